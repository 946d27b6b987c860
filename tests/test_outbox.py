"""Outbox bookkeeping on SQLite and PostgreSQL: plan once, claim, lease, record, share between workers."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from digest.deliver.outbox import (
    Held,
    Record,
    apply,
    claim,
    digests_with_work,
    held_rows,
    pending_counts,
    renew,
    requeue_failed,
)
from digest.deliver.planning import EventFacts, KeptCache, plan_deliveries
from digest.deliver.publish import PublishReport
from digest.domain.status import DeliveryStatus, FailureKind, SubscriberStatus
from digest.domain.views import filter_view
from digest.store.db import SessionFactory, open_database
from digest.store.models import Delivery, Digest, Subscriber
from tests.conftest import build_event, build_view
from tests.publish_runner import NOW, RecordingChannel, add_subscriber, build_day, make_runner

LEASE = dt.timedelta(minutes=10)


def _mid(channel: str, sid: int) -> str | None:
    return f"<m-{sid}@x>" if channel == "email" else None


async def _digest(sessions: SessionFactory, digest_id: int) -> Digest:
    async with sessions() as session:
        return await session.get_one(Digest, digest_id)


async def _rows(sessions: SessionFactory) -> list[Delivery]:
    async with sessions() as session:
        return list((await session.scalars(select(Delivery).order_by(Delivery.id))).all())


def test_kept_events_match_the_filter_semantics() -> None:
    events = [EventFacts(1, frozenset({"a", "b"}), 50.0), EventFacts(2, frozenset({"c"}), 30.0)]
    kept = KeptCache(events)
    assert kept({"b", "z"}, 0) == (1,)
    assert kept({"a", "c"}, 40) == (1,)
    assert kept({"a", "c"}, 30) == (1, 2)
    assert kept({"z"}, 0) == () == kept(set(), 0)


_LAYERS = ("tensor_ir", "kernel_codegen", "runtime", "optimization")
_SCORES = st.sampled_from([0.0, 30.0, 49.5, 50.0, 80.0, 100.0])
_EVENTS = st.lists(st.tuples(st.sets(st.sampled_from(_LAYERS)), _SCORES), max_size=6)


@settings(max_examples=60, deadline=None)
@given(events=_EVENTS, layers=st.sets(st.sampled_from(_LAYERS)),
       min_score=_SCORES)
def test_planning_keeps_what_the_view_filter_keeps(events: list[tuple[set[str], float]], layers: set[str],
                                                   min_score: float) -> None:
    """The plan's filter (KeptCache over the outbox's facts) and the readers' (filter_view) agree."""
    views = tuple(build_event(n, layers=tuple(sorted(ls)), score=score)
                  for n, (ls, score) in enumerate(events))
    facts = [EventFacts(e.id, frozenset(e.layers), e.score) for e in views]
    shown = filter_view(build_view(views), layers, min_score).events
    assert KeptCache(facts)(layers, min_score) == tuple(e.id for e in shown)


async def test_planning_happens_once_for_the_subscribers_active_then(sessions: SessionFactory) -> None:
    digest_id = await build_day(sessions)
    everyone = await add_subscriber(sessions, "all@example.com")
    chat = await add_subscriber(sessions, "12345", channel="telegram")
    await add_subscriber(sessions, "none@example.com", layers=["distributed"])
    await add_subscriber(sessions, "high@example.com", min_score=99)
    await add_subscriber(sessions, "left@example.com", status="unsubscribed")
    async with sessions.begin() as session:
        plan = await plan_deliveries(session, await _digest(sessions, digest_id), NOW, message_id=_mid)
    assert plan.first and plan.planned == {"email": 1, "telegram": 1} and plan.empty == {"email": 2}
    rows = await _rows(sessions)
    assert [(r.subscriber_id, r.status, r.message_id) for r in rows] == [
        (everyone, DeliveryStatus.PLANNED, f"<m-{everyone}@x>"), (chat, DeliveryStatus.PLANNED, None)]
    assert (await _digest(sessions, digest_id)).published_at == NOW
    await add_subscriber(sessions, "late@example.com")
    async with sessions.begin() as session:
        again = await plan_deliveries(session, await _digest(sessions, digest_id), NOW, message_id=_mid)
    assert not again.first and len(await _rows(sessions)) == 2


async def test_dry_run_planning_writes_nothing(sessions: SessionFactory) -> None:
    digest_id = await build_day(sessions)
    await add_subscriber(sessions, "all@example.com")
    async with sessions.begin() as session:
        plan = await plan_deliveries(session, await _digest(sessions, digest_id), NOW, message_id=_mid,
                                     dry_run=True)
    assert plan.first and plan.planned == {"email": 1} and len(plan.audience) == 1
    assert await _rows(sessions) == [] and (await _digest(sessions, digest_id)).published_at is None


async def test_concurrent_planners_plan_each_row_once(db_url: str) -> None:
    async with open_database(db_url) as sessions:
        digest_id = await build_day(sessions)
        for n in range(40):
            await add_subscriber(sessions, f"r{n}@example.com")

        async def planner() -> bool:
            async with sessions.begin() as session:
                digest = await session.get_one(Digest, digest_id)
                return (await plan_deliveries(session, digest, NOW, message_id=_mid)).first

        firsts = await asyncio.gather(*(planner() for _ in range(4)))
        rows = await _rows(sessions)
    assert sorted(firsts) == [False, False, False, True]
    assert len(rows) == 40 == len({r.subscriber_id for r in rows})


async def _claim(sessions: SessionFactory, now: dt.datetime, *, limit: int = 10,
                 started: dt.datetime | None = None, exclude: tuple[int, ...] = ()) -> list[int]:
    async with sessions.begin() as session:
        got = await claim(session, digest_id=None, channels=["email"], limit=limit, now=now, lease=LEASE,
                          planned_before=started or now, exclude=exclude)
    return [c.delivery_id for c in got]


async def _planned(sessions: SessionFactory, n: int) -> int:
    digest_id = await build_day(sessions)
    for i in range(n):
        await add_subscriber(sessions, f"r{i}@example.com")
    async with sessions.begin() as session:
        await plan_deliveries(session, await _digest(sessions, digest_id), NOW, message_id=_mid)
    return digest_id


async def test_claims_respect_limit_lease_and_exclusions(sessions: SessionFactory) -> None:
    await _planned(sessions, 5)
    assert await _claim(sessions, NOW, limit=2) == [1, 2]
    assert await _claim(sessions, NOW + LEASE - dt.timedelta(seconds=1), limit=1) == [3]
    async with sessions() as session:
        assert await pending_counts(session) == {"email": 5}
    later = NOW + LEASE + dt.timedelta(seconds=30)

    async def take(limit: int, exclude: tuple[int, ...] = ()) -> list[tuple[int, bool]]:
        async with sessions.begin() as session:
            got = await claim(session, digest_id=None, channels=["email"], limit=limit, now=later,
                              lease=LEASE, planned_before=later, exclude=exclude)
        return [(c.delivery_id, c.resumed) for c in got]

    assert await take(3, exclude=(1,)) == [(2, True), (4, False), (5, False)]
    assert await take(10) == [(1, True)]  # 3's lease still holds
    assert {r.status for r in await _rows(sessions)} == {DeliveryStatus.SENDING}


async def test_rows_handled_in_this_run_are_not_claimed_again(sessions: SessionFactory) -> None:
    await _planned(sessions, 1)
    (did,) = await _claim(sessions, NOW)
    deferred = Record(did, DeliveryStatus.PLANNED, 1, 0, 1, "451 later",
                      claimed_at=NOW + dt.timedelta(seconds=5), message_id="<m-1@x>")
    async with sessions.begin() as session:
        await apply(session, [deferred])
    assert await _claim(sessions, NOW + dt.timedelta(seconds=6), started=NOW) == []
    assert await _claim(sessions, NOW + dt.timedelta(hours=1)) == [did]


async def test_records_and_refusals_are_written(sessions: SessionFactory) -> None:
    await _planned(sessions, 2)
    a, b = await _claim(sessions, NOW)
    async with sessions.begin() as session:
        await apply(session, [
            Record(a, DeliveryStatus.SENT, 1, 1, 1, None, NOW, sent_at=NOW, message_id="<m-1@x>"),
            Record(b, DeliveryStatus.FAILED, 1, 0, 1, "550 gone", NOW, message_id="<m-2@x>",
                   mark=(2, SubscriberStatus.BOUNCED)),
        ])
    rows = await _rows(sessions)
    assert [(r.status, r.parts_sent, r.attempts, r.sent_at, r.last_error) for r in rows] == [
        (DeliveryStatus.SENT, 1, 1, NOW, None), (DeliveryStatus.FAILED, 0, 1, None, "550 gone")]
    async with sessions() as session:
        assert (await session.get_one(Subscriber, 2)).status == "bounced"
        assert (await session.get_one(Subscriber, 1)).status == "active"
        assert await digests_with_work(session, ["email"]) == []


async def test_digests_with_work_lists_published_digests_with_rows(sessions: SessionFactory) -> None:
    digest_id = await _planned(sessions, 1)
    async with sessions() as session:
        found = await digests_with_work(session, ["email"])
        assert await digests_with_work(session, ["telegram"]) == []
    assert [d for d, _ in found] == [digest_id]


@pytest.mark.postgres
async def test_two_workers_on_postgres_never_send_a_delivery_twice(postgres_url: str) -> None:
    async with open_database(postgres_url) as sessions:
        digest_id = await build_day(sessions)
        for n in range(60):
            await add_subscriber(sessions, f"r{n}@example.com")
        async with sessions.begin() as session:
            await plan_deliveries(session, await session.get_one(Digest, digest_id), NOW, message_id=_mid)
        channels = [RecordingChannel("email", concurrency=3, delay=0.01) for _ in range(2)]
        runners = [make_runner(sessions, {"email": ch}) for ch in channels]
        reports = [PublishReport(None) for _ in runners]
        await asyncio.gather(*(r.drain(rep, digest_id) for r, rep in zip(runners, reports, strict=True)))
        async with sessions() as session:
            statuses = Counter((await session.scalars(select(Delivery.status))).all())
            attempts = await session.scalar(select(func.sum(Delivery.attempts)))
    sent = Counter(m.delivery_id for ch in channels for m in ch.sent)
    assert len(sent) == 60 and set(sent.values()) == {1}
    assert all(ch.sent for ch in channels)  # both workers took a share
    assert statuses == {DeliveryStatus.SENT: 60} and attempts == 60
    assert sum(rep.channels["email"].sent for rep in reports) == 60


async def test_a_lease_holds_until_it_ends_and_a_heartbeat_extends_it(sessions: SessionFactory) -> None:
    await _planned(sessions, 2)
    lease = dt.timedelta(seconds=60)

    async def take(now: dt.datetime) -> list[tuple[int, bool]]:
        async with sessions.begin() as session:
            got = await claim(session, digest_id=None, channels=["email"], limit=10, now=now, lease=lease,
                              planned_before=now)
        return [(c.delivery_id, c.resumed) for c in got]

    async def held(now: dt.datetime) -> dict[str, Held]:
        async with sessions() as session:
            return await held_rows(session, now)

    assert await take(NOW) == [(1, False), (2, False)]  # a run claims both, then dies
    almost = NOW + lease - dt.timedelta(seconds=1)
    assert await take(almost) == [] and await held(almost) == {"email": Held(2, NOW + lease)}
    async with sessions.begin() as session:  # a live run's heartbeat: only row 1 is still its
        assert await renew(session, [1], almost + lease) == 1
    assert await take(NOW + lease) == [(2, True)]  # the dead lease ended: free, flagged resumed
    assert await held(NOW + lease) == {"email": Held(2, NOW + 2 * lease)}  # row 1, and row 2's new claim
    assert await take(almost + lease - dt.timedelta(seconds=1)) == []
    assert await take(almost + lease) == [(1, True)]


async def test_requeue_failed_puts_back_only_our_bugs(sessions: SessionFactory) -> None:
    digest_id = await _planned(sessions, 4)
    a, b, c, d = await _claim(sessions, NOW)
    async with sessions.begin() as session:
        await apply(session, [
            Record(a, DeliveryStatus.FAILED, 1, 0, 1, "compose: ValueError()", NOW, failure=FailureKind.BUG),
            Record(b, DeliveryStatus.FAILED, 1, 0, 1, "550 gone", NOW, failure=FailureKind.PERMANENT,
                   mark=(2, SubscriberStatus.BOUNCED)),
            Record(c, DeliveryStatus.FAILED, 10, 0, 1, "451 later", NOW, failure=FailureKind.EXHAUSTED),
            Record(d, DeliveryStatus.SENT, 1, 1, 1, None, NOW, sent_at=NOW),
        ])
    async with sessions.begin() as session:
        assert await requeue_failed(session, digest_id + 1) == {}  # another digest: nothing
        assert await requeue_failed(session, digest_id) == {"email": 1}
    rows = await _rows(sessions)
    assert [(r.status, r.failure, r.attempts) for r in rows] == [
        (DeliveryStatus.PLANNED, None, 0), (DeliveryStatus.FAILED, FailureKind.PERMANENT, 1),
        (DeliveryStatus.FAILED, FailureKind.EXHAUSTED, 10), (DeliveryStatus.SENT, None, 1)]
    assert await _claim(sessions, NOW) == [a]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(leases=st.lists(st.integers(min_value=-120, max_value=120), min_size=1, max_size=6),
       at=st.integers(min_value=-60, max_value=60))
async def test_every_sending_row_is_either_held_or_claimable(
        sqlite_sessions: SessionFactory, leases: list[int], at: int) -> None:
    sessions = sqlite_sessions  # one database for every example: planned once, its rows reset each time
    async with sessions() as session:
        planned = await session.scalar(select(func.count()).select_from(Delivery))
    if not planned:
        await _planned(sessions, 6)
    now = NOW + dt.timedelta(seconds=at)
    async with sessions.begin() as session:  # rows 1..n sending under leases ending NOW + each offset
        for row in (await session.scalars(select(Delivery).order_by(Delivery.id))).all():
            offset = leases[row.id - 1] if row.id <= len(leases) else None
            row.status = DeliveryStatus.PLANNED if offset is None else DeliveryStatus.SENDING
            row.claimed_at = None if offset is None else NOW - dt.timedelta(minutes=5)
            row.lease_until = None if offset is None else NOW + dt.timedelta(seconds=offset)
    async with sessions() as session:
        held = await held_rows(session, now)
    expected_held = [o for o in leases if NOW + dt.timedelta(seconds=o) > now]
    assert held.get("email", Held(0, now)).rows == len(expected_held)
    if expected_held:
        assert held["email"].until == NOW + dt.timedelta(seconds=max(expected_held))
    async with sessions.begin() as session:
        taken = await claim(session, digest_id=None, channels=["email"], limit=100, now=now, lease=LEASE,
                            planned_before=now)
    stale = {i + 1 for i, o in enumerate(leases) if NOW + dt.timedelta(seconds=o) <= now}
    assert {c.delivery_id for c in taken if c.resumed} == stale
    assert len(taken) == 6 - len(expected_held)
