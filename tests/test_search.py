"""Search and the weekly counts, on real SQLite (FTS5 trigram) and PostgreSQL (tsvector + GIN)."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import update

from bot.commands import Chat, Commands
from bot.ratelimit import RateLimiter
from bot.telegram_bot import build_application, running
from digest.build.pipeline import BuildOptions, build_digest
from digest.config import load_settings
from digest.domain.window import window_for
from digest.store import search
from digest.store.db import SessionFactory, open_database
from digest.store.models import Digest, DigestEvent, DigestText, Event, Writeup
from digest.web.app import create_app
from tests.archive import DATES, NOW, SITE_URL, TZ, Archive, build_archive, renderer
from tests.builders import add_entry, add_source
from tests.fake_telegram import TOKEN, FakeTelegram

DAY = DATES[0]
T0 = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)


@pytest.fixture
async def archive(sessions: SessionFactory) -> Archive:
    """Three built digests in a fresh database (SQLite and PostgreSQL)."""
    return await build_archive(sessions)


@asynccontextmanager
async def client(sessions: SessionFactory, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh app on ``sessions`` (the clock fixed just after the last window)."""
    app = create_app(sessions, renderer(), site_url=SITE_URL, timezone=TZ, clock=lambda: NOW,
                     default_locale="zh", **options)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as c:
        yield c


async def find(sessions: SessionFactory, query: str, **options: Any) -> list[search.Hit]:
    async with sessions() as session:
        return await search.search(session, query, **options)


def keys(hits: list[search.Hit]) -> list[tuple[str, int]]:
    return [(h.kind, h.id) for h in hits]


async def test_finds_english_and_two_character_chinese_terms(sessions: SessionFactory,
                                                             archive: Archive) -> None:
    hits = await find(sessions, "TRITON")
    assert hits[0] == search.Hit("event", archive.hostile_event, hits[0].locale, hits[0].title,
                                 hits[0].snippet, hits[0].score, None)
    assert "Triton" in hits[0].title
    assert ("digest", hits[-1].id) in keys(hits) and hits[-1].date == DAY  # that day's overview names it
    two = await find(sessions, "内核", locale="zh")  # "kernel": two characters, under a trigram
    assert two and all(h.locale == "zh" and "内核" in h.snippet for h in two)
    assert ("event", archive.hostile_event) in keys(two)
    assert await find(sessions, "内核 Triton") != [] and await find(sessions, "编译器 Triton") == []
    assert await find(sessions, "zz") == []


async def test_layer_filter_keeps_events_shown_with_the_layer_and_digests_with_one(
    sessions: SessionFactory, archive: Archive
) -> None:
    (xla,) = archive.event_ids[DATES[2]]  # the XLA SPMD sharding paper
    assert ("event", xla) in keys(await find(sessions, "SPMD", layer="distributed"))
    assert ("event", xla) not in keys(await find(sessions, "SPMD", layer="kernel_codegen"))
    kernels = await find(sessions, "内核", layer="kernel_codegen")
    assert kernels and {h.date for h in kernels if h.kind == "digest"} <= {DATES[0], DATES[1]}
    assert [h for h in await find(sessions, "内核", layer="distributed") if h.kind == "event"] == []
    with pytest.raises(search.QueryError):
        await find(sessions, "SPMD", layer="nonsense")


async def _seed(sessions: SessionFactory, writeups: list[tuple[str, str]], *,
                locale: str = "en") -> list[int]:
    """One listed digest showing one event per (title, summary) write-up; returns the event ids."""
    async with sessions.begin() as session:
        digest = Digest(date=dt.date(2026, 9, 1), window_start=T0, window_end=T0, built_at=T0)
        session.add(digest)
        await session.flush()
        ids = []
        for n, (title, summary) in enumerate(writeups):
            event = Event(cluster_key=f"k{n}", title=title, first_seen=T0, updated_at=T0, layers=["runtime"])
            session.add(event)
            await session.flush()
            session.add_all([
                DigestEvent(digest_id=digest.id, event_id=event.id, rank=n + 1, score=50.0,
                            layers=["runtime"]),
                Writeup(event_id=event.id, locale=locale, title=title, summary=summary, why_it_matters="",
                        mode="extractive", created_at=T0)])
            ids.append(event.id)
        session.add(DigestText(digest_id=digest.id, locale=locale, title="Day", overview="", mode="x"))
        await search.refresh(session, digest.id)
    return ids


FILLER = "a long paragraph about memory planners and allocators, " * 8


@pytest.mark.parametrize(("term", "locale"), [("vectorizer", "en"), ("向量", "zh")])
async def test_a_term_in_the_title_outranks_one_mention_in_a_long_body(
    sessions: SessionFactory, term: str, locale: str
) -> None:
    body_only, in_title = await _seed(sessions, [
        ("Allocator notes", FILLER + f"one {term} aside. " + FILLER),
        (f"A {term} for sparse loops", f"The {term} handles sparse loops."),
    ], locale=locale)
    assert keys(await find(sessions, term)) == [("event", in_title), ("event", body_only)]


HOSTILE = ['"', '""', "'", "NEAR(a b)", 'NEAR("triton" "kernel", 2)', "*", "tri*", "triton*", "^triton",
           "title:triton", "body : x", "(triton", "triton)", "a AND", "OR", "NOT triton", "-triton",
           "+", "%", "_", "\\", "%_%", "'; DROP TABLE event; --", "内核\"", "{a b}", "[x]", "a:b:c",
           "triton & kernel | !x", "<->", "'triton' 'kernel'", "\x00", "ⅷ ２ ٣", "🙂🙂🙂"]


async def test_hostile_queries_are_answered_never_a_server_error(sessions: SessionFactory,
                                                                 archive: Archive) -> None:
    async with client(sessions) as c:
        for query in HOSTILE:
            for path in ("/api/search", "/search"):
                answer = await c.get(path, params={"q": query})
                assert answer.status_code in (200, 400), (path, query, answer.status_code)
        assert (await c.get("/api/search", params={"q": "NEAR(triton kernel)"})).json()["results"] == []
        for bad in ("", "   ", "x" * (search.MAX_QUERY + 1)):
            for path in ("/api/search", "/search"):
                answer = await c.get(path, params={"q": bad})
                assert answer.status_code == 400, (path, bad)
        assert (await c.get("/api/search")).status_code == 400
        assert (await c.get("/search")).status_code == 200  # the form alone
        assert (await c.get("/api/search", params={"q": "triton", "limit": "0"})).status_code == 400
        assert (await c.get("/api/search", params={"q": "triton", "layer": "x"})).status_code == 400


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=60) | st.text(st.sampled_from('"*():^-+NEAR ORANDNOT内核%_\\\''), max_size=30))
async def test_any_text_is_a_result_list_or_a_query_error(sqlite_sessions: SessionFactory,
                                                          query: str) -> None:
    try:
        assert isinstance(await find(sqlite_sessions, query), list)
    except search.QueryError as exc:  # only an empty (or only control characters) or too long one
        assert ("too long" in str(exc) and len(query) > search.MAX_QUERY) or "empty" in str(exc)


async def test_the_api_returns_links_and_the_page_escapes_results(sessions: SessionFactory,
                                                                 archive: Archive) -> None:
    async with client(sessions) as c:
        found = (await c.get("/api/search", params={"q": "triton", "lang": "en"})).json()
        assert found["query"] == "triton" and found["locale"] == "en"
        first = found["results"][0]
        assert first["kind"] == "event" and first["url"] == f"/e/{archive.hostile_event}?lang=en"
        assert any(r["url"] == f"/d/{DAY}?lang=en" for r in found["results"])
        page = await c.get("/search", params={"q": "triton"})
        assert page.status_code == 200 and "<script>" not in page.text.split("</head>")[1]
        assert f'href="/e/{archive.hostile_event}"' in page.text and "&lt;script&gt;" in page.text


async def test_the_index_follows_a_rebuild_and_hidden_digests_leave_it(sessions: SessionFactory,
                                                                       archive: Archive) -> None:
    title = "Zanzibar: an MLIR sparse tensor compiler that fuses Triton GPU kernels"
    source = await add_source(sessions, "zanzibar", weight=0.9)
    await add_entry(sessions, source, title, "The MLIR compiler lowers sparse tensor kernels to PTX.",
                    window_for(DAY, TZ).start + dt.timedelta(hours=6))
    assert await find(sessions, "zanzibar") == []
    await build_digest(sessions, DAY, BuildOptions(timezone=TZ, locales=("zh", "en")), now=NOW, force=True)
    rebuilt = await find(sessions, "zanzibar")
    assert [h.kind for h in rebuilt][:1] == ["event"] and "Zanzibar" in rebuilt[0].title
    async with sessions.begin() as session:
        await session.execute(update(Digest).where(Digest.date == DAY).values(hidden_at=NOW))
    assert await find(sessions, "zanzibar") == []


async def test_weekly_counts_per_layer_as_json_svg_and_table(sessions: SessionFactory,
                                                             archive: Archive) -> None:
    async with client(sessions) as c:
        stats = (await c.get("/api/stats")).json()
        assert len(stats["weeks"]) == 12 and stats["weeks"][-1] == "2026-09-28"  # NOW's week, a Monday
        assert stats["archive"]["weeks"] == ["2026-09-21", "2026-09-28"]  # DATES: Sep 27 (Sun) .. 29
        per_week = [sum(stats["archive"]["counts"][lid][n] for lid in stats["layers"]) for n in range(2)]
        assert per_week[0] >= len(archive.event_ids[DATES[2]]) and per_week[1] >= len(archive.event_ids[DAY])
        assert stats["counts"]["distributed"][-2:] == stats["archive"]["counts"]["distributed"]
        one = (await c.get("/api/stats", params={"layer": "distributed"})).json()
        assert one["layers"] == ["distributed"] and one["archive"]["counts"]["distributed"] == [1, 0]
        assert (await c.get("/api/stats", params={"layer": "nope"})).status_code == 400
        page = await c.get("/stats", params={"layer": "distributed"})
        assert page.status_code == 200 and "<script" not in page.text
        assert '<svg xmlns="http://www.w3.org/2000/svg" id="chart-archive" role="img"' in page.text
        assert '<title id="chart-archive-title">' in page.text
        assert '<desc id="chart-archive-desc">' in page.text
        assert '<table id="chart-archive-table">' in page.text
        index = await c.get("/", params={"layer": "distributed"})
        assert 'href="/stats?layer=distributed" id="layer-stats"' in index.text
        assert 'id="layer-stats"' not in (await c.get("/")).text


def test_weeks_start_on_monday_and_count_each_event_once_per_layer() -> None:
    sunday, monday = dt.date(2026, 9, 27), dt.date(2026, 9, 28)
    showings = {1: (sunday, ("runtime",)), 2: (monday, ("runtime", "distributed")), 3: (monday, ())}
    counts = search.weekly(showings, start=None, end=monday + dt.timedelta(days=8))
    assert counts.weeks == (dt.date(2026, 9, 21), monday, dt.date(2026, 10, 5))
    assert counts.counts["runtime"] == (1, 1, 0) and counts.counts["distributed"] == (0, 1, 0)
    assert counts.total(1) == 2


def test_fts5_terms_are_quoted_and_like_patterns_escaped() -> None:
    assert search.parse_query('  NEAR(a "b")  a ') == ('near(a', '"b")', "a")
    plan = search._plan(search.parse_query('x"y* 内核 5%'), "sqlite")
    assert plan.params["match"] == '"x""y*"'
    assert plan.params["l0"] == "%内核%" and plan.params["l1"] == "%5\\%%"
    assert "tsq" in search._plan(("triton",), "postgresql").params
    assert "tsq" not in search._plan(("编译器",), "postgresql").params  # one Chinese run is one word there


# -- the chat command: Commands, and Telegram end to end --------------------------------------

async def test_the_search_command_lists_hits_with_their_commands(sessions: SessionFactory,
                                                                 archive: Archive) -> None:
    commands = Commands(sessions, channel="telegram", clock=lambda: NOW)
    chat = Chat("telegram", "1001", user_locale="en-US")
    found = await commands.run(chat, "search", ["Triton"], allow)
    lines = ["".join(span.text for span in line) for line in found.lines]
    assert lines[0] == "Results for “Triton”" and f"/event {archive.hostile_event}" in lines
    assert f"/digest {DAY}" in lines
    chinese = await commands.run(Chat("telegram", "-5", user_locale="zh-CN"), "search", ["内核"], allow)
    assert "“内核”的搜索结果" in chinese.lines[0][0].text
    usage = await commands.run(chat, "search", [], allow)
    assert usage.error and "/search" in usage.lines[0][0].text
    for hostile in (["NEAR(", "*"], ['"'], ["x" * 300]):
        assert (await commands.run(chat, "search", hostile, allow)).lines


async def allow() -> bool:
    return True


async def test_search_in_telegram(sqlite_url: str, tmp_path: Path) -> None:
    with FakeTelegram() as fake:
        settings = load_settings(database_url=sqlite_url, var_dir=tmp_path, telegram_token=TOKEN,
                                 telegram_api_base=fake.base_url, site_url=SITE_URL)
        async with open_database(sqlite_url) as sessions:
            archive = await build_archive(sessions)
            application = build_application(settings, sessions, limiter=RateLimiter(), clock=lambda: NOW)
            async with running(application, poll_timeout=1):
                fake.command(1001, "/search triton kernel")
                await fake.wait_until(lambda: len(fake.sent(1001)) > 0)
                reply = str(fake.sent(1001)[0]["text"])
                fake.command(1001, "/search")
                await fake.wait_until(lambda: len(fake.sent(1001)) > 1)
                usage = str(fake.sent(1001)[1]["text"])
    assert f"/event {archive.hostile_event}" in reply and "&lt;script&gt;" in reply
    assert "<script>" not in reply and "/search" in usage
