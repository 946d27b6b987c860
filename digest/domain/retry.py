"""The one retry policy: how many tries, and how long to wait between them.

Every retried thing (a delivery, a check copy, a confirmation mail, a step through a
database outage, an LLM request) waits by :meth:`RetryPolicy.delay`: when the server
said how long (Telegram's and Discord's ``retry_after``, an HTTP ``Retry-After``), that,
capped at ``max_retry_after``; otherwise a backoff that doubles from ``backoff`` up to
``cap``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all (the first included) and the wait after each failed one."""

    attempts: int = 3
    backoff: float = 1.0  # seconds after the first try; doubles each time
    cap: float = 60.0  # ... up to this
    max_retry_after: float = math.inf  # the longest wait a server may ask for

    def delay(self, n: int, retry_after: float | None = None) -> float:
        """Seconds to wait after try ``n`` (from 0): the server's ``retry_after`` (capped), else backoff."""
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_retry_after))
        return min(self.backoff * 2.0 ** n, self.cap)
