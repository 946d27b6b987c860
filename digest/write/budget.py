"""The LLM client's daily token budget: what today cost, and room reserved by prompts in flight.

Tokens spent today = the tokens of the cache rows created since ``day_start``
(the cache counts what it stores) + the tokens of answers that could not be
cached (counted here). A prompt reserves its (deliberately high) estimate
before it is sent, so concurrent calls see each other; a reservation is
swapped for what was spent in one step (:meth:`TokenBudget.settle`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import re
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

_CJK = re.compile(r"[\u3000-\u9fff\uac00-\ud7af\uff00-\uffef]")

TokensSince = Callable[[dt.datetime], Awaitable[int]]


def estimate_tokens(text: str) -> int:
    """A deliberately high token estimate: one per CJK character, one per 3 other characters."""
    cjk = len(_CJK.findall(text))
    return cjk + (len(text) - cjk + 2) // 3


class TokenBudget:
    """``daily_tokens`` a day from ``day_start``; ``cached_since`` sums the cache's tokens."""

    def __init__(self, daily_tokens: int, day_start: dt.datetime, cached_since: TokensSince) -> None:
        if day_start.tzinfo is None:
            raise ValueError("day_start must be timezone-aware")
        self.daily_tokens = daily_tokens
        self.day_start = day_start
        self._cached_since = cached_since
        self._lock = asyncio.Lock()
        self._reserved = 0
        self._uncached = 0

    async def spent_today(self) -> int:
        """Tokens spent since ``day_start``: cached answers plus uncacheable ones."""
        return await self._cached_since(self.day_start) + self._uncached

    async def reserve(self, estimate: int) -> bool:
        """Reserve room for a prompt; False (logged) when it does not fit in what is left."""
        async with self._lock:
            left = self.daily_tokens - await self.spent_today() - self._reserved
            if left <= 0 or estimate > left:
                log.warning("LLM budget: %d token(s) left today, prompt needs ~%d", left, estimate)
                return False
            self._reserved += estimate
            return True

    def release(self, estimate: int) -> None:
        """Give back a reservation whose call ended without a result (cancelled, crashed)."""
        self._reserved -= estimate

    async def settle(self, estimate: int, record: Callable[[], Awaitable[int]]) -> None:
        """Swap a reservation for what the call spent, atomically as :meth:`reserve` sees it.

        ``record`` caches the answer (its tokens then count through the cache)
        and returns the tokens the cache will not count.
        """
        async with self._lock:
            self._reserved -= estimate
            self._uncached += await record()
