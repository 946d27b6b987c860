"""``digest sources add|remove|enable|disable|import-opml|export-opml``: the file in use, edited safely.

The commands run as a user runs them, in a temporary folder (so the default
``DIGEST_SOURCES_EXTRA`` is that folder's ``var/sources.toml``), through the CLI's ``main`` in
this process (:func:`tests.test_operator.run_cli`: the command's environment, folder, output and
exit code, without a new interpreter per step); the OPML reader and the TOML writer are also
tested on hostile and arbitrary input directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from digest.cli.sources import key_from, parse_opml
from digest.domain.errors import ConfigError
from digest.ingest.sources import (
    SourceFile,
    check_source,
    edit_sources,
    load_sources,
    lock_path,
    read_source_file,
    toml_value,
)
from tests.test_operator import run_cli

BUILTIN = load_sources()
BUILTIN_KEY = BUILTIN[0].key


def digest(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    clean |= {"DIGEST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'src.db'}", **env}
    return run_cli(tmp, args, clean)


def listed(tmp: Path, **env: str) -> dict[str, dict[str, object]]:
    out = digest(tmp, "sources", "list", "--json", **env)
    assert out.returncode == 0, out.stderr
    return {row["key"]: row for row in json.loads(out.stdout)}


def test_add_disable_enable_remove_in_the_extra_file(tmp_path: Path) -> None:
    extra = tmp_path / "var" / "sources.toml"  # the default DIGEST_SOURCES_EXTRA, ./var/sources.toml
    added = digest(tmp_path, "sources", "add", "modular", "https://www.modular.com/blog/rss.xml",
                   "--name", "Modular blog", "--weight", "0.6")
    assert added.returncode == 0, added.stderr
    assert added.stdout == ("added modular (rss, weight 0.6) https://www.modular.com/blog/rss.xml"
                            " to var/sources.toml\n")
    rows = listed(tmp_path)
    assert len(rows) == len(BUILTIN) + 1 and rows["modular"]["weight"] == 0.6

    assert digest(tmp_path, "sources", "disable", BUILTIN_KEY).returncode == 0
    assert digest(tmp_path, "sources", "disable", "modular").returncode == 0
    assert tomllib.loads(extra.read_text())["override"] == [{"key": BUILTIN_KEY, "enabled": False}]
    rows = listed(tmp_path)
    assert rows[BUILTIN_KEY]["enabled"] is False and rows["modular"]["enabled"] is False
    again = digest(tmp_path, "sources", "disable", BUILTIN_KEY)
    assert again.returncode == 0 and again.stdout == f"{BUILTIN_KEY} is already disabled\n"

    assert digest(tmp_path, "sources", "enable", BUILTIN_KEY).returncode == 0
    assert "override" not in tomllib.loads(extra.read_text())  # back as shipped: no override left
    assert digest(tmp_path, "sources", "remove", "modular").returncode == 0
    assert listed(tmp_path).keys() == {s.key for s in BUILTIN}
    assert extra.read_text().startswith("# Sources added to the built-in list")


def test_a_built_in_source_cannot_be_removed_and_unknown_keys_get_a_suggestion(tmp_path: Path) -> None:
    builtin = digest(tmp_path, "sources", "remove", BUILTIN_KEY)
    assert builtin.returncode == 1 and f"digest sources disable {BUILTIN_KEY}" in builtin.stderr
    typo = digest(tmp_path, "sources", "enable", BUILTIN_KEY + "x")
    assert typo.returncode == 1 and typo.stderr.count("\n") == 1
    assert typo.stderr.endswith(f"did you mean {BUILTIN_KEY}?\n")
    assert not (tmp_path / "var" / "sources.toml").exists()  # nothing to write, nothing written


@pytest.mark.parametrize(("args", "words"), [
    (["Bad Key", "https://e.org/f"], "bad key 'Bad Key'"),
    (["k", "ftp://e.org/f"], "only http:// and https://"),
    (["k", "file:///etc/passwd"], "only http:// and https://"),
    (["k", "https:///no-host"], "no host"),
    (["k", "https://e.org/a b"], "no spaces"),
    (["k", "https://e.org/f", "--kind", "json"], "unknown kind 'json'"),
    (["k", "https://e.org/f", "--weight", "1.5"], "weight must be a number from 0 to 1"),
    (["k", "https://e.org/f", "--weight", "nan"], "weight must be a number from 0 to 1"),
])
def test_bad_values_are_one_line_usage_errors(tmp_path: Path, args: list[str], words: str) -> None:
    out = digest(tmp_path, "sources", "add", *args)
    assert out.returncode == 2 and words in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert not (tmp_path / "var").exists()


def test_a_taken_key_or_url_is_refused(tmp_path: Path) -> None:
    scheme, _, host, path = BUILTIN[0].url.split("/", 3)
    same = f"{scheme.upper()}//{host.upper()}/{path}/"  # scheme and host in another case, a trailing slash
    out = digest(tmp_path, "sources", "add", "mine", same)
    assert out.returncode == 1 and f"the source {BUILTIN_KEY!r} already fetches" in out.stderr
    key = digest(tmp_path, "sources", "add", BUILTIN_KEY, "https://new.example.org/feed")
    assert key.returncode == 1 and "a built-in source already has the key" in key.stderr
    assert not (tmp_path / "var" / "sources.toml").exists(), "nothing written (the edits' lock aside)"


def _waits_for(lock: Path) -> bool:
    """Whether a process is blocked on the flock of ``lock`` (a waiter in /proc/locks)."""
    inode = f":{lock.stat().st_ino} "
    return any("->" in line and inode in line for line in Path("/proc/locks").read_text().splitlines())


def test_two_edits_at_once_take_turns_and_neither_is_lost(tmp_path: Path) -> None:
    """An edit reads the file under the lock: a second `digest sources add`, started while the
    first edit holds it, waits for it, then reads what the first one wrote (both are kept)."""
    extra = tmp_path / "var" / "sources.toml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env |= {"DIGEST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'src.db'}"}
    second = None
    try:
        with edit_sources(None, extra) as editor:
            editor.add(check_source({"key": "first", "name": "First", "url": "https://first.example/feed.xml"}))
            second = subprocess.Popen([sys.executable, "-m", "digest", "sources", "add", "second",
                                       "https://second.example/feed.xml"], cwd=tmp_path, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 60  # a guard against hanging, not a measure of speed
            while not _waits_for(lock_path(extra)):
                assert second.poll() is None, f"the second edit did not wait: {second.communicate()}"
                assert time.monotonic() < deadline, "the second edit never reached the lock"
                time.sleep(0.01)
            editor.save()
        _, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
    finally:
        if second is not None and second.poll() is None:
            second.kill()
    assert [t["key"] for t in tomllib.loads(extra.read_text())["source"]] == ["first", "second"]


def test_with_digest_sources_that_file_is_edited_and_keeps_its_head_comments(tmp_path: Path) -> None:
    (tmp_path / "feeds").mkdir()
    mine = tmp_path / "mine.toml"
    mine.write_text('# my own list\n# second line\n\n[[source]]\nkey = "local"\nname = "Local"\n'
                    'url = "feeds/a.xml"  # a comment that is not kept\n', encoding="utf-8")
    env = {"DIGEST_SOURCES": str(mine)}
    assert digest(tmp_path, "sources", "add", "web", "https://e.org/feed.xml", **env).returncode == 0
    assert digest(tmp_path, "sources", "disable", "local", **env).returncode == 0
    text = mine.read_text()
    assert text.startswith("# my own list\n# second line\n")
    tables = tomllib.loads(text)["source"]
    assert tables[0] == {"key": "local", "name": "Local", "url": "feeds/a.xml", "enabled": False}  # URL as is
    assert [t["key"] for t in tables] == ["local", "web"]
    assert listed(tmp_path, **env).keys() == {"local", "web"}
    assert not (tmp_path / "var").exists()  # the extra file plays no part


def test_an_override_outside_the_extra_file_or_for_no_source(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                             ) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text('[[source]]\nkey = "a"\nname = "A"\nurl = "https://e.org/a"\n\n'
                    '[[override]]\nkey = "a"\nenabled = false\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"mine\.toml:6: \[\[override\]\] tables belong in the "
                                          "DIGEST_SOURCES_EXTRA file only"):
        load_sources(mine)
    extra = tmp_path / "extra.toml"
    extra.write_text('[[override]]\nkey = "retired"\nenabled = false\n\n[[override]]\n'
                     f'key = "{BUILTIN_KEY}"\nenabled = false\ncolour = 1\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"extra\.toml:8: unknown field 'colour' in \[\[override\]\]"):
        load_sources(None, extra)
    extra.write_text('[[override]]\nkey = "retired"\nenabled = false\n', encoding="utf-8")
    assert load_sources(None, extra) == BUILTIN  # a source dropped from the built-in list: ignored
    assert "'retired' ignored" in caplog.text


OPML = """<?xml version="1.0" encoding="UTF-8"?>
<opml version="2.0"><head><title>reader export</title></head><body>
<outline text="Compilers">
  <outline type="rss" text="The LLVM Project Blog" xmlUrl="{builtin}"/>
  <outline type="rss" text="Modular &amp; Mojo" title="Modular &amp; Mojo" xmlUrl="https://www.modular.com/blog/rss.xml"/>
  <outline type="rss" text="编译器周刊" xmlUrl="https://example.cn/feed"/>
  <outline type="rss" text="Modular &amp; Mojo" xmlUrl="https://www.modular.com/other.xml"/>
  <outline type="rss" text="TVM releases" xmlUrl="https://github.com/octo/tvm-fork/releases.atom"/>
  <outline type="rss" text="evil" xmlUrl="javascript:alert(1)"/>
  <outline type="rss" text="line&#10;break" xmlUrl="https://e.org/x.xml"/>
</outline>
<outline text="a folder without feeds"/>
</body></opml>
"""


def test_import_adds_the_new_feeds_and_says_what_it_skipped(tmp_path: Path) -> None:
    builtin = next(s for s in BUILTIN if s.key == "llvm-blog")
    opml = tmp_path / "reader.opml"
    opml.write_text(OPML.format(builtin=builtin.url), encoding="utf-8")
    out = digest(tmp_path, "sources", "import-opml", str(opml))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert f"skipped {builtin.url}: already configured as llvm-blog" in lines
    assert "added modular-mojo (rss) https://www.modular.com/blog/rss.xml" in lines
    assert "added example-cn-feed (rss) https://example.cn/feed" in lines  # no ASCII title: from the URL
    assert "added modular-mojo-2 (rss) https://www.modular.com/other.xml" in lines
    assert "added tvm-releases (github-releases) https://github.com/octo/tvm-fork/releases.atom" in lines
    assert any(x.startswith("skipped 'javascript:alert(1)': bad URL") for x in lines)
    assert lines[-1] == f"5 added to var/sources.toml, 2 skipped, of 7 feeds in {opml}"
    rows = listed(tmp_path)
    assert rows["example-cn-feed"]["name"] == "编译器周刊" and rows["line-break"]["name"] == "line break"

    again = digest(tmp_path, "sources", "import-opml", str(opml))
    assert again.returncode == 0 and again.stdout.splitlines()[-1].startswith("0 added, 7 skipped")


def test_export_then_import_round_trips(tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir(), there.mkdir()
    mine = here / "mine.toml"
    mine.write_text('[[source]]\nkey = "a"\nname = "A <&> \\"quoted\\""\nurl = "https://e.org/a?x=1&y=2"\n\n'
                    '[[source]]\nkey = "off"\nname = "Off"\nurl = "https://e.org/off"\nenabled = false\n\n'
                    '[[source]]\nkey = "local"\nname = "Local"\nurl = "a.xml"\n', encoding="utf-8")
    out = digest(here, "sources", "export-opml", DIGEST_SOURCES=str(mine))
    assert out.returncode == 0 and "1 sources exported; 2 left out" in out.stderr
    root = ET.fromstring(out.stdout)
    assert root.tag == "opml" and root.get("version") == "2.0"
    assert [(o.get("text"), o.get("xmlUrl")) for o in root.iter("outline")] == [
        ('A <&> "quoted"', "https://e.org/a?x=1&y=2")]
    (there / "in.opml").write_text(out.stdout, encoding="utf-8")
    theirs = there / "theirs.toml"
    theirs.write_text("", encoding="utf-8")
    assert digest(there, "sources", "import-opml", "in.opml", DIGEST_SOURCES=str(theirs)).returncode == 0
    (spec,) = load_sources(theirs)
    assert (spec.name, spec.url) == ('A <&> "quoted"', "https://e.org/a?x=1&y=2")


# -- hostile OPML: refused in one line, nothing written ----------------------------------------

HOSTILE = {
    "billion laughs": ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
                       '<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">'
                       '<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>'
                       '<opml version="2.0"><body><outline text="&lol3;" xmlUrl="https://e.org/f"/></body></opml>'),
    "external entity": ('<?xml version="1.0"?><!DOCTYPE opml [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
                        '<opml version="2.0"><body><outline text="&xxe;" xmlUrl="https://e.org/f"/></body></opml>'),
    "external DTD": ('<?xml version="1.0"?><!DOCTYPE opml SYSTEM "http://127.0.0.1:9/evil.dtd">'
                     '<opml version="2.0"><body><outline text="x" xmlUrl="https://e.org/f"/></body></opml>'),
    "parameter entity": ('<?xml version="1.0"?><!DOCTYPE opml [<!ENTITY % p SYSTEM "http://127.0.0.1:9/p">%p;]>'
                         '<opml version="2.0"><body/></opml>'),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_opml_is_refused_before_any_entity_is_read(name: str) -> None:
    with pytest.raises(ConfigError, match="refused: OPML needs no DOCTYPE"):
        parse_opml(HOSTILE[name].encode(), "evil.opml")


@pytest.mark.parametrize(("data", "words"), [
    (b"<html><body/></html>", r"not an OPML file \(the root element is 'html'\)"),
    (b"<opml><body><outline", "line 1: not well-formed XML"),
    (b"", "not well-formed XML"),
    (b"<opml>&undefined;</opml>", "not well-formed XML"),
])
def test_a_file_that_is_no_opml_is_one_line(data: bytes, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as info:
        parse_opml(data, "x.opml")
    assert "\n" not in str(info.value)


def test_the_cli_refuses_a_hostile_file_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "evil.opml").write_text(HOSTILE["billion laughs"], encoding="utf-8")
    out = digest(tmp_path, "sources", "import-opml", "evil.opml")
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "refused" in out.stderr
    assert not (tmp_path / "var").exists()


def test_keys_from_titles_are_valid_and_unique() -> None:
    taken = {"llvm-blog"}
    assert key_from("LLVM Blog", "https://blog.llvm.org/", taken) == "llvm-blog-2"
    assert key_from("Ünïcödé — Blog!", "https://e.org/", set()) == "unicode-blog"
    assert key_from("", "https://www.example.org/feeds/all.atom", set()) == "example-org-feeds-all-atom"
    assert key_from("日报", "https://127.0.0.1/", set()) == "127-0-0-1"
    assert len(key_from("x" * 300, "https://e.org/", set())) <= 64


# -- the writer: what it writes reads back, and a failed write leaves the old file ------------

@given(st.text(max_size=60))
def test_any_text_is_written_as_a_toml_string_that_reads_back(text: str) -> None:
    assert tomllib.loads(f"v = {toml_value(text)}\n")["v"] == text


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sources.toml"
    path.write_text('[[source]]\nkey = "a"\nname = "A"\nurl = "https://e.org/a"\n', encoding="utf-8")
    before = path.read_bytes()
    file = read_source_file(path)
    file.tables.append({"key": "b", "name": "B", "url": "https://e.org/b"})

    def crash(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)  # the rename is where a crash would strike
    with pytest.raises(ConfigError, match=r"cannot write .*No space left on device"):
        file.save()
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["sources.toml"]


def test_a_file_that_would_not_read_back_is_never_written(tmp_path: Path) -> None:
    path = tmp_path / "sources.toml"
    file = SourceFile(path, tables=[{"key": "a", "name": "A", "url": "https://e.org/a", "weight": 7}])
    with pytest.raises(ConfigError, match="weight must be a number from 0 to 1"):
        file.save()
    assert not path.exists()
