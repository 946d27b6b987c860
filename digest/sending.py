"""Send the claimed deliveries of one channel: claim, compose, send, retry, record.

    feeder ── claim ──► queue ──► c workers ── compose ──► channel.send ── TRANSIENT: backoff, again
       ▲                              │                           │
       └──────────── writer ◄─────────┴──── wait for the commit ◄─┘   (one transaction per batch)

Commit discipline: a worker takes its next delivery only after the outcome of
the current one is committed. The writer commits whatever outcomes are
waiting in one transaction (group commit), so commits are batched without
ever leaving more than ``c`` messages accepted by the channel but not yet
recorded: a crash duplicates at most the ``c`` messages in flight, each with
its own stable Message-ID, and the next run counts them (``resent``).
Claimed rows not yet started (the feeder keeps at most ``2c`` claimed and
unfinished) are reclaimed after the lease too, and counted as possible
duplicates although they never went: ``resent`` <= 2c per crash.

A FATAL verdict stops the run: no new sends, the rows not yet sent are put
back to planned (not counted as attempts), and :class:`DeliveryError` is raised.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from digest.channels import Message, Outcome, PushChannel, SendResult
from digest.db import SessionFactory
from digest.errors import DigestError
from digest.outbox import FAILED, MAX_ATTEMPTS, PLANNED, SENDING, SENT, SKIPPED, Claimed, Record, apply, claim

log = logging.getLogger(__name__)
Clock = Callable[[], dt.datetime]
_EXPIRED = dt.timedelta(seconds=1)  # how far past its end a handed-back lease is set


class DeliveryError(DigestError):
    """The channel refused the whole session (authentication, 5xx at connect, 401): the run stopped."""


@dataclass(frozen=True)
class SendOptions:
    """Retry policy and lease."""

    attempts_per_run: int = 3
    max_attempts: int = MAX_ATTEMPTS
    backoff: float = 1.0  # seconds before the first retry; doubles each time
    backoff_cap: float = 60.0
    lease: dt.timedelta = dt.timedelta(minutes=10)
    retry_later: dt.timedelta = dt.timedelta(minutes=10)  # a deferred row waits this long for its next run


@dataclass
class Tally:
    """What happened on one channel in this run."""

    planned: int = 0
    empty: int = 0
    sent: int = 0
    skipped: int = 0
    retried: int = 0
    deferred: int = 0
    failed: int = 0
    resent: int = 0
    rendered: int = 0
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def add(self, other: Tally) -> None:
        """Fold another tally (of the same channel) into this one."""
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)


class Writer:
    """The process's one writer: outcomes and claims waiting while a transaction runs share the next.

    Group commit: one transaction (one fsync) per batch, however many workers
    wait; a claim rides along with the outcomes instead of costing a commit.
    """

    def __init__(self, sessions: SessionFactory) -> None:
        self.sessions = sessions
        self._records: list[tuple[Record, asyncio.Future[None]]] = []
        self._claims: list[tuple[dict[str, Any], asyncio.Future[list[Claimed]]]] = []
        self._task: asyncio.Task[None] | None = None

    async def write(self, record: Record) -> None:
        """Return once ``record`` is committed."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._records.append((record, done))
        self._kick()
        await done

    async def claim(self, **request: Any) -> list[Claimed]:
        """``outbox.claim(**request)`` in the next transaction; return once committed."""
        done: asyncio.Future[list[Claimed]] = asyncio.get_running_loop().create_future()
        self._claims.append((request, done))
        self._kick()
        return await done

    def _kick(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._records or self._claims:
            records, self._records = self._records, []
            claims, self._claims = self._claims, []
            try:
                async with self.sessions.begin() as session:
                    await apply(session, [record for record, _ in records])
                    taken = [await claim(session, **request) for request, _ in claims]
            except Exception as exc:
                waiters: list[asyncio.Future[Any]] = [done for _, done in records]
                for waiter in waiters + [got for _, got in claims]:
                    waiter.set_exception(exc)
                continue
            for _, done in records:
                done.set_result(None)
            for (_, got), rows in zip(claims, taken, strict=True):
                got.set_result(rows)


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
        try:
            await self._feed(queue, started)
        except BaseException:
            self.stop.set()  # the queued rows go back, unsent
            raise
        finally:
            for _ in workers:
                queue.put_nowait(None)
            await asyncio.gather(*workers)
        if self.crashed is not None:
            raise self.crashed
        if self.fatal:
            raise DeliveryError(f"{self.name}: {self.fatal}")

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
            now = self.clock()
            stale = stale_checked is None or now - stale_checked >= self.options.lease / 4
            batch = await self.writer.claim(
                digest_id=self.digest_id, channels=[self.name], limit=free, now=now, stale=stale,
                lease=self.options.lease, planned_before=min(started, now - self.options.retry_later),
                exclude=frozenset(self._held))
            stale_checked = now if stale else stale_checked
            if not batch and not stale:
                stale_checked = None
                continue
            if not batch:
                return
            self._held.update(item.delivery_id for item in batch)
            await self.prepare(batch)
            for item in batch:
                queue.put_nowait(item)

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

    def _record(self, item: Claimed, status: str, attempts: int, parts_sent: int, mid: str | None, *,
                error: str | None = None, claimed_at: dt.datetime | None = None, total: int = 0,
                **extra: Any) -> Record:
        return Record(item.delivery_id, status, attempts, parts_sent, total, error, claimed_at,
                      message_id=mid, **extra)

    def _later(self, item: Claimed, wait: dt.timedelta | None) -> tuple[str, dt.datetime | None]:
        """(status, claimed_at) for a row going back: deferred (``wait``), or released (None).

        A deferred planned row keeps the time of its last try (claims skip it
        until ``retry_later`` has passed). A resumed row may have gone out
        before the crash: it stays ``sending`` with a lease that runs out after
        ``wait``, so whoever sends it at last still counts it as resent.
        """
        now = self.clock()
        if item.resumed:
            return SENDING, now - self.options.lease - _EXPIRED + (wait or dt.timedelta(0))
        return PLANNED, None if wait is None else now

    async def _put_back(self, item: Claimed, attempts: int, parts_sent: int, mid: str | None) -> None:
        """Release an unsent row (the run is stopping): not an attempt, claimable at once."""
        status, claimed_at = self._later(item, None)
        await self.writer.write(self._record(item, status, attempts, parts_sent, mid, claimed_at=claimed_at))

    async def _deliver(self, item: Claimed) -> None:
        if item.subscriber_status != "active":
            self.tally.skipped += 1
            why = f"subscriber {item.subscriber_status}"
            await self.writer.write(self._record(item, SKIPPED, item.attempts, item.parts_sent,
                                                 item.message_id, error=why, claimed_at=self.clock()))
            return
        try:
            message = self.compose(item)
        except Exception as exc:  # a rendering bug fails this delivery, never the run
            log.exception("composing delivery %s failed", item.delivery_id)
            bug = SendResult(Outcome.BUG, item.parts_sent, f"compose: {exc!r}"[:300])
            await self._finish(item, bug, item.attempts, None)
            return
        self.tally.rendered += 1
        await self._attempts(item, message)

    async def _attempts(self, item: Claimed, message: Message) -> None:
        attempts, start = item.attempts, item.parts_sent
        for n in range(self.options.attempts_per_run):
            if n and self.stop.is_set():
                return await self._put_back(item, attempts, start, message.message_id)
            self.tally.retried += int(n > 0)
            result = await self.channel.send(replace(message, start_part=start))
            start = max(start, result.parts_sent)
            if result.outcome is Outcome.FATAL:
                return await self._halt(item, message, result, start)
            attempts += 1
            if result.outcome is not Outcome.TRANSIENT or n + 1 == self.options.attempts_per_run:
                return await self._finish(item, replace(result, parts_sent=start), attempts, message)
            await self.writer.write(self._record(item, SENDING, attempts, start, message.message_id,
                                                 error=result.error, claimed_at=self.clock(),
                                                 total=len(message.parts)))
            await asyncio.sleep(self._backoff(n, result.retry_after))

    def _backoff(self, n: int, retry_after: float | None) -> float:
        delay = min(self.options.backoff * 2.0 ** n, self.options.backoff_cap)
        return max(delay, retry_after or 0.0)

    async def _halt(self, item: Claimed, message: Message, result: SendResult, start: int) -> None:
        if not self.fatal:
            self.fatal = result.error or "the session was refused"
            log.error("%s: stopping the run: %s", self.name, self.fatal)
        self.stop.set()
        await self._put_back(item, item.attempts, start, message.message_id)

    async def _finish(self, item: Claimed, result: SendResult, attempts: int,
                      message: Message | None) -> None:
        """Record the last outcome of this run for ``item`` and count it."""
        mid = message.message_id if message else item.message_id
        total, now = len(message.parts) if message else 0, self.clock()
        fields: dict[str, Any] = {"claimed_at": now, "total": total, "error": result.error}
        if result.outcome is Outcome.SENT:
            status = SENT
            fields.update(sent_at=now, error=None, new_address=self._moved(item, result))
            self.tally.sent += 1
            self.tally.resent += int(item.resumed)
        elif result.outcome is Outcome.TRANSIENT and attempts < self.options.max_attempts:
            status, fields["claimed_at"] = self._later(item, self.options.retry_later)
            self.tally.deferred += 1
        else:
            status = FAILED
            fields["mark"] = self._verdict(item, result)
            self.tally.failed += 1
        await self.writer.write(self._record(item, status, attempts, result.parts_sent, mid, **fields))

    def _verdict(self, item: Claimed, result: SendResult) -> tuple[int, str] | None:
        """The subscriber's new status after a failure: bounced/blocked on a permanent refusal."""
        if result.outcome is Outcome.BUG:
            log.error("%s delivery %s to subscriber %s failed (our bug): %s", self.name,
                      item.delivery_id, item.subscriber_id, result.error)
        if result.outcome is not Outcome.PERMANENT:
            return None
        return item.subscriber_id, "bounced" if self.name == "email" else "blocked"

    @staticmethod
    def _moved(item: Claimed, result: SendResult) -> tuple[int, str] | None:
        if result.new_address and result.new_address != item.address:
            return item.subscriber_id, result.new_address
        return None
