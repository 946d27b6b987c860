"""The one rate-limit shape: sliding windows and an even pace, on an injected clock and sleep.

A :class:`Window` allows at most ``limit`` events in any ``period`` (a sliding
log of the last ``limit``); :class:`Limiter` waits until one more event fits
its windows and its pace (one start every ``interval``), then counts it. The
Telegram channel (per chat and overall), the SMTP channel (messages per
second) and the subscribe form's throttle (which refuses instead of waiting:
:meth:`Window.admit`) are all made of these. Time is seconds on any origin:
tests pass a fake clock and a sleep that moves it, so nothing depends on how
fast the machine is.

    acquire(*also) ─► wait for ``also`` (a caller's own windows) ─► [lock] wait for the windows
                      ─► wait for the paced slot ─► count the event in every window
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable

Clock = Callable[[], float]
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

    def admit(self, now: float) -> bool:
        """Record an event at ``now`` when it fits, and say whether it did (a refused one is not counted)."""
        fits = self.wait(now) == 0
        if fits:
            self.take(now)
        return fits

    def used(self, now: float) -> int:
        """How many recorded events still count at ``now``."""
        return sum(1 for t in self.times if t > now - self.period)

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
