"""Built pages from the cache, revalidation, compression and read counts off the request path.

Real SQLite and PostgreSQL (the ``sessions`` fixture), the app through httpx's ASGI
transport, and once through a real uvicorn on 127.0.0.1 for the flush on shutdown.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import gzip
import zlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from starlette.requests import Request

from digest.build.pipeline import BuildOptions, build_digest
from digest.cli.delete import delete_digest
from digest.store.db import SessionFactory, make_engine, make_session_factory
from digest.store.models import Digest
from digest.web.app import create_app
from digest.web.cache import READS_SLOT, Cached, Gzipped, PageCache, not_modified
from digest.web.reads import REPEAT, ReadCounts, is_reader
from tests.archive import DATES, NOW, SITE_URL, TZ, Archive, build_archive, renderer, served_archive
from tests.smtpserver import SMTPTestServer, smtp_server
from tests.webapp import site, token_in

DAY = DATES[0]
BROWSER = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
BOTS = ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        "curl/8.5.0", "python-httpx/0.28.1", "Mozilla/5.0 (compatible; bingbot/2.0)",
        "facebookexternalhit/1.1", "Mozilla/5.0 HeadlessChrome/120.0", "")


class Clock:
    """A clock the test moves."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture
async def archive(sessions: SessionFactory) -> Archive:
    """Three built digests in a fresh database (SQLite and PostgreSQL)."""
    return await build_archive(sessions)


@pytest.fixture
def smtp() -> Iterator[SMTPTestServer]:
    """A real SMTP server on 127.0.0.1 (the subscription pages mail through it)."""
    with smtp_server() as server:
        yield server


@asynccontextmanager
async def client(sessions: SessionFactory, peer: str = "192.0.2.1",
                 **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh app on ``sessions``, as a browser at ``peer`` (no traffic leaves the process)."""
    app = create_app(sessions, renderer(), site_url=SITE_URL, timezone=TZ, default_locale="zh",
                     clock=options.pop("clock", lambda: NOW), **options)
    transport = httpx.ASGITransport(app, client=(peer, 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://test",
                                 headers={"user-agent": BROWSER}) as c:
        yield c


def reads_in(page: httpx.Response) -> int:
    """The read count a digest page shows."""
    return int(page.text.split('<span id="reads">')[1].split("<")[0])


async def stored_reads(sessions: SessionFactory, date: dt.date = DAY) -> int:
    """The read count in the database."""
    async with sessions() as session:
        return int(await session.scalar(select(Digest.read_count).where(Digest.date == date)) or 0)


async def test_a_built_page_renders_once_and_a_rebuild_renders_it_again(
    sessions: SessionFactory, archive: Archive
) -> None:
    cache = PageCache()
    paths = (f"/d/{DAY}", "/", f"/e/{archive.hostile_event}", "/api/events?days=3")
    async with client(sessions, cache=cache) as c:
        first = {path: await c.get(path) for path in paths}
        assert cache.renders == len(paths)
        second = {path: await c.get(path) for path in paths}
        assert cache.renders == len(paths)
        assert all(second[p].status_code == 200 and second[p].content == first[p].content for p in paths)
        assert (await c.get(f"/d/{DAY}?lang=en")).status_code == 200 and cache.renders == len(paths) + 1
        await build_digest(sessions, DAY, BuildOptions(timezone=TZ, locales=("zh", "en")),
                           now=NOW + dt.timedelta(hours=1), force=True)
        rebuilt = {path: await c.get(path) for path in paths}
    assert cache.renders == 2 * len(paths) + 1  # every page shows the rebuilt day
    for path in paths:  # the same text (ETag: a hash of it), built later
        assert rebuilt[path].status_code == 200 and rebuilt[path].content == first[path].content
        assert rebuilt[path].headers["last-modified"] != first[path].headers["last-modified"], path


async def test_a_burst_of_first_readers_renders_the_page_once(
    sessions: SessionFactory, archive: Archive
) -> None:
    cache = PageCache()
    async with client(sessions, cache=cache) as c:
        pages = await asyncio.gather(*(c.get(f"/d/{DAY}") for _ in range(8)))
        missing = await asyncio.gather(*(c.get(f"/e/{10**6}") for _ in range(3)))
    assert cache.renders == 1 and {p.status_code for p in pages} == {200}
    assert {p.status_code for p in missing} == {404} and len({p.content for p in pages}) == 1


async def test_a_current_copy_is_a_304_and_a_stale_one_the_page(
    sessions: SessionFactory, archive: Archive
) -> None:
    paths = (f"/d/{DAY}", "/", f"/e/{archive.hostile_event}", "/api/events")
    async with client(sessions) as c:
        for path in paths:
            page = await c.get(path)
            tag, modified = page.headers["etag"], page.headers["last-modified"]
            assert tag.startswith('W/"') and page.headers["cache-control"] == "no-cache"
            again = await c.get(path, headers={"if-none-match": tag})
            assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", tag), path
            assert again.headers["content-security-policy"]
            listed = await c.get(path, headers={"if-none-match": f'"other", {tag.removeprefix("W/")}'})
            assert listed.status_code == 304, path
            stale = await c.get(path, headers={"if-none-match": '"other"'})
            assert stale.status_code == 200 and stale.content == page.content, path
            since = await c.get(path, headers={"if-modified-since": modified})
            assert since.status_code == 304, path
            older = await c.get(path, headers={"if-modified-since": "Mon, 01 Jan 2001 00:00:00 GMT"})
            assert older.status_code == 200, path


async def test_an_events_list_is_kept_per_query_until_a_digest_in_its_window_changes(
    sessions: SessionFactory, archive: Archive
) -> None:
    cache = PageCache()
    async with client(sessions, cache=cache) as c:
        wide, narrow = await c.get("/api/events?days=3"), await c.get("/api/events?days=1")
        assert cache.renders == 2
        assert {e["id"] for e in narrow.json()["events"]} == set(archive.event_ids[DAY])
        for page, path in ((wide, "/api/events?days=3"), (narrow, "/api/events?days=1")):
            again = await c.get(path, headers={"if-none-match": page.headers["etag"]})
            assert again.status_code == 304 and cache.renders == 2, path
        assert "deleted" in await delete_digest(sessions, DATES[1], force=False, now=NOW)  # unpublished
        gone = await c.get("/api/events?days=3", headers={"if-none-match": wide.headers["etag"]})
        kept = await c.get("/api/events?days=1", headers={"if-none-match": narrow.headers["etag"]})
    assert gone.status_code == 200 and gone.headers["etag"] != wide.headers["etag"]
    assert [e["id"] for e in gone.json()["events"]] == [
        e["id"] for e in wide.json()["events"] if e["id"] not in archive.event_ids[DATES[1]]]
    assert kept.status_code == 304 and cache.renders == 3  # a window without that digest: still current


async def test_cycling_through_query_values_never_evicts_the_archives_pages(
    sessions: SessionFactory, archive: Archive
) -> None:
    cache = PageCache(size=4, query_size=3)
    async with client(sessions, cache=cache) as c:
        page = await c.get(f"/d/{DAY}")
        for score in range(10):  # more answers than both LRUs hold
            assert (await c.get(f"/api/events?min_score={score}")).status_code == 200
        assert cache.renders == 11
        again = await c.get(f"/d/{DAY}")
        assert again.content == page.content and cache.renders == 11, "the page is still cached"
        assert (await c.get("/api/events?min_score=9")).status_code == 200 and cache.renders == 11
        assert (await c.get("/api/events?min_score=0")).status_code == 200 and cache.renders == 12


async def test_pages_are_gzipped_when_the_client_accepts_it(
    sessions: SessionFactory, archive: Archive
) -> None:
    async with client(sessions) as c:
        for path in (f"/d/{DAY}", "/", "/api/events?days=3"):
            zipped = await c.get(path, headers={"accept-encoding": "gzip"})
            plain = await c.get(path, headers={"accept-encoding": "identity"})
            assert zipped.headers["content-encoding"] == "gzip", path
            assert "Accept-Encoding" in zipped.headers["vary"], path
            assert int(zipped.headers["content-length"]) < len(plain.content), path
            assert zipped.content == plain.content and "content-encoding" not in plain.headers, path
        small = await c.get("/healthz", headers={"accept-encoding": "gzip"})
    assert "content-encoding" not in small.headers  # under a kilobyte: not worth it


async def test_a_cached_page_is_gzipped_once_whatever_its_read_count(
    sessions: SessionFactory, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, reads = PageCache(), ReadCounts(sessions, lambda: NOW)
    packers: list[tuple[Any, ...]] = []
    real = zlib.compressobj

    def counted(*args: Any, **kwargs: Any) -> Any:  # every gzip made anywhere in the process
        packers.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(zlib, "compressobj", counted)
    gz = {"accept-encoding": "gzip, deflate, br"}
    async with client(sessions, cache=cache, reads=reads) as c:
        first = await c.get(f"/d/{DAY}", headers=gz)
        made = len(packers)
        assert made == 2 and cache.compressions == 1 and reads_in(first) == 1  # before and after the slot
        async with client(sessions, peer="192.0.2.9", cache=cache, reads=reads) as other:  # a new count
            second = await other.get(f"/d/{DAY}", headers=gz)
        index = [await c.get("/", headers=gz) for _ in range(2)]
        assert len(packers) == made + 1 and cache.compressions == 2  # the index, once
        again = await c.get(f"/d/{DAY}", headers=gz)
        plain = await c.get(f"/d/{DAY}", headers={"accept-encoding": "identity"})
        assert len(packers) == made + 1 and (cache.renders, cache.compressions) == (2, 2)
        current = await c.get(f"/d/{DAY}", headers={**gz, "if-none-match": again.headers["etag"]})
    assert first.headers["content-encoding"] == second.headers["content-encoding"] == "gzip"
    assert reads_in(second) == reads_in(again) == reads_in(plain) == 2
    assert again.content == plain.content and "content-encoding" not in plain.headers
    assert second.content.replace(b'"reads">2<', b'"reads">1<') == first.content
    for name in ("etag", "last-modified", "cache-control", "content-language"):
        assert again.headers[name] == plain.headers[name], name  # one validator under both encodings
    assert again.headers["vary"] == plain.headers["vary"] == "Accept-Language, Accept-Encoding"
    assert index[0].headers["content-encoding"] == "gzip" and index[0].content == index[1].content
    assert (current.status_code, current.content) == (304, b"")
    assert current.headers["etag"] == again.headers["etag"] and "Accept-Encoding" in current.headers["vary"]
    assert first.headers["etag"] != second.headers["etag"]  # the count is in the validator


@settings(max_examples=200, deadline=None)
@given(before=st.binary(max_size=3000), after=st.binary(max_size=3000),
       fill=st.one_of(st.binary(max_size=40), st.just(b"x" * 70_000)), slot=st.booleans())
def test_a_gzip_member_with_any_fill_is_the_filled_body(before: bytes, after: bytes, fill: bytes,
                                                        slot: bool) -> None:
    body = before.replace(READS_SLOT, b"") + (READS_SLOT if slot else b"") + after.replace(READS_SLOT, b"")
    zipped = Gzipped.of(body)
    want = body.replace(READS_SLOT, fill, 1)
    member = zipped.member(fill)
    assert gzip.decompress(member) == want
    assert zlib.decompress(member, wbits=31) == want  # one member: no trailing data
    if not slot:
        assert member is zipped.member(b"other")  # nothing to fill: the same bytes every time


def test_small_bodies_are_not_compressed_and_large_ones_are() -> None:
    when = dt.datetime(2026, 9, 29, tzinfo=dt.UTC)
    assert Cached.of("<p>x</p>", "text/html", when).compressed().zipped is None
    big = Cached.of("<p>" + "compiler " * 400 + "</p>", "text/html", when).compressed()
    assert big.zipped is not None and len(big.zipped.member(b"")) < len(big.body) // 10


async def test_pages_with_tokens_are_never_compressed(
    sessions: SessionFactory, archive: Archive, smtp: SMTPTestServer
) -> None:
    async with site(sessions, smtp) as s:
        form = await s.client.get("/subscribe", headers={"accept-encoding": "gzip"})
        index = await s.client.get("/", headers={"accept-encoding": "gzip"})
    assert form.status_code == 200 and len(form.content) > 1024 and token_in(form.text)
    assert "content-encoding" not in form.headers  # a token beside reflected input: no BREACH
    assert index.headers["content-encoding"] == "gzip"


async def test_reads_count_browsers_once_per_client_in_ten_minutes(
    sessions: SessionFactory, archive: Archive
) -> None:
    clock = Clock(NOW)
    reads = ReadCounts(sessions, clock)
    async with client(sessions, clock=clock, reads=reads) as c:
        shown = [reads_in(await c.get(f"/d/{DAY}")) for _ in range(3)]
        assert (await c.head(f"/d/{DAY}")).status_code == 200
        for agent in BOTS:
            assert (await c.get(f"/d/{DAY}", headers={"user-agent": agent})).status_code == 200
        clock.now += REPEAT - dt.timedelta(seconds=1)
        shown.append(reads_in(await c.get(f"/d/{DAY}")))
        clock.now += dt.timedelta(seconds=2)
        shown.append(reads_in(await c.get(f"/d/{DAY}")))
    async with client(sessions, peer="192.0.2.2", clock=clock, reads=reads) as other:
        shown.append(reads_in(await other.get(f"/d/{DAY}")))
        assert (await other.get(f"/d/{DATES[1]}")).status_code == 200
    assert shown == [1, 1, 1, 1, 2, 3]
    assert await stored_reads(sessions) == 0  # no request wrote
    assert await reads.flush() == 4
    assert (await stored_reads(sessions), await stored_reads(sessions, DATES[1])) == (3, 1)
    assert reads.shown(DAY, 3) == 3 and await reads.flush() == 0


def test_who_counts_as_a_reader() -> None:
    assert is_reader("GET", BROWSER)
    assert not is_reader("HEAD", BROWSER) and not is_reader("POST", BROWSER)
    assert not any(is_reader("GET", agent) for agent in BOTS) and not is_reader("GET", None)


async def test_the_tally_is_stored_every_few_seconds(sessions: SessionFactory, archive: Archive) -> None:
    naps: list[float] = []
    stored = asyncio.Event()

    async def sleep(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) > 1:  # the first flush is done: stop here
            stored.set()
            await asyncio.Event().wait()

    reads = ReadCounts(sessions, Clock(NOW), every=7.0, sleep=sleep)
    assert reads.record(DAY, "192.0.2.1", "GET", BROWSER)
    running = asyncio.create_task(reads.run())
    await asyncio.wait_for(stored.wait(), 30)
    running.cancel()
    assert naps == [7.0, 7.0] and await stored_reads(sessions) == 1 and reads.shown(DAY, 1) == 1


async def test_a_failed_flush_keeps_the_tally_for_the_next() -> None:
    engine = make_engine("postgresql+asyncpg://nobody:x@127.0.0.1:9/none", connect_args={"timeout": 2})
    reads = ReadCounts(make_session_factory(engine), Clock(NOW))
    try:
        assert reads.record(DAY, "192.0.2.1", "GET", BROWSER)
        with pytest.raises(OSError):
            await reads.flush()
    finally:
        await engine.dispose()
    assert reads.pending == {DAY: 1} and reads.shown(DAY, 0) == 1


async def test_reads_are_stored_when_uvicorn_shuts_down(sqlite_sessions: SessionFactory) -> None:
    await build_archive(sqlite_sessions)
    reads = ReadCounts(sqlite_sessions, Clock(NOW), every=3600.0)  # only the shutdown flush can store
    app = create_app(sqlite_sessions, renderer(), site_url=SITE_URL, timezone=TZ, default_locale="zh",
                     clock=lambda: NOW, reads=reads)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, lifespan="on"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        assert not serving.done()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers={"user-agent": BROWSER}) as c:
        assert reads_in(await c.get(f"/d/{DAY}")) == 1
        assert (await c.get(f"/d/{DATES[1]}")).status_code == 200
    assert await stored_reads(sqlite_sessions) == 0
    server.should_exit = True
    await serving
    assert (await stored_reads(sqlite_sessions), await stored_reads(sqlite_sessions, DATES[1])) == (1, 1)


@pytest.fixture
def thawed() -> Iterator[None]:
    """Whatever a test freezes goes back to the collector afterwards (the suite runs on)."""
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def test_the_served_app_hides_its_start_up_heap_from_the_collector(
    tmp_path: Path, thawed: None
) -> None:
    assert gc.get_freeze_count() == 0
    async with served_archive(tmp_path) as (base, _):
        frozen = gc.get_freeze_count()  # start-up's objects: full collections no longer walk them
        async with httpx.AsyncClient(base_url=base) as c:
            assert (await c.get(f"/d/{DAY}")).status_code == 200
    assert frozen > 10_000


def _request(headers: dict[str, str]) -> Request:
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw, "query_string": b""})


HEADER = st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=60)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(match=st.one_of(st.none(), HEADER), since=st.one_of(st.none(), HEADER))
def test_any_validator_header_is_answered(match: str | None, since: str | None) -> None:
    page = Cached.of("<p>x</p>", "text/html", dt.datetime(2026, 9, 29, tzinfo=dt.UTC))
    headers = {k: v for k, v in (("if-none-match", match), ("if-modified-since", since)) if v is not None}
    fresh = not_modified(_request(headers), 'W/"abc"', page.modified)
    assert isinstance(fresh, bool)
    if match is not None and "abc" not in match and "*" not in match:
        assert not fresh
