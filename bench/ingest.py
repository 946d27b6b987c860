"""Benchmark ingestion against bare feedparser on the same files, in the same run.

    python bench/ingest.py DIR

Two cases, each into a fresh SQLite database in a temporary folder: every
file under DIR as a local-path source, and 30 generated RSS feeds of 200
entries each (HTML bodies with links, the shape of a busy blog). Printed per
case: the bare ``feedparser.parse`` time over the same bytes (best of two),
the first ingest (entries, seconds, entries/s, ratio to bare parse), and a
second ingest over the unchanged files (its cost relative to the first).
Targets: first ingest <= 1.1x bare parse on DIR, <= 1.2x on the generated
feeds; a second run >= 100x cheaper than the first.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import io
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from email.utils import format_datetime
from pathlib import Path

import feedparser

from digest.ingest.pipeline import FetchOptions, FetchResult, fetch_sources
from digest.ingest.sources import SourceSpec
from digest.store.db import open_database

SKIPPED_SUFFIXES = {".md", ".tsv", ".txt"}
GENERATED_FEEDS, GENERATED_ENTRIES = 30, 200
START = dt.datetime(2026, 1, 5, 8, 0, tzinfo=dt.UTC)
WORDS = ("compiler", "loop", "vectorizer", "register", "allocation", "pass", "pipeline", "MLIR",
         "dialect", "lowering", "inliner", "profile", "guided", "LLVM", "GCC", "backend", "parser",
         "lexer", "type", "checker", "borrow", "IR", "SSA", "phi", "codegen", "linker", "LTO")


@dataclass(frozen=True)
class Case:
    """One benchmark input: its files, their bytes, and their local-path sources."""

    name: str
    files: list[Path]
    bodies: list[bytes]
    specs: list[SourceSpec]
    first_target: float


def feed_files(folder: Path) -> list[Path]:
    """Every regular file under ``folder`` that may be a feed, in a stable order."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix not in SKIPPED_SUFFIXES)


def case(name: str, files: list[Path], first_target: float) -> Case:
    """A case over ``files``: one local-path source each."""
    specs = [SourceSpec(key=f"f{i}", name=p.name, url=str(p.resolve())) for i, p in enumerate(files)]
    return Case(name, files, [p.read_bytes() for p in files], specs, first_target)


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def _item(rng: random.Random, feed: int, number: int) -> str:
    url = f"https://blog{feed}.example.org/posts/{number}-{rng.choice(WORDS)}"
    paragraphs = "".join(
        f"<p>{_sentence(rng, 25)} See <a href=\"https://example.org/{rng.randrange(10**6)}\">"
        f"<b>this</b></a> &amp; <code>-O{rng.randrange(4)}</code>.</p>" for _ in range(8))
    when = format_datetime(START - dt.timedelta(hours=number * 3 + feed), usegmt=True)
    return (f"<item><title>{_sentence(rng, 8)}</title><link>{url}</link>"
            f"<guid isPermaLink=\"false\">feed{feed}-post{number}</guid><pubDate>{when}</pubDate>"
            f"<author>dev{number % 7}@example.org (Dev {number % 7})</author>"
            f"<category>{rng.choice(WORDS)}</category><category>{rng.choice(WORDS)}</category>"
            f"<description>{_escape(f'<p>{_sentence(rng, 30)}</p>')}</description>"
            f"<content:encoded><![CDATA[{paragraphs}]]></content:encoded></item>\n")


def _escape(markup: str) -> str:
    return markup.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def generated_feed(feed: int, entries: int) -> bytes:
    """One RSS 2.0 document with ``entries`` items (deterministic per ``feed``)."""
    rng = random.Random(feed)
    items = "".join(_item(rng, feed, n) for n in range(entries))
    return ('<?xml version="1.0" encoding="utf-8"?>\n'
            '<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/">'
            f"<channel><title>Generated blog {feed}</title>"
            f"<link>https://blog{feed}.example.org/</link><description>d</description>\n"
            f"{items}</channel></rss>\n").encode()


def write_generated(folder: Path) -> list[Path]:
    """The generated feeds as files under ``folder``."""
    paths = []
    for feed in range(GENERATED_FEEDS):
        path = folder / f"generated-{feed:02d}.xml"
        path.write_bytes(generated_feed(feed, GENERATED_ENTRIES))
        paths.append(path)
    return paths


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


def _statuses(results: list[FetchResult]) -> dict[str, int]:
    return dict(Counter(str(r.status) for r in results))


def report(item: Case) -> None:
    """Benchmark one case and print its figures."""
    bare = bare_parse_seconds(item.bodies)
    (first_s, first), (second_s, second) = asyncio.run(ingest_twice(item.specs))
    entries = sum(r.entries_new for r in first)
    print(f"== {item.name}")
    print(f"files: {len(item.files)}  bytes: {sum(map(len, item.bodies)):,}")
    print(f"bare feedparser.parse: {bare:.3f} s")
    print(f"first ingest: entries {entries}  seconds {first_s:.3f}  "
          f"entries/s {entries / first_s:.1f}  ratio to bare parse {first_s / bare:.2f}x "
          f"(target <= {item.first_target}x)  statuses {_statuses(first)}")
    print(f"second ingest (unchanged files): seconds {second_s:.3f}  "
          f"{first_s / second_s:.1f}x cheaper than the first (target >= 100x)  "
          f"statuses {_statuses(second)}")


def main() -> int:
    """Run the benchmark on DIR and on the generated feeds, and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    folder = parser.parse_args().folder
    files = feed_files(folder)
    if not files:
        print(f"no files under {folder}", file=sys.stderr)
        return 2
    report(case(str(folder), files, 1.1))
    with tempfile.TemporaryDirectory() as generated:
        name = f"generated {GENERATED_FEEDS} x {GENERATED_ENTRIES}"
        report(case(name, write_generated(Path(generated)), 1.2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
