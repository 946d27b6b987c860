"""Named run locks in the database: a build, publish or fetch runs once at a time, across machines.

PostgreSQL: a session-level advisory lock on a dedicated connection kept for as
long as the lock is held; the server frees it when that connection closes, so a
process that dies frees its locks at once.

SQLite: a ``run_lock`` row (holder, expiry) taken in ``BEGIN IMMEDIATE``. A
heartbeat task renews the expiry while the holder lives; the row of a process
that was killed is free to take once it expires (``LEASE``, about a minute).
Expiry is read from the injected clock, so tests move time instead of sleeping.

The second caller waits (``wait=True``, told once through ``on_wait``) or gets
:class:`LockBusy`, a one-line error. Names say what runs: :func:`build_lock`,
:func:`publish_lock` (one per date) and :data:`FETCH_LOCK` (one for every fetch).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from digest.domain.clock import Clock
from digest.domain.errors import DigestError, StorageError
from digest.domain.retry import RetryPolicy
from digest.store.db import SessionFactory
from digest.store.models import RunLock

log = logging.getLogger(__name__)
LEASE = dt.timedelta(seconds=60)
POLL = 1.0  # the longest wait between two tries of a held SQLite lock
FIRST_POLL = 0.05  # the first; it doubles up to POLL
FETCH_LOCK = "fetch"
_KEY_SPACE = "compiler-digest:"


class LockBusy(DigestError):
    """Another process holds the lock and the caller chose not to wait."""

    def __init__(self, name: str) -> None:
        super().__init__(f"another {name} is running")
        self.name = name


def build_lock(date: dt.date) -> str:
    """The lock of building one date."""
    return f"build of {date.isoformat()}"


def publish_lock(date: dt.date) -> str:
    """The lock of publishing one date."""
    return f"publish of {date.isoformat()}"


def advisory_key(name: str) -> int:
    """A stable signed 64-bit PostgreSQL advisory-lock key for ``name``."""
    digest = hashlib.sha256((_KEY_SPACE + name).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def new_holder() -> str:
    """Who holds a lock: host, process and a per-acquisition suffix."""
    return f"{socket.gethostname()[:120]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def holder_alive(holder: str) -> bool:
    """False only when ``holder`` names a process of this host that no longer exists.

    A rerun right after a crash (SQLite's usual case: one machine) need not wait
    out the dead process's lease; a holder on another host is trusted until it expires.
    """
    host_pid = holder.rpartition(":")[0]
    host, _, pid = host_pid.rpartition(":")
    if host != socket.gethostname()[:120] or not pid.isdecimal():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by another user
        return True
    return True


@asynccontextmanager
async def run_lock(
    target: AsyncEngine | SessionFactory,
    name: str,
    *,
    wait: bool,
    clock: Clock,
    lease: dt.timedelta = LEASE,
    heartbeat: float | None = None,
    poll: float = POLL,
    on_wait: Callable[[str], None] | None = None,
) -> AsyncIterator[None]:
    """Hold the lock ``name`` for the body; wait for it, or raise :class:`LockBusy`.

    ``heartbeat`` (seconds, default a quarter of the lease) and ``poll`` (the longest
    wait between tries while waiting: from FIRST_POLL, doubling) matter only on SQLite.
    """
    engine = _engine(target)
    tell = on_wait or _log_wait
    if engine.dialect.name == "postgresql":
        async with _advisory(engine, name, wait=wait, on_wait=tell):
            yield
        return
    if engine.dialect.name != "sqlite":
        raise StorageError(f"run locks need PostgreSQL or SQLite, not {engine.dialect.name}")
    every = heartbeat if heartbeat is not None else lease.total_seconds() / 4
    row = _Row(engine, name, new_holder(), clock, lease)
    async with _leased(row, wait=wait, poll=poll, every=every, on_wait=tell):
        yield


def _log_wait(name: str) -> None:
    log.info("waiting for another %s", name)


def _engine(target: AsyncEngine | SessionFactory) -> AsyncEngine:
    if isinstance(target, AsyncEngine):
        return target
    bind = target.kw.get("bind")
    if not isinstance(bind, AsyncEngine):
        raise StorageError("run locks need a session factory bound to an engine")
    return bind


# PostgreSQL: session-level advisory locks.


@asynccontextmanager
async def _advisory(
    engine: AsyncEngine, name: str, *, wait: bool, on_wait: Callable[[str], None]
) -> AsyncIterator[None]:
    """The lock on a dedicated connection, closed (so freed by the server) whenever unlocking is unsure."""
    key = advisory_key(name)
    async with engine.connect() as conn:
        try:
            await _take_advisory(conn, key, name, wait=wait, on_wait=on_wait)
        except BaseException:
            await conn.invalidate()  # cancelled while waiting: the server may have granted it
            raise
        try:
            yield
        finally:
            await _release_advisory(conn, key, name)


async def _release_advisory(conn: AsyncConnection, key: int, name: str) -> None:
    try:
        await conn.scalar(select(func.pg_advisory_unlock(key)))
        await conn.commit()
    except SQLAlchemyError as exc:
        log.warning("the %s lock's connection failed; the server freed the lock with it: %s", name, exc)
        await conn.invalidate()
    except BaseException:
        await conn.invalidate()
        raise


async def _take_advisory(
    conn: AsyncConnection, key: int, name: str, *, wait: bool, on_wait: Callable[[str], None]
) -> None:
    if not await conn.scalar(select(func.pg_try_advisory_lock(key))):
        if not wait:
            raise LockBusy(name)
        on_wait(name)
        await conn.execute(select(func.pg_advisory_lock(key)))
    await conn.commit()  # the lock outlives the transaction: no transaction stays open


# SQLite: a row with a lease, renewed by a heartbeat.


class _Row:
    """One lock row as one holder sees it; every statement runs in its own BEGIN IMMEDIATE."""

    def __init__(self, engine: AsyncEngine, name: str, holder: str, clock: Clock,
                 lease: dt.timedelta) -> None:
        self.engine, self.name, self.holder, self.clock, self.lease = engine, name, holder, clock, lease

    @asynccontextmanager
    async def _immediate(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction that takes SQLite's write lock first (waits up to the busy timeout)."""
        async with self.engine.connect() as conn:
            await conn.exec_driver_sql("BEGIN IMMEDIATE")
            yield conn
            await conn.commit()

    async def take(self) -> bool:
        """Take the row if it is free, expired or ours."""
        now = self.clock()
        async with self._immediate() as conn:
            row = (await conn.execute(
                select(RunLock.holder, RunLock.expires_at).where(RunLock.name == self.name)
            )).first()
            if row is None:
                await conn.execute(insert(RunLock).values(
                    name=self.name, holder=self.holder, acquired_at=now, expires_at=now + self.lease))
                return True
            if row.holder != self.holder and row.expires_at > now and holder_alive(row.holder):
                return False
            await conn.execute(update(RunLock).where(RunLock.name == self.name).values(
                holder=self.holder, acquired_at=now, expires_at=now + self.lease))
            if row.holder != self.holder:
                log.warning("took the %s lock of %s, which expired at %s", self.name, row.holder,
                            row.expires_at.isoformat(timespec="seconds"))
            return True

    async def renew(self) -> bool:
        """Push the expiry on; False when the row is no longer ours."""
        async with self._immediate() as conn:
            done = await conn.execute(
                update(RunLock).where(RunLock.name == self.name, RunLock.holder == self.holder)
                .values(expires_at=self.clock() + self.lease))
            return bool(done.rowcount)

    async def drop(self) -> None:
        """Free the row if it is still ours; on failure it expires by itself."""
        try:
            async with self._immediate() as conn:
                await conn.execute(
                    delete(RunLock).where(RunLock.name == self.name, RunLock.holder == self.holder))
        except SQLAlchemyError as exc:
            log.warning("could not free the %s lock (it expires by itself): %s", self.name, exc)


@asynccontextmanager
async def _leased(
    row: _Row, *, wait: bool, poll: float, every: float, on_wait: Callable[[str], None]
) -> AsyncIterator[None]:
    told, tries = False, 0
    pace = RetryPolicy(backoff=min(FIRST_POLL, poll), cap=poll)  # a short hold is seen soon
    while not await row.take():
        if not wait:
            raise LockBusy(row.name)
        if not told:
            on_wait(row.name)
            told = True
        await asyncio.sleep(pace.delay(tries))
        tries += 1
    beat = asyncio.create_task(_heartbeat(row, every))
    try:
        yield
    finally:
        beat.cancel()
        await asyncio.wait([beat])
        await row.drop()


async def _heartbeat(row: _Row, every: float) -> None:
    """Renew the lease every ``every`` seconds while the holder lives."""
    while True:
        await asyncio.sleep(every)
        try:
            if not await row.renew():
                log.error("the %s lock expired and was taken by another process", row.name)
                return
        except SQLAlchemyError as exc:
            log.warning("could not renew the %s lock: %s", row.name, exc)
