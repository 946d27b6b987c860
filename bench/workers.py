"""Benchmark: N ``digest worker`` processes on one PostgreSQL, over SMTP and over Telegram.

    python bench/workers.py [--deliveries 20000] [--workers 1,2,4] [--chats 600]
                            [--database-url postgresql+asyncpg://...]

Email: for each N, a throwaway database on the server (``--database-url`` or
DIGEST_TEST_POSTGRES_URL; dropped at the end) gets one built digest and
``--deliveries`` email subscribers; ``digest publish --plan-only`` plans them,
then N ``digest worker --once`` processes send them to an SMTP sink running
in another process (aiosmtpd, counting and discarding). Prints messages/s for
each N, the ratio to one worker, and where the CPU went (the workers', the
sink's, from their rusage; PostgreSQL's is the rest of the machine).

Telegram: 4 workers send one digest to ``--chats`` chats through the fake
Bot API server (tests/fake_telegram.py: at most 30 messages in any 1,000 ms,
one per second to one chat, 429 past them), their limits kept together in the
``rate_bucket`` table. Prints messages/s (first to last message; target >= 27,
ceiling 30) and the 429s (target 0).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import insert  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from digest.domain.layers import LAYER_IDS  # noqa: E402
from digest.store.db import open_database  # noqa: E402
from digest.store.models import Subscriber  # noqa: E402
from tests.fake_telegram import TOKEN, FakeTelegram  # noqa: E402
from tests.publish_runner import DAY, NOW, build_day  # noqa: E402

CHUNK = 5_000
SINK = """
import resource, socket, sys
from aiosmtpd.controller import Controller
class Count:
    n = 0
    async def handle_DATA(self, server, session, envelope):
        Count.n += 1
        return "250 OK"
probe = socket.socket()
probe.bind(("127.0.0.1", 0))
port = probe.getsockname()[1]
probe.close()
c = Controller(Count(), hostname="127.0.0.1", port=port)
c.start()
print(port, flush=True)
sys.stdin.read()
c.stop()
r = resource.getrusage(resource.RUSAGE_SELF)
print(Count.n, r.ru_utime + r.ru_stime, flush=True)
"""


async def _admin(server_url: str, sql: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    url = make_url(server_url).set(drivername="postgresql", database="postgres")
    conn = await asyncpg.connect(url.render_as_string(hide_password=False))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextmanager
def throwaway(server_url: str) -> Iterator[str]:
    """A fresh database on the server for one run; dropped afterwards."""
    name = f"digest_bench_{uuid.uuid4().hex[:10]}"
    asyncio.run(_admin(server_url, f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _populate(url: str, channel: str, addresses: list[str]) -> None:
    async with open_database(url) as sessions:
        await build_day(sessions)
        rows = [{"channel": channel, "address": a, "locale": "en", "layers": list(LAYER_IDS),
                 "min_score": 0.0, "status": "active", "created_at": NOW, "updated_at": NOW,
                 "confirmed_at": NOW} for a in addresses]
        for start in range(0, len(rows), CHUNK):
            async with sessions.begin() as session:
                await session.execute(insert(Subscriber), rows[start:start + CHUNK])


def _env(url: str, tmp: str, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env.update(DIGEST_DATABASE_URL=url, DIGEST_VAR_DIR=tmp, DIGEST_MAIL_FROM="digest@example.org",
               DIGEST_SECRET_KEY="bench-workers-key-0123456789abcdef", **more)  # no DIGEST_NOW: one clock
    return env


def _digest(env: dict[str, str], *command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "digest", *command, "--json"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _plan(env: dict[str, str]) -> None:
    proc = _digest(env, "publish", "--date", str(DAY), "--plan-only")
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"publish --plan-only failed: {err.decode()[-2000:]}")


def _run_workers(env: dict[str, str], n: int) -> tuple[float, float]:
    """Start ``n`` workers, wait for all; (seconds from start to the last exit, their CPU seconds)."""
    started = time.perf_counter()
    procs = [_digest(env, "worker", "--once") for _ in range(n)]
    cpu = 0.0
    for proc in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"a worker failed: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        cpu += usage.ru_utime + usage.ru_stime
    return time.perf_counter() - started, cpu


def email_run(server_url: str, deliveries: int, workers: int, tmp: str) -> dict[str, Any]:
    """One email run with ``workers`` processes: messages/s and where the CPU went."""
    sink = subprocess.Popen([sys.executable, "-c", SINK], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert sink.stdout is not None and sink.stdin is not None
    port = sink.stdout.readline().strip()
    with throwaway(server_url) as url:
        asyncio.run(_populate(url, "email", [f"r{n}@example.com" for n in range(deliveries)]))
        env = _env(url, tmp, DIGEST_SMTP_HOST="127.0.0.1", DIGEST_SMTP_PORT=port, DIGEST_SMTP_TLS="none",
                   DIGEST_SMTP_CONCURRENCY="8")
        _plan(env)
        elapsed, cpu = _run_workers(env, workers)
    out, _ = sink.communicate("")
    received, sink_cpu = out.split()
    return {"workers": workers, "received": int(received), "seconds": elapsed, "rate": deliveries / elapsed,
            "worker_cpu": cpu, "sink_cpu": float(sink_cpu)}


def telegram_run(server_url: str, chats: int, workers: int, tmp: str) -> dict[str, Any]:
    """Telegram through ``workers`` processes against the fake: messages/s and the 429s."""
    with throwaway(server_url) as url, FakeTelegram() as fake:
        asyncio.run(_populate(url, "telegram", [str(100_000 + n) for n in range(chats)]))
        env = _env(url, tmp, DIGEST_TELEGRAM_TOKEN=TOKEN, DIGEST_TELEGRAM_API_BASE=fake.base_url)
        _plan(env)
        _run_workers(env, workers)
        times = sorted(call.at for call in fake.calls_of("sendMessage") if call.status == 200)
        span = times[-1] - times[0] if len(times) > 1 else 0.0
        return {"messages": len(times), "rate": (len(times) - 1) / span if span else 0.0,
                "too_many": fake.too_many}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=20_000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--chats", type=int, default=600)
    parser.add_argument("--database-url", default=os.environ.get("DIGEST_TEST_POSTGRES_URL", ""))
    args = parser.parse_args()
    if not args.database_url.startswith("postgresql"):
        raise SystemExit("bench/workers.py needs PostgreSQL: --database-url or DIGEST_TEST_POSTGRES_URL")
    tmp = str(ROOT / "var" / "bench-workers")
    print(f"email: {args.deliveries} deliveries, SMTP sink in another process, {os.cpu_count()} cores")
    base = None
    for n in (int(w) for w in args.workers.split(",")):
        run = email_run(args.database_url, args.deliveries, n, tmp)
        base = base or run["rate"]
        print(f"  {n} worker(s): {run['rate']:7.1f} msg/s "
              f"({run['received']} received in {run['seconds']:.1f} s), "
              f"x{run['rate'] / base:.2f} of one worker; CPU: workers {run['worker_cpu']:.1f} s, "
              f"sink {run['sink_cpu']:.1f} s, of {run['seconds'] * (os.cpu_count() or 1):.1f} s available")
    tg = telegram_run(args.database_url, args.chats, 4, tmp)
    print(f"telegram: 4 workers, {tg['messages']} messages at {tg['rate']:.1f} msg/s "
          "(target >= 27, ceiling 30), "
          f"{tg['too_many']} answered 429")
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(f"(this process, populating and the fake server: {ru.ru_utime + ru.ru_stime:.1f} s CPU)")


if __name__ == "__main__":
    main()
