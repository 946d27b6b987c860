"""The delivery outbox: plan rows once, claim them, record what became of each send.

A row is one digest for one subscriber (unique per pair) and moves through

    planned ──claim──► sending ──► sent
       ▲                  │   ├──► failed   (``failure``: permanent refusal, our bug, or
       │                  │   │              MAX_ATTEMPTS exhausted; bug rows can be requeued)
       └── transient ─────┘   └──► skipped  (the subscriber left before its turn)

Planning happens once, at the first publish of a digest
(:mod:`digest.deliver.planning`); this module claims the rows and records
what became of each.

A claim is a lease: ``lease_until`` is set when a row is claimed and renewed
by its sender's heartbeat while it lives. A ``sending`` row whose lease
expired belongs to a process that died, and is claimed again, flagged
``resumed`` (what went out before the crash may go twice; the flag stays on
the row until it is sent). A row under another run's unexpired lease is
*held*: reports count it, with the time it falls due. PostgreSQL claims with
``FOR UPDATE SKIP LOCKED`` so any number of workers share the rows; SQLite
re-checks the state in the ``UPDATE`` (one writer at a time). Helpers never
commit: the caller owns the transaction.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from digest.domain.errors import DigestError
from digest.domain.status import DeliveryStatus, FailureKind, SubscriberStatus
from digest.store.models import Delivery, Digest, Subscriber, utcnow
from digest.subscribe.subscriptions import change_address, mark

log = logging.getLogger(__name__)
TABLE = cast(Table, Delivery.__table__)  # Core statements: the hot path skips the ORM
MAX_ATTEMPTS = 10  # send attempts in all runs before a row is given up as failed
UNFINISHED = (DeliveryStatus.PLANNED, DeliveryStatus.SENDING)  # rows a run may still send


@dataclass(frozen=True)
class Claimed:
    """A delivery taken for sending, with what composing and sending it needs."""

    delivery_id: int
    digest_id: int
    subscriber_id: int
    channel: str
    address: str
    locale: str
    layers: tuple[str, ...]
    min_score: float
    subscriber_status: str = SubscriberStatus.ACTIVE
    parts_sent: int = 0
    attempts: int = 0
    message_id: str | None = None
    resumed: bool = False
    thread_id: str | None = None


@dataclass(frozen=True)
class Record:
    """The new state of one delivery (and of its subscriber, when a refusal changes it)."""

    delivery_id: int
    status: DeliveryStatus
    attempts: int
    parts_sent: int
    parts_total: int
    last_error: str | None
    claimed_at: dt.datetime | None
    sent_at: dt.datetime | None = None
    message_id: str | None = None
    lease_until: dt.datetime | None = None
    resumed: bool = False
    failure: FailureKind | None = None
    mark: tuple[int, SubscriberStatus] | None = None
    new_address: tuple[int, str] | None = None
    thread_id: str | None = None


def _stale(now: dt.datetime) -> Any:
    """Sending rows whose lease expired: their process died."""
    return and_(Delivery.status == DeliveryStatus.SENDING,
                or_(Delivery.lease_until.is_(None), Delivery.lease_until <= now))


def _held(now: dt.datetime) -> Any:
    """Sending rows under an unexpired lease: some run (live, or dead but not yet expired) holds them."""
    return and_(Delivery.status == DeliveryStatus.SENDING, Delivery.lease_until > now)


def _bug_failed() -> Any:
    """Rows failed by our bug or configuration: the ones ``requeue_failed`` puts back."""
    return and_(Delivery.status == DeliveryStatus.FAILED, Delivery.failure == FailureKind.BUG)


def _fresh(planned_before: dt.datetime) -> Any:
    """Planned rows never tried, or deferred (claimed_at = when) before ``planned_before``."""
    return and_(Delivery.status == DeliveryStatus.PLANNED,
                or_(Delivery.claimed_at.is_(None), Delivery.claimed_at < planned_before))


def _claimable(now: dt.datetime, planned_before: dt.datetime) -> Any:
    return or_(_fresh(planned_before), _stale(now))


_CLAIM_COLUMNS = (
    Delivery.id, Delivery.digest_id, Delivery.subscriber_id, Subscriber.channel, Subscriber.address,
    Subscriber.locale, Subscriber.layers, Subscriber.min_score, Subscriber.status,
    Delivery.parts_sent, Delivery.attempts, Delivery.message_id, Delivery.status, Delivery.resumed,
    Delivery.thread_id,
)


async def claim(
    session: AsyncSession, *, digest_id: int | None, channels: Collection[str], limit: int,
    now: dt.datetime, lease: dt.timedelta, planned_before: dt.datetime, exclude: Collection[int] = (),
    stale: bool = True,
) -> list[Claimed]:
    """Take up to ``limit`` claimable rows of ``channels`` (status sending, leased until now + lease).

    A deferred row (planned, with the time of its last try in claimed_at) is
    claimable once that time is before ``planned_before``: the caller passes
    the earlier of its run's start and ``now`` minus the retry delay.

    Rows of dead processes first (unless ``stale`` is False: callers look for
    them now and then, not at every claim), then planned rows; each lookup
    walks the status index in id order and stops at ``limit``. ``exclude``
    names rows the caller still holds (their lease may run out while they are
    being sent, and they must not be taken twice).
    """
    rows: list[Any] = []
    if stale:  # rows we hold are sending too: only their lease can expire, so exclude them here
        query = _claim_query(_stale(now), channels, digest_id, limit)
        rows += (await session.execute(query.where(Delivery.id.not_in(list(exclude))))).all()
    if len(rows) < limit:
        query = _claim_query(_fresh(planned_before), channels, digest_id, limit - len(rows))
        rows += (await session.execute(query)).all()
    if not rows:
        return []
    table = TABLE
    taken = set((await session.execute(
        update(table).where(table.c.id.in_([r[0] for r in rows]), _claimable(now, planned_before))
        .values(status=DeliveryStatus.SENDING, claimed_at=now, lease_until=now + lease).returning(table.c.id)
    )).scalars().all())
    return [_claimed(r) for r in rows if r[0] in taken]


def _claim_query(condition: Any, channels: Collection[str], digest_id: int | None, limit: int) -> Any:
    """Rows meeting ``condition``, in id order, locked (PostgreSQL skips rows others hold)."""
    query = (
        select(*_CLAIM_COLUMNS).join(Subscriber, Subscriber.id == Delivery.subscriber_id)
        .where(condition, Subscriber.channel.in_(list(channels)))
        .order_by(Delivery.id).limit(limit).with_for_update(skip_locked=True, of=Delivery)
    )
    return query if digest_id is None else query.where(Delivery.digest_id == digest_id)


def _claimed(row: Any) -> Claimed:
    (did, digest_id, sid, channel, address, locale, layers, min_score, sub_status,
     parts_sent, attempts, message_id, status, resumed, thread_id) = row
    resumed = status == DeliveryStatus.SENDING or bool(resumed)
    return Claimed(did, digest_id, sid, channel, address, locale, tuple(layers or ()), float(min_score),
                   sub_status, parts_sent, attempts, message_id, resumed=resumed, thread_id=thread_id)


async def renew(session: AsyncSession, ids: Collection[int], until: dt.datetime) -> int:
    """Extend the lease of the sending rows ``ids`` (a live sender's heartbeat); how many were renewed."""
    if not ids:
        return 0
    result: Any = await session.execute(
        update(TABLE).where(TABLE.c.id.in_(sorted(ids)), TABLE.c.status == DeliveryStatus.SENDING)
        .values(lease_until=until))
    return int(result.rowcount)


async def pending_rows(session: AsyncSession, *, now: dt.datetime, digest_id: int | None = None,
                       channels: Collection[str] | None = None, retry_failed: bool = False) -> list[Claimed]:
    """Rows a publish at ``now`` would send (and the bug-failed ones with ``retry_failed``), unclaimed."""
    condition = _claimable(now, now)
    query = select(*_CLAIM_COLUMNS).join(Subscriber, Subscriber.id == Delivery.subscriber_id)
    query = query.where(or_(condition, _bug_failed()) if retry_failed else condition)
    if digest_id is not None:
        query = query.where(Delivery.digest_id == digest_id)
    if channels is not None:
        query = query.where(Subscriber.channel.in_(list(channels)))
    return [_claimed(r) for r in (await session.execute(query.order_by(Delivery.id))).all()]


async def pending_counts(session: AsyncSession, digest_id: int | None = None) -> dict[str, int]:
    """Rows planned or sending, per channel."""
    query = (select(Subscriber.channel, func.count()).select_from(Delivery)
             .join(Subscriber, Subscriber.id == Delivery.subscriber_id)
             .where(Delivery.status.in_(UNFINISHED)).group_by(Subscriber.channel))
    if digest_id is not None:
        query = query.where(Delivery.digest_id == digest_id)
    return {channel: int(n) for channel, n in (await session.execute(query)).all()}


@dataclass(frozen=True)
class Held:
    """Rows of one channel under another run's unexpired lease, and when the last of them falls due."""

    rows: int
    until: dt.datetime


async def held_rows(session: AsyncSession, now: dt.datetime, digest_id: int | None = None) -> dict[str, Held]:
    """Per channel: the sending rows whose lease runs past ``now`` (not claimable yet)."""
    query = (select(Subscriber.channel, func.count(), func.max(Delivery.lease_until)).select_from(Delivery)
             .join(Subscriber, Subscriber.id == Delivery.subscriber_id)
             .where(_held(now)).group_by(Subscriber.channel))
    if digest_id is not None:
        query = query.where(Delivery.digest_id == digest_id)
    found = (await session.execute(query)).all()
    return {channel: Held(int(n), until) for channel, n, until in found if until is not None}


async def failed_by_bug(session: AsyncSession, digest_id: int | None = None) -> dict[str, int]:
    """Per channel: the rows failed by our bug or configuration (what ``requeue_failed`` puts back)."""
    query = (select(Subscriber.channel, func.count()).select_from(Delivery)
             .join(Subscriber, Subscriber.id == Delivery.subscriber_id)
             .where(_bug_failed()).group_by(Subscriber.channel))
    if digest_id is not None:
        query = query.where(Delivery.digest_id == digest_id)
    return {channel: int(n) for channel, n in (await session.execute(query)).all()}


async def requeue_failed(session: AsyncSession, digest_id: int | None = None) -> dict[str, int]:
    """Put the rows failed by our bug or configuration back to planned, attempts afresh; counts per channel.

    Rows refused for good by their recipient (or out of attempts) stay failed.
    """
    counts = await failed_by_bug(session, digest_id)
    statement = update(TABLE).where(TABLE.c.status == DeliveryStatus.FAILED,
                                    TABLE.c.failure == FailureKind.BUG)
    if digest_id is not None:
        statement = statement.where(TABLE.c.digest_id == digest_id)
    if counts:
        await session.execute(statement.values(status=DeliveryStatus.PLANNED, failure=None, attempts=0,
                                               claimed_at=None, lease_until=None))
    return counts


async def digests_with_work(session: AsyncSession, channels: Collection[str]) -> list[tuple[int, dt.date]]:
    """Published digests that still have rows to send on ``channels``, oldest first."""
    rows = await session.execute(
        select(Digest.id, Digest.date).where(Digest.published_at.is_not(None)).where(
            select(Delivery.id).join(Subscriber, Subscriber.id == Delivery.subscriber_id)
            .where(Delivery.digest_id == Digest.id, Delivery.status.in_(UNFINISHED),
                   Subscriber.channel.in_(list(channels))).exists()
        ).order_by(Digest.date)
    )
    return [(int(i), d) for i, d in rows.all()]


_RECORD_FIELDS = ("status", "attempts", "parts_sent", "parts_total", "last_error", "claimed_at",
                  "sent_at", "message_id", "lease_until", "resumed", "failure", "thread_id")


async def apply(session: AsyncSession, records: Sequence[Record]) -> None:
    """Write ``records`` (one bulk UPDATE by primary key) and the subscriber changes they carry."""
    if not records:
        return
    table = TABLE
    statement = update(table).where(table.c.id == bindparam("record_id")).values(
        {name: bindparam(name) for name in _RECORD_FIELDS})
    await session.execute(statement, [
        {"record_id": r.delivery_id, **{name: getattr(r, name) for name in _RECORD_FIELDS}} for r in records
    ])
    for record in records:
        if record.mark is None and record.new_address is None:
            continue
        now = record.sent_at or record.claimed_at or utcnow()
        if record.mark is not None:
            await mark(session, record.mark[0], record.mark[1], now)
        if record.new_address is not None:
            try:
                async with session.begin_nested():
                    await change_address(session, record.new_address[0], record.new_address[1], now)
            except DigestError as exc:  # the new address is taken or invalid: keep the old one
                log.warning("subscriber %s: address not changed: %s", record.new_address[0], exc)
