"""Read counts off the request path, and the cheap look-ups that key the page cache.

A digest page's GET by a browser adds one to an in-process tally; a background task
adds the tally to the database every few seconds and once more on shutdown (the app's
lifespan), so no request waits on a write and nothing counted is lost on SIGTERM.
HEAD, known bots and a repeat from one client within ten minutes are not counted.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy import Select, bindparam, func, select, update
from sqlalchemy.exc import SQLAlchemyError

from digest.domain.clock import Clock
from digest.store.db import SessionFactory
from digest.store.models import Digest, DigestEvent
from digest.store.queries import listed

log = logging.getLogger(__name__)
Sleep = Callable[[float], Awaitable[None]]
REPEAT = dt.timedelta(minutes=10)
FLUSH_EVERY = 5.0  # seconds between flushes: the count shown lags by about this much
# Scripts, crawlers, link previews and monitors: none of them is a reader.
_BOTS = re.compile(
    r"bot|crawl|spider|slurp|archiv|preview|monitor|uptime|headless|lighthouse|scan|fetch|"
    r"facebookexternalhit|curl|wget|python|httpx|aiohttp|go-http|java/|libwww|okhttp|axios|node|wrk",
    re.IGNORECASE)
_BROWSER = re.compile(r"(Mozilla|Opera)/", re.IGNORECASE)


def is_reader(method: str, user_agent: str | None) -> bool:
    """A GET by something that says it is a browser and no known bot."""
    agent = user_agent or ""
    return method == "GET" and bool(_BROWSER.match(agent)) and not _BOTS.search(agent)


@dataclass(frozen=True)
class Stamp:
    """What keys a digest's cached page (its build time) and the read count stored."""

    built_at: dt.datetime
    read_count: int


_DAY = Digest.__table__.c
_DIGEST_STAMP = select(_DAY.built_at, _DAY.read_count).where(
    _DAY.date == bindparam("date", type_=_DAY.date.type), listed())


async def digest_stamp(sessions: SessionFactory, date: dt.date) -> Stamp | None:
    """The listed digest of ``date``'s build time and stored count, or None: one small row."""
    async with sessions.kw["bind"].connect() as connection:
        row = (await connection.execute(_DIGEST_STAMP, {"date": date})).first()
    return None if row is None else Stamp(row.built_at, row.read_count)


@dataclass(frozen=True)
class ArchiveStamp:
    """A fingerprint of some listed digests: how many, the newest build, the newest id."""

    count: int
    built_at: dt.datetime | None
    last_id: int | None

    def changed(self, otherwise: dt.datetime) -> dt.datetime:
        """When these digests last changed (the newest build), else ``otherwise``."""
        return self.built_at or otherwise


@functools.cache  # one statement per shape: its compiled form is reused
def _stamp_query(of_event: bool, since: bool) -> Select[int, dt.datetime, int]:
    """The stamp's statement of one shape, values bound per call."""
    digest, shown = Digest.__table__.c, DigestEvent.__table__.c
    query = select(func.count(digest.id), func.max(digest.built_at), func.max(digest.id)).where(listed())
    if of_event:
        query = query.join_from(Digest.__table__, DigestEvent.__table__, shown.digest_id == digest.id)
        query = query.where(shown.event_id == bindparam("event_id", type_=shown.event_id.type))
    if since:
        query = query.where(digest.window_end > bindparam("since", type_=digest.window_end.type))
    return query


async def archive_stamp(sessions: SessionFactory, event_id: int | None = None,
                        since: dt.datetime | None = None) -> ArchiveStamp:
    """The stamp of the listed digests (all, those showing ``event_id``, or newer than ``since``).

    It changes when a digest is built, rebuilt, hidden or listed, so it keys cached lists. Every
    request of a cached page asks it, so it is one prepared Core statement on a pooled connection:
    no session, no ORM (building the statement and the session were half a cached request's time).
    """
    query = _stamp_query(event_id is not None, since is not None)
    async with sessions.kw["bind"].connect() as connection:
        values = {"event_id": event_id, "since": since}
        count, built_at, last_id = (await connection.execute(query, values)).one()
    return ArchiveStamp(count, built_at, last_id)


class ReadCounts:
    """Counted reads not yet stored, and who read what lately (per process, bounded by ``REPEAT``)."""

    def __init__(self, sessions: SessionFactory, clock: Clock, *, every: float = FLUSH_EVERY,
                 sleep: Sleep = asyncio.sleep) -> None:
        self.sessions = sessions
        self.clock = clock
        self.every = every
        self.sleep = sleep
        self.pending: Counter[dt.date] = Counter()
        self.flushing: Counter[dt.date] = Counter()
        self.seen: dict[tuple[str, dt.date], dt.datetime] = {}

    def record(self, date: dt.date, client: str, method: str, user_agent: str | None) -> bool:
        """Count one read of ``date`` unless it is no reader's or a repeat; True when counted."""
        if not is_reader(method, user_agent):
            return False
        now, key = self.clock(), (client, date)
        last = self.seen.get(key)
        if last is not None and now - last < REPEAT:
            return False
        self.seen[key] = now
        self.pending[date] += 1
        return True

    def shown(self, date: dt.date, stored: int) -> int:
        """The count to show: the stored one plus what this process has not stored yet."""
        return stored + self.pending[date] + self.flushing[date]

    def forget_old(self) -> None:
        """Drop clients last seen longer than ``REPEAT`` ago (keeps ``seen`` bounded)."""
        cutoff = self.clock() - REPEAT
        self.seen = {key: at for key, at in self.seen.items() if at > cutoff}

    async def flush(self) -> int:
        """Add the pending counts to the database in one transaction; how many reads were stored."""
        batch, self.pending = self.pending, Counter()
        if batch:
            self.flushing += batch
            try:
                await self._store(batch)
            except BaseException:
                self.pending += batch  # kept for the next flush
                raise
            finally:
                self.flushing -= batch
        self.forget_old()
        return sum(batch.values())

    async def _store(self, batch: Counter[dt.date]) -> None:
        async with self.sessions.begin() as session:
            for date, reads in sorted(batch.items()):
                await session.execute(update(Digest).where(Digest.date == date, listed())
                                      .values(read_count=Digest.read_count + reads)
                                      .execution_options(synchronize_session=False))

    async def run(self) -> None:
        """Flush every ``every`` seconds until cancelled; a failed flush is logged and retried."""
        while True:
            await self.sleep(self.every)
            try:
                await self.flush()
            except (SQLAlchemyError, OSError) as exc:
                log.warning("read counts not stored yet: %s", exc)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Flush in the background while the app serves, and once more when it stops."""
        task = asyncio.create_task(self.run())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await self.flush()
