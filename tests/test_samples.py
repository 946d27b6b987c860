"""The bundled offline sample feeds: valid source file, parseable feeds, full windows."""

from __future__ import annotations

import calendar
import json
import re
import tomllib
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import feedparser
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from digest.domain.errors import DigestError
from digest.ingest.samples import (
    FEEDS,
    SampleContentError,
    load_content,
    parse_content,
    sample_items,
    write_samples,
)
from digest.ingest.sources import SourceSpec, load_sources

SHANGHAI = ZoneInfo("Asia/Shanghai")
NOWS = [
    datetime(2026, 11, 20, 0, 30, tzinfo=SHANGHAI),
    datetime(2026, 11, 20, 8, 5, tzinfo=SHANGHAI),
    datetime(2026, 11, 20, 15, 0, tzinfo=SHANGHAI),
    datetime(2026, 11, 20, 23, 59, 59, 999_999, tzinfo=SHANGHAI),
    datetime(2026, 11, 21, 3, 17, 42, tzinfo=UTC),  # any aware zone works
]
MIN_PER_WINDOW = 8


def latest_closed_window(now: datetime) -> tuple[datetime, datetime]:
    """[D-1 08:00, D 08:00) Asia/Shanghai, the last such window that ended at or before now."""
    local = now.astimezone(SHANGHAI)
    end = datetime.combine(local.date(), time(8), SHANGHAI)
    if local < end:
        end -= timedelta(days=1)
    return end - timedelta(days=1), end


def entry_time(entry: Any) -> datetime:
    """feedparser's published date (GitHub's release Atom only has <updated>)."""
    parsed = entry.get("published_parsed") or entry.get("updated_parsed")
    assert parsed is not None, entry.get("id")
    return datetime.fromtimestamp(calendar.timegm(parsed), UTC)


def parse_all(sources: list[SourceSpec]) -> dict[str, Any]:
    """Each source's document parsed by feedparser, checked to be well-formed."""
    parsed: dict[str, Any] = {}
    for spec in sources:
        document = feedparser.parse(spec.path.read_bytes())
        assert not document.bozo, (spec.key, document.get("bozo_exception"))
        assert document.entries, spec.key
        parsed[spec.key] = document
    return parsed


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[datetime, Path]:
    """The samples written once per test `now` (shared: writing and parsing is the slow part)."""
    return {now: write_samples(tmp_path_factory.mktemp("samples"), now) for now in NOWS}


@pytest.fixture(scope="module")
def parsed(written: dict[datetime, Path]) -> dict[datetime, dict[str, Any]]:
    """The parsed documents per test `now`."""
    return {now: parse_all(load_sources(path)) for now, path in written.items()}


@pytest.mark.parametrize("now", NOWS, ids=lambda n: n.strftime("%H%M%Z"))
def test_source_file_is_valid_and_relative(now: datetime, written: dict[datetime, Path]) -> None:
    path = written[now]
    assert path.name == "sources.toml"
    sources = load_sources(path)
    assert [s.key for s in sources] == [f.key for f in FEEDS]
    for spec in sources:
        assert spec.is_local and spec.enabled
        assert spec.path.parent == path.parent and spec.path.is_file(), spec.url
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    assert all(not Path(table["url"]).is_absolute() for table in raw["source"])


def test_sample_keys_match_the_real_list() -> None:
    real = {s.key: s for s in load_sources()}
    for feed in FEEDS:
        assert feed.key in real, feed.key
        assert (feed.name, feed.kind, feed.weight) == (
            real[feed.key].name,
            real[feed.key].kind,
            real[feed.key].weight,
        )


@pytest.mark.parametrize("now", NOWS, ids=lambda n: n.strftime("%H%M%Z"))
def test_latest_closed_window_is_full(
    now: datetime, parsed: dict[datetime, dict[str, Any]]
) -> None:
    start, end = latest_closed_window(now)
    in_window = [
        entry
        for document in parsed[now].values()
        for entry in document.entries
        if start <= entry_time(entry) < end
    ]
    assert len(in_window) >= MIN_PER_WINDOW
    relevant = {
        item.link
        for item in sample_items(now)
        if item.relevant and start <= item.published < end
    }
    assert len(relevant) >= MIN_PER_WINDOW
    for document in parsed[now].values():
        for entry in document.entries:
            assert entry_time(entry) <= now


def test_every_closed_window_of_a_day_is_full() -> None:
    base = datetime(2026, 11, 20, tzinfo=SHANGHAI)
    for minutes in range(0, 24 * 60, 20):
        now = base + timedelta(minutes=minutes)
        start, end = latest_closed_window(now)
        items = [i for i in sample_items(now) if start <= i.published < end]
        assert len({i.link for i in items if i.relevant}) >= MIN_PER_WINDOW, now


@pytest.mark.parametrize("now", NOWS[:2], ids=lambda n: n.strftime("%H%M%Z"))
def test_feeds_carry_the_sample_items(
    now: datetime, parsed: dict[datetime, dict[str, Any]]
) -> None:
    expected = sample_items(now)
    for key, document in parsed[now].items():
        mine = [i for i in expected if i.source == key]
        assert [e.id for e in document.entries] == [i.guid for i in mine]
        assert [e.link for e in document.entries] == [i.link for i in mine]
        assert [e.title for e in document.entries] == [i.title for i in mine]
        assert [entry_time(e) for e in document.entries] == [i.published for i in mine]


def test_deterministic(tmp_path: Path) -> None:
    now = NOWS[2]
    first, second, later = (tmp_path / "a", tmp_path / "b", tmp_path / "c")
    write_samples(first, now)
    write_samples(second, now.astimezone(UTC))  # the same instant in another zone
    write_samples(later, now + timedelta(hours=1))
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    for name in names:
        if name != "sources.toml":  # its comment names `now` as given
            assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert (first / "arxiv-cs.pl.xml").read_bytes() != (later / "arxiv-cs.pl.xml").read_bytes()
    again = tmp_path / "d"
    write_samples(again, now)
    assert all((first / n).read_bytes() == (again / n).read_bytes() for n in names)


def test_naive_now_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="aware"):
        write_samples(tmp_path, datetime(2026, 11, 20, 8, 0))


def test_arxiv_listings(parsed: dict[datetime, dict[str, Any]]) -> None:
    documents = parsed[NOWS[2]]
    arxiv = [e for key, d in documents.items() if key.startswith("arxiv-") for e in d.entries]
    types = {e.arxiv_announce_type for e in arxiv}
    assert types == {"new", "cross", "replace", "replace-cross"}
    feeds_per_paper: dict[str, set[str]] = {}
    for key, document in documents.items():
        if not key.startswith("arxiv-"):
            continue
        assert document.feed.title.endswith("updates on arXiv.org")
        for e in document.entries:
            match = re.fullmatch(r"oai:arXiv\.org:(\d{4}\.\d{5})v(\d+)", e.id)
            assert match, e.id
            assert e.link == f"https://arxiv.org/abs/{match[1]}"
            assert e.summary.startswith(
                f"arXiv:{match[1]}v{match[2]} Announce Type: {e.arxiv_announce_type} \nAbstract: "
            )
            assert e.author and e.tags
            if e.arxiv_announce_type in ("new", "cross"):
                feeds_per_paper.setdefault(match[1], set()).add(key)
    assert sum(len(feeds) > 1 for feeds in feeds_per_paper.values()) >= 5
    # a replacement of a paper that was announced new earlier in the sample
    replaced = {re.sub(r"v\d+$", "", e.id) for e in arxiv if e.arxiv_announce_type == "replace"}
    announced = {re.sub(r"v\d+$", "", e.id) for e in arxiv if e.arxiv_announce_type == "new"}
    assert replaced & announced and replaced - announced


def test_blog_links_an_arxiv_paper_of_the_sample(parsed: dict[datetime, dict[str, Any]]) -> None:
    documents = parsed[NOWS[2]]
    arxiv_links = {
        e.link for key, d in documents.items() if key.startswith("arxiv-") for e in d.entries
    }
    for key in ("pytorch-blog", "llvm-blog"):
        html = " ".join(
            (e.content[0].value if "content" in e else e.summary) for e in documents[key].entries
        )
        linked = set(re.findall(r"https://arxiv\.org/abs/\d{4}\.\d{5}", html))
        assert linked & arxiv_links, key


def test_github_release_feeds(parsed: dict[datetime, dict[str, Any]]) -> None:
    documents = parsed[NOWS[2]]
    for key, repo, final, pre in (
        ("gh-triton", "triton-lang/triton", "v3.6.0", "v3.6.0-rc1"),
        ("gh-llvm", "llvm/llvm-project", "llvmorg-21.1.8", "llvmorg-22.1.0-rc2"),
    ):
        tags = []
        for e in documents[key].entries:
            match = re.fullmatch(r"tag:github\.com,2008:Repository/(\d+)/(.+)", e.id)
            assert match, e.id
            tags.append(match[2])
            assert e.link == f"https://github.com/{repo}/releases/tag/{match[2]}"
            assert e.content[0].type == "text/html" and "<" in e.content[0].value
            assert e.author
        assert final in tags and pre in tags
        assert documents[key].feed.title.startswith("Release notes from ")


def test_hostile_content_is_present_and_well_formed(
    written: dict[datetime, Path], parsed: dict[datetime, dict[str, Any]]
) -> None:
    documents = parsed[NOWS[2]]
    titles = [e.title for d in documents.values() for e in d.entries]
    assert any("<script>alert(1)</script>" in t for t in titles)
    summaries = [e.get("summary", "") for d in documents.values() for e in d.entries]
    assert any("@everyone" in s for s in summaries)
    raw = (written[NOWS[2]].parent / "pytorch-blog.xml").read_text(encoding="utf-8")
    assert 'href="javascript:' in raw
    raw_pl = (written[NOWS[2]].parent / "arxiv-cs.pl.xml").read_text(encoding="utf-8")
    assert "&lt;script&gt;" in raw_pl and "<script>" not in raw_pl


def test_counts_are_in_range() -> None:
    items = sample_items(NOWS[0])
    assert 40 <= len(items) <= 70
    assert {i.source for i in items} == {f.key for f in FEEDS}


# --- the content file: checked by models, refused in one line naming the table and the field

VALID_PAPER: dict[str, object] = {
    "id": "2611.00001", "version": 1, "announce": "new", "categories": ["cs.PL"],
    "age_minutes": 60, "relevant": True, "title": "T", "authors": "A", "abstract": "B",
}
OPTIONAL = {"license"}  # the one paper field with a default
WRONG_TYPE: dict[type, object] = {str: 7, int: "7", bool: 1, list: "cs.PL"}


def toml_tables(kind: str, tables: list[dict[str, object]]) -> str:
    """TOML for an array of tables (JSON scalars and arrays of strings are valid TOML)."""
    return "".join(f"[[{kind}]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in t.items())
                   for t in tables)


def test_the_bundled_content_fits_the_models() -> None:
    content = load_content()
    assert content.papers and content.posts and content.releases
    assert all(isinstance(p.categories, tuple) and p.license for p in content.papers)


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(min_value=1, max_value=4),
    data=st.data(),
    field=st.sampled_from(sorted(VALID_PAPER)),
    missing=st.booleans(),
)
def test_a_bad_paper_field_is_named_in_one_line(
    count: int, data: st.DataObject, field: str, missing: bool
) -> None:
    bad = data.draw(st.integers(min_value=0, max_value=count - 1))
    papers = [dict(VALID_PAPER, id=f"2611.{i:05d}") for i in range(count)]
    if missing:
        del papers[bad][field]
    else:
        papers[bad][field] = WRONG_TYPE[type(VALID_PAPER[field])]
    with pytest.raises(SampleContentError) as caught:
        parse_content(toml_tables("paper", papers), "content.toml")
    message = str(caught.value)
    assert message.startswith(f"content.toml: [[paper]] #{bad + 1}: {field}")
    assert "\n" not in message
    assert ("required" in message) is missing


@pytest.mark.parametrize(("tables", "expected"), [
    (toml_tables("paper", [VALID_PAPER | {"announce": "old"}]), "[[paper]] #1: announce: "),
    (toml_tables("paper", [VALID_PAPER | {"categories": []}]), "[[paper]] #1: categories: "),
    (toml_tables("paper", [VALID_PAPER | {"licence": "x"}]), "[[paper]] #1: licence: Extra"),
    (toml_tables("paper", [VALID_PAPER, VALID_PAPER | {"categories": ["cs.PL", 3]}]),
     "[[paper]] #2: categories[1]: "),
    (toml_tables("post", [{"feed": "gh-llvm", "age_minutes": 1, "relevant": True, "title": "t",
                           "html": "h"}]),
     "[[post]] #1: feed: unknown or unsuitable feed 'gh-llvm'"),
    (toml_tables("release", [{"feed": "llvm-blog", "tag": "v1", "title": "t", "author": "a",
                              "age_minutes": 1, "relevant": True, "html": "h"}]),
     "[[release]] #1: feed: unknown or unsuitable feed 'llvm-blog'"),
    (toml_tables("papers", [VALID_PAPER]), "papers: Extra inputs"),
    ("[[post]\n", "not valid TOML: "),
])
def test_content_errors_name_the_field(tables: str, expected: str) -> None:
    with pytest.raises(SampleContentError, match=re.escape(f"content.toml: {expected}")) as caught:
        parse_content(tables, "content.toml")
    assert isinstance(caught.value, DigestError) and "\n" not in str(caught.value)
