"""Ingestion end to end: a real HTTP server on 127.0.0.1, real feedparser, real databases.

Storage tests run on SQLite and PostgreSQL (the ``sessions`` fixture); the
network-behaviour tests use SQLite only, where the backend does not matter.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import os
import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import feedparser
import httpx
import pytest
from feeds import arxiv_item, arxiv_listing, atom, github_releases, rfc822, rss
from feedserver import FeedServer, Reply
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from digest.domain.status import FetchStatus
from digest.ingest import due
from digest.ingest.pipeline import (
    FetchOptions,
    FetchResult,
    SourceState,
    fetch_sources,
    source_states,
    sync_sources,
)
from digest.ingest.sources import SourceSpec
from digest.store.db import SessionFactory
from digest.store.models import Entry, FetchLog, Source
from tests.test_operator import run_cli

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
HOUR_AGO = NOW - dt.timedelta(hours=1)
FAST = FetchOptions(timeout=5.0, retry_backoff=0.01)
RSS = "application/rss+xml"
JSON_KEYS = ["source", "status", "http_status", "entries_total", "entries_new",
             "entries_updated", "bytes", "seconds", "warnings", "error"]


@pytest.fixture
def server() -> Iterator[FeedServer]:
    with FeedServer() as feed_server:
        yield feed_server


@pytest.fixture
def parse_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count feedparser.parse calls (the real function still runs)."""
    calls: list[int] = []
    real = feedparser.parse

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(feedparser, "parse", spy)
    return calls


def spec(key: str, url: str, kind: str = "rss", enabled: bool = True) -> SourceSpec:
    return SourceSpec(key=key, name=key.title(), url=url, kind=kind, enabled=enabled)


async def fetch(sessions: SessionFactory, *specs: SourceSpec, options: FetchOptions = FAST,
                **kwargs: Any) -> list[FetchResult]:
    kwargs.setdefault("now", NOW)
    return await fetch_sources(sessions, list(specs), options, **kwargs)


async def entries(sessions: SessionFactory, key: str) -> list[Entry]:
    async with sessions() as session:
        query = select(Entry).join(Source).where(Source.key == key).order_by(Entry.id)
        return list(await session.scalars(query))


async def state(sessions: SessionFactory, key: str) -> SourceState:
    return next(s for s in await source_states(sessions) if s.key == key)


def news(*titles: str) -> bytes:
    return rss([{"title": t, "guid": f"tag:ex,2024:{t}", "link": f"https://ex.org/{t}",
                 "pubDate": rfc822(HOUR_AGO)} for t in titles])


# ---------------------------------------------------------------- storage (SQLite + PostgreSQL)


async def test_fetches_and_stores_every_kind_of_feed(sessions: SessionFactory,
                                                     server: FeedServer) -> None:
    blog = server.serve("/blog.xml", Reply(rss([{
        "title": "Triton 3 &amp; you", "link": "https://ex.org/t3?utm_source=rss&amp;x=1#c",
        "guid": "https://ex.org/t3", "pubDate": rfc822(HOUR_AGO),
        "description": '&lt;a href="https://arxiv.org/abs/2409.01234?fbclid=9"&gt;paper&lt;/a&gt;',
    }]), content_type=RSS))
    atom_url = server.serve("/atom.xml", Reply(atom([{
        "id": "urn:1", "title": "MLIR news", "link": "/posts/mlir",
        "updated": HOUR_AGO.isoformat(), "summary": "s"}]), content_type=None))
    arxiv = server.serve("/rss/cs.PL", Reply(arxiv_listing([
        arxiv_item("2409.01234", 2, "replace", "Paper", HOUR_AGO),
        arxiv_item("2409.05555", 1, "new", "New paper", HOUR_AGO, doi="10.1145/3.4"),
        arxiv_item("2409.06666", 1, "cross", "Cross", HOUR_AGO),
    ]), content_type=RSS))
    releases = server.serve("/triton-lang/triton/releases.atom", Reply(github_releases(
        "triton-lang", "triton", [("v3.1.0-rc1", HOUR_AGO), ("v3.0.0", HOUR_AGO)])))
    results = await fetch(sessions, spec("blog", blog), spec("atom", atom_url),
                          spec("arxiv", arxiv, "arxiv"), spec("gh", releases, "github-releases"))

    assert [(r.source, r.status, r.http_status, r.entries_new) for r in results] == [
        ("blog", "ok", 200, 1), ("atom", "ok", 200, 1), ("arxiv", "ok", 200, 3), ("gh", "ok", 200, 2)
    ]
    assert list(results[0].as_json()) == JSON_KEYS
    (post,) = await entries(sessions, "blog")
    assert post.canonical_url == "https://ex.org/t3?x=1" and post.title == "Triton 3 & you"
    assert "https://arxiv.org/abs/2409.01234" in post.links
    assert post.published == HOUR_AGO and post.first_seen == NOW
    (mlir,) = await entries(sessions, "atom")
    assert mlir.url == server.url("/posts/mlir"), "resolved even without a Content-Type"
    assert results[1].warnings == []
    papers = {e.arxiv_id: e for e in await entries(sessions, "arxiv")}
    assert papers["2409.01234"].arxiv_version == 2
    assert [papers[k].announce_type for k in sorted(papers)] == ["replace", "new", "cross"]
    assert papers["2409.05555"].doi == "10.1145/3.4"
    rc, stable = await entries(sessions, "gh")
    assert rc.url == server.url("/triton-lang/triton/releases/tag/v3.1.0-rc1")
    assert (rc.repo, rc.tag, rc.prerelease) == ("triton-lang/triton", "v3.1.0-rc1", True)
    assert (stable.tag, stable.prerelease) == ("v3.0.0", False)
    agents = {r.headers["user-agent"] for r in server.requests}
    assert len(agents) == 1 and agents.pop().startswith("compiler-digest/")
    async with sessions() as session:
        assert await session.scalar(select(func.count()).select_from(FetchLog)) == 4


async def test_conditional_get_gets_304_and_parses_nothing(
    sessions: SessionFactory, server: FeedServer, parse_calls: list[int]
) -> None:
    stamp = "Mon, 09 Sep 2024 10:00:00 GMT"
    url = server.serve("/f.xml", Reply(news("a", "b"), etag='"v1"', last_modified=stamp))
    (first,) = await fetch(sessions, spec("f", url))
    (second,) = await fetch(sessions, spec("f", url))

    assert (first.status, first.entries_new) == ("ok", 2)
    assert second.as_json() | {"seconds": 0} == {
        "source": "f", "status": "not_modified", "http_status": 304, "entries_total": 0,
        "entries_new": 0, "entries_updated": 0, "bytes": 0, "seconds": 0, "warnings": [],
        "error": None,
    }
    first_request, second_request = server.requests_to("/f.xml")
    assert "if-none-match" not in first_request.headers
    assert second_request.headers["if-none-match"] == '"v1"'
    assert second_request.headers["if-modified-since"] == stamp
    assert len(parse_calls) == 1
    current = await state(sessions, "f")
    assert (current.last_status, current.last_http_status, current.entries) == (
        "not_modified", 304, 2)


async def test_changed_entry_is_updated_in_place_and_new_ones_added(
    sessions: SessionFactory, server: FeedServer
) -> None:
    url = server.serve("/f.xml", Reply(news("a", "b")))
    await fetch(sessions, spec("f", url))
    body = news("a", "b", "c").replace(b"<title>b</title>", b"<title>b, revised</title>")
    server.serve("/f.xml", Reply(body))
    later = NOW + dt.timedelta(hours=2)
    (result,) = await fetch(sessions, spec("f", url), now=later)

    assert (result.entries_total, result.entries_new, result.entries_updated) == (3, 1, 1)
    by_title = {e.title: e for e in await entries(sessions, "f")}
    assert set(by_title) == {"a", "b, revised", "c"}
    assert by_title["b, revised"].first_seen == NOW and by_title["b, revised"].updated_at == later
    assert by_title["a"].updated_at == NOW


def many(prefix: str, count: int) -> bytes:
    """``count`` dated items titled ``prefix`` + n, and one undated item (guid ``u:1``)."""
    items = [{"title": f"{prefix}{n}", "guid": f"g:{n}", "pubDate": rfc822(HOUR_AGO)}
             for n in range(count)]
    return rss([*items, {"title": f"{prefix}undated", "guid": "u:1"}])


async def test_bulk_writes_span_batches_and_keep_a_fallback_date_on_update(
    sessions: SessionFactory, server: FeedServer
) -> None:
    url = server.serve("/f.xml", Reply(many("t", 1_100)))  # more than two ROW_BATCHes of rows
    (first,) = await fetch(sessions, spec("f", url))
    server.serve("/f.xml", Reply(many("revised t", 1_100)))
    later = NOW + dt.timedelta(hours=2)
    (second,) = await fetch(sessions, spec("f", url), now=later)

    assert (first.entries_new, second.entries_new, second.entries_updated) == (1_101, 0, 1_101)
    stored = {e.entry_key: e for e in await entries(sessions, "f")}
    assert len(stored) == 1_101
    assert (stored["u:1"].title, stored["u:1"].published, stored["u:1"].updated_at) == (
        "revised tundated", NOW, later), "an updated entry keeps its first fallback date"
    assert (stored["g:7"].title, stored["g:7"].published, stored["g:7"].first_seen) == (
        "revised t7", HOUR_AGO, NOW)


async def test_statuses_are_fetch_status_members_stored_and_shown_as_the_same_words(
    sessions: SessionFactory, server: FeedServer
) -> None:
    good = server.serve("/good.xml", Reply(news("a"), etag='"v1"'))
    bad = server.serve("/bad.xml", Reply(b"oops", status=404))
    first = await fetch(sessions, spec("good", good), spec("bad", bad))
    (again,) = await fetch(sessions, spec("good", good))

    results = [*first, again]
    assert [r.status for r in results] == [FetchStatus.OK, FetchStatus.ERROR,
                                           FetchStatus.NOT_MODIFIED]
    assert all(type(r.status) is FetchStatus for r in results)
    words = [json.loads(json.dumps(r.as_json()))["status"] for r in results]
    assert words == ["ok", "error", "not_modified"]
    query = select(Source.key, FetchLog.status).join(Source).order_by(FetchLog.id)
    async with sessions() as session:
        logged = [(key, status) for key, status in await session.execute(query)]
    assert sorted(logged[:2]) == [("bad", "error"), ("good", "ok")]  # one run: any order
    assert logged[2:] == [("good", "not_modified")]
    assert all(type(status) is str for _, status in logged)
    assert [(await state(sessions, k)).last_status for k in ("good", "bad")] == [
        "not_modified", "error"]


async def test_failures_are_counted_and_reset(sessions: SessionFactory, server: FeedServer) -> None:
    url = server.serve("/f.xml", Reply(b"oops", status=500))
    (first,) = await fetch(sessions, spec("f", url))
    assert (first.status, first.http_status) == ("error", 500)
    assert first.error == "HTTP 500 Internal Server Error (after 1 retry)"
    assert len(server.requests_to("/f.xml")) == 2
    assert (await state(sessions, "f")).consecutive_failures == 1
    await fetch(sessions, spec("f", url))
    failing = await state(sessions, "f")
    assert (failing.consecutive_failures, failing.last_status, failing.last_http_status) == (
        2, "error", 500)
    assert failing.last_error == first.error
    server.serve("/f.xml", Reply(news("a")))
    await fetch(sessions, spec("f", url))
    healed = await state(sessions, "f")
    assert (healed.consecutive_failures, healed.last_status, healed.last_error) == (0, "ok", None)


async def test_check_mode_stores_nothing_and_sends_no_validators(
    sessions: SessionFactory, server: FeedServer
) -> None:
    url = server.serve("/f.xml", Reply(news("a", "b"), etag='"v1"'))
    (checked,) = await fetch(sessions, spec("f", url), store=False)
    assert (checked.status, checked.entries_total, checked.entries_new) == ("ok", 2, 2)
    assert await source_states(sessions) == []
    await fetch(sessions, spec("f", url))
    server.serve("/f.xml", Reply(news("a", "b", "c"), etag='"v1"'))
    (again,) = await fetch(sessions, spec("f", url), store=False)
    assert (again.status, again.entries_new, again.entries_updated) == ("ok", 1, 0)
    assert "if-none-match" not in server.requests_to("/f.xml")[-1].headers
    assert len(await entries(sessions, "f")) == 2


async def test_local_file_source(sessions: SessionFactory, tmp_path: Path,
                                 parse_calls: list[int]) -> None:
    path = tmp_path / "feed.xml"
    path.write_bytes(news("a"))
    local = spec("local", f"file://{path}")
    (first,) = await fetch(sessions, local)
    (second,) = await fetch(sessions, local)
    path.write_bytes(news("a", "b"))
    (third,) = await fetch(sessions, local)

    assert (first.status, first.http_status, first.bytes) == ("ok", None, len(news("a")))
    assert (second.status, second.entries_total) == ("not_modified", 0)
    assert (third.status, third.entries_new) == ("ok", 1)
    assert len(parse_calls) == 2


async def test_hostile_values_fit_the_columns(sessions: SessionFactory, tmp_path: Path) -> None:
    long_link = "https://ex.org/" + "p" * 3000
    path = tmp_path / "odd.xml"
    path.write_bytes(atom([
        {"id": "urn:" + "x" * 700, "title": "long id", "link": long_link},
        {"id": "tag:github.com,2008:Repository/1/v1%00" + "t" * 400, "title": "tag"},
        {"id": "urn:nul", "title": "a&#x1;b", "link": "https://github.com/o/r/releases/tag/%00rc"},
    ], feed_id="tag:github.com,2008:https://github.com/o/r/releases"))
    (result,) = await fetch(sessions, spec("odd", str(path), "github-releases"))

    assert (result.status, result.entries_new) == ("ok", 3), result.error
    long_id, tag, nul = await entries(sessions, "odd")
    assert long_id.entry_key.startswith("sha256:") and long_id.canonical_url is None
    assert tag.tag is not None and len(tag.tag) == 256 and "\x00" not in tag.tag
    assert nul.tag == "rc" and nul.title == "ab"


# ---------------------------------------------------------------- network behaviour (SQLite)


async def test_unchanged_body_without_validators_is_not_modified(
    sqlite_sessions: SessionFactory, server: FeedServer, parse_calls: list[int]
) -> None:
    url = server.serve("/f.xml", Reply(news("a")))
    await fetch(sqlite_sessions, spec("f", url))
    (second,) = await fetch(sqlite_sessions, spec("f", url))
    assert (second.status, second.http_status, second.entries_total) == ("not_modified", 200, 0)
    assert len(parse_calls) == 1


async def test_one_retry_after_a_server_error(sqlite_sessions: SessionFactory,
                                              server: FeedServer) -> None:
    url = server.serve("/f.xml", Reply(b"", status=503), Reply(news("a")))
    (result,) = await fetch(sqlite_sessions, spec("f", url))
    assert (result.status, result.entries_new) == ("ok", 1)
    assert len(server.requests_to("/f.xml")) == 2


@pytest.mark.parametrize("declared", [True, False])
async def test_body_over_the_cap_is_aborted(sqlite_sessions: SessionFactory, server: FeedServer,
                                            declared: bool) -> None:
    url = server.serve("/big.xml", Reply(news("a"), padding=5_000_000, content_length=declared))
    options = FetchOptions(max_bytes=4096, retry_backoff=0.01)
    started = time.perf_counter()
    (result,) = await fetch(sqlite_sessions, spec("big", url), options=options)
    assert (result.status, result.http_status) == ("error", 200)
    assert result.error == "body larger than the 4096-byte cap (max_bytes); aborted"
    assert time.perf_counter() - started < 2


async def test_slow_drip_is_cut_by_the_total_timeout(sqlite_sessions: SessionFactory,
                                                     server: FeedServer) -> None:
    url = server.serve("/slow.xml", Reply(news("a") * 20, drip_delay=0.02, drip_chunk=8))
    options = FetchOptions(timeout=0.3, retry_backoff=0.01)
    started = time.perf_counter()
    (result,) = await fetch(sqlite_sessions, spec("slow", url), options=options)
    assert result.status == "error"
    assert result.error == "timed out after 0.3 s for the whole fetch (after 1 retry)"
    assert time.perf_counter() - started < 2


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (Reply(b"<!DOCTYPE html><html><head><title>Blog</title></head><body><p>hi</p></body>"
               b"</html>", content_type="text/html; charset=utf-8"), "not a feed: got an HTML page"),
        (Reply(b""), "not a feed: empty body"),
        (Reply(b"  \n"), "not a feed: empty body"),
        (Reply(b'{"hello": "world"}', content_type="application/json"),
         "not a feed: no feed version, title or entries found"),
    ],
)
async def test_not_a_feed(sqlite_sessions: SessionFactory, server: FeedServer, reply: Reply,
                          reason: str) -> None:
    url = server.serve("/page", reply)
    (result,) = await fetch(sqlite_sessions, spec("page", url))
    assert (result.status, result.http_status, result.error) == ("error", 200, reason)


async def test_ill_formed_xml_keeps_what_parsed(sqlite_sessions: SessionFactory,
                                                server: FeedServer) -> None:
    body = news("a", "b").replace(b"</channel></rss>", b"<item><title>broken &nbsp; <b></item>")
    url = server.serve("/bad.xml", Reply(body))
    (result,) = await fetch(sqlite_sessions, spec("bad", url))
    assert result.status == "ok" and result.entries_new >= 2
    assert result.warnings[0].startswith("ill-formed feed, kept what parsed")


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (rss([{"title": "Café – “quoted”", "guid": "1"}], encoding="windows-1252"), RSS),
        (rss([{"title": "Café – “quoted”", "guid": "1"}], encoding="windows-1252", declare=False),
         "application/rss+xml; charset=windows-1252"),
        (rss([{"title": "Café – “quoted”", "guid": "1"}], encoding="utf-16"), RSS),
    ],
    ids=["cp1252-declared", "cp1252-http-charset", "utf-16-bom"],
)
async def test_encodings(sqlite_sessions: SessionFactory, server: FeedServer, body: bytes,
                         content_type: str) -> None:
    url = server.serve("/enc.xml", Reply(body, content_type=content_type))
    (result,) = await fetch(sqlite_sessions, spec("enc", url))
    assert result.status == "ok", result.error
    (entry,) = await entries(sqlite_sessions, "enc")
    assert entry.title == "Café – “quoted”"


async def test_http_failures_are_one_line_errors(sqlite_sessions: SessionFactory,
                                                 server: FeedServer) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    server.serve("/loop", Reply(status=302, headers={"Location": "/loop"}))
    server.serve("/moved", Reply(status=301, headers={"Location": "/f.xml"}))
    server.serve("/f.xml", Reply(news("a")))
    server.serve("/missing", Reply(b"gone", status=404))
    results = await fetch(
        sqlite_sessions,
        spec("missing", server.url("/missing")),
        spec("refused", f"http://127.0.0.1:{closed_port}/f.xml"),
        spec("tls", server.url("/f.xml").replace("http://", "https://")),
        spec("loop", server.url("/loop")),
        spec("moved", server.url("/moved")),
        options=FetchOptions(max_redirects=3, retry_backoff=0.01, timeout=5),
    )
    missing, refused, tls, loop, moved = results
    assert (missing.http_status, missing.error) == (404, "HTTP 404 Not Found")
    assert len(server.requests_to("/missing")) == 1, "a 404 is not retried"
    assert refused.error is not None and refused.error.startswith("connection failed:")
    assert tls.status == "error" and tls.error is not None and "SSL" in tls.error
    assert loop.error == "more than 3 redirects"
    assert (moved.status, moved.entries_new) == ("ok", 1)
    assert all("\n" not in (r.error or "") for r in results)


async def test_one_failing_source_never_stops_the_others(
    sqlite_sessions: SessionFactory, server: FeedServer
) -> None:
    good = server.serve("/good.xml", Reply(news("a")))
    bad = server.serve("/bad.xml", Reply(b"<html>no</html>", content_type="text/html", etag='"h"'))
    seen: list[str] = []
    results = await fetch(
        sqlite_sessions, spec("bad", bad), spec("off", good, enabled=False), spec("good", good),
        progress=lambda result: seen.append(result.source),
    )
    assert [(r.source, r.status) for r in results] == [("bad", "error"), ("good", "ok")]
    assert sorted(seen) == ["bad", "good"]
    states = {s.key: s for s in await source_states(sqlite_sessions)}
    assert states["bad"].last_error == "not a feed: got an HTML page"
    assert (states["good"].entries, states["good"].last_status) == (1, "ok")
    assert (states["off"].enabled, states["off"].last_status) == (False, None)
    await fetch(sqlite_sessions, spec("bad", bad))
    assert "if-none-match" not in server.requests_to("/bad.xml")[-1].headers, (
        "a body that failed keeps no validators, so it is fetched in full again")


async def test_per_host_politeness_and_overall_concurrency(sqlite_sessions: SessionFactory) -> None:
    active: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    overall = {"now": 0, "peak": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        active[host] += 1
        overall["now"] += 1
        peak[host] = max(peak[host], active[host])
        overall["peak"] = max(overall["peak"], overall["now"])
        await asyncio.sleep(0.05)
        active[host] -= 1
        overall["now"] -= 1
        return httpx.Response(200, content=news(request.url.path.strip("/")))

    specs = [spec(f"{host}-{n}", f"https://{host}.example/{n}") for host in "abcd" for n in range(4)]
    options = FetchOptions(concurrency=5, per_host=2, retry_backoff=0.01)
    results = await fetch(sqlite_sessions, *specs, options=options,
                          transport=httpx.MockTransport(handler))
    assert all(r.status == "ok" for r in results)
    assert max(peak.values()) == 2
    assert 2 < overall["peak"] <= 5


async def test_arxiv_api_error_document_is_a_source_error(sqlite_sessions: SessionFactory,
                                                           server: FeedServer) -> None:
    body = atom([{"id": "https://arxiv.org/api/errors#incorrect_id_format_for_abc",
                  "title": "Error", "summary": "incorrect id format for abc"}],
                title="arXiv Search Results")
    url = server.serve("/api/query", Reply(body, content_type="application/atom+xml"))
    (result,) = await fetch(sqlite_sessions, spec("api", url, "arxiv"))
    assert (result.status, result.error) == ("error", "arXiv API error: incorrect id format for abc")


async def test_missing_dates_and_repeated_ids_are_stored_with_warnings(
    sqlite_sessions: SessionFactory, server: FeedServer
) -> None:
    body = rss([{"title": "undated", "guid": "u:1"}, {"title": "again", "guid": "u:1"},
                {"title": "dated", "guid": "u:2", "pubDate": rfc822(HOUR_AGO)}])
    url = server.serve("/f.xml", Reply(body))
    (result,) = await fetch(sqlite_sessions, spec("f", url))
    assert (result.entries_total, result.entries_new) == (3, 2)
    assert result.warnings == ["1 entry: no usable date (published set to fetch time)",
                               "1 repeated entry ids, first kept: u:1"]
    undated, dated = await entries(sqlite_sessions, "f")
    assert (undated.title, undated.published, undated.published_is_fallback) == (
        "undated", NOW, True)
    assert (dated.published, dated.published_is_fallback) == (HOUR_AGO, False)
    (again,) = await fetch(sqlite_sessions, spec("f", url), now=NOW + dt.timedelta(days=1))
    assert again.status == "not_modified"
    server.serve("/f.xml", Reply(body.replace(b"</channel>", b"<item><guid>u:3</guid></item>"
                                                             b"</channel>")))
    (grown,) = await fetch(sqlite_sessions, spec("f", url), now=NOW + dt.timedelta(days=2))
    assert (grown.entries_new, grown.entries_updated) == (1, 0), "a fallback date is no change"
    assert (await entries(sqlite_sessions, "f"))[0].published == NOW


async def test_sync_sources_upserts_and_forgets_validators_of_a_moved_feed(
    sqlite_sessions: SessionFactory,
) -> None:
    async with sqlite_sessions() as session:
        rows = await sync_sources(session, [spec("a", "https://a.example/feed")])
        rows["a"].etag, rows["a"].body_hash = '"x"', "h"
        rows["a"].next_fetch_at = NOW + dt.timedelta(hours=1)
        await session.commit()
    async with sqlite_sessions() as session:
        moved = SourceSpec("a", "Renamed", "https://b.example/feed", "atom", 0.9, False)
        row = (await sync_sources(session, [moved]))["a"]
        await session.commit()
    assert (row.name, row.url, row.kind, row.weight, row.enabled) == (
        "Renamed", "https://b.example/feed", "atom", 0.9, False)
    assert (row.etag, row.body_hash, row.next_fetch_at) == (None, None, None), "the new URL is due"
    (listed,) = await source_states(sqlite_sessions)
    assert (listed.key, listed.entries, listed.consecutive_failures) == ("a", 0, 0)


async def test_a_full_disk_is_reported_as_storage_not_as_unreachable_sources(
        tmp_path: Path, server: FeedServer, capsys: pytest.CaptureFixture[str]) -> None:
    """SQLite refuses to grow (SQLITE_FULL, as on a full disk): the last line says so, exit 1."""
    from sqlalchemy import event

    from digest.cli.ingest import _report
    from digest.store.db import make_engine, make_session_factory, migrate

    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'full.db'}")
    await migrate(engine)

    def no_room(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA page_count")
        (pages,) = cursor.fetchone()
        cursor.execute(f"PRAGMA max_page_count = {pages}")
        cursor.close()

    await engine.dispose()
    event.listen(engine.sync_engine, "connect", no_room)
    titles = (f"entry-{n}-" + "x" * 400 for n in range(200))
    url = server.serve("/big", Reply(news(*titles), content_type=RSS))
    try:
        results = await fetch(make_session_factory(engine), spec("big", url))
    finally:
        await engine.dispose()
    assert results[0].status == "error" and "storage failed" in (results[0].error or "")
    assert _report(results, as_json=True) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "could not be stored" in last and "full" in last and "make demo" not in last


# ---------------------------------------------------------------- due times (SQLite)

SY_NS = b'<rss version="2.0" xmlns:sy="http://purl.org/rss/1.0/modules/syndication/">'
HINT_UNITS = {"max-age": dt.timedelta(seconds=1), "ttl": dt.timedelta(minutes=1)}
_paths = itertools.count()


def hinted(kind: str, value: int, body: bytes) -> Reply:
    """A reply whose feed says, in one of the three ways, how long to leave it alone."""
    if kind == "max-age":
        return Reply(body, headers={"Cache-Control": f"public, max-age={value}"})
    if kind == "ttl":
        return Reply(body.replace(b"<channel>", f"<channel><ttl>{value}</ttl>".encode()))
    channel = f"<channel><sy:updatePeriod>hourly</sy:updatePeriod>" \
              f"<sy:updateFrequency>{value}</sy:updateFrequency>"
    return Reply(body.replace(b'<rss version="2.0">', SY_NS)
                 .replace(b"<channel>", channel.encode()))


def hint_interval(kind: str, value: int) -> dt.timedelta:
    """What the hint says (``sy``: an hour divided by the frequency)."""
    return dt.timedelta(hours=1) / value if kind == "sy" else HINT_UNITS[kind] * value


def clamped(interval: dt.timedelta) -> dt.timedelta:
    return min(max(interval, FAST.due_floor), FAST.due_ceiling)


async def next_fetch_at(sessions: SessionFactory, key: str) -> dt.datetime | None:
    async with sessions() as session:
        return await session.scalar(select(Source.next_fetch_at).where(Source.key == key))


HINTS = st.one_of(
    st.tuples(st.just("max-age"), st.integers(1, 200_000)),  # seconds: under 5 min to over a day
    st.tuples(st.just("ttl"), st.integers(1, 3_000)),  # minutes
    st.tuples(st.just("sy"), st.integers(1, 30)),  # hourly, 1 to 30 times (floor: 5 min)
)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hint=HINTS)
async def test_a_feed_is_not_fetched_before_its_hint_says_within_floor_and_ceiling(
    sqlite_sessions: SessionFactory, server: FeedServer, hint: tuple[str, int]
) -> None:
    kind, value = hint
    path = f"/due-{next(_paths)}.xml"
    source = spec(path.strip("/").replace(".xml", ""), server.serve(path, hinted(kind, value,
                                                                                 news("a"))))
    wait = clamped(hint_interval(kind, value))
    (first,) = await fetch(sqlite_sessions, source)
    (early,) = await fetch(sqlite_sessions, source, now=NOW + wait - dt.timedelta(seconds=1))
    requests_before_due = len(server.requests_to(path))
    (due,) = await fetch(sqlite_sessions, source, now=NOW + wait)

    assert first.status == "ok"
    assert await next_fetch_at(sqlite_sessions, source.key) == NOW + 2 * wait  # set again by `due`
    assert (early.status, early.http_status, early.seconds, early.error) == ("not_due", None, 0, None)
    assert requests_before_due == 1, "a source that is not due gets no request"
    assert due.status == "not_modified" and len(server.requests_to(path)) == 2


@pytest.mark.parametrize(("kind", "value", "expected"), [
    ("max-age", 60, dt.timedelta(minutes=5)),  # under the floor
    ("ttl", 90, dt.timedelta(minutes=90)),
    ("sy", 4, dt.timedelta(minutes=15)),
    ("ttl", 60 * 24 * 7, dt.timedelta(hours=24)),  # over the ceiling
])
async def test_next_fetch_at_is_the_hint_between_floor_and_ceiling(
    sqlite_sessions: SessionFactory, server: FeedServer, kind: str, value: int,
    expected: dt.timedelta
) -> None:
    await fetch(sqlite_sessions, spec("f", server.serve("/f.xml", hinted(kind, value, news("a")))))
    assert await next_fetch_at(sqlite_sessions, "f") == NOW + expected


async def test_the_longest_hint_wins_and_an_unchanged_feed_keeps_it_or_brings_its_own(
    sqlite_sessions: SessionFactory, server: FeedServer
) -> None:
    body = news("a").replace(b"<channel>", b"<channel><ttl>30</ttl>")
    url = server.serve("/f.xml", Reply(body, etag='"v1"', headers={"Cache-Control": "max-age=600"}),
                       Reply(body, etag='"v1"'),  # a 304: no body, no hint of its own
                       Reply(body, headers={"Cache-Control": "max-age=7200"}))  # same body
    source = spec("f", url)
    await fetch(sqlite_sessions, source)
    assert await next_fetch_at(sqlite_sessions, "f") == NOW + dt.timedelta(minutes=30)
    later = NOW + dt.timedelta(minutes=30)
    (kept,) = await fetch(sqlite_sessions, source, now=later)
    assert (kept.status, kept.http_status) == ("not_modified", 304)
    assert await next_fetch_at(sqlite_sessions, "f") == later + dt.timedelta(minutes=30)
    (told,) = await fetch(sqlite_sessions, source, now=later + dt.timedelta(minutes=30))
    assert (told.status, told.http_status) == ("not_modified", 200)
    assert await next_fetch_at(sqlite_sessions, "f") == later + dt.timedelta(minutes=150)


async def test_no_hint_no_cache_and_errors_leave_a_source_due(
    sqlite_sessions: SessionFactory, server: FeedServer
) -> None:
    plain = spec("plain", server.serve("/plain.xml", Reply(news("a"))))
    no_store = spec("nostore", server.serve("/nostore.xml", Reply(news("a"), headers={
        "Cache-Control": "no-store, max-age=3600"})))
    failing = spec("failing", server.serve("/failing.xml", hinted("ttl", 60, news("a")),
                                           Reply(b"gone", status=404)))
    await fetch(sqlite_sessions, plain, no_store, failing)
    (error,) = await fetch(sqlite_sessions, failing, force=True)
    results = await fetch(sqlite_sessions, plain, no_store, failing, now=NOW + dt.timedelta(minutes=1))

    assert error.status == "error"
    assert [r.status for r in results] == ["not_modified", "not_modified", "error"]
    assert [await next_fetch_at(sqlite_sessions, k) for k in ("plain", "nostore", "failing")] == [
        None, None, None]


async def test_force_fetches_a_source_that_is_not_due(
    sqlite_sessions: SessionFactory, server: FeedServer
) -> None:
    source = spec("f", server.serve("/f.xml", hinted("ttl", 60, news("a")),
                                    hinted("ttl", 60, news("a", "b"))))
    await fetch(sqlite_sessions, source)
    (skipped,) = await fetch(sqlite_sessions, source)
    (forced,) = await fetch(sqlite_sessions, source, force=True)
    (checked,) = await fetch(sqlite_sessions, source, store=False)

    assert skipped.status == "not_due"
    assert (forced.status, forced.entries_new) == ("ok", 1)
    assert checked.status == "ok", "a check (store=False) ignores due times"
    assert len(server.requests_to("/f.xml")) == 3


async def test_a_local_file_has_no_due_time_and_is_not_read_when_unchanged(
    sqlite_sessions: SessionFactory, tmp_path: Path, parse_calls: list[int]
) -> None:
    path = tmp_path / "feed.xml"
    path.write_bytes(news("a").replace(b"<channel>", b"<channel><ttl>600</ttl>"))
    local = spec("local", str(path))
    await fetch(sqlite_sessions, local)
    stamp = path.stat()
    path.write_bytes(news("b").replace(b"<channel>", b"<channel><ttl>600</ttl>"))  # same size
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    (same_stamp,) = await fetch(sqlite_sessions, local)
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1))
    (touched,) = await fetch(sqlite_sessions, local)

    assert await next_fetch_at(sqlite_sessions, "local") is None
    assert same_stamp.status == "not_modified", "same modification time and size: not read"
    assert (touched.status, touched.entries_new) == ("ok", 1)
    assert len(parse_calls) == 2


def test_digest_fetch_force_and_exit_status_with_not_due_sources(
    server: FeedServer, tmp_path: Path
) -> None:
    url = server.serve("/f.xml", hinted("ttl", 60, news("a")))
    sources = tmp_path / "sources.toml"
    sources.write_text(f'[[source]]\nkey = "f"\nname = "F"\nurl = "{url}"\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env |= {"DIGEST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}",
            "DIGEST_VAR_DIR": str(tmp_path / "var"), "DIGEST_SOURCES": str(sources),
            "DIGEST_NOW": NOW.isoformat()}

    def digest_fetch(*args: str) -> tuple[int, list[str]]:
        done = run_cli(tmp_path, ["fetch", "--json", *args], env)  # the CLI's main, in this process
        return done.returncode, [row["status"] for row in json.loads(done.stdout or "[]")]

    assert digest_fetch() == (0, ["ok"])
    assert digest_fetch() == (0, ["not_due"])
    assert digest_fetch("--force") == (0, ["not_modified"])
    assert len(server.requests_to("/f.xml")) == 2


@pytest.mark.parametrize(("header", "seconds"), [
    ("max-age=60", 60), ('public, max-age="120"', 120), ("private,max-age=0", 0),
    ("no-cache, max-age=60", None), ("no-store", None), ("s-maxage=60", None),
    ("max-age=soon", None), ("", None), (None, None),
])
def test_cache_control_max_age(header: str | None, seconds: int | None) -> None:
    expected = None if seconds is None else dt.timedelta(seconds=seconds)
    assert due.max_age(header) == expected
