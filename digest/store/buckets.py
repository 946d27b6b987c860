"""Token buckets in the ``rate_bucket`` table, so every worker on one PostgreSQL keeps one limit.

A take is ONE statement: an ``UPDATE ... WHERE key = :key AND <a token is
there> RETURNING`` ("there": within the rate's ``ahead`` seconds; such a token
is booked, the bucket goes below zero and the taker waits for it). PostgreSQL
locks the row and, when another take changed it meanwhile, evaluates the
condition and the new value again on the row as it is now, so two workers
never spend the same token (a read-then-write would). The row is inserted on
first use (``ON CONFLICT DO NOTHING``: a full bucket). When no token is there,
the wait is computed from the row, and the caller sleeps through its injected
sleep. Times come from the injected clock (one per process, all on UTC); a
clock behind the row's ``updated_at`` adds no tokens.

PostgreSQL only (``LEAST``/``GREATEST``, ``EXTRACT(EPOCH ...)``): on SQLite
there is one process and the in-memory limiter stays.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import text

from digest.domain.clock import Clock, system_now
from digest.domain.ratelimit import Rate, Take, refill, refused, taken, until_one
from digest.store.db import SessionFactory

_HAVE = ("LEAST(CAST(:cap AS double precision), tokens + CAST(:rate AS double precision)"
         " * GREATEST(0, EXTRACT(EPOCH FROM (CAST(:now AS timestamp) - updated_at))))")
TAKE = text(f"UPDATE rate_bucket SET tokens = {_HAVE} - 1, "
            "updated_at = GREATEST(updated_at, CAST(:now AS timestamp)) "
            f"WHERE key = :key AND {_HAVE} - 1 >= CAST(:floor AS double precision) "
            "RETURNING tokens, updated_at")
CREATE = text("INSERT INTO rate_bucket (key, tokens, updated_at) VALUES (:key, :cap, :now) "
              "ON CONFLICT DO NOTHING")
READ = text("SELECT tokens, updated_at FROM rate_bucket WHERE key = :key")


def _naive(when: dt.datetime) -> dt.datetime:
    """The column's form of ``when``: naive UTC (what ``UTCDateTime`` stores)."""
    return when.astimezone(dt.UTC).replace(tzinfo=None)


class DbBuckets:
    """:class:`~digest.domain.ratelimit.Buckets` in the database: one row per key, one statement per take."""

    def __init__(self, sessions: SessionFactory, clock: Clock = system_now) -> None:
        self.sessions = sessions
        self.clock = clock

    async def take(self, rate: Rate) -> Take:
        """Take a token of ``rate.key`` now, or say how long until one is there (from the row)."""
        now = self.clock()
        params = {"key": rate.key, "cap": rate.capacity, "rate": rate.per_second, "now": _naive(now),
                  "floor": rate.floor}
        got = await self._take(params)
        if got is None and await self._row(rate, now) is None:  # first use: a full bucket, then take
            got = await self._take(params)
        if got is not None:
            return taken(rate, *got)
        tokens, at = await self._row(rate, now) or (0.0, now)
        return refused(rate, refill(rate, tokens, at, now), max(at, now))

    async def wait(self, rate: Rate) -> float:
        """Seconds until ``rate.key`` has a token; takes nothing (no row yet: a full bucket, now)."""
        now = self.clock()
        state = await self._row(rate, now)
        return 0.0 if state is None else until_one(rate, refill(rate, *state, now))

    async def _take(self, params: dict[str, Any]) -> tuple[float, dt.datetime] | None:
        """The one statement of a take: (tokens left, the bucket's time), or None when none was there."""
        async with self.sessions.begin() as session:
            row = (await session.execute(TAKE, params)).first()
        return None if row is None else (float(row.tokens), row.updated_at.replace(tzinfo=dt.UTC))

    async def _row(self, rate: Rate, now: dt.datetime) -> tuple[float, dt.datetime] | None:
        """(tokens, updated_at) of the bucket; None when it had no row (one is inserted, full)."""
        params = {"key": rate.key, "cap": rate.capacity, "now": _naive(now)}
        async with self.sessions.begin() as session:
            row = (await session.execute(READ, params)).first()
            if row is None:
                await session.execute(CREATE, params)
                return None
        return float(row.tokens), row.updated_at.replace(tzinfo=dt.UTC)
