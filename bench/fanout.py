"""Benchmark: fan a digest out to many email subscribers.

    python bench/fanout.py [--subscribers 10000] [--connections 8] [--plan 100000]

1. SMTP: ``--subscribers`` email subscribers with mixed filters (layer sets,
   minimum scores, locales) on SQLite, delivered by ``publish`` to a local
   aiosmtpd sink running in another process (it only counts). Compared with a
   bare aiosmtplib loop sending the same pre-built messages over the same
   number of connections, in the same run. Target: >= 0.8 x the bare loop.
2. Planning + rendering (personal links included, SMTP excluded) for
   ``--plan`` subscribers on SQLite. Target: < 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import multiprocessing
import random
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiosmtplib  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from digest.build.pipeline import BuildOptions, build_digest  # noqa: E402
from digest.deliver.planning import plan_deliveries  # noqa: E402
from digest.deliver.publish import PublishOptions  # noqa: E402
from digest.deliver.sending import SendOptions  # noqa: E402
from digest.deliver.smtp import SmtpChannel, SmtpConfig  # noqa: E402
from digest.domain.layers import LAYER_IDS  # noqa: E402
from digest.domain.window import window_for  # noqa: E402
from digest.store.db import SessionFactory, open_database  # noqa: E402
from digest.store.models import Entry, Source, Subscriber  # noqa: E402
from digest.store.queries import get_digest  # noqa: E402
from tests.publish_runner import DAY, make_runner  # noqa: E402

WINDOW = window_for(DAY, "Asia/Shanghai")
NOW = WINDOW.end + dt.timedelta(minutes=10)
SENDER = "digest@example.org"
COMBOS = [("kernel_codegen",), ("graph_ir", "tensor_ir"), ("hardware_backend",), ("runtime", "distributed"),
          ("optimization", "kernel_codegen"), ("frontend", "graph_ir"), ("benchmark",),
          ("tensor_ir", "kernel_codegen", "hardware_backend"), ("distributed",), ("runtime",)]


def _sink(port_out: Connection, count: Synchronized) -> None:  # type: ignore[type-arg]
    """The SMTP sink process: accept everything, count messages."""
    from aiosmtpd.smtp import SMTP

    class Counting:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            with count.get_lock():
                count.value += 1
            return "250 OK"

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: SMTP(Counting(), enable_SMTPUTF8=True), "127.0.0.1", 0)
        port_out.send(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(serve())


async def _populate_day(sessions: SessionFactory) -> None:
    lines = (ROOT / "tests" / "data" / "labelled.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line) for line in lines if line.strip()]
    texts = [t for t in texts if t.get("relevant")][:40]
    async with sessions.begin() as session:
        source = Source(key="arxiv", name="arXiv cs.PL", url="https://arxiv.example/feed", kind="arxiv",
                        weight=0.7, enabled=True, consecutive_failures=0)
        session.add(source)
        await session.flush()
        span = (WINDOW.end - WINDOW.start).total_seconds()
        await session.execute(insert(Entry), [{
            "source_id": source.id, "entry_key": f"e{n}", "url": f"https://arxiv.org/abs/2609.{n:05d}",
            "canonical_url": f"https://arxiv.org/abs/2609.{n:05d}", "title": t["title"],
            "summary": t["summary"], "authors": [], "categories": [], "links": [],
            "published": WINDOW.start + dt.timedelta(seconds=span * (n + 0.5) / len(texts)),
            "first_seen": WINDOW.start, "updated_at": WINDOW.start, "content_hash": f"h{n}",
            "arxiv_id": f"2609.{n:05d}", "arxiv_version": 1, "announce_type": "new",
        } for n, t in enumerate(texts)])
    await build_digest(sessions, DAY, BuildOptions(locales=("zh", "en")), now=NOW)


async def _add_subscribers(sessions: SessionFactory, n: int) -> None:
    rng = random.Random(7)
    rows = []
    for i in range(n):
        layers = list(LAYER_IDS) if rng.random() < 0.5 else list(rng.choice(COMBOS))
        rows.append({"channel": "email", "address": f"reader{i}@example.com", "status": "active",
                     "locale": "zh" if rng.random() < 0.7 else "en", "layers": layers,
                     "min_score": rng.choice([0.0, 0.0, 30.0, 40.0, 50.0]),
                     "created_at": NOW, "updated_at": NOW, "confirmed_at": NOW})
    async with sessions.begin() as session:
        for start in range(0, n, 5000):
            await session.execute(insert(Subscriber), rows[start:start + 5000])


async def _prebuilt(sessions: SessionFactory) -> list[tuple[str, bytes]]:
    """The messages publish would send, built in memory (a dry-run plan)."""
    runner = make_runner(sessions, {})
    async with sessions() as session:
        plan = await plan_deliveries(session, await get_digest(session, DAY), NOW, dry_run=True,
                                     message_id=runner.message_ids(DAY))
    await runner.composer.prepare(plan.audience)
    return [(item.address, runner.composer.compose(item).parts[0]) for item in plan.audience]


async def _bare_loop(port: int, messages: list[tuple[str, bytes]], connections: int) -> float:
    """Seconds for a plain aiosmtplib loop to send ``messages`` over ``connections`` connections."""
    pending = iter(messages)

    async def one() -> None:
        client = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, start_tls=False)
        await client.connect()
        for rcpt, data in pending:
            await client.sendmail(SENDER, [rcpt], data)
        await client.quit()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(connections)))
    return time.perf_counter() - start


async def _publish(sessions: SessionFactory, port: int, connections: int) -> tuple[float, Any]:
    channel = SmtpChannel(SmtpConfig(host="127.0.0.1", port=port, tls="none", concurrency=connections,
                                     envelope_from=SENDER))
    runner = make_runner(sessions, {"email": channel}, options=PublishOptions(send=SendOptions()))
    start = time.perf_counter()
    report = await runner.publish(DAY, "zh")
    seconds = time.perf_counter() - start
    await channel.aclose()
    return seconds, report


async def smtp_bench(subscribers: int, connections: int) -> None:
    count: Synchronized = multiprocessing.Value("q", 0)  # type: ignore[type-arg]
    receive, send = multiprocessing.Pipe(duplex=False)
    sink = multiprocessing.Process(target=_sink, args=(send, count), daemon=True)
    sink.start()
    port = int(receive.recv())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            async with open_database(f"sqlite+aiosqlite:///{tmp}/fanout.db") as sessions:
                await _populate_day(sessions)
                await _add_subscribers(sessions, subscribers)
                messages = await _prebuilt(sessions)
                bare_1 = await _bare_loop(port, messages, connections)
                ours, report = await _publish(sessions, port, connections)
                bare_2 = await _bare_loop(port, messages, connections)
    finally:
        sink.terminate()
    bare = min(bare_1, bare_2)
    tally = report.channels["email"]
    n = len(messages)
    print(f"fan-out: {subscribers} email subscribers, {n} with events ({tally.empty} empty), "
          f"{connections} SMTP connections to an aiosmtpd sink in another process")
    print(f"  bare aiosmtplib loop, pre-built messages: {n / bare:8.0f} msgs/s "
          f"({bare_1:.2f} s, {bare_2:.2f} s)")
    print(f"  digest publish (plan + render + send + record): {tally.sent / ours:8.0f} msgs/s ({ours:.2f} s)")
    print(f"  ratio publish / bare: {bare / ours:.2f}  (target >= 0.8)")
    print(f"  sink counted {count.value} = {2 * n} bare + {tally.sent} publish")


async def plan_bench(subscribers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with open_database(f"sqlite+aiosqlite:///{tmp}/plan.db") as sessions:
            await _populate_day(sessions)
            await _add_subscribers(sessions, subscribers)
            runner = make_runner(sessions, {})
            start = time.perf_counter()
            async with sessions.begin() as session:
                digest = await get_digest(session, DAY)
                plan = await plan_deliveries(session, digest, NOW, message_id=runner.message_ids(DAY))
            planned = time.perf_counter()
            items = plan.audience  # what the claims would return, subscriber by subscriber
            await runner.composer.prepare(items)
            size = sum(len(runner.composer.compose(item).parts[0]) for item in items)
            done = time.perf_counter()
    print(f"plan + render: {subscribers} subscribers on SQLite: {sum(plan.planned.values())} rows planned "
          f"in {planned - start:.2f} s; {len(items)} messages ({runner.composer.groups} rendered groups, "
          f"{size / 1e6:.0f} MB) composed in {done - planned:.2f} s; total {done - start:.2f} s "
          "(target < 10 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=10_000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--plan", type=int, default=100_000)
    args = parser.parse_args()
    asyncio.run(smtp_bench(args.subscribers, args.connections))
    asyncio.run(plan_bench(args.plan))


if __name__ == "__main__":
    main()
