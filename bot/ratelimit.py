"""Telegram's broadcast limits, enforced here rather than hoped for.

Telegram allows about 30 messages per second overall, one per second to one
chat and 20 per minute to one group. :class:`RateLimiter` keeps every send
inside all three, with a small safety margin for network jitter: the server
times a message when it arrives, not when we decide to send it. It is the
core's one limiter shape (:mod:`digest.domain.ratelimit`): one overall
:class:`~digest.domain.ratelimit.Limiter` (its window and an even pace of one
send every ``period * (1 + margin) / limit`` seconds, rather than bursts of
30 that queue in the connection pool and arrive bunched), and per chat its
own windows, counted at the same instant as the overall one.

    acquire(chat) ─► [chat lock] wait for the chat (1/s; 20/min for a group)
                                 ─► [overall] wait for the window and the pace ─► count ─► send
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from digest.domain.ratelimit import Clock, Limiter, Rate, SharedLimiter, Sleep, Window


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
    shared_pace: float = 27.2  # msgs/s of all workers together: 1 + 27.2 in any second, under 30 with
    # room for the sends of several processes, which arrive with more jitter than one's

    @property
    def slack_period(self) -> float:
        """The period with the margin: what every window here counts over."""
        return self.period * (1 + self.margin)

    def buckets(self, chat: str) -> tuple[Rate, ...]:
        """The same limits as token buckets every worker shares: overall first, then the chat's.

        A bucket lets ``capacity + rate * W`` through in any ``W`` seconds, so each
        is sized to stay under its limit over the slack period (a minute for a group).
        Overall: ``shared_pace``.
        """
        period, minute = self.slack_period, 60 * self.slack_period
        rates = [Rate("telegram", self.shared_pace),
                 Rate(f"telegram:chat:{chat}", self.per_chat / period)]
        if chat.startswith("-"):  # Telegram group and channel ids are negative
            burst = self.per_group_minute // 2
            rates.append(Rate(f"telegram:group:{chat}", (self.per_group_minute - burst - 1) / minute, burst))
        return tuple(rates)


class RateLimiter:
    """Waits until one more message to ``chat`` keeps every limit, then counts it."""

    def __init__(self, limits: Limits | None = None, *, clock: Clock = time.monotonic,
                 sleep: Sleep = asyncio.sleep) -> None:
        self.limits = limits or Limits()
        period = self.limits.slack_period
        self._overall = Limiter([Window(self.limits.overall, period)], period / self.limits.overall,
                                clock=clock, sleep=sleep)
        self._chats: dict[str, _Chat] = {}
        self._acquired = 0
        self._shared: SharedLimiter | None = None

    def share(self, shared: SharedLimiter) -> None:
        """Keep the limits in ``shared`` (every worker's buckets) instead of in this process."""
        self._shared = shared

    async def acquire(self, chat: int | str) -> None:
        """Return when one message to ``chat`` may go now (FIFO per chat and overall)."""
        if self._shared is not None:
            await self._shared.acquire(*self.limits.buckets(str(chat)))
            return
        state = self._chat(str(chat))
        async with state.lock:
            await self._overall.acquire(*state.windows)
        self._acquired += 1
        if self._acquired % 1000 == 0:
            self._prune()

    def _chat(self, key: str) -> _Chat:
        state = self._chats.get(key)
        if state is None:
            period = self.limits.slack_period
            windows = [Window(self.limits.per_chat, period)]
            if key.startswith("-"):  # Telegram group and channel ids are negative
                windows.append(Window(self.limits.per_group_minute, 60 * period))
            state = self._chats[key] = _Chat(windows=tuple(windows))
        return state

    def _prune(self) -> None:
        """Forget chats with nothing left in their windows (keeps memory flat over a long run)."""
        now = self._overall.clock()
        for key, state in list(self._chats.items()):
            if not state.lock.locked() and all(w.idle_since(now) for w in state.windows):
                del self._chats[key]

    @property
    def tracked_chats(self) -> int:
        """How many chats have state (for tests)."""
        return len(self._chats)
