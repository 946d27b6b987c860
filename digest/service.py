"""``digest serve``: the web app, the chat bots and the daily schedule in one asyncio process.

On start the service catches up: when the latest closed window's digest is not
published yet, it runs the daily job for it once, under the ``catch-up`` run
lock (a second service started at the same time waits, then finds it
published). Then, at every DIGEST_SCHEDULE time (cron, in DIGEST_TIMEZONE,
read from the injected clock), it runs the job for the latest closed window.
The waiting goes through an injected ``sleep``, so a test fires a tick at once.

Stopping (``stop`` set, by SIGTERM or SIGINT in :func:`until_signal`): the
web server and the bots are told to finish, the publish runner's ``stop``
lets in-flight sends finish and releases the rest; a run still going after
``grace`` seconds is cancelled (its open transaction is rolled back, so
nothing stays half-recorded).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import html
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

from croniter import croniter

from digest.daily import DailyDeps, DailyReport, run_daily
from digest.deliver.channels import Message, Outcome, PushChannel
from digest.deliver.headers import header_block, mime_alternative
from digest.deliver.mailer import MailIdentity
from digest.deliver.sending import DeliveryError
from digest.domain.clock import Clock
from digest.domain.status import ChannelName
from digest.domain.window import latest_closed
from digest.render.report_text import STREAK, admin_text
from digest.store.db import SessionFactory
from digest.store.reports import failing_sources, is_published

log = logging.getLogger(__name__)
CATCH_UP_LOCK = "catch-up"
GRACE = 8.0  # seconds a run may take to stop before it is cancelled (SIGTERM: done within 10 s)
DISCORD_MAX = 2000  # characters of one Discord message
MAX_NAP = 60.0  # the schedule re-reads the clock at least this often
Sleep = Callable[[float], Awaitable[None]]
Task = Callable[[asyncio.Event], Coroutine[Any, Any, object]]


class Schedule:
    """A cron expression in a time zone: when the next run is due after a given instant."""

    def __init__(self, cron: str, timezone: str) -> None:
        self.cron, self.zone = cron, ZoneInfo(timezone)

    def next_after(self, now: dt.datetime) -> dt.datetime:
        """The first due time strictly after ``now`` (aware, UTC)."""
        due: dt.datetime = croniter(self.cron, now.astimezone(self.zone)).get_next(dt.datetime)
        return due.astimezone(dt.UTC)


async def nap(seconds: float, stop: asyncio.Event, sleep: Sleep) -> None:
    """Sleep ``seconds`` (through ``sleep``), or less when ``stop`` is set first."""
    waiter = asyncio.ensure_future(stop.wait())
    napping = asyncio.ensure_future(sleep(max(seconds, 0.0)))
    try:
        await asyncio.wait([waiter, napping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, napping):
            task.cancel()
        await asyncio.gather(waiter, napping, return_exceptions=True)


@dataclass
class Service:
    """The parts of ``digest serve``; each optional part is a coroutine awaited with ``stop``."""

    deps: DailyDeps
    schedule: Schedule
    lock: Callable[[str], AbstractAsyncContextManager[None]]
    clock: Clock
    stop: asyncio.Event
    parts: Sequence[tuple[str, Task]] = ()  # the web app and the bots
    scheduled: bool = True
    sleep: Sleep = asyncio.sleep
    grace: float = GRACE
    next_run: dt.datetime | None = field(default=None, init=False)

    def due(self) -> dt.datetime | None:
        """The next scheduled run (for /healthz), None when the schedule is off."""
        return self.next_run if self.scheduled else None

    async def run(self) -> None:
        """Run every part until ``stop``; then wait for them (a run up to ``grace`` seconds)."""
        tasks = [asyncio.create_task(self._guarded(name, part), name=name) for name, part in self.parts]
        if self.scheduled:
            self.next_run = self.schedule.next_after(self.clock())
            daily = self._guarded("schedule", lambda _: self.daily())
            tasks.append(asyncio.create_task(daily, name="schedule"))
        try:
            await self.stop.wait()
        finally:
            self.stop.set()
            await self._finish(tasks)

    async def _guarded(self, name: str, part: Task) -> None:
        """One part; its failure is logged (one line), the others go on."""
        try:
            await part(self.stop)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failing bot must not stop the web app or the schedule
            log.error("%s stopped: %s", name, exc)

    async def _finish(self, tasks: list[asyncio.Task[None]]) -> None:
        _, pending = await asyncio.wait(tasks, timeout=self.grace) if tasks else (set(), set())
        for task in pending:
            log.warning("%s did not stop within %.0f s; cancelling it", task.get_name(), self.grace)
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def daily(self) -> None:
        """Catch up, then run at every scheduled time until stopped."""
        await self.catch_up()
        while not self.stop.is_set():
            await self.tick()

    async def tick(self) -> DailyReport | None:
        """Wait for the next due time (None when stopped first), then run the job for the latest window.

        The due time was set before the catch-up (or the previous run), so a run that
        took past it is followed by the tick at once; the next is due after the clock.
        """
        due = self.next_run = self.next_run or self.schedule.next_after(self.clock())
        while (left := (due - self.clock()).total_seconds()) > 0:
            if self.stop.is_set():
                return None
            await nap(min(left, MAX_NAP), self.stop, self.sleep)
        if self.stop.is_set():
            return None
        self.next_run = self.schedule.next_after(max(due, self.clock()))
        log.info("scheduled run for %s", latest_closed(self.clock(), self.deps.build.timezone))
        return await run_daily(None, self.deps, "schedule")

    async def catch_up(self) -> DailyReport | None:
        """Build and publish the latest closed window once when it is not published (None if it was)."""
        date = latest_closed(self.clock(), self.deps.build.timezone)
        async with self.lock(CATCH_UP_LOCK):
            async with self.deps.sessions() as session:
                if await is_published(session, date):
                    log.info("catch-up: %s is published already", date)
                    return None
            log.warning("catch-up: %s is not published; running the daily job for it", date)
            return await run_daily(date, self.deps, "catch-up")


async def until_signal(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGINT or SIGTERM (the handlers stay until the loop ends)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread (tests)
            loop.add_signal_handler(sig, stop.set)


# -- the admin copy ------------------------------------------------------------

Send = Callable[[str, str, str], Awaitable[None]]  # (channel, address, text)


@dataclass(frozen=True)
class AdminCopies:
    """After each run: the report's text to every configured admin address, through the channels."""

    sessions: SessionFactory
    targets: Sequence[tuple[str, str]]  # (channel name, address)
    send: Send
    streak: int = STREAK

    async def __call__(self, report: DailyReport, trigger: str) -> None:
        """Send the copies; a failure is logged (one line), never raised: the run is over."""
        async with self.sessions() as session:
            failing = await failing_sources(session, self.streak)
        text = admin_text(report.as_json(), trigger, failing)
        for name, address in self.targets:
            try:
                await self.send(name, address, text)
            except Exception as exc:  # one bad admin channel must not hide the others
                log.error("the admin copy on %s could not be sent: %s", name, exc)


def admin_message(name: str, address: str, text: str, identity: MailIdentity, now: dt.datetime) -> Message:
    """The admin copy as channel ``name`` sends it: a plain mail, a Telegram HTML text, a Discord payload."""
    if name == ChannelName.EMAIL:
        stamp = hashlib.sha256(f"{address}\n{text}\n{now.isoformat()}".encode()).hexdigest()[:20]
        mid = f"<run-report-{stamp}@{identity.domain}>"
        head = header_block(identity.from_words(), to=address, subject=text.splitlines()[0], date=now,
                            mid=mid, extra=[("Auto-Submitted", "auto-generated")])
        body = head + mime_alternative(text, f"<pre>{html.escape(text)}</pre>")
        return Message(0, 0, address, (body,), mid)
    if name == ChannelName.TELEGRAM:
        return Message(0, 0, address, (f"<pre>{html.escape(text)}</pre>",))
    return Message(0, 0, address, ({"content": text[:DISCORD_MAX]},))


async def send_once(channel: PushChannel, message: Message) -> None:
    """Send ``message`` on ``channel`` and close it; DeliveryError unless it went out."""
    try:
        result = await channel.send(message)
    finally:
        await channel.aclose()
    if result.outcome is not Outcome.SENT:
        raise DeliveryError(result.error or result.outcome.value)
