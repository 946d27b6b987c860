"""Benchmark: the web archive under load, each page against ``/healthz`` of the same process.

    .venv/bin/python bench/web.py [--seconds 10] [--connections 16]

Writes the bundled samples into a temporary folder, builds their day (``digest run``,
DIGEST_NOW pinned), starts ``python -m digest serve --web`` on a free loopback port and
loads each URL in turn with wrk (``wrk -t2 -cN -dSs --latency URL``, another process).
Prints req/s, mean and percentile latencies, and each route's req/s over ``/healthz``
(``/api/events 304`` is a client revalidating its copy: a 304, counted as an answer).
Targets: every route at least 0.5 x ``/healthz``; ``/d/DATE`` and ``/api/events`` p99 under 100 ms.
Traffic goes to 127.0.0.1 only, and every run is bounded by ``--seconds``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOW = dt.datetime(2026, 12, 5, 3, 0, tzinfo=dt.UTC)  # the samples' clock, as in bench/startup.py
sys.path.insert(0, str(ROOT))

from digest.domain.window import latest_closed  # noqa: E402
from digest.ingest.samples import write_samples  # noqa: E402

DATE = latest_closed(NOW, "Asia/Shanghai").isoformat()  # the day the samples build at NOW
PERCENTILES = ("50%", "90%", "99%")
_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def environment(tmp: Path) -> dict[str, str]:
    """A private database, var folder, sources and clock; the caller's DIGEST_* settings left out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env.update(DIGEST_DATABASE_URL=f"sqlite+aiosqlite:///{tmp / 'bench.db'}",
               DIGEST_VAR_DIR=str(tmp / "var"), DIGEST_NOW=NOW.isoformat(),
               DIGEST_SOURCES=str(write_samples(tmp / "samples", NOW)), PYTHONPATH=str(ROOT))
    return env


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> bytes:
    """The body of a GET (raises on an error status)."""
    with urllib.request.urlopen(url, timeout=5) as answer:
        return bytes(answer.read())


def start_server(tmp: Path, env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """``digest serve --web`` on ``port``, once /healthz answers (its log goes to a file)."""
    log = (tmp / "serve.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "digest", "serve", "--web", "--port", str(port)],
                              env=env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            get(f"http://127.0.0.1:{port}/healthz")
            return server
        except OSError:
            if server.poll() is not None:
                break
            time.sleep(0.1)
    server.kill()
    raise SystemExit(f"the server did not start; see {tmp / 'serve.log'}:\n"
                     + (tmp / "serve.log").read_text(errors="replace")[-2000:])


def milliseconds(text: str) -> float:
    """wrk's ``1.23ms`` / ``850.00us`` / ``1.02s`` in milliseconds."""
    match = re.fullmatch(r"([0-9.]+)(us|ms|s|m)", text)
    if match is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def load(url: str, seconds: int, connections: int, headers: tuple[str, ...] = ()) -> dict[str, float]:
    """One wrk run: req/s, mean latency, percentiles and errors."""
    argv = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", *[a for h in headers
                                                                          for a in ("-H", h)], url]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=seconds + 60).stdout
    found = {"rps": float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1)),  # type: ignore[union-attr]
             "mean": milliseconds(re.search(r"Latency\s+(\S+)", out).group(1))}  # type: ignore[union-attr]
    for p in PERCENTILES:
        found[p] = milliseconds(re.search(rf"^\s+{p}\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses:\s+([0-9]+)", out)
    found["non2xx"] = float(bad.group(1)) if bad else 0.0
    return found


def etag(url: str) -> str:
    """The ETag a GET of ``url`` answers with."""
    with urllib.request.urlopen(url, timeout=5) as answer:
        return str(answer.headers["etag"])


def routes(base: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The URLs to load (an event id from the API), with any request headers.

    ``/api/events 304``: a client revalidating its copy (If-None-Match), as ``no-cache`` asks.
    """
    events = json.loads(get(f"{base}/api/events?days=30"))["events"]
    if not events:
        raise SystemExit("the built day has no events")
    return {"/healthz": (f"{base}/healthz", ()), "/": (f"{base}/", ()),
            f"/d/{DATE}": (f"{base}/d/{DATE}", ()),
            f"/d/{DATE} gzip": (f"{base}/d/{DATE}", ("Accept-Encoding: gzip",)),
            f"/e/{events[0]['id']}": (f"{base}/e/{events[0]['id']}", ()),
            "/api/events": (f"{base}/api/events", ()),
            "/api/events 304": (f"{base}/api/events", (f"If-None-Match: {etag(f'{base}/api/events')}",))}


def report(results: dict[str, dict[str, float]], seconds: int, connections: int) -> None:
    """The table: one line a route, its ratio to /healthz."""
    base = results["/healthz"]["rps"]
    print(f"wrk -t2 -c{connections} -d{seconds}s --latency, digest serve --web on 127.0.0.1,"
          f" {os.cpu_count()} cores, each page fetched once first")
    print(f"{'route':<24} {'req/s':>8} {'mean ms':>8} " + " ".join(f"{'p' + p[:-1]:>7}" for p in PERCENTILES)
          + f" {'x healthz':>9} {'non-2xx':>7}")
    for name, r in results.items():
        figures = " ".join(f"{r[p]:>7.2f}" for p in PERCENTILES)
        print(f"{name:<24} {r['rps']:>8.1f} {r['mean']:>8.2f} {figures} {r['rps'] / base:>9.2f}"
              f" {r['non2xx']:>7.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description="the web archive under load (wrk)")
    parser.add_argument("--seconds", type=int, default=10, help="length of each wrk run")
    parser.add_argument("--connections", type=int, default=16, help="open connections")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        env = environment(tmp)
        subprocess.run([sys.executable, "-m", "digest", "run"], env=env, cwd=tmp, check=True,
                       capture_output=True)
        port = free_port()
        server = start_server(tmp, env, port)
        try:
            urls = routes(f"http://127.0.0.1:{port}")
            for url, _ in urls.values():
                get(url)  # the steady state: a built page was rendered by its first reader
            results = {label: load(url, args.seconds, args.connections, headers)
                       for label, (url, headers) in urls.items()}
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    report(results, args.seconds, args.connections)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
