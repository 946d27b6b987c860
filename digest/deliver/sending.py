"""Send the claimed deliveries of one channel: claim, compose, send, retry, record.

    feeder ── claim ──► queue ──► c workers ── compose ──► channel.send ── TRANSIENT: backoff, again
       ▲                              │                           │
       └──────────── writer ◄─────────┴──── wait for the commit ◄─┘   (one transaction per batch)

Commit discipline: a worker takes its next delivery only after the outcome of
the current one is committed. The writer (:mod:`digest.deliver.writer`)
commits whatever outcomes are waiting in one transaction (group commit), so commits are batched without
ever leaving more than ``c`` messages accepted by the channel but not yet
recorded: a crash duplicates at most the ``c`` messages in flight, each with
its own stable Message-ID, and the next run counts them (``resent``).
Claimed rows not yet started (the feeder keeps at most ``2c`` claimed and
unfinished) are reclaimed after the lease too, and counted as possible
duplicates although they never went: ``resent`` <= 2c per crash.

Leases are short (a minute) so a dead run's rows are free again soon; a
heartbeat renews the lease of every row the run holds (claimed, queued or in
flight) every ``heartbeat``, so a slow live sender never loses its rows.

Retries follow the one policy of :mod:`digest.deliver.retry` (``SendOptions.retry``).
The database going away (a restart, a failover) stops nothing at once: every
claim, render load, shared-rate take and outcome waits it out
(:func:`~digest.deliver.retry.through_outage`) for up to one lease, the time
after which its rows would be another worker's anyway; then the run stops with
one line. An outcome whose commit was cut off is written again (the same
values); a cut-off claim's rows are taken over after their lease (``resent``).
A FATAL verdict stops the run: no new sends, the rows not yet sent are put
back to planned (not counted as attempts), and :class:`DeliveryError` is raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, TypeVar

from digest import metrics
from digest.deliver.channels import Message, Outcome, PushChannel, SendResult
from digest.deliver.outbox import MAX_ATTEMPTS, Claimed, Record
from digest.deliver.retry import send_with_retry, through_outage
from digest.deliver.writer import Writer
from digest.domain.errors import DigestError
from digest.domain.ratelimit import Sleep
from digest.domain.retry import RetryPolicy
from digest.domain.status import ChannelName, DeliveryStatus, FailureKind, SubscriberStatus
from digest.store.db import is_disconnect

log = logging.getLogger(__name__)
Clock = Callable[[], dt.datetime]
T = TypeVar("T")


class DeliveryError(DigestError):
    """The channel refused the whole session (authentication, 5xx at connect, 401): the run stopped."""


class ComposeError(Exception):
    """A message could not be composed; ``logged`` when the traceback was logged already (once per group)."""

    def __init__(self, reason: str, *, logged: bool = False) -> None:
        super().__init__(reason)
        self.logged = logged


def traceback_for(cause: BaseException | None) -> BaseException | None:
    """What to log with a one-line failure: its traceback only with -v, and a group's never twice."""
    if cause is None or not log.isEnabledFor(logging.INFO):
        return None
    return None if isinstance(cause, ComposeError) and cause.logged else cause


@dataclass(frozen=True)
class SendOptions:
    """Retry policy, lease and heartbeat."""

    attempts_per_run: int = 3
    max_attempts: int = MAX_ATTEMPTS
    backoff: float = 1.0  # seconds before the first retry; doubles each time
    backoff_cap: float = 60.0
    lease: dt.timedelta = dt.timedelta(seconds=60)
    heartbeat: dt.timedelta = dt.timedelta(seconds=15)  # how often the lease of held rows is renewed
    retry_later: dt.timedelta = dt.timedelta(minutes=10)  # a deferred row waits this long for its next run

    @property
    def retry(self) -> RetryPolicy:
        """The tries of one run and the waits between them: the one policy every send follows."""
        return RetryPolicy(self.attempts_per_run, self.backoff, self.backoff_cap)


@dataclass
class Tally:
    """What happened on one channel in this run.

    ``held``/``held_until``: rows under another run's unexpired lease at the
    end of the run, and when the last of them falls due. ``failed_bug``: the
    part of ``failed`` that is our bug or configuration (``--retry-failed``
    sends them again); ``requeued``: bug-failed rows put back by this run.
    """

    planned: int = 0
    empty: int = 0
    sent: int = 0
    skipped: int = 0
    retried: int = 0
    deferred: int = 0
    held: int = 0
    failed: int = 0
    resent: int = 0
    rendered: int = 0
    failed_bug: int = 0
    requeued: int = 0
    held_until: dt.datetime | None = None
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["held_until"] = self.held_until.isoformat() if self.held_until else None
        return data

    def add(self, other: Tally) -> None:
        """Fold another tally into this one: counts add up, the latest ``held_until`` wins."""
        for item in fields(self):
            mine, theirs = getattr(self, item.name), getattr(other, item.name)
            if item.name == "held_until":
                setattr(self, item.name, max((t for t in (mine, theirs) if t is not None), default=None))
            elif item.name == "notes":
                mine.extend(note for note in theirs if note not in mine)
            else:
                setattr(self, item.name, mine + theirs)


Compose = Callable[[Claimed], Message]
Prepare = Callable[[list[Claimed]], Awaitable[None]]
Progress = Callable[[str, Tally], None]


@dataclass
class Dispatch:
    """Drain the claimable rows of one channel (optionally of one digest)."""

    channel: PushChannel
    name: str
    prepare: Prepare
    compose: Compose
    writer: Writer
    clock: Clock
    options: SendOptions
    tally: Tally
    stop: asyncio.Event
    digest_id: int | None = None
    progress: Progress | None = None
    sleep: Sleep = asyncio.sleep  # every wait of the sender (backoff, heartbeat): tests pass their own
    fatal: str | None = None
    crashed: BaseException | None = None
    _held: set[int] = field(default_factory=set)
    _room: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def concurrency(self) -> int:
        return max(1, int(getattr(self.channel, "concurrency", 4)))

    async def run(self) -> None:
        """Send until nothing is claimable; raise DeliveryError on a FATAL verdict."""
        started = self.clock()
        queue: asyncio.Queue[Claimed | None] = asyncio.Queue()
        workers = [asyncio.create_task(self._work(queue)) for _ in range(self.concurrency)]
        heartbeat = asyncio.create_task(self._heartbeat())
        try:
            await self._feed(queue, started)
        except BaseException:
            self.stop.set()  # the queued rows go back, unsent
            raise
        finally:
            for _ in workers:
                queue.put_nowait(None)
            await asyncio.gather(*workers)
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
        if self.crashed is not None:
            raise self.crashed
        if self.fatal:
            raise DeliveryError(f"{self.name}: {self.fatal}")

    async def _heartbeat(self) -> None:
        """Every ``heartbeat``: push the lease of every row this run holds to now + lease."""
        period = self.options.heartbeat.total_seconds()
        while True:
            await self.sleep(period)
            if not self._held:
                continue
            try:
                await self.writer.renew(frozenset(self._held), self.clock() + self.options.lease)
            except Exception as exc:  # the database hiccupped: the next beat tries again
                log.warning("%s: renewing the lease of %d deliveries failed: %s", self.name,
                            len(self._held), exc)

    async def _feed(self, queue: asyncio.Queue[Claimed | None], started: dt.datetime) -> None:
        """Keep at most 2c rows claimed and unfinished, claiming c at a time.

        Rows of dead processes are looked for at the start, every quarter lease,
        and before giving up; planned rows at every claim.
        """
        stale_checked = None
        while not self.stop.is_set():
            free = 2 * self.concurrency - len(self._held)
            if free < self.concurrency:
                self._room.clear()
                await self._room.wait()
                continue
            stale = stale_checked is None or self.clock() - stale_checked >= self.options.lease / 4
            now, batch = await self._steady("claiming deliveries", functools.partial(
                self._claim, started, free, stale))
            stale_checked = now if stale else stale_checked
            if not batch and not stale:
                stale_checked = None
                continue
            if not batch:
                return
            self._held.update(item.delivery_id for item in batch)
            await self._steady("loading the digest", functools.partial(self.prepare, batch))
            for item in batch:
                queue.put_nowait(item)

    async def _claim(self, started: dt.datetime, free: int, stale: bool) -> tuple[dt.datetime, list[Claimed]]:
        """Claim up to ``free`` rows as of now (a claim tried again after an outage is as of then)."""
        now = self.clock()
        return now, await self.writer.claim(
            digest_id=self.digest_id, channels=[self.name], limit=free, now=now, stale=stale,
            lease=self.options.lease, planned_before=min(started, now - self.options.retry_later),
            exclude=frozenset(self._held))

    async def _work(self, queue: asyncio.Queue[Claimed | None]) -> None:
        while (item := await queue.get()) is not None:
            try:
                if self.stop.is_set():
                    await self._put_back(item, item.attempts, item.parts_sent, item.message_id)
                else:
                    await self._deliver(item)
            except Exception as exc:  # the database failed: stop, and let run() raise it
                self.crashed = self.crashed or exc
                self.stop.set()
            finally:
                self._held.discard(item.delivery_id)
                self._room.set()
                if self.progress:
                    self.progress(self.name, self.tally)

    async def _steady(self, what: str, step: Callable[[], Awaitable[T]]) -> T:
        """A database step that waits out a lost connection, for up to one lease (then StorageError)."""
        return await through_outage(step, lost=is_disconnect, patience=self.options.lease.total_seconds(),
                                    sleep=self.sleep, what=f"{self.name}: {what}")

    async def _write(self, record: Record) -> None:
        """Commit ``record`` (again, after a lost connection: the update is the same)."""
        await self._steady("recording a delivery", lambda: self.writer.write(record))

    def _record(self, item: Claimed, status: DeliveryStatus, attempts: int, parts_sent: int,
                mid: str | None, *, error: str | None = None, claimed_at: dt.datetime | None = None,
                total: int = 0, **extra: Any) -> Record:
        """The row's new state; a resumed row keeps its flag, so whoever sends it at last counts it."""
        extra.setdefault("thread_id", item.thread_id)
        return Record(item.delivery_id, status, attempts, parts_sent, total, error, claimed_at,
                      message_id=mid, resumed=item.resumed, **extra)

    async def _put_back(self, item: Claimed, attempts: int, parts_sent: int, mid: str | None) -> None:
        """Release an unsent row (the run is stopping): not an attempt, claimable at once."""
        await self._write(self._record(item, DeliveryStatus.PLANNED, attempts, parts_sent, mid))

    async def _deliver(self, item: Claimed) -> None:
        if item.subscriber_status != SubscriberStatus.ACTIVE:
            self.tally.skipped += 1
            why = f"subscriber {item.subscriber_status}"
            await self._write(self._record(item, DeliveryStatus.SKIPPED, item.attempts, item.parts_sent,
                                           item.message_id, error=why, claimed_at=self.clock()))
            return
        try:
            message = self.compose(item)
        except Exception as exc:  # a rendering bug fails this delivery, never the run
            reason = str(exc) if isinstance(exc, ComposeError) else repr(exc)
            bug = SendResult(Outcome.BUG, item.parts_sent, f"compose: {reason}"[:300])
            await self._finish(item, bug, item.attempts, None, cause=exc)
            return
        self.tally.rendered += 1
        await self._attempts(item, message)

    async def _attempts(self, item: Claimed, message: Message) -> None:
        """Send with the retry policy, recording each transient try; then finish, halt or put back."""
        start, thread = item.parts_sent, message.thread_id

        async def send() -> SendResult:
            nonlocal start, thread
            # The database is touched before a part goes (a shared rate take): a lost connection
            # there is waited out and the part sent then.
            result = await self._steady("waiting for the rate", lambda: metrics.active().timed(
                self.channel.name, self.channel.send(replace(message, start_part=start, thread_id=thread))))
            start, thread = max(start, result.parts_sent), result.thread_id or thread
            return result

        async def between(result: SendResult, sends: int) -> None:
            metrics.active().waited(self.channel.name, result.retry_after)
            now = self.clock()
            await self._write(self._record(
                item, DeliveryStatus.SENDING, item.attempts + sends, start, message.message_id,
                error=result.error, claimed_at=now, total=len(message.parts),
                lease_until=now + self.options.lease, thread_id=thread))

        tries = await send_with_retry(send, self.options.retry, self.sleep, between=between,
                                      stopped=self.stop.is_set)
        self.tally.retried += tries.sends - 1
        item = replace(item, thread_id=thread)  # the day's thread stays with the row, whatever happens
        if tries.stopped:
            return await self._put_back(item, item.attempts + tries.sends, start, message.message_id)
        if tries.result.outcome is Outcome.FATAL:
            return await self._halt(item, message, tries.result, start)
        attempts = item.attempts + tries.sends
        await self._finish(item, replace(tries.result, parts_sent=start), attempts, message)

    async def _halt(self, item: Claimed, message: Message, result: SendResult, start: int) -> None:
        if not self.fatal:
            self.fatal = result.error or "the session was refused"
            log.error("%s: stopping the run: %s", self.name, self.fatal)
        self.stop.set()
        await self._put_back(item, item.attempts, start, message.message_id)

    async def _finish(self, item: Claimed, result: SendResult, attempts: int,
                      message: Message | None, *, cause: BaseException | None = None) -> None:
        """Record the last outcome of this run for ``item`` and count it.

        A transient outcome defers the row (planned, claimed_at = now: claims
        skip it until ``retry_later`` has passed) until MAX_ATTEMPTS in all.
        """
        mid = message.message_id if message else item.message_id
        total, now = len(message.parts) if message else 0, self.clock()
        values: dict[str, Any] = {"claimed_at": now, "total": total, "error": result.error}
        if result.outcome is Outcome.SENT:
            status = DeliveryStatus.SENT
            values.update(sent_at=now, error=None, new_address=self._moved(item, result))
            self.tally.sent += 1
            self.tally.resent += int(item.resumed)
        elif result.outcome is Outcome.TRANSIENT and attempts < self.options.max_attempts:
            status = DeliveryStatus.PLANNED
            self.tally.deferred += 1
        else:
            status = DeliveryStatus.FAILED
            values.update(failure=self._failure(item, result, cause), mark=self._verdict(item, result))
            self.tally.failed += 1
        await self._write(self._record(item, status, attempts, result.parts_sent, mid, **values))
        metrics.active().delivered(self.channel.name, status)

    def _failure(self, item: Claimed, result: SendResult, cause: BaseException | None) -> FailureKind:
        """Why the row failed; a bug is counted and logged in one line (its traceback only with -v)."""
        if result.outcome is Outcome.PERMANENT:
            return FailureKind.PERMANENT
        if result.outcome is not Outcome.BUG:
            return FailureKind.EXHAUSTED
        self.tally.failed_bug += 1
        log.error("%s delivery %s to subscriber %s failed (our bug or configuration): %s", self.name,
                  item.delivery_id, item.subscriber_id, result.error, exc_info=traceback_for(cause))
        return FailureKind.BUG

    def _verdict(self, item: Claimed, result: SendResult) -> tuple[int, SubscriberStatus] | None:
        """The subscriber's new status after a failure: bounced/blocked on a permanent refusal."""
        if result.outcome is not Outcome.PERMANENT:
            return None
        email = self.name == ChannelName.EMAIL
        return item.subscriber_id, SubscriberStatus.BOUNCED if email else SubscriberStatus.BLOCKED

    @staticmethod
    def _moved(item: Claimed, result: SendResult) -> tuple[int, str] | None:
        if result.new_address and result.new_address != item.address:
            return item.subscriber_id, result.new_address
        return None
