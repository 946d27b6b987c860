"""The process's one database writer for the senders: group commit of outcomes, claims and renewals.

A worker's outcome, a feeder's claim and a heartbeat's lease renewal each
wait for the next transaction; whatever waits while one runs shares the
next, so commits are batched (one fsync per batch) however many workers wait.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from digest.deliver.outbox import Claimed, Record, apply, claim, renew
from digest.store.db import SessionFactory


class Writer:
    """The process's one writer: outcomes and claims waiting while a transaction runs share the next.

    Group commit: one transaction (one fsync) per batch, however many workers
    wait; a claim or a lease renewal rides along with the outcomes instead of
    costing a commit.
    """

    def __init__(self, sessions: SessionFactory) -> None:
        self.sessions = sessions
        self._records: list[tuple[Record, asyncio.Future[None]]] = []
        self._jobs: list[tuple[Callable[[AsyncSession], Awaitable[Any]], asyncio.Future[Any]]] = []
        self._task: asyncio.Task[None] | None = None

    async def write(self, record: Record) -> None:
        """Return once ``record`` is committed."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._records.append((record, done))
        self._kick()
        await done

    async def claim(self, **request: Any) -> list[Claimed]:
        """``outbox.claim(**request)`` in the next transaction; return once committed."""
        rows: list[Claimed] = await self._job(lambda session: claim(session, **request))
        return rows

    async def renew(self, ids: Collection[int], until: dt.datetime) -> int:
        """``outbox.renew`` in the next transaction; return once committed."""
        renewed: int = await self._job(lambda session: renew(session, ids, until))
        return renewed

    async def _job(self, job: Callable[[AsyncSession], Awaitable[Any]]) -> Any:
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._jobs.append((job, done))
        self._kick()
        return await done

    def _kick(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._records or self._jobs:
            records, self._records = self._records, []
            jobs, self._jobs = self._jobs, []
            waiters: list[asyncio.Future[Any]] = [done for _, done in records] + [done for _, done in jobs]
            try:
                async with self.sessions.begin() as session:
                    await apply(session, [record for record, _ in records])
                    results: list[Any] = [None] * len(records) + [await job(session) for job, _ in jobs]
            except Exception as exc:
                for waiter in waiters:
                    if not waiter.done():  # a waiter may have been cancelled (a stopping heartbeat)
                        waiter.set_exception(exc)
                continue
            for waiter, result in zip(waiters, results, strict=True):
                if not waiter.done():
                    waiter.set_result(result)
