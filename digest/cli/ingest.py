"""Handlers of the ingestion commands: ``db``, ``fetch``, ``sources``, ``samples``, ``run``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from digest import __version__
from digest.cli.output import format_table
from digest.config import Settings
from digest.domain.errors import DigestError
from digest.ingest.sources import SourceSpec, load_sources
from digest.store.db import make_engine, migrate, open_database

if TYPE_CHECKING:
    from digest.ingest.pipeline import FetchOptions, FetchResult



def fetch_options(settings: Settings) -> FetchOptions:
    """Fetch options from settings."""
    from digest.ingest.pipeline import FetchOptions

    return FetchOptions(
        concurrency=settings.fetch_concurrency,
        per_host=settings.fetch_per_host,
        timeout=settings.fetch_timeout,
        max_bytes=settings.fetch_max_bytes,
        max_redirects=settings.fetch_max_redirects,
        user_agent=f"compiler-digest/{__version__} (+{settings.site_url})",
    )


async def db_upgrade(settings: Settings, args: argparse.Namespace) -> int:
    """``digest db upgrade``."""
    engine = make_engine(settings.database_url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()
    print("database is at the latest revision", file=sys.stderr)
    return 0


def _progress(total: int) -> Callable[[FetchResult], None]:
    done = 0
    tty = sys.stderr.isatty()

    def report(result: FetchResult) -> None:
        nonlocal done
        done += 1
        if tty:
            detail = result.error or f"{result.entries_new} new, {result.entries_total} entries"
            print(f"[{done}/{total}] {result.source}: {result.status} ({detail})", file=sys.stderr)

    return report


def _results_table(results: list[FetchResult]) -> str:
    rows = [
        (
            r.source,
            r.status,
            r.http_status if r.http_status is not None else "-",
            r.entries_total,
            r.entries_new,
            r.entries_updated,
            r.bytes,
            f"{r.seconds:.2f}",
            (r.error or (f"{len(r.warnings)} warning(s)" if r.warnings else ""))[:70],
        )
        for r in results
    ]
    headers = ("source", "status", "http", "entries", "new", "updated", "bytes", "seconds", "note")
    return format_table(headers, rows, right=(2, 3, 4, 5, 6, 7))


async def _fetch(settings: Settings, *, store: bool) -> list[FetchResult]:
    from digest.ingest.pipeline import fetch_sources

    specs = [s for s in load_sources(settings.sources) if s.enabled]
    if not specs:
        raise DigestError("no enabled source in the source list")
    async with _fetch_lock(settings, store), open_database(settings.database_url) as sessions:
        return await fetch_sources(
            sessions, specs, fetch_options(settings), now=settings.clock(), store=store,
            progress=_progress(len(specs)),
        )


def _fetch_lock(settings: Settings, store: bool) -> AbstractAsyncContextManager[None]:
    """One storing fetch at a time (a second one waits); a check stores nothing and takes no lock."""
    from digest.store.locks import FETCH_LOCK, cli_lock

    return cli_lock(settings, FETCH_LOCK) if store else nullcontext()


def _report(results: list[FetchResult], as_json: bool) -> int:
    from digest.cli.main import print_json
    from digest.ingest.pipeline import STORAGE_FAILED

    if as_json:
        print_json([r.as_json() for r in results])
    else:
        print(_results_table(results))
    good = [r for r in results if r.status in ("ok", "not_modified")]
    unstored = [r for r in results if (r.error or "").startswith(STORAGE_FAILED)]
    if unstored:
        print(f"digest: error: {len(unstored)} source(s) were fetched but could not be stored "
              f"({unstored[0].error}); fix the database or disk and fetch again", file=sys.stderr)
        return 1
    if not good:
        print(f"digest: error: no source could be reached ({len(results)} failed); {OFFLINE_HINT}",
              file=sys.stderr)
        return 1
    return 0


async def fetch(settings: Settings, args: argparse.Namespace) -> int:
    """``digest fetch``: fetch every enabled source and store the entries."""
    return _report(await _fetch(settings, store=True), args.json)


async def sources_check(settings: Settings, args: argparse.Namespace) -> int:
    """``digest sources check``: fetch and report, store nothing."""
    return _report(await _fetch(settings, store=False), args.json)


async def sources_list(settings: Settings, args: argparse.Namespace) -> int:
    """``digest sources list``: the configured sources and their last outcome."""
    from digest.cli.main import print_json
    from digest.ingest.pipeline import source_states, sync_sources

    specs = load_sources(settings.sources)
    async with open_database(settings.database_url) as sessions:
        async with sessions.begin() as session:
            await sync_sources(session, specs)
        states = {state.key: state for state in await source_states(sessions)}
    rows = [_source_row(spec, states.get(spec.key)) for spec in specs]
    if args.json:
        print_json(rows)
    else:
        headers = ("source", "kind", "weight", "enabled", "last fetch", "outcome", "failures",
                   "entries", "error")
        print(format_table(headers, [tuple(r.values())[:9] for r in rows], right=(2, 6, 7)))
    return 0


def _source_row(spec: SourceSpec, state: object) -> dict[str, object]:
    last = getattr(state, "last_fetched_at", None)
    return {
        "key": spec.key,
        "kind": spec.kind,
        "weight": spec.weight,
        "enabled": spec.enabled,
        "last_fetched_at": last.isoformat(timespec="seconds") if last else None,
        "last_status": getattr(state, "last_status", None),
        "consecutive_failures": getattr(state, "consecutive_failures", 0),
        "entries": getattr(state, "entries", 0),
        "last_error": (getattr(state, "last_error", None) or "")[:60] or None,
        "name": spec.name,
        "url": spec.url,
        "last_http_status": getattr(state, "last_http_status", None),
    }


async def samples(settings: Settings, args: argparse.Namespace) -> int:
    """``digest samples``: write the offline sample feeds and their source file."""
    from digest.ingest.samples import write_samples

    path = write_samples(Path(args.out), settings.clock())
    print(path)
    print(f"now run: DIGEST_SOURCES={path} digest run", file=sys.stderr)
    return 0


async def run(settings: Settings, args: argparse.Namespace) -> int:
    """``digest run``: the daily job: fetch, build and publish the latest closed window."""
    results = await _fetch(settings, store=True)
    code = _report(results, args.json)
    if code:
        return code
    from digest.cli import digests as cmd_digest
    from digest.cli import publish as cmd_publish

    now = settings.clock()
    await cmd_digest.build_latest(settings, now)
    return await cmd_publish.publish_latest(settings, now)


OFFLINE_HINT = (
    "to run offline with the bundled samples: make demo (or: digest samples --out var/samples"
    " && DIGEST_SOURCES=var/samples/sources.toml digest run)"
)
