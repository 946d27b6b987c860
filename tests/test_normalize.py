"""Pure normalisation: generated feed documents through feedparser, no database, no network."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from typing import Any

import pytest
from feeds import arxiv_item, arxiv_listing, atom, github_releases, rfc822, rss

from digest.ingest.extids import is_prerelease
from digest.ingest.feedtext import canonical_url, plain_text, truncate
from digest.ingest.jsonfeed import parse_json_feed
from digest.ingest.normalize import (
    BODY_MAX,
    SUMMARY_MAX,
    FeedContext,
    NormalizedFeed,
    bozo_warning,
    feed_context,
    looks_like_feed,
    normalize_entry,
    normalize_feed,
)
from digest.ingest.pipeline import feedparse

NOW = dt.datetime(2024, 9, 10, 12, 0, tzinfo=dt.UTC)
YESTERDAY = NOW - dt.timedelta(days=1)


def parsed(body: bytes, content_type: str | None = None, url: str | None = None) -> Any:
    """The document as ingestion parses it (feedparser's own HTML passes off)."""
    return feedparse(body, content_type, url)


def normalized(body: bytes, kind: str = "rss", url: str | None = None) -> NormalizedFeed:
    doc = parsed(body, "application/xml" if url else None, url)
    return normalize_feed(doc, feed_context(doc, kind, NOW, url))


def ctx(kind: str = "rss", base: str | None = "https://example.org/feed") -> FeedContext:
    return FeedContext(kind=kind, fetched_at=NOW, base_url=base)


# ---------------------------------------------------------------- URLs and text


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("https://Example.ORG/a?utm_source=x&id=3&utm_medium=y#frag", "https://example.org/a?id=3"),
        ("http://example.org:80/p?fbclid=1&gclid=2&ref=hn", "http://example.org/p"),
        ("https://example.org:8443/p?q=a%20b&mc_cid=9", "https://example.org:8443/p?q=a%20b"),
        ("/post/1?x=1", "https://example.org/post/1?x=1"),
        ("../up", "https://example.org/up"),
        ("https://user:pw@example.org", "https://example.org/"),
        ("  https://example.org/ws\n", "https://example.org/ws"),
        ("javascript:alert(1)", None),
        ("mailto:a@example.org", None),
        ("ftp://example.org/f", None),
        ("", None),
        ("http://[::1", None),
    ],
)
def test_canonical_url(raw: str, expected: str | None) -> None:
    assert canonical_url(raw, "https://example.org/blog/feed.xml") == expected


def test_plain_text_strips_tags_decodes_entities_and_keeps_angle_text() -> None:
    html = ("<p>Fast &amp; <b>small</b>,</p>\n<script>alert(1)</script><br/>"
            "std::vector<int> &#8217;ok&#8217;")
    assert plain_text(html) == "Fast & small, std::vector<int> ’ok’"
    assert plain_text("a\x00b\x07c   d") == "abc d"
    cut = truncate("word " * 100, 52)
    assert cut.endswith("word…") and len(cut) <= 52


# ---------------------------------------------------------------- RSS 2.0 and Atom


def test_rss_entry_fields() -> None:
    feed = normalized(rss([{
        "title": "&lt;b&gt;MLIR&lt;/b&gt; &amp;amp;   Triton\n news",
        "link": "https://example.org/p/1?utm_source=rss&amp;id=7#top",
        "guid": "tag:example.org,2024:post-1",
        "description": '&lt;p&gt;See &lt;a href="/rel/paper"&gt;paper&lt;/a&gt; and '
                       '&lt;a href="https://arxiv.org/abs/2409.01234?utm_campaign=z"&gt;x&lt;/a&gt;'
                       '&lt;a href="javascript:void(0)"&gt;j&lt;/a&gt;&lt;/p&gt;',
        "pubDate": rfc822(YESTERDAY),
        "category": "compilers",
        "author": "ann@example.org (Ann)",
    }]), url="https://example.org/feed.xml")
    (entry,) = feed.entries
    assert entry.entry_key == "tag:example.org,2024:post-1"
    assert entry.title == "MLIR & Triton news"
    assert entry.url == "https://example.org/p/1?utm_source=rss&id=7#top"
    assert entry.canonical_url == "https://example.org/p/1?id=7"
    assert entry.summary == "See paper and xj"
    assert entry.links == (
        "https://example.org/p/1?id=7", "https://example.org/rel/paper",
        "https://arxiv.org/abs/2409.01234",
    )
    assert entry.published == YESTERDAY.replace(microsecond=0)
    assert entry.published.tzinfo is dt.UTC and not entry.published_is_fallback
    assert entry.categories == ("compilers",)
    assert entry.arxiv_id is None, "a post that links a paper is not the paper"
    assert feed.warnings == []


def test_atom_entry_prefers_summary_and_collects_content_links() -> None:
    feed = normalized(atom([{
        "id": "urn:uuid:1", "title": '<![CDATA[TVM <i>Relax</i>]]>', "link": "/posts/relax",
        "updated": "2024-09-09T10:00:00+02:00", "summary": "Short.",
        "content": '<![CDATA[<p>Long <a href="https://github.com/apache/tvm">repo</a></p>]]>',
    }]), url="https://blog.example.org/atom.xml")
    (entry,) = feed.entries
    assert entry.title == "TVM <i>Relax</i>", "an Atom title without a type is text"
    assert entry.summary == "Short."
    assert entry.url == "https://blog.example.org/posts/relax"
    assert "https://github.com/apache/tvm" in entry.links
    assert entry.published == dt.datetime(2024, 9, 9, 8, 0, tzinfo=dt.UTC)


def test_missing_and_broken_dates_fall_back_to_fetch_time_with_a_warning() -> None:
    future = NOW + dt.timedelta(days=30)
    feed = normalized(rss([
        {"title": "no date", "guid": "a"},
        {"title": "bad date", "guid": "b", "pubDate": "yesterday-ish"},
        {"title": "future", "guid": "c", "pubDate": rfc822(future)},
    ]))
    assert [e.published for e in feed.entries] == [NOW, NOW, NOW]
    assert all(e.published_is_fallback for e in feed.entries)
    assert "2 entries: no usable date (published set to fetch time)" in feed.warnings
    assert "1 entry: date in the future (published set to fetch time)" in feed.warnings


def test_empty_title_falls_back_and_odd_types_never_crash() -> None:
    odd: dict[str, Any] = {
        "title": {"value": None}, "summary": ["<p>Body", " text</p>"], "tags": "not-a-list",
        "authors": [None, {"name": 3}], "links": [None, {"href": 5}], "published_parsed": "x",
        "content": [{"value": 1}], "id": None,
    }
    entry = normalize_entry(odd, ctx())
    assert entry.title == "Body text"
    assert entry.published == NOW and entry.published_is_fallback
    assert entry.entry_key.startswith("sha256:")
    assert entry.authors == ("3",)
    bare = normalize_entry({}, ctx(base=None))
    assert bare.title == "(untitled)" and bare.url is None and bare.links == ()


def test_entry_key_falls_back_from_guid_to_link_to_hash() -> None:
    with_link = normalize_entry({"link": "https://e.org/x?utm_source=a"}, ctx())
    assert with_link.entry_key == "https://e.org/x"
    long_guid = normalize_entry({"id": "x" * 600}, ctx())
    assert long_guid.entry_key.startswith("sha256:") and len(long_guid.entry_key) == 71
    first = normalize_entry({"title": "same"}, ctx())
    assert first.entry_key == normalize_entry({"title": "same"}, ctx()).entry_key


def test_content_hash_ignores_the_fallback_date_but_sees_real_changes() -> None:
    raw = {"id": "1", "title": "T", "summary": "S"}
    early = normalize_entry(raw, ctx())
    late = normalize_entry(raw, FeedContext("rss", NOW + dt.timedelta(hours=5)))
    assert early.content_hash == late.content_hash
    assert normalize_entry({**raw, "title": "T2"}, ctx()).content_hash != early.content_hash


def test_repeated_ids_keep_the_first_and_warn() -> None:
    feed = normalized(rss([
        {"title": "first", "guid": "dup"}, {"title": "second", "guid": "dup"},
        {"title": "other", "guid": "x"},
    ]))
    assert feed.total == 3
    assert [e.title for e in feed.entries] == ["first", "other"]
    assert feed.warnings[-1] == "1 repeated entry ids, first kept: dup"


def test_summary_is_capped() -> None:
    entry = normalize_entry({"id": "1", "summary": "<p>" + "word " * 2000 + "</p>"}, ctx())
    assert len(entry.summary) <= SUMMARY_MAX and entry.summary.endswith("…")


# ---------------------------------------------------------------- arXiv


def test_arxiv_listing_items() -> None:
    body = arxiv_listing([
        arxiv_item("2409.01234", 2, "replace", "A Compiler & Things", YESTERDAY, doi="10.1145/1.2"),
        arxiv_item("2409.05555", 1, "new", "Fresh", YESTERDAY, abstract="We fuse 3 kernels."),
        arxiv_item("2409.06666", 1, "cross", "Crossed", YESTERDAY),
        arxiv_item("2408.00001", 3, "replace-cross", "Old", YESTERDAY),
    ])
    feed = normalized(body, kind="arxiv", url="https://rss.arxiv.org/rss/cs.PL")
    replace, new, cross, replace_cross = feed.entries
    assert replace.entry_key == "oai:arXiv.org:2409.01234v2"
    assert (replace.arxiv_id, replace.arxiv_version, replace.announce_type) == (
        "2409.01234", 2, "replace")
    assert replace.doi == "10.1145/1.2"
    assert replace.title == "A Compiler & Things"
    assert new.summary == "We fuse 3 kernels."
    assert new.authors == ("Ada Lovelace", "Alan Turing", "Grace Hopper")
    assert new.canonical_url == "https://arxiv.org/abs/2409.05555"
    assert cross.announce_type == "cross" and replace_cross.announce_type == "replace-cross"
    assert replace_cross.arxiv_version == 3


def test_arxiv_prefix_without_element_and_api_entries() -> None:
    listing = normalize_entry({
        "id": "oai:arXiv.org:2409.07777v1",
        "summary": "arXiv:2409.07777v1 Announce Type: new \nAbstract: Plain.",
    }, ctx("arxiv"))
    assert (listing.arxiv_id, listing.announce_type, listing.summary) == (
        "2409.07777", "new", "Plain.")
    api = normalize_entry({
        "id": "http://arxiv.org/abs/cond-mat/0412498v1", "link": "http://arxiv.org/abs/x",
        "arxiv_doi": "10.1103/PhysRevB.71.184511", "title": "0",
    }, ctx("arxiv"))
    assert (api.arxiv_id, api.arxiv_version, api.announce_type) == ("cond-mat/0412498", 1, None)
    assert api.doi == "10.1103/PhysRevB.71.184511"
    assert api.title == "0"


def test_arxiv_api_error_document_is_reported_not_stored() -> None:
    body = atom([{
        "id": "https://arxiv.org/api/errors#incorrect_id_format_for_abc", "title": "Error",
        "summary": "incorrect id format for abc", "updated": "2026-04-12T22:59:06Z",
    }], title="arXiv Search Results")
    feed = normalized(body, kind="arxiv")
    assert feed.entries == [] and feed.api_errors == ["incorrect id format for abc"]


# ---------------------------------------------------------------- GitHub releases


def test_github_releases_with_relative_links_and_prereleases() -> None:
    body = github_releases("triton-lang", "triton", [
        ("v3.1.0-rc1", YESTERDAY), ("v3.0.0", YESTERDAY), ("nightly-20240909", YESTERDAY),
    ])
    feed = normalized(body, kind="github-releases",
                      url="https://github.com/triton-lang/triton/releases.atom")
    rc, stable, nightly = feed.entries
    assert rc.url == "https://github.com/triton-lang/triton/releases/tag/v3.1.0-rc1"
    assert (rc.repo, rc.tag, rc.prerelease) == ("triton-lang/triton", "v3.1.0-rc1", True)
    assert (stable.tag, stable.prerelease) == ("v3.0.0", False)
    assert nightly.prerelease
    assert "https://github.com/triton-lang/triton/compare/x...v3.0.0" in stable.links


def test_github_release_from_a_local_copy_resolves_against_the_feed_link() -> None:
    body = github_releases("llvm", "llvm-project", [("llvmorg-19.1.0", YESTERDAY)])
    (entry,) = normalized(body, kind="github-releases").entries
    assert entry.url == "https://github.com/llvm/llvm-project/releases/tag/llvmorg-19.1.0"
    assert (entry.repo, entry.tag, entry.prerelease) == ("llvm/llvm-project", "llvmorg-19.1.0",
                                                         False)


def test_github_tag_from_entry_id_when_the_link_is_missing() -> None:
    context = FeedContext("github-releases", NOW, repo="apache/tvm")
    entry = normalize_entry({"id": "tag:github.com,2008:Repository/1/v0.18.0.rc0"}, context)
    assert (entry.repo, entry.tag, entry.prerelease) == ("apache/tvm", "v0.18.0.rc0", True)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("v2.0.0-rc1", True), ("3.0.0a1", True), ("v1.0.0-beta.2", True), ("Nightly build", True),
        ("Pre-release 5", True), ("0.1.dev20240101", True), ("v1.2.3", False),
        ("Source code", False), ("devtools 4", False), ("alphabet 1", False),
    ],
)
def test_is_prerelease(name: str, expected: bool) -> None:
    assert is_prerelease(name) is expected


def test_blog_title_mentioning_beta_is_not_a_prerelease() -> None:
    entry = normalize_entry({"id": "1", "title": "Beta testing the new pass manager"}, ctx())
    assert entry.tag is None and not entry.prerelease


# ---------------------------------------------------------------- documents


def test_feed_detection_and_bozo_warning() -> None:
    html = parsed(b"<!DOCTYPE html><html><head><title>Hi</title></head><body>x</body></html>",
                  "text/html")
    assert not looks_like_feed(html)
    assert not looks_like_feed(parsed(b"hello"))
    empty_feed = parsed(rss([]))
    assert looks_like_feed(empty_feed) and bozo_warning(empty_feed) is None
    broken = parsed(rss([{"title": "kept", "guid": "1"}])[:-20])
    assert looks_like_feed(broken)
    assert (bozo_warning(broken) or "").startswith("ill-formed feed, kept what parsed")


def test_struct_time_with_leap_second_is_accepted() -> None:
    leap = time.struct_time((2016, 12, 31, 23, 59, 60, 5, 366, 0))
    entry = normalize_entry({"id": "1", "published_parsed": leap}, ctx())
    assert entry.published == dt.datetime(2016, 12, 31, 23, 59, 59, tzinfo=dt.UTC)


def test_json_feed_becomes_the_same_records() -> None:
    body = json.dumps({
        "version": "https://jsonfeed.org/version/1.1", "title": "JSON blog",
        "home_page_url": "https://json.example/", "items": [
            {"id": "j1", "url": "/posts/1?utm_source=x", "title": "vector<int> & more",
             "content_html": '<p>See <a href="https://arxiv.org/abs/2409.01234">it</a></p>',
             "date_published": "2024-09-09T10:00:00+02:00", "tags": ["mlir", 3],
             "authors": [{"name": "Ann"}]},
            {"id": 2, "content_text": "no title <b>here</b>", "date_published": "garbage"},
        ],
    }).encode()
    doc = parse_json_feed(body)
    assert doc is not None and looks_like_feed(doc)
    first, second = normalize_feed(doc, feed_context(doc, "rss", NOW, None)).entries
    assert first.url == "https://json.example/posts/1?utm_source=x"
    assert first.canonical_url == "https://json.example/posts/1"
    assert (first.title, first.summary) == ("vector<int> & more", "See it")
    assert first.published == dt.datetime(2024, 9, 9, 8, 0, tzinfo=dt.UTC)
    assert first.categories == ("mlir",) and first.authors == ("Ann",)
    assert "https://arxiv.org/abs/2409.01234" in first.links
    assert (second.entry_key, second.title, second.published_is_fallback) == (
        "2", "no title <b>here</b>", True)
    assert parse_json_feed(b'{"version": "1"}') is None
    assert parse_json_feed(b"<rss/>") is None and parse_json_feed(b"{oops") is None


# ---------------------------------------------------------------- the body (full text)

_POST = ("&lt;h2&gt;Results&lt;/h2&gt;&lt;p&gt;The teaser again.&lt;/p&gt;"
         "&lt;p&gt;We fuse FlashAttention into &lt;b&gt;CUDA graphs&lt;/b&gt;: 38 minutes to "
         "6 minutes.&lt;/p&gt;&lt;script&gt;evil()&lt;/script&gt;")


def _rss_with_content(content: str, description: str = "The teaser.") -> bytes:
    doc = rss([{"title": "Post", "link": "https://example.org/p", "guid": "g1",
                "description": description, "content:encoded": content}])
    return doc.replace(b'<rss version="2.0">',
                       b'<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/">')


def test_rss_keeps_the_teaser_as_summary_and_the_whole_post_as_body() -> None:
    (entry,) = normalized(_rss_with_content(_POST)).entries
    assert entry.summary == "The teaser."
    assert entry.body == ("Results\n\nThe teaser again.\n\n"
                          "We fuse FlashAttention into CUDA graphs: 38 minutes to 6 minutes.")
    assert entry.row()["body"] == entry.body, "the body is stored with the entry"


def test_body_is_bounded_and_empty_without_content() -> None:
    huge = "&lt;p&gt;" + "word " * 10_000 + "&lt;/p&gt;"
    (entry,) = normalized(_rss_with_content(huge * 3)).entries
    assert len(entry.body) <= BODY_MAX and entry.body.endswith("…")
    (plain,) = normalized(rss([{"title": "T", "guid": "g", "description": "Only a teaser."}])).entries
    assert plain.body == ""


def test_a_content_that_is_the_summary_is_kept_as_body_only_for_its_structure() -> None:
    notes = ("&lt;h2&gt;Breaking changes&lt;/h2&gt;&lt;ul&gt;&lt;li&gt;Removed the old pass manager."
             "&lt;/li&gt;&lt;li&gt;Renamed tt.dot to tt.mma.&lt;/li&gt;&lt;/ul&gt;")
    one = "&lt;p&gt;Release v3.2, see the changes.&lt;/p&gt;"

    def release(content: str) -> bytes:
        return (b'<feed xmlns="http://www.w3.org/2005/Atom"><title>r</title><entry><id>t1</id>'
                b"<title>v3.2</title><updated>2026-11-30T10:00:00Z</updated>"
                b'<content type="html">' + content.encode() + b"</content></entry></feed>")

    (listed,) = normalized(release(notes), kind="atom").entries
    assert " ".join(listed.body.split()) == listed.summary, "Atom content only: the summary is it"
    assert listed.body.split("\n\n") == ["Breaking changes", "Removed the old pass manager.",
                                           "Renamed tt.dot to tt.mma."]
    (flat,) = normalized(release(one), kind="atom").entries
    assert flat.summary == "Release v3.2, see the changes." and flat.body == ""


def test_body_changes_the_content_hash_but_no_body_keeps_the_old_one() -> None:
    (with_body,) = normalized(_rss_with_content(_POST)).entries
    (other,) = normalized(_rss_with_content(_POST.replace("6 minutes", "7 minutes"))).entries
    assert with_body.content_hash != other.content_hash
    (plain,) = normalized(rss([{"title": "T", "guid": "g", "description": "Teaser."}])).entries
    old = {k: v for k, v in plain.row().items() if k not in ("content_hash", "body")}
    old["published"] = None  # no date in the item: the fallback is left out of the hash
    blob = json.dumps(old, ensure_ascii=False, sort_keys=True).encode()
    assert plain.content_hash == hashlib.sha256(blob).hexdigest(), "stored entries stay unchanged"
