"""Token buckets in the ``rate_bucket`` table, so every process on one database keeps one limit.

A take is ONE statement: an ``UPDATE ... WHERE key = :key AND <a token is
there> RETURNING`` ("there": within the rate's ``ahead`` seconds; such a token
is booked, the bucket goes below zero and the taker waits for it; with
``ahead=0`` a take that finds no whole token is simply refused, which is how the
web throttle uses it). PostgreSQL locks the row and, when another take changed
it meanwhile, evaluates the condition and the new value again on the row as it
is now, so two workers never spend the same token (a read-then-write would).
SQLite (one process, one writer at a time) runs the same statement in its own
dialect. The row is inserted on first use (``ON CONFLICT DO NOTHING``: a full
bucket). When no token is there, the wait is computed from the row, and the
caller sleeps through its injected sleep. Times come from the injected clock
(one per process, all on UTC); a clock behind the row's ``updated_at`` adds no
tokens. SQLite reads times to the millisecond (``julianday``).

Stale rows are pruned: a bucket untouched for longer than it takes to refill
from its floor is full, the same as no row, so a take deletes such rows of its
key's family (``kind:scope:`` of a ``kind:scope:id`` key, e.g. every
``telegram:chat:`` bucket; the buckets of one family share one rate) at most
once every :data:`PRUNE_EVERY` seconds, with :data:`SKEW` seconds to spare for
processes whose clocks disagree. Keys without a family (``telegram``,
``discord``) are one row each and never pruned.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import DateTime, Executable, Float, TextClause, bindparam, text
from sqlalchemy.types import TypeEngine

from digest.domain.clock import Clock, system_now
from digest.domain.ratelimit import Rate, Take, refill, refused, taken, until_one
from digest.store.db import SessionFactory

PRUNE_EVERY = 60.0  # seconds between two prunes of one family by one process
SKEW = 60.0  # seconds of clock disagreement between processes that a prune allows for

_PG_HAVE = ("LEAST(CAST(:cap AS double precision), tokens + CAST(:rate AS double precision)"
            " * GREATEST(0, EXTRACT(EPOCH FROM (CAST(:now AS timestamp) - updated_at))))")
_LITE_HAVE = "MIN(:cap, tokens + :rate * MAX(0, (julianday(:now) - julianday(updated_at)) * 86400.0))"
_SQL = {
    "postgresql": {
        "take": f"UPDATE rate_bucket SET tokens = {_PG_HAVE} - 1, "
                "updated_at = GREATEST(updated_at, CAST(:now AS timestamp)) "
                f"WHERE key = :key AND {_PG_HAVE} - 1 >= CAST(:floor AS double precision) "
                "RETURNING tokens, updated_at",
        "prune": "DELETE FROM rate_bucket WHERE substr(key, 1, CAST(:n AS integer)) = :family "
                 "AND updated_at < CAST(:cutoff AS timestamp)",
    },
    "sqlite": {
        "take": f"UPDATE rate_bucket SET tokens = {_LITE_HAVE} - 1, updated_at = MAX(updated_at, :now) "
                f"WHERE key = :key AND {_LITE_HAVE} - 1 >= :floor RETURNING tokens, updated_at",
        "prune": "DELETE FROM rate_bucket WHERE substr(key, 1, :n) = :family AND updated_at < :cutoff",
    },
}
CREATE = "INSERT INTO rate_bucket (key, tokens, updated_at) VALUES (:key, :cap, :now) ON CONFLICT DO NOTHING"
READ = "SELECT tokens, updated_at FROM rate_bucket WHERE key = :key"
_TIMES = (bindparam("now", type_=DateTime()), bindparam("cutoff", type_=DateTime()))
_ROW: dict[str, TypeEngine[Any]] = {"tokens": Float(), "updated_at": DateTime()}


def _statement(sql: str) -> Executable:
    """``sql`` with its times bound as DateTime (SQLite stores them as text) and its row typed."""
    clause: TextClause = text(sql)
    clause = clause.bindparams(*(p for p in _TIMES if f":{p.key}" in sql))
    return clause.columns(**_ROW) if "RETURNING" in sql or sql.startswith("SELECT") else clause


STATEMENTS = {dialect: {name: _statement(sql) for name, sql in queries.items()}
              for dialect, queries in _SQL.items()}
COMMON = {"create": _statement(CREATE), "read": _statement(READ)}


def _naive(when: dt.datetime) -> dt.datetime:
    """The column's form of ``when``: naive UTC (what ``UTCDateTime`` stores)."""
    return when.astimezone(dt.UTC).replace(tzinfo=None)


def _aware(when: dt.datetime) -> dt.datetime:
    return when.replace(tzinfo=dt.UTC)


def family(key: str) -> str | None:
    """The family of ``kind:scope:id`` (``kind:scope:``), or None for a key of its own (``telegram``)."""
    kind, scope, rest = [*key.split(":", 2), "", ""][:3]
    return f"{kind}:{scope}:" if rest and scope else None


def idle_after(rate: Rate) -> float:
    """Seconds after its last take that a bucket of ``rate`` is full again, wherever it was."""
    return (rate.capacity - rate.floor) / rate.per_second


class DbBuckets:
    """:class:`~digest.domain.ratelimit.Buckets` in the database: one row per key, one statement per take."""

    def __init__(self, sessions: SessionFactory, clock: Clock = system_now) -> None:
        self.sessions = sessions
        self.clock = clock
        self._pruned: dict[str, dt.datetime] = {}  # family -> this process's last prune of it

    def _sql(self, name: str) -> Executable:
        dialect = self.sessions.kw["bind"].dialect.name
        if dialect not in STATEMENTS:
            raise NotImplementedError(f"rate buckets need PostgreSQL or SQLite, not {dialect}")
        return STATEMENTS[dialect][name]

    async def take(self, rate: Rate) -> Take:
        """Take a token of ``rate.key`` now, or say how long until one is there (from the row)."""
        now = self.clock()
        await self._prune_due(rate, now)
        params = {"key": rate.key, "cap": rate.capacity, "rate": rate.per_second, "now": _naive(now),
                  "floor": rate.floor}
        got = await self._take(params)
        state = None
        if got is None:
            state = await self._row(rate, now)
            # no row (one was inserted, full), or another first taker's row, inserted since: take again
            if state is None or refill(rate, *state, now) - 1.0 >= rate.floor:
                got = await self._take(params)
                state = None if got is not None else await self._row(rate, now)
        if got is not None:
            return taken(rate, *got)
        tokens, at = state or (0.0, now)
        return refused(rate, refill(rate, tokens, at, now), max(at, now))

    async def wait(self, rate: Rate) -> float:
        """Seconds until ``rate.key`` has a token; takes nothing (no row yet: a full bucket, now)."""
        now = self.clock()
        state = await self._row(rate, now)
        return 0.0 if state is None else until_one(rate, refill(rate, *state, now))

    async def prune(self, rate: Rate) -> int:
        """Delete the rows of ``rate``'s family untouched for longer than a refill (and :data:`SKEW`)."""
        name = family(rate.key)
        if name is None:
            return 0
        now = self.clock()
        self._pruned[name] = now
        cutoff = now - dt.timedelta(seconds=idle_after(rate) + SKEW)
        async with self.sessions.begin() as session:
            result: Any = await session.execute(self._sql("prune"), {"n": len(name), "family": name,
                                                                     "cutoff": _naive(cutoff)})
        return int(result.rowcount or 0)

    async def _prune_due(self, rate: Rate, now: dt.datetime) -> None:
        """Prune ``rate``'s family when this process last did more than :data:`PRUNE_EVERY` ago."""
        name = family(rate.key)
        if name is None:
            return
        last = self._pruned.get(name)
        if last is None or not 0 <= (now - last).total_seconds() < PRUNE_EVERY:
            await self.prune(rate)

    async def _take(self, params: dict[str, Any]) -> tuple[float, dt.datetime] | None:
        """The one statement of a take: (tokens left, the bucket's time), or None when none was there."""
        async with self.sessions.begin() as session:
            row = (await session.execute(self._sql("take"), params)).first()
        return None if row is None else (float(row.tokens), _aware(row.updated_at))

    async def _row(self, rate: Rate, now: dt.datetime) -> tuple[float, dt.datetime] | None:
        """(tokens, updated_at) of the bucket; None when it had no row (one is inserted, full)."""
        params = {"key": rate.key, "cap": rate.capacity, "now": _naive(now)}
        async with self.sessions.begin() as session:
            row = (await session.execute(COMMON["read"], {"key": rate.key})).first()
            if row is None:
                await session.execute(COMMON["create"], params)
                return None
        return float(row.tokens), _aware(row.updated_at)
