"""An async limiter for Telegram's broadcast limits, enforced here rather than hoped for.

Telegram allows about 30 messages per second overall, one per second to one
chat and 20 per minute to one group. :class:`RateLimiter` keeps every send
inside all three, with a small safety margin for network jitter: the server
times a message when it arrives, not when we decide to send it.

Sends are also paced (one every ``period * (1 + margin) / limit`` seconds)
rather than fired in bursts of 30: a burst queues in the connection pool and
arrives spread out, which is exactly how a window limit gets overrun.

    acquire(chat) ─► wait for the chat (1/s; 20/min for a group) ─► wait for the global pace ─► send
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class Window:
    """At most ``limit`` events in any ``period`` seconds (a sliding log of the last ``limit``)."""

    def __init__(self, limit: int, period: float) -> None:
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


@dataclass
class _Chat:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    windows: tuple[Window, ...] = ()


@dataclass(frozen=True)
class Limits:
    """The limits to keep; the defaults are Telegram's."""

    overall: int = 30
    per_chat: int = 1
    per_group_minute: int = 20
    period: float = 1.0
    margin: float = 0.05  # 5 % slack against jitter between our clock and the server's


class RateLimiter:
    """Waits until one more message to ``chat`` keeps every limit, then counts it."""

    def __init__(self, limits: Limits | None = None, *, clock: Clock = time.monotonic,
                 sleep: Sleep = asyncio.sleep) -> None:
        self.limits = limits or Limits()
        self._clock = clock
        self._sleep = sleep
        slack = 1 + self.limits.margin
        self._overall = Window(self.limits.overall, self.limits.period * slack)
        self._interval = self.limits.period * slack / self.limits.overall
        self._next = -float("inf")
        self._lock = asyncio.Lock()
        self._chats: dict[str, _Chat] = {}
        self._acquired = 0

    async def acquire(self, chat: int | str) -> None:
        """Return when one message to ``chat`` may go now (FIFO per chat and overall)."""
        state = self._chat(str(chat))
        async with state.lock:
            await self._wait_for(lambda now: max(w.wait(now) for w in state.windows))
            async with self._lock:
                await self._wait_for(self._overall.wait)
                slot = max(self._next, self._clock())
                await self._wait_for(lambda now: slot - now)
                # The next slot follows this one's schedule, not its (late) wake-up: no drift.
                self._next = slot + self._interval
                now = self._clock()
                self._overall.take(now)
                for window in state.windows:
                    window.take(now)
        self._acquired += 1
        if self._acquired % 1000 == 0:
            self._prune()

    async def _wait_for(self, delay: Callable[[float], float]) -> None:
        while (pause := delay(self._clock())) > 0:
            await self._sleep(pause)

    def _chat(self, key: str) -> _Chat:
        state = self._chats.get(key)
        if state is None:
            slack = 1 + self.limits.margin
            windows = [Window(self.limits.per_chat, self.limits.period * slack)]
            if key.startswith("-"):  # Telegram group and channel ids are negative
                windows.append(Window(self.limits.per_group_minute, 60 * self.limits.period * slack))
            state = self._chats[key] = _Chat(windows=tuple(windows))
        return state

    def _prune(self) -> None:
        """Forget chats with nothing left in their windows (keeps memory flat over a long run)."""
        now = self._clock()
        for key, state in list(self._chats.items()):
            if not state.lock.locked() and all(w.idle_since(now) for w in state.windows):
                del self._chats[key]

    @property
    def tracked_chats(self) -> int:
        """How many chats have state (for tests)."""
        return len(self._chats)
