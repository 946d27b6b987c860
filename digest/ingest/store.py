"""Database side of ingestion: source rows, entry upserts, fetch outcomes.

Helpers take a session and never commit; the caller (``ingest``) owns the
transaction, one per source. Entries are written in bulk with Core
statements (no ORM objects): the stored ``(entry_key, content_hash)`` pairs
of the document's keys are read in one query per 1,000 keys, new rows go in
with one executemany INSERT per 500 rows, changed rows with one executemany
UPDATE by primary key per 500 rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Boolean, String, Table, Text, bindparam, case, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from digest.domain.status import FetchStatus
from digest.ingest.normalize import NormalizedEntry
from digest.ingest.sources import SourceSpec
from digest.store.db import SessionFactory
from digest.store.models import Entry, FetchLog, Source

KEY_BATCH = 1000
ROW_BATCH = 500
_ENTRY = cast(Table, Entry.__table__)  # Core statements: no ORM objects per row
_UPDATE_ENTRY = update(_ENTRY).where(_ENTRY.c.id == bindparam("entry_id"))


@dataclass(frozen=True)
class SourceSnapshot:
    """What a fetch needs from a stored source: its id, cache validators and due time."""

    id: int
    etag: str | None
    last_modified: str | None
    body_hash: str | None
    last_fetched_at: dt.datetime | None = None
    next_fetch_at: dt.datetime | None = None


@dataclass(frozen=True)
class SourceState:
    """One source's configuration and last outcome, for ``digest sources list``."""

    key: str
    name: str
    url: str
    kind: str
    weight: float
    enabled: bool
    last_fetched_at: dt.datetime | None
    last_status: str | None
    last_http_status: int | None
    last_error: str | None
    consecutive_failures: int
    entries: int

    def as_json(self) -> dict[str, object]:
        """A JSON-ready dict (times in ISO 8601)."""
        data = dict(self.__dict__)
        data["last_fetched_at"] = self.last_fetched_at.isoformat() if self.last_fetched_at else None
        return data


@dataclass
class FetchResult:
    """The outcome of fetching one source: the ``digest fetch --json`` object, and what is stored."""

    source: str
    status: FetchStatus
    http_status: int | None
    entries_total: int = 0
    entries_new: int = 0
    entries_updated: int = 0
    bytes: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    error: str | None = None

    def as_json(self) -> dict[str, object]:
        """Exactly the DESIGN ``digest fetch --json`` object."""
        return {
            "source": self.source, "status": self.status, "http_status": self.http_status,
            "entries_total": self.entries_total, "entries_new": self.entries_new,
            "entries_updated": self.entries_updated, "bytes": self.bytes,
            "seconds": round(self.seconds, 3), "warnings": list(self.warnings), "error": self.error,
        }


async def sync_sources(session: AsyncSession, specs: Sequence[SourceSpec]) -> dict[str, Source]:
    """Insert or update one ``Source`` row per spec (by key); a moved feed forgets validators and due time."""
    keys = [spec.key for spec in specs]
    found = await session.scalars(select(Source).where(Source.key.in_(keys)))
    rows = {row.key: row for row in found}
    for spec in specs:
        row = rows.get(spec.key)
        if row is None:
            row = rows[spec.key] = Source(key=spec.key, url=spec.url, consecutive_failures=0)
            session.add(row)
        elif row.url != spec.url:
            row.url, row.etag, row.last_modified, row.body_hash = spec.url, None, None, None
            row.next_fetch_at = None  # the new URL is due at once
        row.name, row.kind = spec.name, spec.kind
        row.weight, row.enabled = spec.weight, spec.enabled
    await session.flush()
    return rows


def snapshot(row: Source) -> SourceSnapshot:
    """The fetch-relevant part of a source row."""
    return SourceSnapshot(row.id, row.etag, row.last_modified, row.body_hash,
                          row.last_fetched_at, row.next_fetch_at)


async def read_snapshots(session: AsyncSession, keys: Sequence[str]) -> dict[str, SourceSnapshot]:
    """Snapshots of the stored sources among ``keys`` (read only)."""
    rows = await session.scalars(select(Source).where(Source.key.in_(list(keys))))
    return {row.key: snapshot(row) for row in rows}


async def stored_hashes(session: AsyncSession, source_id: int, keys: Sequence[str]) -> dict[
    str, tuple[int, str]
]:
    """``entry_key -> (id, content_hash)`` for the stored entries among ``keys``."""
    found: dict[str, tuple[int, str]] = {}
    for start in range(0, len(keys), KEY_BATCH):
        batch = list(keys[start:start + KEY_BATCH])
        query = select(Entry.entry_key, Entry.id, Entry.content_hash).where(
            Entry.source_id == source_id, Entry.entry_key.in_(batch)
        )
        found.update({key: (id_, hash_) for key, id_, hash_ in await session.execute(query)})
    return found


def split_changes(
    records: Sequence[NormalizedEntry], stored: dict[str, tuple[int, str]]
) -> tuple[list[NormalizedEntry], list[tuple[int, NormalizedEntry]]]:
    """Records that are new, and ``(id, record)`` pairs whose content hash changed."""
    new = [r for r in records if r.entry_key not in stored]
    changed = [(stored[r.entry_key][0], r) for r in records
               if r.entry_key in stored and stored[r.entry_key][1] != r.content_hash]
    return new, changed


async def count_changes(session: AsyncSession, source_id: int | None,
                        records: Sequence[NormalizedEntry]) -> tuple[int, int]:
    """How many records would be new and how many updated (read only)."""
    if source_id is None:
        return len(records), 0
    stored = await stored_hashes(session, source_id, [r.entry_key for r in records])
    new, changed = split_changes(records, stored)
    return len(new), len(changed)


async def write_entries(session: AsyncSession, source_id: int, records: Sequence[NormalizedEntry],
                        now: dt.datetime) -> tuple[int, int]:
    """Insert new entries and update changed ones in bulk; return (new, updated)."""
    stored = await stored_hashes(session, source_id, [r.entry_key for r in records])
    new, changed = split_changes(records, stored)
    rows = [{**r.row(), "source_id": source_id, "first_seen": now, "updated_at": now} for r in new]
    await _executemany(session, insert(_ENTRY), rows)
    fallback = [_update_row(id_, r, now) for id_, r in changed if r.published_is_fallback]
    dated = [_update_row(id_, r, now) for id_, r in changed if not r.published_is_fallback]
    await _executemany(session, _UPDATE_ENTRY, dated)
    await _executemany(session, _UPDATE_ENTRY, fallback)  # one statement per set of columns
    return len(new), len(changed)


async def _executemany(session: AsyncSession, statement: Any, rows: list[dict[str, Any]]) -> None:
    """One Core executemany per ``ROW_BATCH`` rows (no ORM objects, bounded parameter sets)."""
    for start in range(0, len(rows), ROW_BATCH):
        await session.execute(statement, rows[start:start + ROW_BATCH])


def _update_row(entry_id: int, record: NormalizedEntry, now: dt.datetime) -> dict[str, Any]:
    row = {**record.row(), "entry_id": entry_id, "updated_at": now}
    if record.published_is_fallback:  # keep the first fallback (first-seen) time
        del row["published"], row["published_is_fallback"]
    return row


@dataclass(frozen=True)
class Outcome:
    """One fetch outcome to store on its source row (and as a ``FetchLog`` row).

    ``validators`` None keeps the stored ones (an error); ``body_hash`` None keeps the
    stored hash (a 304); ``next_fetch_at`` None makes the source due on the next run.
    """

    source_id: int
    result: FetchResult
    validators: tuple[str | None, str | None] | None = None
    body_hash: str | None = None
    next_fetch_at: dt.datetime | None = None


def _kept_or_new(column: str) -> Any:
    """``column`` as stored when the parameter ``keep`` is true, else the parameter ``column``."""
    return case((bindparam("keep", type_=Boolean), _SOURCE.c[column]),
                else_=bindparam(f"new_{column}", type_=Text))


_SOURCE = cast(Table, Source.__table__)
_FETCH_LOG = cast(Table, FetchLog.__table__)
_RECORD_SOURCE = update(_SOURCE).where(_SOURCE.c.id == bindparam("source_id")).values(
    last_fetched_at=bindparam("now"), last_status=bindparam("status"),
    last_http_status=bindparam("http_status"), last_error=bindparam("error"),
    next_fetch_at=bindparam("next_at"),
    consecutive_failures=case((bindparam("failed", type_=Boolean),
                               _SOURCE.c.consecutive_failures + 1), else_=0),
    etag=_kept_or_new("etag"), last_modified=_kept_or_new("last_modified"),
    body_hash=func.coalesce(bindparam("new_body_hash", type_=String), _SOURCE.c.body_hash),
)


async def record_outcomes(session: AsyncSession, outcomes: Sequence[Outcome],
                          now: dt.datetime) -> None:
    """Store outcomes and next due times on their source rows, with one ``FetchLog`` row each.

    Two executemany statements whatever the number of outcomes.
    """
    if not outcomes:
        return
    await session.execute(_RECORD_SOURCE, [_source_params(o, now) for o in outcomes])
    await session.execute(insert(_FETCH_LOG), [_log_row(o.source_id, o.result, now)
                                               for o in outcomes])


def _source_params(outcome: Outcome, now: dt.datetime) -> dict[str, Any]:
    result = outcome.result
    etag, last_modified = outcome.validators or (None, None)
    return {
        "source_id": outcome.source_id, "now": now, "status": result.status,
        "http_status": result.http_status, "error": result.error,
        "next_at": outcome.next_fetch_at, "failed": result.status == FetchStatus.ERROR,
        "keep": outcome.validators is None, "new_etag": etag, "new_last_modified": last_modified,
        "new_body_hash": outcome.body_hash,
    }


def _log_row(source_id: int, outcome: FetchResult, now: dt.datetime) -> dict[str, Any]:
    return {
        "source_id": source_id, "started_at": now, "status": outcome.status,
        "http_status": outcome.http_status, "entries_total": outcome.entries_total,
        "entries_new": outcome.entries_new, "entries_updated": outcome.entries_updated,
        "bytes": outcome.bytes, "seconds": outcome.seconds, "warnings": list(outcome.warnings),
        "error": outcome.error,
    }


async def source_states(sessions: SessionFactory) -> list[SourceState]:
    """Every stored source with its last outcome and its number of stored entries."""
    counts = (
        select(Entry.source_id, func.count(Entry.id).label("n"))
        .group_by(Entry.source_id)
        .subquery()
    )
    query = (
        select(Source, func.coalesce(counts.c.n, 0))
        .outerjoin(counts, counts.c.source_id == Source.id)
        .order_by(Source.key)
    )
    async with sessions() as session:
        rows = (await session.execute(query)).all()
    return [_state(source, int(n)) for source, n in rows]


def _state(row: Source, entries: int) -> SourceState:
    return SourceState(
        key=row.key, name=row.name, url=row.url, kind=row.kind, weight=row.weight,
        enabled=row.enabled, last_fetched_at=row.last_fetched_at, last_status=row.last_status,
        last_http_status=row.last_http_status, last_error=row.last_error,
        consecutive_failures=row.consecutive_failures, entries=entries,
    )
