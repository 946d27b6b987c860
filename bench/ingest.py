"""Benchmark ingestion against bare feedparser on the same files, in the same run.

    python bench/ingest.py DIR

Every file under DIR becomes a local-path source; a fresh SQLite database in a
temporary folder receives them. Printed: the bare ``feedparser.parse`` time
over the same bytes (best of two), the first ingest (entries, seconds,
entries/s, ratio to bare parse; target <= 1.5x), and a second ingest over the
unchanged files (its cost relative to the first; target >= 10x cheaper).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import io
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import feedparser

from digest.ingest.pipeline import FetchOptions, FetchResult, fetch_sources
from digest.ingest.sources import SourceSpec
from digest.store.db import open_database

SKIPPED_SUFFIXES = {".md", ".tsv", ".txt"}


def feed_files(folder: Path) -> list[Path]:
    """Every regular file under ``folder`` that may be a feed, in a stable order."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix not in SKIPPED_SUFFIXES)


def bare_parse_seconds(bodies: list[bytes]) -> float:
    """feedparser.parse over every body, best of two rounds."""
    rounds = []
    for _ in range(2):
        started = time.perf_counter()
        for body in bodies:
            feedparser.parse(io.BytesIO(body))
        rounds.append(time.perf_counter() - started)
    return min(rounds)


async def ingest_twice(specs: list[SourceSpec]) -> tuple[tuple[float, list[FetchResult]], ...]:
    """Two timed ingest runs into one fresh database (migration not timed)."""
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        async with open_database(f"sqlite+aiosqlite:///{folder}/bench.db") as sessions:
            for _ in range(2):
                started = time.perf_counter()
                results = await fetch_sources(sessions, specs, FetchOptions(),
                                              now=dt.datetime.now(dt.UTC))
                runs.append((time.perf_counter() - started, results))
    return tuple(runs)


def main() -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    folder = parser.parse_args().folder
    files = feed_files(folder)
    if not files:
        print(f"no files under {folder}", file=sys.stderr)
        return 2
    bodies = [path.read_bytes() for path in files]
    specs = [SourceSpec(key=f"f{i}", name=p.name, url=str(p.resolve())) for i, p in enumerate(files)]
    bare = bare_parse_seconds(bodies)
    (first_s, first), (second_s, second) = asyncio.run(ingest_twice(specs))
    entries = sum(r.entries_new for r in first)
    print(f"files: {len(files)}  bytes: {sum(map(len, bodies)):,}")
    print(f"bare feedparser.parse: {bare:.3f} s")
    print(f"first ingest: entries {entries}  seconds {first_s:.3f}  "
          f"entries/s {entries / first_s:.1f}  ratio to bare parse {first_s / bare:.2f}x "
          f"(target <= 1.5x)  statuses {dict(Counter(str(r.status) for r in first))}")
    print(f"second ingest (unchanged files): seconds {second_s:.3f}  "
          f"{first_s / second_s:.1f}x cheaper than the first (target >= 10x)  "
          f"statuses {dict(Counter(str(r.status) for r in second))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
