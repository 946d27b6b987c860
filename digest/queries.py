"""Read stored digests and events. Helpers never commit: the caller owns the transaction."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from digest.errors import BuildError
from digest.models import Digest, DigestEvent, DigestText, Entry, Event, EventEntry, Source, Writeup
from digest.views import DigestView, EventView, SourceLink
from digest.write import EventInput, EventWriteup, SourceText, extractive_day, extractive_event


async def get_digest(session: AsyncSession, date: dt.date) -> Digest:
    """The stored digest of ``date``, or a BuildError with a hint to build it."""
    digest = await session.scalar(select(Digest).where(Digest.date == date))
    if digest is None:
        raise BuildError(f"no digest for {date} yet; build it first: digest build --date {date}")
    return digest


async def event_sources(session: AsyncSession, event_ids: Sequence[int]) -> dict[int, list[SourceText]]:
    """Every source entry of each event, best source first."""
    rows = await session.execute(
        select(EventEntry.event_id, Entry, Source)
        .join(Entry, Entry.id == EventEntry.entry_id)
        .join(Source, Source.id == Entry.source_id)
        .where(EventEntry.event_id.in_(list(event_ids)))
        .order_by(Source.weight.desc(), Entry.id)
    )
    found: dict[int, list[SourceText]] = defaultdict(list)
    for event_id, entry, source in rows:
        url = entry.canonical_url or entry.url
        found[event_id].append(SourceText(source.name, url, entry.title, entry.summary))
    return found


async def load_view(session: AsyncSession, date: dt.date, locale: str) -> DigestView:
    """The digest of ``date`` in ``locale``; missing write-ups are filled extractively."""
    digest = await get_digest(session, date)
    rows = (await session.execute(
        select(DigestEvent, Event).join(Event, Event.id == DigestEvent.event_id)
        .where(DigestEvent.digest_id == digest.id).order_by(DigestEvent.rank)
    )).all()
    ids = [event.id for _, event in rows]
    sources = await event_sources(session, ids)
    writeups = {w.event_id: w for w in (await session.scalars(
        select(Writeup).where(Writeup.event_id.in_(ids), Writeup.locale == locale)
    )).all()}
    events = tuple(
        _event_view(snap, event, sources.get(event.id, []), writeups.get(event.id), locale)
        for snap, event in rows
    )
    text = await session.scalar(
        select(DigestText).where(DigestText.digest_id == digest.id, DigestText.locale == locale)
    )
    if text is not None:
        title, overview, watch, mode = text.title, text.overview, tuple(text.watchlist), text.mode
    else:
        day = extractive_day([e.as_writeup() for e in events], locale, date)
        title, overview, watch, mode = day.title, day.overview, tuple(day.watchlist), day.mode
    return DigestView(
        date=date, locale=locale, title=title, overview=overview, watchlist=watch, day_mode=mode,
        window_start=digest.window_start, window_end=digest.window_end, events=events,
        stats=dict(digest.stats), tokens=digest.tokens, read_count=digest.read_count,
    )


def _event_view(
    snap: DigestEvent, event: Event, sources: list[SourceText], row: Writeup | None, locale: str
) -> EventView:
    if row is not None:
        text = EventWriteup(row.title, row.summary, row.why_it_matters, tuple(row.watch),
                            tuple(snap.layers), row.mode)
    else:
        text = extractive_event(
            EventInput(event.id, event.title, tuple(snap.layers), snap.score, tuple(sources)),
            locale,
        )
    links = tuple(dict.fromkeys(SourceLink(s.name, s.url) for s in sources))
    return EventView(
        id=event.id, rank=snap.rank, title=text.title, url=event.url, score=snap.score,
        score_breakdown=dict(snap.score_breakdown), layers=tuple(snap.layers), sources=links,
        summary=text.summary, why_it_matters=text.why_it_matters, watch=tuple(text.watch),
        written_by=text.mode, updated=snap.updated,
    )
