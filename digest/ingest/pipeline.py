"""Ingestion: fetch every enabled source, parse it, store its new and changed entries.

    specs ─► sync Source rows ─► per source, at most ``concurrency`` at a time:
        next_fetch_at still ahead ─► not_due (no request, nothing written)
        fetch (fetch.py: local file or conditional GET, caps, one retry)
          ├─ 304, an unchanged file, or a body with the stored SHA-256 ─► not_modified
          └─ body ─► feedparser on the bytes (in a thread) ─► normalize.py ─► store.py
        ─► outcome on Source + a FetchLog row, committed with the entries (one
           transaction per source, so a crash loses at most the source in flight);
           not_modified and error outcomes together in one transaction at the end

Semantics:

- ``not_due`` means the source's ``next_fetch_at`` (set by its last fetch from
  Cache-Control max-age, RSS ``<ttl>`` or ``sy:updatePeriod``/``updateFrequency``,
  bounded by ``FetchOptions.due_floor``/``due_ceiling``; see due.py) is after
  ``now``: no request is made and nothing is written. ``force=True`` fetches anyway.
  Due times are for HTTP sources: a local file is checked on every run, by its
  modification time and size (unchanged: not_modified, not even read).

- ``not_modified`` means the server answered 304, or the body's SHA-256 equals
  the stored ``body_hash`` (a local file that did not change, or a server
  without validators): nothing is parsed and ``entries_total`` is 0.
- An entry already stored is updated in place only when its content hash changed.
- ``store=False`` (``digest sources check``) ignores due times, sends no validators
  and ignores the stored body hash, so it always downloads and parses; it reports how many
  entries *would* be new or updated and writes nothing.
- An arXiv API error document (entries with ids ``.../api/errors#...``) is a
  per-source error naming arXiv's message, when it holds no real entries;
  mixed with real entries, the error entries are dropped with a warning.
- One source failing (network, HTTP status, not a feed, even a bug) never stops
  the others: each ends as a :class:`FetchResult`.
- ``seconds`` is the source's own time: on the wire (fetch.py's Stopwatch, from
  the moment its per-host slot is free), parsing, and storing once the write lock
  is held; waiting for a slot, the lock or the retry's backoff is not counted.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import feedparser
import httpx
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from digest import metrics
from digest.domain.errors import NotAFeedError, SourceError
from digest.domain.status import FetchStatus
from digest.ingest import due
from digest.ingest import store as storage
from digest.ingest.fetch import Download, Fetcher, FetchOptions, Stopwatch, Validators
from digest.ingest.jsonfeed import parse_json_feed
from digest.ingest.normalize import (
    NormalizedFeed,
    bozo_warning,
    feed_context,
    looks_like_feed,
    normalize_feed,
)
from digest.ingest.sources import SourceSpec
from digest.ingest.store import FetchResult, SourceSnapshot, SourceState
from digest.store.db import SessionFactory
from digest.store.models import Source

__all__ = [
    "FetchOptions",
    "FetchResult",
    "SourceState",
    "feedparse",
    "fetch_sources",
    "parse_document",
    "source_states",
    "sync_sources",
]

log = logging.getLogger(__name__)
STORAGE_FAILED = "storage failed"  # the error of a source fetched but not stored
MAX_WARNINGS = 20


async def sync_sources(session: AsyncSession, specs: list[SourceSpec]) -> dict[str, Source]:
    """Upsert ``Source`` rows by key from the configuration (the caller commits)."""
    return await storage.sync_sources(session, specs)


async def source_states(sessions: SessionFactory) -> list[SourceState]:
    """Every stored source, its last outcome, failure run and stored entry count."""
    return await storage.source_states(sessions)


def parse_document(body: bytes, spec: SourceSpec, download: Download,
                   fetched_at: dt.datetime) -> tuple[NormalizedFeed, list[str]]:
    """Parse and normalise a body; raise NotAFeedError / SourceError when it is no usable feed."""
    if not body.strip():
        raise NotAFeedError(spec.key, spec.url, "not a feed: empty body")
    parsed = _parse(body, spec, download)
    if not looks_like_feed(parsed):
        raise NotAFeedError(spec.key, spec.url, f"not a feed: {_not_a_feed_reason(body, download)}")
    feed = normalize_feed(parsed, feed_context(parsed, spec.kind, fetched_at, download.url))
    if feed.api_errors and not feed.entries:
        raise SourceError(spec.key, spec.url, f"arXiv API error: {feed.api_errors[0]}")
    warnings = [w for w in [bozo_warning(parsed)] if w] + feed.warnings
    warnings += [f"arXiv API error entry dropped: {msg}" for msg in feed.api_errors]
    return feed, warnings


def feedparse(body: bytes, content_type: str | None = None, url: str | None = None) -> Any:
    """feedparser on the bytes, with the HTTP headers that decide encoding and base URL.

    feedparser's own HTML passes (sanitising, resolving relative URIs) are off: they
    cost more than the XML parse itself, and normalisation makes every HTML field
    plain text and resolves every link in one pass of its own (feedtext.py).
    """
    headers = {}
    if content_type:  # without one, feedparser sniffs the XML like a local file
        headers = {"content-type": content_type, "content-location": url or ""}
    # A BytesIO, not the bytes: given bytes, feedparser first tries open() them as a file name.
    return feedparser.parse(io.BytesIO(body), response_headers=headers, sanitize_html=False,
                            resolve_relative_uris=False)


def _parse(body: bytes, spec: SourceSpec, download: Download) -> Any:
    try:
        return parse_json_feed(body) or feedparse(body, download.content_type, download.url)
    except Exception as exc:  # feedparser gives up on some inputs with its own exceptions
        reason = f"not a feed: the parser failed ({type(exc).__name__}: {_line(exc)})"
        raise NotAFeedError(spec.key, spec.url, reason) from exc


def _not_a_feed_reason(body: bytes, download: Download) -> str:
    head = body[:512].lstrip().lower()
    if b"<html" in head or b"<!doctype html" in head or "html" in (download.content_type or ""):
        return "got an HTML page"
    return "no feed version, title or entries found"


class _Run:
    """One fetch run: the fetcher, limits, write lock, the known source rows, deferred outcomes."""

    def __init__(self, sessions: SessionFactory, fetcher: Fetcher, options: FetchOptions,
                 snapshots: dict[str, SourceSnapshot], now: dt.datetime, store: bool,
                 force: bool = False, timer: Callable[[], float] = time.perf_counter) -> None:
        self.sessions, self.fetcher, self.options = sessions, fetcher, options
        self.snapshots, self.now, self.store, self.force = snapshots, now, store, force
        self.timer = timer
        self.slots = asyncio.Semaphore(options.concurrency)
        self.write_lock = asyncio.Lock()
        self.deferred: list[tuple[SourceSnapshot, FetchResult, Download | None]] = []

    async def source(self, spec: SourceSpec) -> FetchResult:
        """Fetch, parse and store one source, unless it is not due; failures end as errors."""
        if self._not_due(spec):
            result = FetchResult(spec.key, FetchStatus.NOT_DUE, None)  # no request, nothing stored
        else:
            result = await self._fetched(spec)
        metrics.active().fetched(spec.key, result.status)
        return result

    def _not_due(self, spec: SourceSpec) -> bool:
        known = self.snapshots.get(spec.key)
        if not self.store or self.force or known is None or spec.is_local:  # a check fetches
            return False
        return not due.is_due(self.now, known.next_fetch_at)

    async def _fetched(self, spec: SourceSpec) -> FetchResult:
        async with self.slots:
            watch = Stopwatch(self.timer)
            result, download = await self._guarded(spec, watch)
            result.seconds = watch.seconds
            if len(result.warnings) > MAX_WARNINGS:
                extra = len(result.warnings) - MAX_WARNINGS
                result.warnings = [*result.warnings[:MAX_WARNINGS], f"... and {extra} more"]
            known = self.snapshots.get(spec.key)
            if self.store and known and result.status != FetchStatus.OK:  # OK: stored already
                fresh = download if result.status == FetchStatus.NOT_MODIFIED else None
                self.deferred.append((known, result, fresh))
            return result

    async def _guarded(
        self, spec: SourceSpec, watch: Stopwatch
    ) -> tuple[FetchResult, Download | None]:
        try:
            return await self._fetch_and_store(spec, watch)
        except SourceError as exc:
            http_status = getattr(exc, "http_status", None)
            return FetchResult(spec.key, FetchStatus.ERROR, http_status, error=exc.reason), None
        except SQLAlchemyError as exc:
            log.warning("storing %s failed: %s", spec.key, _line(exc))
            reason = f"{STORAGE_FAILED}: {_line(exc)}"
            return FetchResult(spec.key, FetchStatus.ERROR, None, error=reason), None
        except Exception as exc:  # a bug on one source's input must not stop the others
            log.exception("unexpected failure on source %s", spec.key)
            reason = f"internal error: {type(exc).__name__}: {_line(exc)}"
            return FetchResult(spec.key, FetchStatus.ERROR, None, error=reason), None

    async def _fetch_and_store(self, spec: SourceSpec, watch: Stopwatch) -> tuple[
        FetchResult, Download
    ]:
        known = self.snapshots.get(spec.key) if self.store else None
        validators = Validators(known.etag, known.last_modified) if known else Validators()
        download = await self.fetcher.fetch(spec, validators, watch)
        size = len(download.body or b"")
        result = FetchResult(spec.key, FetchStatus.OK, download.http_status, bytes=size)
        if download.body is None or (known and known.body_hash == download.body_hash):
            result.status = FetchStatus.NOT_MODIFIED
            return result, download
        try:
            with watch.running():
                feed, result.warnings = await asyncio.to_thread(
                    parse_document, download.body, spec, download, self.now
                )
        except SourceError as exc:  # not a feed: keep the HTTP status and size in the result
            result.status, result.error = FetchStatus.ERROR, exc.reason
            return result, download
        result.entries_total = feed.total
        if self.store:
            await self._store(spec, result, feed, download, watch)
        else:
            with watch.running():
                await self._count(spec, result, feed)
        return result, download

    async def _store(self, spec: SourceSpec, result: FetchResult, feed: NormalizedFeed,
                     download: Download, watch: Stopwatch) -> None:
        """Entries, outcome, body hash and due time of one source in one transaction."""
        known = self.snapshots[spec.key]  # every spec was synced before a storing run
        async with self.write_lock:
            with watch.running():
                async with self.sessions() as session:
                    counts = await storage.write_entries(session, known.id, feed.entries, self.now)
                    result.entries_new, result.entries_updated = counts
                    result.seconds = watch.elapsed()  # stored with the outcome
                    outcome = self._outcome(known.id, result, download, feed.interval)
                    await storage.record_outcomes(session, [outcome], self.now)
                    await session.commit()

    async def _count(self, spec: SourceSpec, result: FetchResult, feed: NormalizedFeed) -> None:
        """How many entries a storing run would add or update (check mode: read only)."""
        known = self.snapshots.get(spec.key)
        async with self.sessions() as session:
            counts = await storage.count_changes(session, known.id if known else None,
                                                 feed.entries)
        result.entries_new, result.entries_updated = counts

    async def record_deferred(self) -> None:
        """Store every not_modified and error outcome of the run in one short transaction.

        They carry no entries, so writing them together costs one commit, not one per
        source (a crash loses only this bookkeeping). A not_modified download brings
        validators to store and keeps the last interval unless it says a new max-age; an
        error keeps the old validators (a body that failed to parse is fetched in full
        next time) and makes the source due on the next run.
        """
        outcomes = [self._outcome(known.id, result, download,
                                  due.previous_interval(known.last_fetched_at, known.next_fetch_at))
                    for known, result, download in self.deferred]
        if not outcomes:
            return
        try:
            async with self.write_lock, self.sessions() as session:
                await storage.record_outcomes(session, outcomes, self.now)
                await session.commit()
        except SQLAlchemyError as exc:
            log.warning("recording the fetch outcomes failed: %s", _line(exc))

    def _outcome(self, source_id: int, result: FetchResult, download: Download | None,
                 interval: dt.timedelta | None) -> storage.Outcome:
        """What to store of one fetch: validators, body hash and when it is due again."""
        if download is None:  # an error: keep validators and hash, due on the next run
            return storage.Outcome(source_id, result)
        next_at = None  # a local file (no HTTP status) is read whenever it changed
        if download.http_status is not None:
            hint = due.longest([download.max_age, interval])
            next_at = due.next_fetch_at(self.now, hint, self.options.due_floor,
                                        self.options.due_ceiling)
        validators = (download.validators.etag, download.validators.last_modified)
        return storage.Outcome(source_id, result, validators, download.body_hash, next_at)


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


async def _prepare(sessions: SessionFactory, specs: Sequence[SourceSpec],
                   store_results: bool) -> dict[str, SourceSnapshot]:
    async with sessions() as session:
        if not store_results:
            return await storage.read_snapshots(session, [s.key for s in specs])
        rows = await storage.sync_sources(session, list(specs))
        await session.commit()
        return {key: storage.snapshot(row) for key, row in rows.items()}


async def fetch_sources(
    sessions: SessionFactory,
    specs: list[SourceSpec],
    options: FetchOptions,
    *,
    now: dt.datetime,
    store: bool = True,
    progress: Callable[[FetchResult], None] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    force: bool = False,
    timer: Callable[[], float] = time.perf_counter,
) -> list[FetchResult]:
    """Fetch every enabled spec; one result per enabled spec, in spec order.

    A source whose stored ``next_fetch_at`` is after ``now`` is ``not_due``: no request,
    nothing written; ``force`` fetches it anyway. ``timer`` (a monotonic clock) measures
    each result's ``seconds``.
    """
    snapshots = await _prepare(sessions, specs, store)  # disabled ones too: their flag is shown
    enabled = [spec for spec in specs if spec.enabled]
    async with Fetcher(options, transport) as fetcher:
        run = _Run(sessions, fetcher, options, snapshots, now, store, force, timer)

        async def one(spec: SourceSpec) -> FetchResult:
            result = await run.source(spec)
            if progress is not None:
                progress(result)
            return result

        results = list(await asyncio.gather(*(one(spec) for spec in enabled)))
    await run.record_deferred()
    return results
