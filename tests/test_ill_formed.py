"""Files of feedparser's ill-formed corpus, carried here, through the real ingest path.

``bench/robustness.py`` runs the whole corpus (../shared/corpus/robustness, not in the repo)
through ``digest fetch --json`` and checks nothing crashes; these are the ill-formed files of it,
byte for byte (feedparser's test suite, BSD-licensed; the origin of each is its name), served over
real HTTP (tests/feedserver.py) with the headers their ``Header:`` comment asks for and fetched by
the real CLI in one run. Each comes out as the script printed it: an ill-formed document keeps
what parsed (with feedparser's complaint as one warning), an empty one is a one-line error, and
the run itself exits 0 with no traceback.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from digest.cli import main as cli
from digest.store.db import open_database
from digest.store.models import Entry, Source
from tests.cli_env import private_env
from tests.feedserver import FeedServer, Reply

NOW = "2026-01-05T08:00:00+00:00"

# name: (body, Content-Type, status, entries stored, the one-line error)
CASES: dict[str, tuple[bytes, str, str, int, str | None]] = {
    "illformed/aaa_illformed.xml": (
        b'<!--\nDescription: illformed XML\nExpect:      bozo\n-->\n<rss version="2.0">\n</rss',
        "application/xml", "ok", 0, None),
    "illformed/rss_empty_document.xml": (
        b"<!--\r\nDescription: Empty document should be a bozo \r\nExpect:      bozo\r\n-->\r\n",
        "application/xml", "error", 0, "not a feed: no feed version, title or entries found"),
    "illformed/rss_incomplete_cdata.xml": (
        b'<!--\r\nDescription: Incomplete CDATA block\r\nExpect:      bozo\r\n-->\r\n'
        b'<?xml version="1.0"?>\r\n<rss version="2.0">\r\n<channel>\r\n'
        b"<title>can feedparser read this xml</title>\r\n"
        b"<link>http://adcdefgh.com</link>\r\n<description>feedparser goes into infinite loop while parsing "
        b"this file</description>\r\n<language>en-us</language>\r\n<copyright>2005-10-28</copyright>\r\n"
        b"<item><title><![CD\r\n",
        "application/xml", "ok", 1, None),
    "illformed/rss_item_link_corrupted_ampersands.xml": (
        b"<!--\r\n    Description: ensure a=1&b=2, not a=1&b;=2\r\n    Expect: entries[0].link == "
        b"'http://link/get?a=1&b=2'\r\n-->\r\n\r\n<rss version=\"2.0\">\r\n  <channel>\r\n    <item>\r\n"
        b"      <link>http://link/get?a=1&amp;b=2</link>\r\n    </item>\r\n  </channel>\r\n</rss\r\n",
        "application/xml", "ok", 1, None),
    "illformed/chardet/gb2312.xml": (
        b"<!--\nSkipUnless:   __import__('chardet')\nDescription:  GB2312 with no encoding information\n"
        b"Expect:       bozo and encoding == 'GB2312'\n-->\n<rss>\n<channel>\n<item>\n<title>"
        b"\xb2\xbb\xb9\xe9\xd2\xc6\xc3\xf1\xc2\xfe\xbb\xad\xcf\xb5\xc1\xd0\xa3\xba\xd7\xa8\xd2\xb5\xb9\xa4\xd7\xf7"
        b"</title>\n</item>\n</channel>\n</rss>\n",
        "application/xml", "ok", 1, None),
    "illformed/http_high_bit_date.xml": (
        b'<?xml version="1.0" encoding="iso-8859-7"?>\n<!--\nSkipUnless:  __import__(\'codecs\').lookup'
        b"('iso-8859-7')\nHeader:      Content-type: text/xml\nDescription: non-ASCII characters in date "
        b'crashes parser\nExpect:      1\n-->\n<rss version="2.0">\n\t<channel>\n\t<pubDate>'
        b"\xd4\xf1\xe9, 29 \xc9\xef\xfd\xed 2004 12:53:00 GMT</pubDate>\n\t</channel>\n</rss>",
        "text/xml", "ok", 0, None),
    "illformed/undeclared_namespace.xml": (
        b"<!--\nSkipUnless:   __import__('sys').version.split()[0] >= '2.2.0'\nDescription: undeclared "
        b'namespace\nExpect:      bozo\n-->\n<rss version="2.0">\n<channel>\n<itunes:subtitle>Foo'
        b"</itunes:subtitle>\n</channel>\n</rss>\n",
        "application/xml", "ok", 0, None),
    "illformed/rdf_channel_empty_textinput.xml": (
        b"<!--\nDescription: empty textinput element confuses regex parser and crashes on setting item "
        b"title (thinks we're still in textinput)\nExpect:      bozo\n-->\n<?xml version=\"1.0\"?>\n"
        b'<rdf:RDF \n  xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" \n'
        b'  xmlns="http://purl.org/rss/1.0/"\n> \n  <channel rdf:about="http://example.com/">\n'
        b'    <items>\n      <rdf:Seq>\n        <rdf:li rdf:resource="http://example.com/1" />\n'
        b'      </rdf:Seq>\n    </items>\n    <textinput rdf:resource="http://example.com/" />\n'
        b'  </channel>\n\n  <item rdf:about="http://example.com/1">\n    <title>crashes here</title>\n'
        b'  </item>\n\n  <textinput rdf:about="http://meerkat.oreillynet.com/">\n  </textinput>\n\n</rdf:RDF',
        "application/xml", "ok", 1, None),
}


def _key(name: str) -> str:
    return name.rsplit("/", 1)[-1].removesuffix(".xml").replace("_", "-")


@pytest.fixture
def fetched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> Iterator[tuple[int, dict[str, Any], str, str]]:
    """One ``digest fetch --json`` over every case: (exit code, rows by key, stderr, database URL)."""
    url = private_env(monkeypatch, tmp_path, "ill.db", chdir=False,
                      DIGEST_SOURCES=str(tmp_path / "sources.toml"), DIGEST_NOW=NOW)
    with FeedServer() as server:
        lines = []
        for name, (body, content_type, *_) in CASES.items():
            where = server.serve("/" + name, Reply(body, content_type=content_type))
            lines.append(f'[[source]]\nkey = "{_key(name)}"\nname = "{name}"\nurl = "{where}"\n')
        (tmp_path / "sources.toml").write_text("\n".join(lines), encoding="utf-8")
        code = cli.main(["fetch", "--json"])
    out = capsys.readouterr()
    yield code, {row["source"]: row for row in json.loads(out.out)}, out.err, url


async def _stored(url: str) -> dict[str, list[Entry]]:
    async with open_database(url) as sessions, sessions() as session:
        query = select(Source.key, Entry).join(Entry, Entry.source_id == Source.id)
        rows = (await session.execute(query)).all()
    found: dict[str, list[Entry]] = {}
    for key, entry in rows:
        found.setdefault(key, []).append(entry)
    return found


def test_the_ill_formed_corpus_keeps_what_parsed_and_fails_in_one_line(
        fetched: tuple[int, dict[str, Any], str, str]) -> None:
    code, rows, err, url = fetched
    assert code == 0 and "Traceback" not in err, err
    assert set(rows) == {_key(name) for name in CASES}
    for name, (_, _, status, entries, error) in CASES.items():
        row = rows[_key(name)]
        assert (row["status"], row["entries_new"], row["error"]) == (status, entries, error), name
    bozo = rows["aaa-illformed"]["warnings"]
    assert len(bozo) == 1 and bozo[0].startswith("ill-formed feed, kept what parsed ("), bozo
    stored = asyncio.run(_stored(url))
    assert {key: len(entries) for key, entries in stored.items()} == {
        _key(name): n for name, (*_, n, _) in CASES.items() if n}
    assert stored["rss-item-link-corrupted-ampersands"][0].url == "http://link/get?a=1&b=2"
    # GB2312 bytes with no declared encoding are read as GB2312 (feedparser detects legacy encodings
    # with chardet, a dependency for this reason; without it the title was mojibake, "²»¹é...")
    assert stored["gb2312"][0].title == "不归移民漫画系列：专业工作"
    assert stored["rdf-channel-empty-textinput"][0].title == "crashes here"
