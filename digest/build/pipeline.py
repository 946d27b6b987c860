"""``build_digest(date)``: turn a window's stored entries into a stored digest.

The pipeline, in three steps so that no database transaction waits on the LLM:

1. select   the window's entries (late arrivals included); ``digest.analyze`` drops
            what is not news, clusters them into events (attaching to known events),
            classifies them, asks the LLM about the borderline ones (no transaction
            open), scores each event and commits the events.
2. write    write-ups per locale for the ranked events: the LLM for the top ones
            (``llm_top_events``, by default every shown event) when a client is given,
            one cached request per event with its sources' body excerpts
            (``prompts.source_texts``), ``llm_concurrency`` at a time, the output in rank
            order; the extractive writer as the fallback, and in LLM mode such an event
            says so in front of its summary (``FALLBACK_NOTES``); then the day's title,
            overview and watch list.
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
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from digest.analyze.score import ScoreWeights
from digest.analyze.taxonomy import Taxonomy, load_taxonomy
from digest.build.analyze import analyze
from digest.build.event_store import EventRecord, to_item
from digest.build.triage import TRIAGE_LIMIT, TriageScope
from digest.domain.errors import UsageError
from digest.domain.items import Item
from digest.domain.status import FetchStatus, WriteMode
from digest.domain.window import Window, date_of, window_for
from digest.domain.writeups import Brief, DayWriteup, EventInput, EventWriteup, overall_mode
from digest.store import search
from digest.store.db import SessionFactory
from digest.store.models import Digest, DigestEvent, DigestText, Entry, FetchLog, Source, Writeup
from digest.write import prompts
from digest.write.extractive import bounded_briefs, brief_of
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
BRIEF_ROUNDUPS = 3  # roundups shown as briefs at most (their items are bounded together)


@dataclass(frozen=True)
class BuildOptions:
    """What a build needs from the settings."""

    timezone: str = "Asia/Shanghai"
    locales: tuple[str, ...] = ("zh",)
    max_events: int = 12
    llm_top_events: int = 12  # the settings default it to max_events: every shown event
    llm_concurrency: int = 6
    llm_triage: TriageScope = "all"  # the events the LLM judges (digest.build.triage)
    llm_triage_limit: int = TRIAGE_LIMIT  # at most this many a build
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
                             include_prereleases=options.include_prereleases, llm=llm, stats=stats,
                             triage_scope=options.llm_triage, triage_limit=options.llm_triage_limit)
    briefs = _briefs(analysis.records, analysis.roundups)
    ranked = _rank([r for r in analysis.records if r.event_id not in analysis.roundups],
                   options.max_events)
    texts = await _write_all(ranked, options, date, llm, stats, [b.name for b in briefs])
    outcome = _Outcome(ranked, texts, stats, analysis.triage.as_dict(), briefs)
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


def _briefs(records: Sequence[EventRecord], roundups: frozenset[int]) -> tuple[Brief, ...]:
    """The relevant roundups as briefs (best first): one 简讯 / Briefs entry, not main events."""
    chosen = _rank([r for r in records if r.event_id in roundups], BRIEF_ROUNDUPS)
    return bounded_briefs([brief_of(r.event_id, r.items, r.layers, r.score) for r in chosen if r.items])


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
    briefs: tuple[Brief, ...] = ()


async def _write_all(
    ranked: Sequence[EventRecord],
    options: BuildOptions,
    date: dt.date,
    llm: LLMClient | None,
    stats: WriteStats,
    briefs: Sequence[str] = (),
) -> _Texts:
    """Every locale's write-ups; at most ``llm_concurrency`` LLM calls at a time."""
    gate = asyncio.Semaphore(max(1, options.llm_concurrency))
    inputs = [record.as_input() for record in ranked]
    asked = [_llm_input(r, e) for r, e in zip(ranked, inputs, strict=True)] if llm else inputs
    events = list(zip(inputs, asked, strict=True))
    written = await asyncio.gather(*(
        _write_locale(events, locale, options.llm_top_events, date, llm, stats, gate, briefs)
        for locale in options.locales
    ))
    return _Texts({locale: texts for locale, (texts, _) in zip(options.locales, written, strict=True)},
                  {locale: day for locale, (_, day) in zip(options.locales, written, strict=True)})


async def _write_locale(
    events: Sequence[tuple[EventInput, EventInput]],
    locale: str,
    llm_top: int,
    date: dt.date,
    llm: LLMClient | None,
    stats: WriteStats,
    gate: asyncio.Semaphore,
    briefs: Sequence[str] = (),
) -> tuple[list[EventWriteup], DayWriteup]:
    """One locale: the events concurrently (kept in rank order), then the day over them.

    With a client, every event the LLM did not write (past ``llm_top``, or its answer
    failed or was rejected) says so in its summary (:func:`_marked`); the day is
    written from the unmarked texts.
    """
    outcomes = await asyncio.gather(*(
        _write_event(event, asked, locale, llm if rank < llm_top else None, stats, gate)
        for rank, (event, asked) in enumerate(events)
    ))
    written = [text for text, _ in outcomes]
    day = None
    if llm is not None and written:
        async with gate:
            day = await llm_day(llm, written, locale, date, stats=stats)
    day = day or extractive_day(written, locale, date, briefs=briefs)
    if llm is not None:
        written = [_marked(text, why, locale) for text, why in outcomes]
    return written, day


async def _write_event(
    event: EventInput, asked: EventInput, locale: str, llm: LLMClient | None, stats: WriteStats,
    gate: asyncio.Semaphore,
) -> tuple[EventWriteup, str | None]:
    """The LLM's write-up of ``asked`` (the event with its body excerpts), else the extractive one
    of ``event`` and why (the fallback reason counted in ``stats``; ``not_asked`` without a client)."""
    if llm is None:
        return extractive_event(event, locale), "not_asked"
    mine = WriteStats()  # this event's own outcome, added to the build's
    async with gate:
        written = await llm_event(llm, asked, locale, stats=mine)
    stats.add(mine)
    if written is not None:
        return written, None
    return extractive_event(event, locale), next(iter(mine.fallbacks), "unknown")


# The per-event note on a write-up the LLM did not write, in a digest it wrote the rest of.
FALLBACK_NOTES: dict[str, dict[str, str]] = {
    "zh": {"figures": "（模型稿中的数字在来源里核对不到，本条改用抽取式摘要。）",
           "other": "（本条未由模型撰写，为抽取式摘要。）"},
    "en": {"figures": "(The model's draft stated figures the sources do not; this write-up is "
                      "extractive.)",
           "other": "(Not written by the model; this write-up is extractive.)"},
}


def _marked(text: EventWriteup, why: str | None, locale: str) -> EventWriteup:
    """``text`` with a short note in front of its summary when the LLM did not write it."""
    if why is None:
        return text
    notes = FALLBACK_NOTES.get(locale, FALLBACK_NOTES["en"])
    note = notes["figures" if why == "figures" else "other"]
    return replace(text, summary=f"{note}{'' if locale == 'zh' else ' '}{text.summary}")


def _llm_input(record: EventRecord, event: EventInput) -> EventInput:
    """The event as the LLM reads it: each source's summary and a bounded excerpt of its body."""
    items: dict[tuple[str | None, str], Item] = {}
    for each in record.items:
        items.setdefault((each.url, each.title), each)
    parts = []
    for source in event.sources:
        item = items.get((source.url, source.title))
        parts.append((item.summary, item.body_beyond_summary) if item is not None else (source.summary, ""))
    texts = prompts.source_texts(event.title, parts)
    return replace(event, sources=tuple(
        replace(source, summary=text) for source, text in zip(event.sources, texts, strict=False)))


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
    for rank, record in enumerate(ranked, 1):
        session.add(DigestEvent(digest_id=digest_id, event_id=record.event_id, rank=rank,
                                score=record.score, score_breakdown=dict(record.breakdown),
                                layers=list(record.layers), updated=record.updated))
    for locale, written in texts.events.items():
        for record, text in zip(ranked, written, strict=True):
            await _upsert_writeup(session, record.event_id, locale, text, now)
        day = texts.days[locale]
        session.add(DigestText(digest_id=digest_id, locale=locale, title=day.title,
                               overview=day.overview, watchlist=list(day.watchlist),
                               mode=day.mode))


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
        "briefs": [b.as_dict() for b in outcome.briefs],
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
