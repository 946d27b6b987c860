"""Run reports: what each daily run did (``digest report``, ``/healthz``, the admin copy).

One row per run (scheduled, caught up or ``digest run``), written once the run
has finished, in one short transaction: a stopped run leaves no half row.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from digest.store.models import Digest, RunReport, Source


@dataclass(frozen=True)
class FailingSource:
    """A source whose last fetches all failed: how many in a row, and the last error."""

    key: str
    failures: int
    error: str | None


async def save_report(session: AsyncSession, *, date: dt.date, trigger: str, started: dt.datetime,
                      finished: dt.datetime, ok: bool, report: dict[str, Any]) -> RunReport:
    """Add one run's report (the caller commits)."""
    row = RunReport(date=date, trigger=trigger, started_at=started, finished_at=finished, ok=ok,
                    report=report)
    session.add(row)
    await session.flush()
    return row


async def latest_report(session: AsyncSession, date: dt.date | None = None) -> RunReport | None:
    """The latest report of ``date``, or of the latest run when no date is given."""
    query = select(RunReport)
    if date is not None:
        query = query.where(RunReport.date == date)
    return await session.scalar(query.order_by(RunReport.started_at.desc(), RunReport.id.desc()).limit(1))


async def failing_sources(session: AsyncSession, at_least: int) -> list[FailingSource]:
    """The sources that failed ``at_least`` times in a row, the longest streak first."""
    rows = await session.execute(
        select(Source.key, Source.consecutive_failures, Source.last_error)
        .where(Source.consecutive_failures >= at_least)
        .order_by(Source.consecutive_failures.desc(), Source.key))
    return [FailingSource(key, failures, error) for key, failures, error in rows.all()]


async def is_published(session: AsyncSession, date: dt.date) -> bool:
    """Whether the digest of ``date`` exists and was published."""
    published = await session.scalar(select(Digest.published_at).where(Digest.date == date))
    return published is not None
