"""Events in the database: find known events by identity key, save clusters as events."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from digest.classify import classify_items
from digest.cluster import Cluster, primary_order
from digest.items import Item
from digest.models import Digest, DigestEvent, Entry, Event, EventEntry, Source
from digest.score import ScoreWeights, score
from digest.taxonomy import Taxonomy
from digest.extractive import EventInput, SourceText

KNOWN_LOOKBACK = dt.timedelta(days=30)

KeysFn = Callable[[Item], list[str]]


@dataclass
class EventRecord:
    """An event as the build ranks and writes it."""

    event_id: int
    title: str
    url: str | None
    relevant: bool
    score: float
    breakdown: dict[str, float]
    layers: tuple[str, ...]
    updated: bool
    items: list[Item] = field(default_factory=list)

    def as_input(self) -> EventInput:
        """The writer's input: title, layers, score and every source's text."""
        sources = tuple(
            SourceText(name=i.source_name, url=i.url, title=i.title, summary=i.summary)
            for i in self.items
        )
        return EventInput(self.event_id, self.title, self.layers, self.score, sources)


def _item(entry: Entry, source: Source) -> Item:
    from digest.build import to_item

    return to_item(entry, source)


async def _entries_of(session: AsyncSession, event_ids: Iterable[int]) -> dict[int, list[Item]]:
    ids = list(set(event_ids))
    found: dict[int, list[Item]] = {i: [] for i in ids}
    for chunk in range(0, len(ids), 500):
        rows = await session.execute(
            select(EventEntry.event_id, Entry, Source)
            .join(Entry, Entry.id == EventEntry.entry_id)
            .join(Source, Source.id == Entry.source_id)
            .where(EventEntry.event_id.in_(ids[chunk:chunk + 500]))
        )
        for event_id, entry, source in rows:
            found[event_id].append(_item(entry, source))
    return found


async def load_known_keys(session: AsyncSession, keys_fn: KeysFn, now: dt.datetime) -> dict[str, int]:
    """Identity keys of recent events' entries (and their cluster keys) -> event id."""
    recent = (await session.execute(
        select(Event.id, Event.cluster_key).where(Event.updated_at >= now - KNOWN_LOOKBACK)
    )).all()
    known = {key: event_id for event_id, key in recent}
    for event_id, items in (await _entries_of(session, [r[0] for r in recent])).items():
        for item in items:
            for key in keys_fn(item):
                known.setdefault(key, event_id)
    return known


async def save_events(
    session: AsyncSession,
    clusters: Sequence[Cluster],
    taxonomy: Taxonomy,
    weights: ScoreWeights,
    now: dt.datetime,
    *,
    before: dt.date,
) -> list[EventRecord]:
    """Create or extend one event per cluster, classify and score it; return the records.

    Batched: a handful of queries whatever the number of clusters.
    """
    events = await _event_rows(session, clusters, now)
    ids = [e.id for e in events]
    existing = await _entries_of(session, ids)
    published = await _published_before(session, ids, before)
    await _link(session, [(e.id, i) for e, c in zip(events, clusters, strict=True) for i in c.items], now)
    return [
        _classify_and_score(event, _unique([*existing.get(event.id, []), *found.items]), taxonomy,
                            weights, now, updated=event.id in published)
        for event, found in zip(events, clusters, strict=True)
    ]


def _unique(items: Sequence[Item]) -> list[Item]:
    return list({i.entry_id: i for i in items}.values())


def _chunks(values: Sequence[Any], size: int = 500) -> Iterable[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


async def _published_before(session: AsyncSession, ids: list[int], before: dt.date) -> set[int]:
    found: set[int] = set()
    for chunk in _chunks(ids):
        rows = await session.scalars(
            select(DigestEvent.event_id).join(Digest, Digest.id == DigestEvent.digest_id)
            .where(DigestEvent.event_id.in_(chunk), Digest.date < before)
        )
        found.update(rows.all())
    return found


async def _event_rows(session: AsyncSession, clusters: Sequence[Cluster], now: dt.datetime) -> list[Event]:
    """The event of each cluster: the known one, the one with its key, or a new one."""
    by_id: dict[int, Event] = {}
    for chunk in _chunks(sorted({c.event_id for c in clusters if c.event_id is not None})):
        by_id.update((e.id, e) for e in await session.scalars(select(Event).where(Event.id.in_(chunk))))
    by_key: dict[str, Event] = {}
    for chunk in _chunks(sorted({c.key for c in clusters if c.event_id is None})):
        query = select(Event).where(Event.cluster_key.in_(chunk))
        by_key.update((e.cluster_key, e) for e in await session.scalars(query))
    for found in clusters:
        if found.event_id is None and found.key not in by_key:
            by_key[found.key] = Event(cluster_key=found.key, title=found.primary.title,
                                      url=found.primary.url, first_seen=now, updated_at=now,
                                      layers=[], score_breakdown={})
            session.add(by_key[found.key])
    await session.flush()
    return [by_id[c.event_id] if c.event_id is not None else by_key[c.key] for c in clusters]


async def _link(session: AsyncSession, pairs: Sequence[tuple[int, Item]], now: dt.datetime) -> None:
    """Link entries to events; an entry already linked to an event keeps that link."""
    linked: set[int] = set()
    for chunk in _chunks([item.entry_id for _, item in pairs]):
        rows = await session.scalars(select(EventEntry.entry_id).where(EventEntry.entry_id.in_(chunk)))
        linked.update(rows.all())
    rows_to_add = [
        {"event_id": event_id, "entry_id": item.entry_id, "added_at": now}
        for event_id, item in pairs if item.entry_id not in linked
    ]
    if rows_to_add:
        await session.execute(insert(EventEntry), rows_to_add)


def _classify_and_score(
    event: Event,
    items: list[Item],
    taxonomy: Taxonomy,
    weights: ScoreWeights,
    now: dt.datetime,
    *,
    updated: bool,
) -> EventRecord:
    primary = min(items, key=primary_order)
    verdict = classify_items(items, taxonomy)
    result = score(items, verdict, weights)
    breakdown: dict[str, Any] = dict(result.breakdown)
    event.title, event.url = primary.title, primary.url
    event.relevant, event.relevance = verdict.relevant, verdict.relevance
    event.layers, event.score, event.score_breakdown = list(verdict.layers), result.score, breakdown
    event.updated_at = now
    ordered = sorted(items, key=primary_order)
    return EventRecord(event.id, primary.title, primary.url, verdict.relevant, result.score,
                       breakdown, tuple(verdict.layers), updated, ordered)
