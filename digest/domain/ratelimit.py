"""The one rate-limit shape: sliding windows and an even pace, on an injected clock and sleep.

A :class:`Window` allows at most ``limit`` events in any ``period`` (a sliding
log of the last ``limit``); :class:`Limiter` waits until one more event fits
its windows and its pace (one start every ``interval``), then counts it. The
Telegram channel (per chat and overall) and the SMTP channel (messages per
second) are made of these. Time is seconds on any origin:
tests pass a fake clock and a sleep that moves it, so nothing depends on how
fast the machine is. Past one process, the same limits are token buckets
(:class:`Rate`) whose state is pluggable (:class:`Buckets`: in memory, or the
database's ``rate_bucket`` table that every worker sees), kept by a
:class:`SharedLimiter`; the subscribe form's throttle takes from such buckets
and refuses instead of waiting.

    acquire(*also) ─► wait for ``also`` (a caller's own windows) ─► [lock] wait for the windows
                      ─► wait for the paced slot ─► count the event in every window
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

Clock = Callable[[], float]
MIN_WAIT = 1e-3  # seconds: the shortest wait a refused take asks for
Sleep = Callable[[float], Awaitable[None]]


class Window:
    """At most ``limit`` events in any ``period`` seconds (a sliding log of the last ``limit``)."""

    def __init__(self, limit: int, period: float) -> None:
        if limit < 1 or period <= 0:
            raise ValueError("a window needs a limit of at least 1 and a positive period")
        self.limit = limit
        self.period = period
        self.times: deque[float] = deque(maxlen=limit)

    def wait(self, now: float) -> float:
        """Seconds until one more event fits (0 when it fits now)."""
        if len(self.times) < self.limit:
            return 0.0
        return max(0.0, self.times[0] + self.period - now)

    def take(self, now: float) -> None:
        """Record an event at ``now``."""
        self.times.append(now)

    def idle_since(self, now: float) -> bool:
        """True when nothing recorded still counts."""
        return not self.times or self.times[-1] + self.period <= now


def longest_wait(windows: Iterable[Window], now: float) -> float:
    """Seconds until one more event fits every window."""
    return max((w.wait(now) for w in windows), default=0.0)


class Limiter:
    """Waits until one more event keeps every window and the pace, then counts it (FIFO).

    ``interval`` spaces starts evenly (0: no pace): a burst would queue in a
    connection pool and arrive bunched, which is how a window limit gets
    overrun at the far end. The next slot follows the previous slot's
    schedule, not its (late) wake-up, so the pace does not drift.
    """

    def __init__(self, windows: Iterable[Window] = (), interval: float = 0.0, *,
                 clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.windows = tuple(windows)
        self.interval = interval
        self.clock = clock
        self.sleep = sleep
        self._next = -float("inf")
        self._lock = asyncio.Lock()

    async def acquire(self, *also: Window) -> float:
        """Return (the time counted) when one more event fits ``also``, the windows and the pace.

        ``also`` are the caller's own windows (one chat's), waited for before
        the shared lock so that one key's wait holds up no other key; the
        caller keeps them FIFO (one acquire per key at a time).
        """
        await self.wait_for(lambda now: longest_wait(also, now))
        async with self._lock:
            await self.wait_for(lambda now: longest_wait(self.windows, now))
            slot = max(self._next, self.clock())
            await self.wait_for(lambda now: slot - now)
            self._next = slot + self.interval
            now = self.clock()
            for window in (*self.windows, *also):
                window.take(now)
        return now

    async def wait_for(self, delay: Callable[[float], float]) -> None:
        """Sleep until ``delay(now)`` is no longer positive."""
        while (pause := delay(self.clock())) > 0:
            await self.sleep(pause)


def per_second(rate: float, *, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> Limiter:
    """At most ``rate`` starts per second, evenly spaced; 0 means no limit."""
    return Limiter(interval=1.0 / rate if rate > 0 else 0.0, clock=clock, sleep=sleep)


# -- token buckets whose state may live outside the process ------------------------------------------

@dataclass(frozen=True)
class Rate:
    """One token bucket: ``capacity`` tokens at most, ``per_second`` back; ``key`` names its state.

    In any ``W`` seconds it lets at most ``capacity + per_second * W`` events through, so a
    capacity of 1 is an even pace of one event every ``1 / per_second`` seconds. A take may
    reserve a token that comes within ``ahead`` seconds (the bucket goes below zero by as
    much) and waits for it: the next slot is booked before it comes, so a take's latency
    (a database round trip) is not lost from the pace.
    """

    key: str
    per_second: float
    capacity: float = 1.0
    ahead: float = 0.1

    @property
    def floor(self) -> float:
        """The fewest tokens a take may leave: a debt of ``ahead`` seconds of refill."""
        return -self.per_second * self.ahead


@dataclass(frozen=True)
class Take:
    """One try at a token: ``taken`` or not, and ``wait``: until the token is there (taken: go then)."""

    taken: bool
    wait: float
    at: dt.datetime  # the bucket's time of the try

    @property
    def slot(self) -> dt.datetime:
        """When the event may happen (a taken token's time)."""
        return self.at + dt.timedelta(seconds=self.wait)


class Buckets(Protocol):
    """Token buckets' state: in this process (:class:`MemoryBuckets`) or a database every process sees."""

    async def take(self, rate: Rate) -> Take:
        """Take (or book) one token of ``rate.key`` if there is one (atomically), else say how long until."""
        ...

    async def wait(self, rate: Rate) -> float:
        """Seconds until ``rate.key`` has a token (0: now); takes nothing."""
        ...


def refill(rate: Rate, tokens: float, updated_at: dt.datetime, now: dt.datetime) -> float:
    """The tokens a bucket holds at ``now`` (a clock behind ``updated_at`` adds nothing)."""
    elapsed = max(0.0, (now - updated_at).total_seconds())
    return min(rate.capacity, tokens + rate.per_second * elapsed)


def until_one(rate: Rate, tokens: float) -> float:
    """Seconds until a bucket holding ``tokens`` holds one (0: it does)."""
    return max(0.0, (1.0 - tokens) / rate.per_second)


def taken(rate: Rate, left: float, at: dt.datetime) -> Take:
    """A take that left ``left`` tokens: below zero, it waits for its booked token."""
    return Take(True, max(0.0, -left / rate.per_second), at)


def refused(rate: Rate, tokens: float, at: dt.datetime) -> Take:
    """A take that found too few tokens: the wait until one may be booked (never 0)."""
    return Take(False, max(MIN_WAIT, (1.0 + rate.floor - tokens) / rate.per_second), at)


class MemoryBuckets:
    """:class:`Buckets` in this process's memory, on an injected clock (the database's twin)."""

    def __init__(self, clock: Callable[[], dt.datetime]) -> None:
        self.clock = clock
        self._state: dict[str, tuple[float, dt.datetime]] = {}

    async def take(self, rate: Rate) -> Take:
        now = self.clock()
        tokens, at = self._state.get(rate.key, (rate.capacity, now))
        have, at = refill(rate, tokens, at, now), max(at, now)
        if have - 1.0 < rate.floor:
            return refused(rate, have, at)
        self._state[rate.key] = (have - 1.0, at)
        return taken(rate, have - 1.0, at)

    async def wait(self, rate: Rate) -> float:
        now = self.clock()
        tokens, at = self._state.get(rate.key, (rate.capacity, now))
        return until_one(rate, refill(rate, tokens, at, now))


class SharedLimiter:
    """Waits for a token of every bucket given, then takes them: the limits every worker keeps together.

    ``acquire(overall, *narrow)``: first wait (taking nothing) until each narrow
    bucket (one chat's) has a token, then take the overall one, then the narrow
    ones, so each token is taken just before the send and a wait for the overall
    bucket never eats into a chat's spacing. This process's waiters for one chat
    take turns, so two of them never both see its token and spend an overall one
    each for it; a narrow token taken meanwhile by another process (rare: one chat,
    two senders) costs one overall token and a retry.
    """

    def __init__(self, buckets: Buckets, clock: Callable[[], dt.datetime], *,
                 sleep: Sleep = asyncio.sleep) -> None:
        self.buckets = buckets
        self.clock = clock  # the buckets' clock: a booked token is waited for until its time, not for
        self.sleep = sleep  # its wait counted from after the round trip (which would bunch the sends)
        self._turns: dict[str, asyncio.Lock] = {}  # per overall key: one waiter of this process books
        self._chats: dict[str, asyncio.Lock] = {}  # per narrow key: one waiter of this process at a time

    async def acquire(self, overall: Rate, *narrow: Rate) -> None:
        """Return when one event fits ``overall`` and every ``narrow`` bucket, their tokens taken."""
        async with contextlib.AsyncExitStack() as turns:
            for key in sorted({rate.key for rate in narrow}):  # one order: no two waiters deadlock
                await turns.enter_async_context(self._chats.setdefault(key, asyncio.Lock()))
            await self._acquire(overall, narrow)

    async def _acquire(self, overall: Rate, narrow: Sequence[Rate]) -> None:
        while True:
            for rate in narrow:
                while (pause := await self.buckets.wait(rate)) > 0:
                    await self.sleep(pause)
            await self.take(overall)
            if all([await self._take_now(rate) for rate in narrow]):
                return

    async def take(self, rate: Rate) -> dt.datetime:
        """Take one token of ``rate`` and wait for it; the time it was booked for.

        This process's waiters take turns (FIFO) at booking: one polls the bucket,
        not all of them at every refill, which would crowd the connection pool and
        the row; the wait for a booked token is outside the turn, so the next books meanwhile.
        """
        async with self._turns.setdefault(rate.key, asyncio.Lock()):
            while not (got := await self.buckets.take(rate)).taken:
                await self.sleep(got.wait)
        await self._until(got.slot)
        return got.slot

    async def _take_now(self, rate: Rate) -> bool:
        """Take a narrow token that the wait said is there; a booked one is waited for."""
        got = await self.buckets.take(rate)
        if got.taken:
            await self._until(got.slot)
        return got.taken

    async def _until(self, when: dt.datetime) -> None:
        """Sleep until ``when`` on the buckets' clock."""
        if (pause := (when - self.clock()).total_seconds()) > 0:
            await self.sleep(pause)


@runtime_checkable
class SharesLimits(Protocol):
    """A channel that can keep its platform's limits in shared buckets (bootstrap's, on PostgreSQL)."""

    def share_limits(self, shared: SharedLimiter) -> None:
        """Keep the limits in ``shared`` from now on, instead of in this process."""
        ...
