"""Planning a digest's deliveries: once, at its first publish, one row per subscriber with >= 1 event.

The conditional ``UPDATE digest SET published_at`` decides which planner is
first (PostgreSQL locks the row, SQLite has one writer), and only that
planner inserts the rows (``ON CONFLICT DO NOTHING`` all the same). A
subscriber whose filter leaves no event gets no row: nothing is sent, and
nothing is left to finish. Which events a filter leaves is the one rule of
:func:`digest.domain.views.keeps`, memoised per filter (:class:`KeptCache`).
Helpers never commit: the caller owns the transaction.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import exists, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from digest.deliver.outbox import TABLE, Claimed
from digest.domain.layers import stored_layers
from digest.domain.status import DeliveryStatus, SubscriberStatus
from digest.domain.views import keeps
from digest.store.models import Delivery, Digest, DigestEvent, Subscriber

log = logging.getLogger(__name__)
PLAN_CHUNK = 5000


@dataclass(frozen=True)
class EventFacts:
    """What filtering needs of one event of a digest."""

    id: int
    layers: frozenset[str]
    score: float


class KeptCache:
    """The ids of the events a filter keeps (:func:`~digest.domain.views.keeps`), memoised per filter.

    Most subscribers share a few filters, so a plan of many rows costs a few filterings.
    """

    def __init__(self, events: Sequence[EventFacts]) -> None:
        self.events = tuple(events)
        self._memo: dict[tuple[frozenset[str], float], tuple[int, ...]] = {}

    def __call__(self, layers: Collection[str], min_score: float) -> tuple[int, ...]:
        key = (frozenset(layers), float(min_score))
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = tuple(e.id for e in self.events if keeps(e, key[0], key[1]))
        return found


@dataclass
class PlanResult:
    """What planning did: rows per channel, and subscribers whose filter left nothing."""

    first: bool
    planned: dict[str, int] = field(default_factory=dict)
    empty: dict[str, int] = field(default_factory=dict)
    audience: list[Claimed] = field(default_factory=list)


async def digest_events(session: AsyncSession, digest_id: int) -> tuple[EventFacts, ...]:
    """The layers and scores of a digest's events, as the snapshot holds them."""
    rows = await session.execute(
        select(DigestEvent.event_id, DigestEvent.layers, DigestEvent.score)
        .where(DigestEvent.digest_id == digest_id).order_by(DigestEvent.rank)
    )
    return tuple(EventFacts(eid, frozenset(layers or ()), float(score)) for eid, layers, score in rows)


async def _mark_published(session: AsyncSession, digest_id: int, now: dt.datetime) -> bool:
    """Set published_at if still unset; True for the one caller that set it."""
    result: Any = await session.execute(
        update(Digest).where(Digest.id == digest_id, Digest.published_at.is_(None))
        .values(published_at=now)
    )
    return bool(result.rowcount == 1)


async def plan_deliveries(
    session: AsyncSession, digest: Digest, now: dt.datetime, *,
    message_id: Callable[[str, int], str | None], dry_run: bool = False,
) -> PlanResult:
    """At the first publish of ``digest``: one planned row per active subscriber with >= 1 event.

    Later calls plan nothing (``first`` is False). ``dry_run`` computes the same
    audience and writes nothing.
    """
    first = digest.published_at is None if dry_run else await _mark_published(session, digest.id, now)
    if not first:
        return PlanResult(first=False)
    kept = KeptCache(await digest_events(session, digest.id))
    result = PlanResult(first=True)
    rows = await session.execute(
        select(Subscriber.id, Subscriber.channel, Subscriber.address, Subscriber.locale,
               Subscriber.layers, Subscriber.min_score)
        .where(Subscriber.status == SubscriberStatus.ACTIVE).order_by(Subscriber.id)
    )
    for sid, channel, address, locale, stored, min_score in rows:
        layers = stored_layers(stored or [])
        if layers is None or not _is_score(min_score):
            log.warning("subscriber %s (%s): the stored filter does not read (layers %.80r, min_score %.20r);"
                        " left out of this digest", sid, channel, stored, min_score)
            result.empty[channel] = result.empty.get(channel, 0) + 1
            continue
        if not kept(layers, min_score):
            result.empty[channel] = result.empty.get(channel, 0) + 1
            continue
        result.planned[channel] = result.planned.get(channel, 0) + 1
        result.audience.append(Claimed(0, digest.id, sid, channel, address, locale,
                                       layers, float(min_score),
                                       message_id=message_id(channel, sid)))
    if not dry_run:
        await _insert_rows(session, digest.id, result.audience, now)
    return result


def _is_score(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 100


async def joined_after(session: AsyncSession, digest_id: int) -> int:
    """Active subscribers created after the digest's first publish, so without a row (they get the next)."""
    has_row = exists().where(Delivery.digest_id == digest_id, Delivery.subscriber_id == Subscriber.id)
    count = await session.scalar(
        select(func.count(Subscriber.id)).join(Digest, Digest.id == digest_id)
        .where(Subscriber.status == SubscriberStatus.ACTIVE, Digest.published_at.is_not(None),
               Subscriber.created_at > Digest.published_at, ~has_row)
    )
    return int(count or 0)


async def _insert_rows(session: AsyncSession, digest_id: int, audience: Sequence[Claimed],
                       now: dt.datetime) -> None:
    """INSERT ... ON CONFLICT DO NOTHING, in chunks: concurrent planners cannot duplicate a row."""
    stmt = _insert_ignoring_conflicts(session)
    for start in range(0, len(audience), PLAN_CHUNK):
        chunk = audience[start:start + PLAN_CHUNK]
        await session.execute(stmt, [
            {"digest_id": digest_id, "subscriber_id": c.subscriber_id, "status": DeliveryStatus.PLANNED,
             "parts_total": 0, "parts_sent": 0, "attempts": 0, "message_id": c.message_id,
             "planned_at": now}
            for c in chunk
        ])


def _insert_ignoring_conflicts(session: AsyncSession) -> Any:
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(TABLE).on_conflict_do_nothing(index_elements=["digest_id", "subscriber_id"])
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(TABLE).on_conflict_do_nothing(index_elements=["digest_id", "subscriber_id"])
