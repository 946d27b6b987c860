"""The source file format: defaults, relative paths, errors naming the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from digest.domain.errors import ConfigError
from digest.ingest.sources import load_sources


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sources.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_builtin_list_has_the_real_sources() -> None:
    specs = load_sources()
    urls = {s.url for s in specs}
    assert "https://rss.arxiv.org/rss/cs.PL" in urls
    assert "https://blog.llvm.org/index.xml" in urls
    assert "https://github.com/pytorch/helion/releases.atom" in urls
    assert len({s.key for s in specs}) == len(specs) == 19
    assert all(s.url.startswith("https://") for s in specs)


def test_defaults_and_relative_paths(tmp_path: Path) -> None:
    path = _write(tmp_path, '[[source]]\nkey = "local"\nname = "Local"\nurl = "feeds/a.xml"\n')
    (spec,) = load_sources(path)
    assert (spec.kind, spec.weight, spec.enabled) == ("rss", 0.5, True)
    assert spec.is_local and spec.path == tmp_path / "feeds" / "a.xml"


def test_file_url_is_kept(tmp_path: Path) -> None:
    path = _write(tmp_path, '[[source]]\nkey = "f"\nname = "F"\nurl = "file:///tmp/x.xml"\n')
    (spec,) = load_sources(path)
    assert spec.is_local and spec.path == Path("/tmp/x.xml")


@pytest.mark.parametrize(
    ("body", "line", "words"),
    [
        ('key = "a"\nname = "A"\nurl = "https://x"\ncolour = "red"\n', 5, "unknown field 'colour'"),
        ('key = "a"\nname = "A"\nurl = "https://x"\nkind = "json"\n', 5, "unknown kind"),
        ('key = "a"\nname = "A"\nurl = "https://x"\nweight = 2\n', 5, "weight"),
        ('key = "a"\nname = "A"\nurl = "ftp://x/y"\n', 4, "unsupported URL scheme"),
        ('key = "A B"\nname = "A"\nurl = "https://x"\n', 2, "bad key"),
    ],
)
def test_errors_name_the_line(tmp_path: Path, body: str, line: int, words: str) -> None:
    path = _write(tmp_path, "[[source]]\n" + body)
    with pytest.raises(ConfigError, match=words) as info:
        load_sources(path)
    assert str(info.value).startswith(f"{path}:{line}:")


def test_repeated_key_names_both_lines(tmp_path: Path) -> None:
    text = (
        '[[source]]\nkey = "a"\nname = "A"\nurl = "https://x"\n\n'
        '[[source]]\nkey = "a"\nname = "B"\nurl = "https://y"\n'
    )
    with pytest.raises(ConfigError, match=r":7: repeated source key 'a' \(first at line 2\)"):
        load_sources(_write(tmp_path, text))


def test_missing_field_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="missing the required field 'url'"):
        load_sources(_write(tmp_path, '[[source]]\nkey = "a"\nname = "A"\n'))
    with pytest.raises(ConfigError, match=r"sources\.toml"):
        load_sources(_write(tmp_path, "[[source]\n"))
    with pytest.raises(ConfigError, match="cannot read"):
        load_sources(tmp_path / "nope.toml")


def test_a_non_utf8_source_file_is_one_line_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "sources.toml"
    path.write_bytes(b'[[source]]\nkey = "x"\nname = "Caf\xe9"\nurl = "a.xml"\n')
    with pytest.raises(ConfigError) as info:
        load_sources(path)
    message = str(info.value)
    assert message.startswith(f"{path}: line 3: not UTF-8") and "\n" not in message


def test_the_extra_file_is_added_to_the_built_in_list(tmp_path: Path) -> None:
    extra = _write(tmp_path, '# mine\n[[source]]\nkey = "mine"\nname = "Mine"\nurl = "https://example.org/feed"\n')
    specs = load_sources(None, extra)
    assert [s.key for s in specs][-1] == "mine" and len(specs) == len(load_sources()) + 1
    assert load_sources(None, tmp_path / "absent.toml") == load_sources()


def test_a_key_in_both_files_names_both_lines(tmp_path: Path) -> None:
    builtin = load_sources()[0].key
    extra = _write(tmp_path, f'\n[[source]]\nname = "Again"\nkey = "{builtin}"\nurl = "https://e.org/f"\n')
    with pytest.raises(ConfigError) as err:
        load_sources(None, extra)
    message = str(err.value)
    assert message.startswith(f"{extra}:4: source key {builtin!r} is already in ")
    assert "sources.toml:" in message.split("already in ")[1] and not message.endswith(":0")


def test_digest_sources_replaces_the_list_and_ignores_the_extra(tmp_path: Path) -> None:
    only = _write(tmp_path, '[[source]]\nkey = "only"\nname = "Only"\nurl = "https://e.org/f"\n')
    assert [s.key for s in load_sources(only, tmp_path / "whatever.toml")] == ["only"]
