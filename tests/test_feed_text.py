"""Feed text and links as readers get them: titles stay text, invisible marks go, URLs are URIs.

Real feed documents (RSS, Atom ``type="text"`` / ``type="html"``) go through
feedparser and the project's normalisation; once end to end, served over
HTTP on 127.0.0.1, fetched, built and rendered in every output format.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import json
import re
from collections.abc import Iterator
from typing import Any

import feedparser
import pytest
from feeds import rfc822, rss
from feedserver import FeedServer, Reply
from hypothesis import given, settings
from hypothesis import strategies as st

from digest.build.pipeline import BuildOptions, build_digest
from digest.domain.window import window_for
from digest.ingest.feedtext import absolute_url, canonical_url, field_text
from digest.ingest.fetch import FetchOptions
from digest.ingest.normalize import NormalizedEntry, feed_context, normalize_feed
from digest.ingest.pipeline import fetch_sources
from digest.ingest.sources import SourceSpec
from digest.render.renderer import Renderer
from digest.render.safety import clean_text, discord_escape, md_escape, tg_escape
from digest.render.split import telegram_text
from digest.store.db import SessionFactory
from digest.store.queries import load_view

DAY = dt.date(2026, 9, 29)
WINDOW = window_for(DAY, "Asia/Shanghai")
NOW = WINDOW.end + dt.timedelta(minutes=5)
PUBLISHED = WINDOW.start + dt.timedelta(hours=3)
INVISIBLE = "\u200b\u200c\u200d\u200e\u200f\u2060\u061c"

SCRIPT_TITLE = "Stopping <script>alert(1)</script> at the IR Level"
GENERIC_TITLE = "Generic <T> kernels: std::vector<int> in MLIR"
ATOM_TEXT_TITLE = "Lowering std::vector<int> & <b>bold</b> to LLVM"
ATOM_HTML_TITLE = "Fusing all the kernels <T>"
ODD_LINK = 'https://example.org/p5?a=1&b=<2>&c="3"'
ODD_LINK_URI = "https://example.org/p5?a=1&b=%3C2%3E&c=%223%22"

RSS_DOC = rss([
    {"title": "Stopping &lt;script&gt;alert(1)&lt;/script&gt; at the IR Level",
     "link": "https://example.org/p1", "guid": "p1", "pubDate": rfc822(PUBLISHED),
     "description": "We compile HTML templates through an IR with a Triton compiler pass that "
                    "autotunes tile sizes of GEMM kernels and generates PTX for H100 GPUs."},
    {"title": f"Generic &lt;T&gt; kernels: {INVISIBLE[:3]}std::vector&lt;int&gt; in "
              f"M{INVISIBLE[3:]}LIR",
     "link": "https://example.org/p2", "guid": "p2", "pubDate": rfc822(PUBLISHED),
     "description": "The MLIR sparse_tensor dialect lowers co-iteration loops through linalg "
                    "to the vector dialect."},
    {"title": "a &amp;lt;T&amp;gt; &amp;amp; b", "link": "https://example.org/p3", "guid": "p3",
     "pubDate": rfc822(PUBLISHED), "description": "A pass."},
])


def _atom_doc() -> bytes:
    entry = ('<entry><id>urn:{id}</id><updated>{when}</updated>'
             '<link rel="alternate" href="{link}"/><title type="{kind}">{title}</title>'
             '<summary type="html">{summary}</summary></entry>\n')
    when = PUBLISHED.isoformat()
    entries = [
        entry.format(id="a1", when=when, kind="text", link="https://example.org/a1",
                     title="Lowering std::vector&lt;int&gt; &amp; &lt;b&gt;bold&lt;/b&gt; to LLVM",
                     summary="We describe NCCL all-reduce collectives for tensor parallel "
                             "training, sharded across a device mesh by the XLA compiler."),
        entry.format(id="a2", when=when, kind="html", link=html.escape(ODD_LINK),
                     title="Fusing &lt;em&gt;all&lt;/em&gt; the kernels &amp;lt;T&amp;gt;",
                     summary="TorchInductor captures an FX graph with TorchDynamo, graph breaks "
                             "and all, and fuses operators in the graph IR."),
    ]
    return ('<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom">'
            '<id>urn:feed</id><title>Atom blog</title><link rel="alternate" '
            'href="https://example.org/"/><updated>2026-09-01T00:00:00Z</updated>\n'
            f"{''.join(entries)}</feed>\n").encode()


ATOM_DOC = _atom_doc()


def normalized(body: bytes) -> list[NormalizedEntry]:
    doc = feedparser.parse(io.BytesIO(body), response_headers={})
    return normalize_feed(doc, feed_context(doc, "rss", NOW, None)).entries


# ---------------------------------------------------------------- titles are text


def test_rss_titles_keep_markup_like_text() -> None:
    script, generic, double = normalized(RSS_DOC)
    assert script.title == SCRIPT_TITLE
    assert generic.title == GENERIC_TITLE, "zero-width and bidi marks are removed"
    assert double.title == "a <T> & b", "a double-escaped title (feedparser: HTML) is decoded once"


def test_atom_title_type_decides_text_or_html() -> None:
    text, markup = normalized(ATOM_DOC)
    assert text.title == ATOM_TEXT_TITLE
    assert markup.title == ATOM_HTML_TITLE


def test_summaries_are_still_html() -> None:
    body = rss([{"title": "t", "guid": "1",
                 "description": "&lt;p&gt;Fast &lt;b&gt;std::vector&amp;lt;int&amp;gt;&lt;/b&gt;"
                                "&lt;script&gt;x()&lt;/script&gt;&lt;/p&gt;"}])
    (entry,) = normalized(body)
    assert entry.summary == "Fast std::vector<int>"


@pytest.mark.parametrize(("value", "kind", "expected"), [
    ("std::vector<int>  &amp;\n<b>x</b>", "text/plain", "std::vector<int> &amp; <b>x</b>"),
    ("std::vector&lt;int&gt; <b>x</b>", "text/html", "std::vector<int> x"),
    ("<div>a <i>b</i></div>", "application/xhtml+xml", "a b"),
    (f"a{INVISIBLE}b\x00\u202ec", "text/plain", "abc"),
    (f"a{INVISIBLE}b", "text/html", "ab"),
])
def test_field_text(value: str, kind: str, expected: str) -> None:
    assert field_text(value, kind) == expected


def test_clean_text_removes_zero_width_and_bidi_marks() -> None:
    assert clean_text(f"M{INVISIBLE}LIR\u202a\ufeff") == "MLIR"


# ---------------------------------------------------------------- URLs are URIs

_URI = re.compile(
    r"https?://(?:[a-z0-9\-._~!$&'()*+,;=]+|\[[0-9a-f:.]+\])(?::\d+)?"
    r"/[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*(?:\?[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*)?"
)
_BAD_ESCAPE = re.compile(r"%(?![0-9A-F]{2})")


def is_uri(url: str) -> bool:
    """An absolute http(s) URI of RFC 3986 characters only, every ``%`` a full escape."""
    return bool(_URI.fullmatch(url)) and not _BAD_ESCAPE.search(url)


@pytest.mark.parametrize(("raw", "expected"), [
    (ODD_LINK, ODD_LINK_URI),
    ("https://example.org/a b/`x`{y}|\\^", "https://example.org/a%20b/%60x%60%7By%7D%7C%5C%5E"),
    ("https://example.org/ü?q=編譯&r=[1]", "https://example.org/%C3%BC?q=%E7%B7%A8%E8%AD%AF&r=%5B1%5D"),
    ("https://Bücher.Example/x", "https://xn--bcher-kva.example/x"),
    ("https://example.org/100%?p=%7e&q=%zz", "https://example.org/100%25?p=%7E&q=%25zz"),
    ("https://example.org/\u200bx", "https://example.org/%E2%80%8Bx"),
    ("http://[::1]:8080/x", "http://[::1]:8080/x"),
    ("http://exa<mple.org/", None),
    ("http://[fe80::1%25eth0]/", None),
])
def test_canonical_urls_are_valid_uris(raw: str, expected: str | None) -> None:
    assert canonical_url(raw) == expected


def test_stored_entry_links_are_uris() -> None:
    _, odd = normalized(ATOM_DOC)
    assert odd.url == odd.canonical_url == ODD_LINK_URI
    assert absolute_url('/p?q="x"#f<1>', "https://example.org/") == "https://example.org/p?q=%22x%22#f%3C1%3E"


_URL_CHARS = st.sampled_from(list("aZ09-._~:/?#[]@!$&'()*+,;=% <>\"{}|\\^`\u00fc\u7de8\u200b\t"))
_URL_PARTS = st.tuples(
    st.sampled_from(["http://", "https://", "HTTPS://", "ftp://", "javascript:", "//", ""]),
    st.sampled_from(["", "", "user:pw@", "a b@"]),
    st.sampled_from(["example.org", "EXAMPLE.org", "bücher.example", "[::1]", "[v1.x]",
                     "exa mple.org", "例え.jp", "", "a..b", "[::1"]),
    st.sampled_from(["", "", ":80", ":443", ":8080", ":x", ":99999"]),
    st.text(_URL_CHARS, max_size=40),
)
_URLISH = st.one_of(st.text(), st.builds("".join, _URL_PARTS), st.text(_URL_CHARS, max_size=40))


@settings(max_examples=400, deadline=None)
@given(_URLISH, st.sampled_from([None, "https://example.org/blog/feed.xml"]))
def test_canonical_url_is_a_uri_and_idempotent(raw: str, base: str | None) -> None:
    canonical = canonical_url(raw, base)
    if canonical is not None:
        assert is_uri(canonical), canonical
        assert canonical_url(canonical) == canonical
    absolute = absolute_url(raw, base)
    if absolute is not None:
        assert not re.search(r"[^A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]", absolute), absolute
        assert not _BAD_ESCAPE.search(absolute) and absolute_url(absolute, None) == absolute


# ---------------------------------------------------------------- end to end, every format


@pytest.fixture
def server() -> Iterator[FeedServer]:
    with FeedServer() as feed_server:
        yield feed_server


async def _built_view_data(sessions: SessionFactory, server: FeedServer) -> Any:
    specs = [
        SourceSpec("blog-rss", "RSS blog", server.serve("/rss", Reply(RSS_DOC)), weight=0.8),
        SourceSpec("blog-atom", "Atom blog", server.serve("/atom", Reply(ATOM_DOC)), weight=0.8),
    ]
    results = await fetch_sources(sessions, specs, FetchOptions(), now=NOW)
    assert [r.error for r in results] == [None, None]
    await build_digest(sessions, DAY, BuildOptions(locales=("en",)), now=NOW)
    async with sessions() as session:
        return await load_view(session, DAY, "en")


TITLES = (SCRIPT_TITLE, GENERIC_TITLE, ATOM_TEXT_TITLE, ATOM_HTML_TITLE)


async def test_markup_like_titles_come_out_exact_and_escaped_in_every_format(
    sqlite_sessions: SessionFactory, server: FeedServer
) -> None:
    view = await _built_view_data(sqlite_sessions, server)
    assert set(TITLES) <= {e.title for e in view.events}
    renderer = Renderer(site_url="https://digest.example")
    page, mail = renderer.render(view, "html"), renderer.email_parts(view)
    for document in (page, mail.html):
        assert "<script>" not in document and "&lt;script&gt;alert(1)&lt;/script&gt;" in document
        assert all(html.escape(title) in document for title in TITLES)
    markdown = renderer.render(view, "md")
    assert all(md_escape(title) in markdown for title in TITLES)
    assert "Stopping \\<script\\>alert(1)\\</script\\> at the IR Level" in markdown
    for body in (renderer.render(view, "text"), mail.text):
        assert all(title in body for title in TITLES)
    data = json.loads(renderer.render(view, "json"))
    assert set(TITLES) <= {e["title"] for e in data["events"]}
    assert ODD_LINK_URI in {e["url"] for e in data["events"]}
    telegram = renderer.telegram(view)
    shown = "".join(telegram_text(m) for m in telegram)
    assert all(tg_escape(t) in "".join(telegram) and t in shown for t in TITLES)
    embeds = [e.get("title", "") for p in renderer.discord(view) for e in p["embeds"]]
    assert all(any(discord_escape(t) in e for e in embeds) for t in TITLES)
