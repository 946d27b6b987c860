"""``build_digest(date)``: turn a window's stored entries into a stored digest.

The pipeline, in three steps so that no database transaction waits on the LLM:

1. select   the window's entries (late arrivals included); ``digest.analyze`` drops
            what is not news, clusters them into events (attaching to known events),
            classifies them, asks the LLM about the borderline ones (no transaction
            open), scores each event and commits the events.
2. write    write-ups per locale for the ranked events: the LLM for the top ones
            when a client is given (a few calls at a time, the output in rank order),
            the extractive writer for the rest and as the fallback; then the day's
            title, overview and watch list.
3. store    the digest, its snapshot of events (rank, score at build time), its
            texts and stats; the entries are assigned to it. One transaction.

Building a date that is already built returns it unchanged (no tokens);
``force=True`` replaces the snapshot, served from the LLM cache.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from digest.analyze.score import ScoreWeights
from digest.analyze.taxonomy import Taxonomy, load_taxonomy
from digest.build.analyze import analyze
from digest.build.event_store import EventRecord, to_item
from digest.domain.errors import UsageError
from digest.domain.status import FetchStatus, WriteMode
from digest.domain.window import Window, date_of, window_for
from digest.domain.writeups import DayWriteup, EventInput, EventWriteup, overall_mode
from digest.store import search
from digest.store.db import SessionFactory
from digest.store.models import Digest, DigestEvent, DigestText, Entry, FetchLog, Source, Writeup
from digest.write.llm import LLMClient
from digest.write.writer import (
    WriteStats,
    extractive_day,
    extractive_event,
    llm_day,
    llm_event,
)

log = logging.getLogger(__name__)
LATE_LOOKBACK = dt.timedelta(days=14)


@dataclass(frozen=True)
class BuildOptions:
    """What a build needs from the settings."""

    timezone: str = "Asia/Shanghai"
    locales: tuple[str, ...] = ("zh",)
    max_events: int = 12
    llm_top_events: int = 8
    llm_concurrency: int = 4
    include_prereleases: bool = False
    weights: ScoreWeights = field(default_factory=ScoreWeights)
    source_keys: frozenset[str] | None = None  # the sources file in use; None: every stored source
    partial: bool = False  # the window is still open: a draft, never published or listed


@dataclass
class BuildReport:
    """What a build did."""

    date: dt.date
    digest_id: int
    created: bool
    entries: int = 0
    late: int = 0
    candidates: int = 0
    events: int = 0
    tokens: int = 0
    generation_mode: str = WriteMode.EXTRACTIVE
    llm: dict[str, Any] = field(default_factory=dict)
    triage: dict[str, int] = field(default_factory=dict)
    partial: bool = False


async def build_digest(
    sessions: SessionFactory,
    date: dt.date,
    options: BuildOptions,
    *,
    now: dt.datetime,
    force: bool = False,
    llm: LLMClient | None = None,
    taxonomy: Taxonomy | None = None,
) -> BuildReport:
    """Build (or return) the digest for ``date``; see the module docstring."""
    window = window_for(date, options.timezone)
    async with sessions() as session:
        existing = await session.scalar(select(Digest).where(Digest.date == date))
    # a partial digest is built again: refreshed while its window is open, replaced once it closed
    if existing is not None and not force and not existing.partial:
        kept = existing.stats
        return BuildReport(date, existing.id, False, events=int(kept.get("events", 0)),
                           entries=int(kept.get("entries", 0)), late=int(kept.get("late", 0)),
                           tokens=0, triage=dict(kept.get("triage", {})),
                           generation_mode=str(existing.generation_modes.get("overall", "")),
                           partial=existing.partial)
    taxonomy = taxonomy or load_taxonomy()
    selection = await _select(sessions, window, options, existing)
    stats = WriteStats()
    items = [to_item(e, selection.sources[e.source_id]) for e in selection.entries]
    analysis = await analyze(sessions, items, taxonomy, options.weights, now=now, date=date,
                             include_prereleases=options.include_prereleases, llm=llm, stats=stats)
    ranked = _rank(analysis.records, options.max_events)
    texts = await _write_all(ranked, options, date, llm, stats)
    outcome = _Outcome(ranked, texts, stats, analysis.triage.as_dict())
    return await _store(sessions, window, selection, outcome, now, existing, options)


async def check_buildable(sessions: SessionFactory, date: dt.date, now: dt.datetime, tz: str, *,
                          partial: bool) -> None:
    """UsageError for a date that cannot be built now: still open without ``partial``, or never.

    A window that has not begun, or that ended before the first stored entry, would give
    an empty digest that stays in the archive for good.
    """
    window = window_for(date, tz)
    if window.start > now:
        raise UsageError(f"{date} is in the future: its window opens {window.start:%Y-%m-%d %H:%M} UTC")
    if window.end > now and not partial:
        raise UsageError(f"the window of {date} is still open until {window.end:%Y-%m-%d %H:%M} UTC; "
                         "use --partial for a draft (never published or listed)")
    async with sessions() as session:
        first = await session.scalar(select(func.min(Entry.published)))
    if first is None:
        raise UsageError("no entries stored yet; run `digest fetch` first")
    if window.end <= first:
        raise UsageError(f"{date} is before the first stored entry ({first:%Y-%m-%d}); nothing to build")


@dataclass
class _Selection:
    entries: list[Entry]
    late_ids: set[int]
    sources: dict[int, Source]


async def _select(
    sessions: SessionFactory, window: Window, options: BuildOptions, existing: Digest | None
) -> _Selection:
    async with sessions() as session:
        free = (
            Entry.digest_id.is_(None) if existing is None
            else or_(Entry.digest_id.is_(None), Entry.digest_id == existing.id)
        )
        in_window = (await session.scalars(
            select(Entry).where(free, Entry.published >= window.start, Entry.published < window.end)
        )).all()
        older = (await session.scalars(
            select(Entry).where(
                free, Entry.published < window.start,
                Entry.published >= window.start - LATE_LOOKBACK, Entry.first_seen < window.end,
            )
        )).all()
        late = await _late_entries(session, list(older), options.timezone, window.date)
        sources = {s.id: s for s in (await session.scalars(select(Source))).all()}
    entries = sorted([*in_window, *late], key=lambda e: (e.published, e.id))
    return _Selection(entries, {e.id for e in late}, sources)


async def _late_entries(
    session: AsyncSession, older: list[Entry], tz: str, date: dt.date
) -> list[Entry]:
    """Entries whose own window's digest was built before they were first seen."""
    if not older:
        return []
    built = dict((await session.execute(
        select(Digest.date, Digest.built_at).where(Digest.date < date)
    )).all())
    late = []
    for entry in older:
        built_at = built.get(date_of(entry.published, tz))
        if built_at is not None and built_at <= entry.first_seen:
            late.append(entry)
    return late


def _rank(records: Sequence[EventRecord], limit: int) -> list[EventRecord]:
    relevant = [r for r in records if r.relevant]
    return sorted(relevant, key=lambda r: (-r.score, r.event_id))[:limit]


@dataclass
class _Texts:
    events: dict[str, list[EventWriteup]]
    days: dict[str, DayWriteup]


@dataclass(frozen=True)
class _Outcome:
    """What analysis and writing produced, for the store step."""

    ranked: Sequence[EventRecord]
    texts: _Texts
    stats: WriteStats
    triage: dict[str, int]


async def _write_all(
    ranked: Sequence[EventRecord],
    options: BuildOptions,
    date: dt.date,
    llm: LLMClient | None,
    stats: WriteStats,
) -> _Texts:
    """Every locale's write-ups; at most ``llm_concurrency`` LLM calls at a time."""
    gate = asyncio.Semaphore(max(1, options.llm_concurrency))
    events = [record.as_input() for record in ranked]
    written = await asyncio.gather(*(
        _write_locale(events, locale, options.llm_top_events, date, llm, stats, gate)
        for locale in options.locales
    ))
    return _Texts({locale: texts for locale, (texts, _) in zip(options.locales, written, strict=True)},
                  {locale: day for locale, (_, day) in zip(options.locales, written, strict=True)})


async def _write_locale(
    events: Sequence[EventInput],
    locale: str,
    llm_top: int,
    date: dt.date,
    llm: LLMClient | None,
    stats: WriteStats,
    gate: asyncio.Semaphore,
) -> tuple[list[EventWriteup], DayWriteup]:
    """One locale: the events concurrently (kept in rank order), then the day over them."""
    written = list(await asyncio.gather(*(
        _write_event(event, locale, llm if rank < llm_top else None, stats, gate)
        for rank, event in enumerate(events)
    )))
    day = None
    if llm is not None and written:
        async with gate:
            day = await llm_day(llm, written, locale, date, stats=stats)
    return written, day or extractive_day(written, locale, date)


async def _write_event(
    event: EventInput, locale: str, llm: LLMClient | None, stats: WriteStats,
    gate: asyncio.Semaphore,
) -> EventWriteup:
    if llm is not None:
        async with gate:
            written = await llm_event(llm, event, locale, stats=stats)
        if written is not None:
            return written
    return extractive_event(event, locale)


async def _store(
    sessions: SessionFactory,
    window: Window,
    selection: _Selection,
    outcome: _Outcome,
    now: dt.datetime,
    existing: Digest | None,
    options: BuildOptions,
) -> BuildReport:
    ranked, stats = outcome.ranked, outcome.stats
    modes = _modes(outcome.texts)
    async with sessions.begin() as session:
        digest = await _digest_row(session, window, existing, now)
        digest.partial = options.partial and (existing is None or existing.partial)  # never un-finish one
        digest.stats = await _stats(session, window, selection, outcome, now, options.source_keys)
        digest.generation_modes = modes
        digest.tokens = stats.tokens
        await _store_snapshot(session, digest.id, ranked, outcome.texts, now)
        await search.refresh(session, digest.id)  # the search index follows every (re)build
        await session.execute(
            update(Entry).where(Entry.id.in_([e.id for e in selection.entries]))
            .values(digest_id=digest.id)
        )
        if selection.late_ids:
            await session.execute(
                update(Entry).where(Entry.id.in_(selection.late_ids)).values(late=True)
            )
    return BuildReport(
        window.date, digest.id, True, entries=len(selection.entries),
        late=len(selection.late_ids), candidates=len(selection.entries), events=len(ranked),
        tokens=stats.tokens, generation_mode=modes["overall"], llm=stats.as_dict(),
        triage=outcome.triage, partial=options.partial,
    )


async def _digest_row(
    session: AsyncSession, window: Window, existing: Digest | None, now: dt.datetime
) -> Digest:
    if existing is None:
        digest = Digest(date=window.date, window_start=window.start, window_end=window.end,
                        built_at=now, stats={}, generation_modes={})
        session.add(digest)
        await session.flush()
        return digest
    digest = await session.get_one(Digest, existing.id)
    digest.built_at = now
    await session.execute(delete(DigestEvent).where(DigestEvent.digest_id == digest.id))
    await session.execute(delete(DigestText).where(DigestText.digest_id == digest.id))
    await session.execute(
        update(Entry).where(Entry.digest_id == digest.id).values(digest_id=None, late=False)
    )
    return digest


async def _store_snapshot(
    session: AsyncSession,
    digest_id: int,
    ranked: Sequence[EventRecord],
    texts: _Texts,
    now: dt.datetime,
) -> None:
    first_locale = next(iter(texts.events.values()), [])
    for rank, record in enumerate(ranked, 1):
        layers = _shown_layers(record, first_locale[rank - 1] if first_locale else None)
        session.add(DigestEvent(digest_id=digest_id, event_id=record.event_id, rank=rank,
                                score=record.score, score_breakdown=dict(record.breakdown),
                                layers=layers, updated=record.updated))
    for locale, written in texts.events.items():
        for record, text in zip(ranked, written, strict=True):
            await _upsert_writeup(session, record.event_id, locale, text, now)
        day = texts.days[locale]
        session.add(DigestText(digest_id=digest_id, locale=locale, title=day.title,
                               overview=day.overview, watchlist=list(day.watchlist),
                               mode=day.mode))


def _shown_layers(record: EventRecord, text: EventWriteup | None) -> list[str]:
    """The rules' layers, or the LLM's refinement of them (already checked against the closed list)."""
    if text is not None and text.mode != WriteMode.EXTRACTIVE and text.layers:
        return list(text.layers)
    return list(record.layers)


async def _upsert_writeup(
    session: AsyncSession, event_id: int, locale: str, text: EventWriteup, now: dt.datetime
) -> None:
    row = await session.scalar(
        select(Writeup).where(Writeup.event_id == event_id, Writeup.locale == locale)
    )
    if row is None:
        row = Writeup(event_id=event_id, locale=locale)
        session.add(row)
    row.title, row.summary, row.why_it_matters = text.title, text.summary, text.why_it_matters
    row.watch, row.mode, row.created_at = list(text.watch), text.mode, now


def _modes(texts: _Texts) -> dict[str, Any]:
    per_locale: dict[str, Any] = {}
    every: list[str] = []
    for locale, written in texts.events.items():
        events = [w.mode for w in written]
        day = texts.days[locale].mode
        per_locale[locale] = {"events": dict(Counter(events)), "day": day}
        every += [*events, day]
    return {"overall": overall_mode(every), "locales": per_locale}


async def _stats(
    session: AsyncSession,
    window: Window,
    selection: _Selection,
    outcome: _Outcome,
    now: dt.datetime,
    source_keys: frozenset[str] | None,
) -> dict[str, Any]:
    by_source = Counter(selection.sources[e.source_id].key for e in selection.entries)
    by_name = Counter(publisher(selection.sources[e.source_id]) for e in selection.entries)
    return {
        "entries": len(selection.entries),
        "late": len(selection.late_ids),
        "events": len(outcome.ranked),
        "entries_by_source": dict(sorted(by_source.items())),
        "entries_by_publisher": dict(by_name.most_common()),
        "failed_sources": await _failed_sources(session, window, now, source_keys),
        "llm": outcome.stats.as_dict(),
        "triage": outcome.triage,
    }


def publisher(source: Source) -> str:
    """Who published a source's entries, as the data notes count them (arXiv, GitHub, or the name)."""
    return {"arxiv": "arXiv", "github-releases": "GitHub"}.get(source.kind, source.name)


async def _failed_sources(session: AsyncSession, window: Window, now: dt.datetime,
                          keys: frozenset[str] | None) -> list[str]:
    """Sources of the file in use (``keys``) whose every fetch in the window (up to the build) failed.

    A source stored by an earlier run on another sources file is not this digest's concern.
    """
    rows = (await session.execute(
        select(Source.key, FetchLog.status)
        .join(FetchLog, FetchLog.source_id == Source.id)
        .where(FetchLog.started_at >= window.start, FetchLog.started_at < max(window.end, now))
    )).all()
    outcomes: dict[str, set[str]] = {}
    for key, status in rows:
        outcomes.setdefault(key, set()).add(status)
    return sorted(key for key, seen in outcomes.items()
                  if seen == {FetchStatus.ERROR} and (keys is None or key in keys))
