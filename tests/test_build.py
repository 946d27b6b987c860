"""build_digest on a real database: windows, late entries, events, idempotence."""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from digest.build.pipeline import BuildOptions, build_digest, check_buildable
from digest.domain.errors import UsageError
from digest.domain.window import window_for
from digest.store.db import SessionFactory, open_database
from digest.store.models import Digest, DigestEvent, Entry, Event, FetchLog, LLMCache
from digest.store.queries import latest_digest_date, list_digests, load_view, recent_events
from tests.builders import COMPILER_PAPERS, DAY, NEGATIVE, NOW, WINDOW, add_entry, add_source

OPTIONS = BuildOptions(locales=("zh", "en"))


async def _day(sessions: SessionFactory) -> dict[str, int]:
    arxiv = await add_source(sessions, "arxiv-cs.pl", name="arXiv cs.PL", kind="arxiv", weight=0.7)
    ids = {}
    for n, (title, summary) in enumerate(COMPILER_PAPERS):
        ids[title] = await add_entry(
            sessions, arxiv, title, summary, WINDOW.start + dt.timedelta(hours=n + 1),
            arxiv_id=f"2609.0000{n}", arxiv_version=1, announce_type="new",
            url=f"https://arxiv.org/abs/2609.0000{n}",
        )
    ids["negative"] = await add_entry(sessions, arxiv, *NEGATIVE, WINDOW.start + dt.timedelta(hours=5),
                                      arxiv_id="2609.00099", arxiv_version=1, announce_type="new")
    ids["outside"] = await add_entry(sessions, arxiv, COMPILER_PAPERS[0][0] + " (old)",
                                     COMPILER_PAPERS[0][1], WINDOW.start - dt.timedelta(seconds=1),
                                     arxiv_id="2609.00100", announce_type="new")
    return ids


async def test_build_ranks_relevant_events_of_the_window(sessions: SessionFactory) -> None:
    ids = await _day(sessions)
    report = await build_digest(sessions, DAY, OPTIONS, now=NOW)
    assert report.created and report.events == 3 and report.entries == 4
    async with sessions() as session:
        view = await load_view(session, DAY, "zh")
        query = select(Entry.id).where(Entry.digest_id == report.digest_id)
        assigned = set((await session.scalars(query)).all())
    assert ids["outside"] not in assigned and ids["negative"] in assigned
    assert [e.rank for e in view.events] == [1, 2, 3]
    assert [e.score for e in view.events] == sorted((e.score for e in view.events), reverse=True)
    for event in view.events:
        assert round(sum(event.score_breakdown.values()), 1) == event.score
        assert event.written_by == "extractive" and event.layers
    assert view.stats["entries_by_source"] == {"arxiv-cs.pl": 4}
    assert view.generation_mode == "extractive"


async def test_building_again_returns_the_same_digest(sessions: SessionFactory) -> None:
    await _day(sessions)
    first = await build_digest(sessions, DAY, OPTIONS, now=NOW)
    again = await build_digest(sessions, DAY, OPTIONS, now=NOW + dt.timedelta(hours=1))
    assert (again.created, again.digest_id, again.events) == (False, first.digest_id, first.events)
    async with sessions() as session:
        before = [(d.event_id, d.rank, d.score) for d in (await session.scalars(
            select(DigestEvent).order_by(DigestEvent.rank))).all()]
    forced = await build_digest(sessions, DAY, OPTIONS, now=NOW + dt.timedelta(hours=2), force=True)
    assert forced.created and forced.digest_id == first.digest_id
    async with sessions() as session:
        after = [(d.event_id, d.rank, d.score) for d in (await session.scalars(
            select(DigestEvent).order_by(DigestEvent.rank))).all()]
        assert await session.scalar(select(func.count()).select_from(Event)) == 4
        assert await session.scalar(select(func.count()).select_from(LLMCache)) == 0
    assert after == before


async def test_late_entry_goes_to_the_next_digest(sessions: SessionFactory) -> None:
    await _day(sessions)
    await build_digest(sessions, DAY, OPTIONS, now=NOW)
    src = await add_source(sessions, "llvm-blog", name="LLVM Blog", weight=0.9)
    late_id = await add_entry(
        sessions, src, "Vectorizing Sparse Loops in MLIR's SparseTensor Dialect",
        "The LLVM blog describes how the MLIR sparse_tensor dialect lowers co-iteration loops "
        "to the vector dialect, with 2.1x speedups on SpMV kernels.",
        WINDOW.end - dt.timedelta(hours=1), first_seen=NOW + dt.timedelta(hours=3),
    )
    next_day = DAY + dt.timedelta(days=1)
    report = await build_digest(sessions, next_day, OPTIONS, now=NOW + dt.timedelta(days=1))
    assert report.late == 1 and report.entries == 1
    async with sessions() as session:
        entry = await session.get_one(Entry, late_id)
        first = await session.scalar(select(Digest).where(Digest.date == DAY))
    assert entry.late and entry.digest_id == report.digest_id
    assert first is not None and first.stats["entries"] == 4


async def test_new_source_of_a_published_event_marks_it_updated(sessions: SessionFactory) -> None:
    await _day(sessions)
    await build_digest(sessions, DAY, OPTIONS, now=NOW)
    blog = await add_source(sessions, "pytorch-blog", name="PyTorch", weight=0.9)
    _, summary = COMPILER_PAPERS[2]
    await add_entry(sessions, blog, "Torch-PIM brings PGO-driven PIM offloading to PyTorch",
                    "Our post explains Torch-PIM (https://arxiv.org/abs/2609.00002): " + summary,
                    WINDOW.end + dt.timedelta(hours=2), links=["https://arxiv.org/abs/2609.00002"])
    next_day = DAY + dt.timedelta(days=1)
    await build_digest(sessions, next_day, OPTIONS, now=NOW + dt.timedelta(days=1))
    async with sessions() as session:
        view = await load_view(session, next_day, "en")
        first = await load_view(session, DAY, "en")
    (event,) = view.events
    assert event.updated
    assert event.id in {e.id for e in first.events}
    assert len(event.sources) == 2


async def test_arxiv_replace_attaches_or_is_dropped(sessions: SessionFactory) -> None:
    await _day(sessions)
    await build_digest(sessions, DAY, OPTIONS, now=NOW)
    arxiv = (await add_source(sessions, "arxiv-cs.ar", kind="arxiv", weight=0.7))
    later = WINDOW.end + dt.timedelta(hours=3)
    await add_entry(sessions, arxiv, COMPILER_PAPERS[0][0], COMPILER_PAPERS[0][1], later,
                    arxiv_id="2609.00000", arxiv_version=2, announce_type="replace")
    await add_entry(sessions, arxiv, "An Unknown Replaced Paper on MLIR Lowering",
                    "Revised version of an MLIR lowering paper.", later,
                    arxiv_id="2609.55555", arxiv_version=3, announce_type="replace")
    report = await build_digest(sessions, DAY + dt.timedelta(days=1), OPTIONS,
                                now=NOW + dt.timedelta(days=1))
    async with sessions() as session:
        view = await load_view(session, DAY + dt.timedelta(days=1), "zh")
        events = await session.scalar(select(func.count()).select_from(Event))
    assert report.entries == 2 and events == 4  # the unknown replace made no event
    assert [e.updated for e in view.events] == [True]


async def test_empty_window_builds_an_empty_digest(sqlite_sessions: SessionFactory) -> None:
    report = await build_digest(sqlite_sessions, DAY, OPTIONS, now=NOW)
    async with sqlite_sessions() as session:
        view = await load_view(session, DAY, "en")
    assert report.created and report.events == 0 and view.events == ()
    assert view.title and view.overview


async def _fetch_log(sessions: SessionFactory, source_id: int, status: str, at: dt.datetime) -> None:
    async with sessions.begin() as session:
        session.add(FetchLog(source_id=source_id, started_at=at, status=status, warnings=[]))


async def test_failed_sources_are_those_of_the_sources_file_in_use(sqlite_sessions: SessionFactory) -> None:
    """A source stored by a run on another sources file (the built-in list) is not named as failed."""
    in_file = await add_source(sqlite_sessions, "sample-blog")
    elsewhere = await add_source(sqlite_sessions, "gh-cutlass")
    for source_id in (in_file, elsewhere):
        await _fetch_log(sqlite_sessions, source_id, "error", WINDOW.start + dt.timedelta(hours=1))
    options = BuildOptions(source_keys=frozenset({"sample-blog", "arxiv-cs.pl"}))
    await build_digest(sqlite_sessions, DAY, options, now=NOW)
    async with sqlite_sessions() as session:
        view = await load_view(session, DAY, "zh")
    assert view.stats["failed_sources"] == ["sample-blog"]


def test_build_options_carry_the_source_keys_of_the_file(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from digest.bootstrap import build_options
    from digest.config import load_settings

    toml = tmp_path / "sources.toml"
    toml.write_text('[[source]]\nkey = "only"\nname = "Only"\nurl = "http://127.0.0.1:9/feed"\n')
    monkeypatch.setenv("DIGEST_SOURCES", str(toml))
    assert build_options(load_settings()).source_keys == frozenset({"only"})


async def test_partial_digest_is_never_listed_and_is_replaced_once_the_window_closes(
        sqlite_sessions: SessionFactory) -> None:
    await _day(sqlite_sessions)
    early = WINDOW.end - dt.timedelta(hours=3)
    draft = await build_digest(sqlite_sessions, DAY, replace(OPTIONS, partial=True), now=early)
    assert draft.created and draft.partial
    async with sqlite_sessions() as session:
        assert (await list_digests(session, "zh")).total == 0
        assert await latest_digest_date(session) is None
        assert await recent_events(session, "zh", since=WINDOW.start) == []
    final = await build_digest(sqlite_sessions, DAY, OPTIONS, now=NOW)
    assert final.created and not final.partial and final.digest_id == draft.digest_id
    async with sqlite_sessions() as session:
        assert [d.date for d in (await list_digests(session, "zh")).items] == [DAY]
        assert await latest_digest_date(session) == DAY
    again = await build_digest(sqlite_sessions, DAY, OPTIONS, now=NOW + dt.timedelta(hours=1))
    assert not again.created, "once final, building again returns it"


@settings(max_examples=60, deadline=None)
@given(offset=st.integers(min_value=-400, max_value=400), partial=st.booleans())
def test_check_buildable_refuses_exactly_the_dates_that_cannot_be_built(offset: int, partial: bool) -> None:
    """Open windows need ``partial``; future windows and windows before the first entry never build."""
    first_entry = WINDOW.start - dt.timedelta(days=100, hours=3)
    date = DAY + dt.timedelta(days=offset)
    now = WINDOW.end - dt.timedelta(hours=2)  # DAY's window is the open one
    window = window_for(date, "Asia/Shanghai")
    refused = window.start > now or (window.end > now and not partial) or window.end <= first_entry

    async def check() -> bool:
        async with open_database("sqlite+aiosqlite:///:memory:") as sessions:
            source = await add_source(sessions, "s")
            await add_entry(sessions, source, "t", "s", first_entry)
            try:
                await check_buildable(sessions, date, now, "Asia/Shanghai", partial=partial)
            except UsageError as exc:
                assert "\n" not in str(exc)
                return True
            return False

    assert asyncio.run(check()) is refused
