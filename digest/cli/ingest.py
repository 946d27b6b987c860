"""The ingestion commands: ``db``, ``fetch``, ``samples`` (and ``sources check``'s fetch).

Progress of a fetch goes to stderr: on a terminal one line per source as it
ends; on a pipe or a file one summary line once every source has ended.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from digest import bootstrap
from digest.cli.output import format_table, print_json, tell_wait

if TYPE_CHECKING:
    from digest.config import Settings
    from digest.ingest.pipeline import FetchResult

OFFLINE_HINT = (
    "to run offline with the bundled samples: make demo (or: digest samples --out var/samples"
    " && DIGEST_SOURCES=var/samples/sources.toml digest run)"
)


def add_commands(sub: Any) -> None:
    """Register ``db``, ``fetch`` and ``samples`` on the CLI (``sources``: digest.cli.sources)."""
    db = sub.add_parser("db", help="database maintenance")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    db_sub.add_parser("upgrade", help="apply migrations up to head").set_defaults(handler=db_upgrade)

    fetch = sub.add_parser("fetch", help="fetch every enabled source and store new entries")
    fetch.add_argument("--json", action="store_true", help="print a JSON array, one object per source")
    fetch.add_argument("--force", action="store_true", help="fetch sources that are not due yet too")
    fetch.set_defaults(handler=fetch_cmd)

    samples_cmd = sub.add_parser("samples", help="write the bundled offline sample feeds")
    samples_cmd.add_argument("--out", default="var/samples", help="folder to write (default var/samples)")
    samples_cmd.set_defaults(handler=samples)


async def db_upgrade(settings: Settings, args: argparse.Namespace) -> int:
    """``digest db upgrade``."""
    async with bootstrap.database(settings):  # opening it migrates it
        pass
    print("database is at the latest revision", file=sys.stderr)
    return 0


def fetch_progress(total: int) -> Callable[[FetchResult], None]:
    """The progress of a fetch of ``total`` sources on stderr (see the module's docstring)."""
    return FetchProgress(total, sys.stderr.isatty())


class FetchProgress:
    """Called with each source's result as it ends: a line per source (``lines``), a summary at the end."""

    def __init__(self, total: int, lines: bool) -> None:
        self.total, self.lines = total, lines
        self.results: list[FetchResult] = []
        self.started = time.monotonic()

    def __call__(self, result: FetchResult) -> None:
        self.results.append(result)
        if self.lines:
            detail = result.error or f"{result.entries_new} new, {result.entries_total} entries"
            print(f"[{len(self.results)}/{self.total}] {result.source}: {result.status} "
                  f"({detail[:100]}, {result.seconds:.1f} s)", file=sys.stderr, flush=True)
        if len(self.results) == self.total:
            print(self.summary(time.monotonic() - self.started), file=sys.stderr, flush=True)

    def summary(self, seconds: float) -> str:
        """``fetched 3 sources in 1.2 s: 2 ok, 1 error; 5 new entries, 0 updated``."""
        counts = Counter(str(r.status) for r in self.results)
        statuses = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        new = sum(r.entries_new for r in self.results)
        updated = sum(r.entries_updated for r in self.results)
        return (f"fetched {len(self.results)} sources in {seconds:.1f} s: {statuses or 'none'}; "
                f"{new} new entries, {updated} updated")


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


async def _fetch(settings: Settings, *, store: bool, force: bool = False) -> list[FetchResult]:
    # the pipeline brings httpx and feedparser: imported here, not for `digest --help`
    from digest.daily import enabled
    from digest.ingest.pipeline import fetch_sources

    specs = enabled(bootstrap.sources(settings))
    async with _fetch_lock(settings, store), bootstrap.database(settings) as sessions:
        return await fetch_sources(
            sessions, specs, bootstrap.fetch_options(settings), now=bootstrap.clock(settings)(),
            store=store, progress=fetch_progress(len(specs)), force=force,
        )


def _fetch_lock(settings: Settings, store: bool) -> AbstractAsyncContextManager[None]:
    """One storing fetch at a time (a second one waits); a check stores nothing and takes no lock."""
    from digest.store.locks import FETCH_LOCK

    return bootstrap.run_lock(settings, FETCH_LOCK, on_wait=tell_wait) if store else nullcontext()


def print_results(results: list[FetchResult], as_json: bool) -> None:
    """The fetch results: a table, or a JSON array."""
    if as_json:
        print_json([r.as_json() for r in results])
    else:
        print(_results_table(results))


def print_failure(failure: str) -> None:
    """Why a command failed, in one line on stderr; the offline hint when no source answered."""
    from digest.daily import NO_SOURCE

    hint = f"; {OFFLINE_HINT}" if failure.startswith(NO_SOURCE) else ""
    print(f"digest: error: {failure}{hint}", file=sys.stderr)


def _report(results: list[FetchResult], as_json: bool) -> int:
    # digest.daily holds the one verdict on a fetch (and brings the pipeline): imported on use
    from digest.daily import fetch_failure

    print_results(results, as_json)
    failure = fetch_failure(results)
    if failure:
        print_failure(failure)
    return 1 if failure else 0


async def fetch_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest fetch``: fetch every enabled source and store the entries."""
    return _report(await _fetch(settings, store=True, force=args.force), args.json)


async def sources_check(settings: Settings, args: argparse.Namespace) -> int:
    """``digest sources check``: fetch and report, store nothing."""
    return _report(await _fetch(settings, store=False), args.json)


async def samples(settings: Settings, args: argparse.Namespace) -> int:
    """``digest samples``: write the offline sample feeds and their source file."""
    from digest.ingest.samples import write_samples

    path = write_samples(Path(args.out), bootstrap.clock(settings)())
    print(path)
    print(f"now run: DIGEST_SOURCES={path} digest run", file=sys.stderr)
    return 0
