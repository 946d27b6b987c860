"""Events in the database: find known events by identity key, save clusters as events.

Classifying is pure and happens outside any write transaction: :func:`stored_items`
reads (read-only) the entries of the events the clusters extend, :func:`plan_event`
classifies a cluster together with them, and the build may revise the plan's
verdict (LLM triage) before :func:`save_events` stores it in one transaction.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from digest.analyze.classify import Classification, classify_items
from digest.analyze.cluster import Cluster, identity_keys, primary_order
from digest.analyze.score import ScoreWeights, score
from digest.analyze.taxonomy import Taxonomy
from digest.domain.items import Item
from digest.domain.writeups import EventInput, SourceText
from digest.store.models import Digest, DigestEvent, Entry, Event, EventEntry, Source
from digest.store.queries import event_entries
from digest.write.extractive import with_excerpt

KNOWN_LOOKBACK = dt.timedelta(days=30)
log = logging.getLogger(__name__)



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
        """The writer's input: title, layers, score and every source's text (summary + body excerpt)."""
        sources = tuple(
            SourceText(name=i.source_name, url=i.url, title=i.title,
                       summary=with_excerpt(i.summary, i.body_beyond_summary))
            for i in _one_per_work(self.items)
        )
        return EventInput(self.event_id, self.title, self.layers, self.score, sources)


def _one_per_work(items: Sequence[Item]) -> list[Item]:
    """The items minus repeats of one work (an arXiv paper cross-listed in three categories)."""
    seen: set[str] = set()
    kept = []
    for item in items:
        key = next(iter(identity_keys(item)), f"entry:{item.entry_id}")
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept


@dataclass(frozen=True)
class PlannedEvent:
    """A cluster, every entry of the event it makes or extends (best first), and its verdict."""

    cluster: Cluster
    items: tuple[Item, ...]
    verdict: Classification

    @property
    def primary(self) -> Item:
        """The event's best entry: its title and URL are the event's."""
        return self.items[0]


def plan_event(cluster: Cluster, stored: Sequence[Item], taxonomy: Taxonomy) -> PlannedEvent:
    """Classify a cluster together with the entries its event already has (pure)."""
    items = tuple(sorted(_unique([*stored, *cluster.items]), key=primary_order))
    return PlannedEvent(cluster, items, classify_items(items, taxonomy))


def to_item(entry: Entry, source: Source) -> Item:
    """The pure analysis view of a stored entry."""
    return Item(
        entry_id=entry.id, source_key=source.key, source_name=source.name,
        source_weight=source.weight, kind=source.kind, title=entry.title, summary=entry.summary,
        url=entry.canonical_url or entry.url, links=tuple(entry.links or ()),
        published=entry.published, arxiv_id=entry.arxiv_id, arxiv_version=entry.arxiv_version,
        announce_type=entry.announce_type, doi=entry.doi, repo=entry.repo, tag=entry.tag,
        prerelease=entry.prerelease, body=entry.body or "",
    )


async def _entries_of(session: AsyncSession, event_ids: Iterable[int]) -> dict[int, list[Item]]:
    """Each event's entries as analysis items (every asked id has a list)."""
    found = await event_entries(session, event_ids)
    return {event_id: [to_item(entry, source) for entry, source in pairs]
            for event_id, pairs in found.items()}


async def load_known_keys(session: AsyncSession, now: dt.datetime) -> dict[str, int]:
    """Identity keys of recent events' entries (and their cluster keys) -> event id."""
    recent = (await session.execute(
        select(Event.id, Event.cluster_key).where(Event.updated_at >= now - KNOWN_LOOKBACK)
    )).all()
    known = {key: event_id for event_id, key in recent}
    for event_id, items in (await _entries_of(session, [r[0] for r in recent])).items():
        for item in items:
            for key in identity_keys(item):
                known.setdefault(key, event_id)
    return known


async def stored_items(session: AsyncSession, clusters: Sequence[Cluster]) -> list[list[Item]]:
    """The entries already linked to the event each cluster extends (none for a new event)."""
    by_key: dict[str, int] = {}
    for chunk in _chunks(sorted({c.key for c in clusters if c.event_id is None})):
        rows = await session.execute(select(Event.cluster_key, Event.id).where(Event.cluster_key.in_(chunk)))
        by_key.update((key, event_id) for key, event_id in rows)
    ids = [c.event_id if c.event_id is not None else by_key.get(c.key) for c in clusters]
    found = await _entries_of(session, [i for i in ids if i is not None])
    return [found[i] if i is not None else [] for i in ids]


async def save_events(
    session: AsyncSession,
    planned: Sequence[PlannedEvent],
    taxonomy: Taxonomy,
    weights: ScoreWeights,
    now: dt.datetime,
    *,
    before: dt.date,
) -> list[EventRecord]:
    """Create or extend one event per planned cluster, store its verdict and score; return the records.

    An event whose entries changed since it was planned (a concurrent build) is
    classified again by the rules. Batched: a handful of queries whatever the number of clusters.
    """
    clusters = [p.cluster for p in planned]
    events = await _event_rows(session, clusters, now)
    ids = [e.id for e in events]
    existing = await _entries_of(session, ids)
    published = await _published_before(session, ids, before)
    await _link(session, [(e.id, i) for e, c in zip(events, clusters, strict=True) for i in c.items], now)
    return [
        _score_and_store(event, _current(plan, existing.get(event.id, []), taxonomy), weights, now,
                         updated=event.id in published)
        for event, plan in zip(events, planned, strict=True)
    ]


def _current(plan: PlannedEvent, stored: Sequence[Item], taxonomy: Taxonomy) -> PlannedEvent:
    """The plan, or a fresh rules-only plan when the event's entries changed meanwhile."""
    now_there = {i.entry_id for i in [*stored, *plan.cluster.items]}
    if now_there == {i.entry_id for i in plan.items}:
        return plan
    log.info("event %r changed while it was classified: the rules decide", plan.primary.title)
    return plan_event(plan.cluster, stored, taxonomy)


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


def _score_and_store(
    event: Event, plan: PlannedEvent, weights: ScoreWeights, now: dt.datetime, *, updated: bool
) -> EventRecord:
    verdict, primary = plan.verdict, plan.primary
    result = score(plan.items, verdict, weights)
    breakdown: dict[str, Any] = dict(result.breakdown)
    event.title, event.url = primary.title, primary.url
    event.relevant, event.relevance = verdict.relevant, verdict.relevance
    event.layers, event.score, event.score_breakdown = list(verdict.layers), result.score, breakdown
    event.updated_at = now
    return EventRecord(event.id, primary.title, primary.url, verdict.relevant, result.score,
                       breakdown, tuple(verdict.layers), updated, list(plan.items))
