"""The daily job: fetch every source, build the latest closed window (or a given date), publish it.

:func:`run_daily` prints nothing and returns a :class:`DailyReport`: what
each step did, and, when the run failed, the one-line reason (``error``).
A step runs only when the one before it succeeded; each runs under its run
lock (fetch, build of the date, publish of the date), so a second run at the
same time waits and then finds the work done: a digest is built once and
each delivery is planned once, so running the job twice sends nothing twice.
``digest run`` prints the report; the service calls this from its schedule.
Every run stores its report (``run_report``: date, trigger, times, outcome,
:meth:`DailyReport.as_json`) in one transaction once it has finished, counts
itself in :mod:`digest.metrics`, then hands the report to ``deps.after``
(the admin copies).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from digest import metrics
from digest.build.pipeline import BuildOptions, BuildReport, build_digest
from digest.deliver.publish import PublishReport, Runner
from digest.domain.clock import Clock
from digest.domain.errors import DigestError
from digest.domain.status import FetchStatus
from digest.domain.window import latest_closed
from digest.ingest.fetch import FetchOptions
from digest.ingest.pipeline import STORAGE_FAILED, fetch_sources
from digest.ingest.sources import SourceSpec
from digest.ingest.store import FetchResult
from digest.store.db import SessionFactory
from digest.store.locks import FETCH_LOCK, build_lock, publish_lock
from digest.store.queries import get_digest
from digest.store.reports import save_report
from digest.write.llm import LLMClient

NO_SOURCE = "no source could be reached"
Lock = Callable[[str], AbstractAsyncContextManager[None]]
After = Callable[["DailyReport", str], Awaitable[None]]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DailyDeps:
    """What the job runs on, built by ``digest.bootstrap.daily_deps`` (or a test)."""

    sessions: SessionFactory
    sources: Sequence[SourceSpec]
    fetch: FetchOptions
    build: BuildOptions
    clock: Clock
    locale: str  # of the publish (a check copy's language)
    llm: Callable[[dt.datetime], AbstractAsyncContextManager[LLMClient | None]]
    publisher: Callable[[], AbstractAsyncContextManager[Runner]]
    lock: Lock
    fetch_progress: Callable[[FetchResult], None] | None = None
    monotonic: Callable[[], float] = time.monotonic
    after: After | None = None  # told every finished run's report and trigger (the admin copies)


@dataclass
class DailyReport:
    """What one run did; ``error`` is the one-line reason when it failed."""

    date: dt.date | None = None
    fetched: list[FetchResult] = field(default_factory=list)
    build: BuildReport | None = None
    publish: PublishReport | None = None
    first_publish: bool = False  # this run planned the digest's deliveries
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """False when the run failed, or a delivery failed because of our bug or configuration."""
        return self.error is None and not (self.publish and self.publish.total().failed_bug)

    @property
    def built(self) -> bool:
        return self.build is not None and self.build.created

    @property
    def published(self) -> bool:
        return self.publish is not None and self.first_publish

    def as_json(self) -> dict[str, Any]:
        """The ``digest run --json`` document."""
        data: dict[str, Any] = {
            "date": self.date.isoformat() if self.date else None, "ok": self.ok, "error": self.error,
            "sources": self._sources(), "fetch": [r.as_json() for r in self.fetched],
            "entries": self.build.entries if self.build else 0,
            "events": self.build.events if self.build else 0,
            **self._step("built", self.built, "already built" if self.build else None),
            **self._step("published", self.published, "already published" if self.publish else None),
        }
        channels = self.publish.channels if self.publish else {}
        data["deliveries"] = {name: tally.as_json() for name, tally in sorted(channels.items())}
        data["llm"] = {"calls": int((self.build.llm if self.build else {}).get("calls", 0)),
                       "tokens": self.build.tokens if self.build else 0}
        data["seconds"] = self.seconds
        return data

    def _sources(self) -> dict[str, Any]:
        failed = [{"source": r.source, "error": r.error} for r in self.fetched if not _good(r)]
        return {"ok": len(self.fetched) - len(failed), "failed": failed,
                "entries_new": sum(r.entries_new for r in self.fetched)}

    def _step(self, name: str, did: bool, done_before: str | None) -> dict[str, Any]:
        """``{name: did}``, and when it did not, why: its work was done before, or the run stopped first."""
        if did:
            return {name: True}
        return {name: False, f"{name}_reason": done_before or self.error or "an earlier step failed"}


def _good(result: FetchResult) -> bool:
    return result.status in (FetchStatus.OK, FetchStatus.NOT_MODIFIED, FetchStatus.NOT_DUE)


def fetch_failure(results: Sequence[FetchResult]) -> str | None:
    """Why a storing fetch failed as a whole: entries fetched but not stored, or no source reached."""
    unstored = [r for r in results if (r.error or "").startswith(STORAGE_FAILED)]
    if unstored:
        return (f"{len(unstored)} source(s) were fetched but could not be stored ({unstored[0].error}); "
                "fix the database or disk and fetch again")
    if not any(_good(r) for r in results):
        return f"{NO_SOURCE} ({len(results)} failed)"
    return None


async def run_daily(date: dt.date | None, deps: DailyDeps, trigger: str = "run") -> DailyReport:
    """Fetch, build ``date`` (default: the latest closed window), publish it; errors end in ``error``.

    ``trigger`` ("schedule", "catch-up" or "run") is stored with the report.
    """
    started_at, started, report = deps.clock(), deps.monotonic(), DailyReport()
    try:
        await _steps(report, date, deps)
    except DigestError as exc:
        report.error = str(exc)
    report.seconds = round(deps.monotonic() - started, 3)
    await _record(report, trigger, started_at, deps)
    return report


async def _record(report: DailyReport, trigger: str, started_at: dt.datetime, deps: DailyDeps) -> None:
    """Store the report, count the run, tell ``deps.after``; a failure here is logged, not raised."""
    finished = deps.clock()
    date = report.date or latest_closed(started_at, deps.build.timezone)
    try:
        async with deps.sessions.begin() as session:
            await save_report(session, date=date, trigger=trigger, started=started_at, finished=finished,
                              ok=report.ok, report=report.as_json())
    except SQLAlchemyError as exc:
        log.error("could not store the report of the %s run of %s: %s", trigger, date, exc)
    metrics.active().ran(trigger, report.ok, report.built, finished.timestamp())
    if deps.after is not None:
        await deps.after(report, trigger)


async def _steps(report: DailyReport, date: dt.date | None, deps: DailyDeps) -> None:
    report.fetched = await _fetch(deps)
    report.date = date or latest_closed(deps.clock(), deps.build.timezone)
    report.error = fetch_failure(report.fetched)
    if report.error is None:
        report.build = await _build(report.date, deps)
        await _publish(report, report.date, deps)


def enabled(specs: Sequence[SourceSpec]) -> list[SourceSpec]:
    """The sources to fetch; DigestError when the list enables none."""
    found = [spec for spec in specs if spec.enabled]
    if not found:
        raise DigestError("no enabled source in the source list")
    return found


async def _fetch(deps: DailyDeps) -> list[FetchResult]:
    specs = enabled(deps.sources)
    async with deps.lock(FETCH_LOCK):
        return await fetch_sources(deps.sessions, specs, deps.fetch, now=deps.clock(),
                                   progress=deps.fetch_progress)


async def _build(date: dt.date, deps: DailyDeps) -> BuildReport:
    """Build under the date's lock: a concurrent build is waited for, then found built."""
    now = deps.clock()
    async with deps.lock(build_lock(date)), deps.llm(now) as llm:
        return await build_digest(deps.sessions, date, deps.build, now=now, llm=llm)


async def _publish(report: DailyReport, date: dt.date, deps: DailyDeps) -> None:
    """Publish under the date's lock; the tallies are kept also when a channel stops the run."""
    async with deps.lock(publish_lock(date)), deps.publisher() as runner:
        async with deps.sessions() as session:
            report.first_publish = (await get_digest(session, date)).published_at is None
        try:
            await runner.publish(date, deps.locale)
        finally:
            if runner.report.date is not None:
                report.publish = runner.report
