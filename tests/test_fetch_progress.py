"""``digest fetch``: ``seconds`` is time on the wire; progress per source on a terminal, one line on a pipe.

The timing tests need no wall clock: the stopwatch's timer is injected and counts
the requests the real feed server (tests/feedserver.py) has answered, 8 "seconds"
each, so a request that waited for its host's slot while others were answered
would show 16, 24, 32 — the bug these tests pin down.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import pty
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from feeds import rfc822, rss
from feedserver import FeedServer, Reply

from digest.domain.status import FetchStatus
from digest.ingest.fetch import Fetcher, FetchOptions, Stopwatch, Validators
from digest.ingest.pipeline import fetch_sources
from digest.ingest.sources import SourceSpec
from digest.store.db import SessionFactory

NOW = dt.datetime(2026, 12, 5, 3, 0, tzinfo=dt.UTC)
ONE_HOST = FetchOptions(per_host=1, concurrency=8, timeout=10.0, retry_backoff=0.01)
WIRE = 8.0  # "seconds" per answered request on the virtual timer


@pytest.fixture
def server() -> Iterator[FeedServer]:
    with FeedServer() as feed_server:
        yield feed_server


def per_request(server: FeedServer) -> Callable[[], float]:
    """A monotonic timer that moves ``WIRE`` with every request the server has seen, and only then."""
    return lambda: WIRE * len(server.requests)


def specs(server: FeedServer, n: int, reply: Reply) -> list[SourceSpec]:
    return [SourceSpec(f"s{i}", f"S{i}", server.serve(f"/s{i}.xml", reply)) for i in range(n)]


def feed() -> bytes:
    return rss([{"title": "t", "guid": "tag:ex,2026:t", "link": "https://ex.org/t", "pubDate": rfc822(NOW)}])


async def test_waiting_for_the_host_slot_is_not_time_on_the_wire(server: FeedServer) -> None:
    sources = specs(server, 4, Reply(feed()))
    watches = [Stopwatch(per_request(server)) for _ in sources]
    async with Fetcher(ONE_HOST) as fetcher:  # one request at a time to 127.0.0.1
        downloads = await asyncio.gather(*(fetcher.fetch(s, Validators(), w) for s, w in zip(
            sources, watches, strict=True)))
    assert all(d.http_status == 200 for d in downloads)
    assert [w.seconds for w in watches] == [WIRE] * 4  # not 8, 16, 24, 32


async def test_fetch_results_report_each_sources_own_seconds(
        sqlite_sessions: SessionFactory, server: FeedServer) -> None:
    """Through the pipeline: four answers of one host, one at a time, are 8 s each (304: nothing to parse)."""
    sources = specs(server, 4, Reply(status=304, content_type=None))
    results = await fetch_sources(sqlite_sessions, sources, ONE_HOST, now=NOW, timer=per_request(server))
    assert [r.status for r in results] == [FetchStatus.NOT_MODIFIED] * 4
    seconds = [r.seconds for r in results]
    assert seconds == [WIRE] * 4
    assert all(s < sum(seconds) - s for s in seconds)


async def test_the_retry_backoff_is_not_time_on_the_wire(server: FeedServer) -> None:
    (source,) = specs(server, 1, Reply(status=503))
    watch = Stopwatch(per_request(server))
    slow_retry = FetchOptions(per_host=1, retry_backoff=0.05)
    async with Fetcher(slow_retry) as fetcher:
        with pytest.raises(Exception, match="after 1 retry"):
            await fetcher.fetch(source, Validators(), watch)
    assert watch.seconds == 2 * WIRE  # two requests on the wire; the pause between them not counted


# -- progress on stderr: a terminal gets a line per source, a pipe one summary -------------------

def _env(tmp: Path, sources: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    return env | {"DIGEST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'p.db'}", "DIGEST_NOW": NOW.isoformat(),
                  "DIGEST_SOURCES": str(sources)}


@pytest.fixture
def two_feeds(tmp_path: Path) -> Path:
    for name in ("a", "b"):
        (tmp_path / f"{name}.xml").write_bytes(feed())
    toml = tmp_path / "sources.toml"
    toml.write_text('[[source]]\nkey = "a"\nname = "A"\nurl = "a.xml"\n\n'
                    '[[source]]\nkey = "b"\nname = "B"\nurl = "b.xml"\n', encoding="utf-8")
    return toml


def test_on_a_pipe_progress_is_one_summary_line(tmp_path: Path, two_feeds: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "digest", "fetch", "--json"], capture_output=True, text=True,
                         env=_env(tmp_path, two_feeds), cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [x for x in out.stderr.splitlines() if not x.startswith("digest: created a new database")]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("fetched 2 sources in ")
    assert lines[0].endswith(": 2 ok; 2 new entries, 0 updated")
    assert out.stdout.lstrip().startswith("[")  # the JSON on stdout is untouched


def test_on_a_terminal_every_source_gets_a_line_as_it_ends(tmp_path: Path, two_feeds: Path) -> None:
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "digest", "fetch"], stdout=subprocess.PIPE,
                              stderr=follower, env=_env(tmp_path, two_feeds), cwd=tmp_path, timeout=120)
        os.close(follower)
        follower = -1
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert done.returncode == 0
    lines = [x for x in seen.decode().splitlines() if x and not x.startswith("digest: created")]
    assert [x.split(":")[0] for x in lines[:2]] in (["[1/2] a", "[2/2] b"], ["[1/2] b", "[2/2] a"])
    assert all("ok (1 new, 1 entries, " in x for x in lines[:2])
    assert lines[2].startswith("fetched 2 sources in ") and len(lines) == 3
    assert b"source" in done.stdout  # the table still goes to stdout
