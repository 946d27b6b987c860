"""Benchmark: a Telegram broadcast to 3,000 chats, and /recent latency over 100,000 events.

    python bench/telegram_broadcast.py [--chats 3000] [--events 100000] [--queries 800]
                                       [--database-url URL]

Broadcast: ``digest publish`` (the core's Runner) sends one digest to every
subscribed chat through the real python-telegram-bot client and
``TelegramChannel`` against tests/fake_telegram.py, which enforces Telegram's
limits (at most 30 messages in any 1,000 ms window, one per second to one
chat) and counts the 429s it answers. Prints messages/s, 429s and the time to
the last message. Target: >= 27 messages/s with zero 429s.

/recent: a database with ``--events`` events, all shown in digests (100 a
day, the worst case for the query) with zh and en write-ups, as a build with
DIGEST_LOCALES=zh,en leaves them (a chat with no language is English), then
/recent as chats send it (default: 3 days; one layer; 7 days; one layer over
30 days): the time from the command to the Telegram HTML reply, p50 and p99.
The yardstick, in the same run, right after each command: the very statements
that command sent (the chat's subscriber row, then the /recent statement, which
brings the chosen events with their showing and write-up), captured from the
engine with their bound values and replayed through the same driver on one open
connection, every row fetched: no ORM, no result types, no session or pool
checkout, no rendering. Each output line names the tables its statements read
first. Start-up's objects are frozen first, as ``digest serve`` does
(:func:`digest.bootstrap.settle_heap`). Target: p99 <= 2 x raw and < 20 ms. ``--explain`` prints each
form's statements and the plan of its biggest query.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import event, insert, text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: E402

from bot.commands import Chat, Commands  # noqa: E402
from bot.telegram_bot import create_channel, reply_parts  # noqa: E402
from digest import bootstrap  # noqa: E402
from digest.config import Settings, load_settings  # noqa: E402
from digest.deliver.mailer import MailIdentity  # noqa: E402
from digest.deliver.publish import Channels, Composer, PublishOptions, Runner  # noqa: E402
from digest.domain.layers import LAYER_IDS  # noqa: E402
from digest.domain.window import window_for  # noqa: E402
from digest.render.renderer import Renderer  # noqa: E402
from digest.store.db import SessionFactory, open_database  # noqa: E402
from digest.store.models import (  # noqa: E402
    Digest,
    DigestEvent,
    Entry,
    Event,
    EventEntry,
    Source,
    Subscriber,
    Writeup,
)
from tests.fake_telegram import TOKEN, FakeTelegram  # noqa: E402
from tests.test_bot_commands import DAY, LATER, build_day  # noqa: E402

CHUNK = 5_000


async def _subscribers(sessions: SessionFactory, chats: int) -> None:
    rows = [{"channel": "telegram", "address": str(100_000 + n), "locale": "zh", "layers": list(LAYER_IDS),
             "min_score": 0.0, "status": "active", "created_at": LATER, "updated_at": LATER,
             "confirmed_at": LATER} for n in range(chats)]
    async with sessions.begin() as session:
        await session.execute(insert(Subscriber), rows)


async def _publish(sessions: SessionFactory, settings: Settings) -> Any:
    channel = create_channel(settings)
    composer = Composer(sessions, Renderer(site_url=settings.site_url), MailIdentity.from_settings(
        "d <d@digest.example>"), site_url=settings.site_url, secret="bench", clock=lambda: LATER)
    runner = Runner(sessions, Channels(lambda name: channel), composer, lambda: LATER, PublishOptions())
    try:
        return await runner.publish(DAY, "zh")
    finally:
        await channel.aclose()


async def broadcast(chats: int, url: str, var: Path) -> None:
    """Publish one digest to ``chats`` chats and print what the fake server saw."""
    with FakeTelegram() as fake:
        async with open_database(url) as sessions:
            await build_day(sessions)
            await _subscribers(sessions, chats)
            settings = load_settings(database_url=url, var_dir=var, telegram_token=TOKEN,
                                     telegram_api_base=fake.base_url, site_url="https://digest.example")
            started = time.monotonic()
            report = await _publish(sessions, settings)
        accepted = [c.at for c in fake.calls_of("sendMessage") if c.status == 200]
    span = accepted[-1] - accepted[0]
    tally = report.channels["telegram"]
    print(f"broadcast: {chats} chats, {len(accepted)} messages ({len(accepted) / chats:.1f} per chat); "
          f"sent {tally.sent}, failed {tally.failed}, deferred {tally.deferred}")
    print(f"  messages/s (first to last message): {(len(accepted) - 1) / span:.2f}")
    print(f"  messages/s (publish start to last):  {len(accepted) / (accepted[-1] - started):.2f}")
    print(f"  429s answered by the server: {fake.too_many}")
    print(f"  time to the last message: {accepted[-1] - started:.1f} s")
    window = max(sum(1 for t in accepted[i:i + 40] if t < start + 1.0) for i, start in enumerate(accepted))
    print(f"  most messages in any 1,000 ms window: {window}")


async def _events(sessions: SessionFactory, events: int, per_day: int) -> dt.datetime:
    """``events`` events, ``per_day`` shown in each daily digest, the newest digest of DAY."""
    async with sessions.begin() as session:
        source = (await session.execute(insert(Source).returning(Source.id), [{
            "key": "bench", "name": "Bench", "url": "https://bench.example/feed", "kind": "rss",
            "weight": 0.8, "enabled": True, "consecutive_failures": 0}])).scalar_one()
        days = -(-events // per_day)
        for day in range(days):
            await _one_day(session, source, DAY - dt.timedelta(days=day), day * per_day,
                           min(per_day, events - day * per_day))
    async with sessions.begin() as session:
        await session.execute(text("ANALYZE"))  # planner statistics, as autovacuum would gather them
    return window_for(DAY, "Asia/Shanghai").end


async def _one_day(session: Any, source: int, date: dt.date, first: int, count: int) -> None:
    window = window_for(date, "Asia/Shanghai")
    digest_id = (await session.execute(insert(Digest).returning(Digest.id), [{
        "date": date, "window_start": window.start, "window_end": window.end, "stats": {},
        "generation_modes": {}, "tokens": 0, "built_at": window.end, "read_count": 0}])).scalar_one()
    ids = range(first + 1, first + count + 1)
    layers = {n: [LAYER_IDS[n % 9], LAYER_IDS[(n * 7) % 9]] for n in ids}
    score = {n: round(30 + (n * 37 % 650) / 10, 1) for n in ids}
    seen = window.start + dt.timedelta(hours=1)
    await session.execute(insert(Entry), [{
        "id": n, "source_id": source, "entry_key": f"e{n}", "url": f"https://bench.example/{n}",
        "canonical_url": f"https://bench.example/{n}", "title": f"Event {n}: a compiler pass for kernels",
        "summary": f"Summary of event {n}. It lowers loops to vector code.", "authors": [],
        "categories": [], "links": [], "published": seen, "first_seen": seen, "updated_at": seen,
        "content_hash": hashlib.sha256(str(n).encode()).hexdigest(), "digest_id": digest_id} for n in ids])
    await session.execute(insert(Event), [{
        "id": n, "cluster_key": f"c{n}", "title": f"Event {n}: a compiler pass for kernels",
        "url": f"https://bench.example/{n}", "relevant": True, "relevance": 0.8, "layers": layers[n],
        "score": score[n], "score_breakdown": {"authority": 20.0, "relevance": score[n] - 20.0},
        "first_seen": seen, "updated_at": seen} for n in ids])
    await session.execute(insert(EventEntry), [{"event_id": n, "entry_id": n, "added_at": seen} for n in ids])
    texts = {"zh": ("事件 {n}：面向内核的编译器优化", "事件 {n} 的摘要：把循环降低为向量代码。",
                    "它让内核生成更快。"),
             "en": ("Event {n}: a compiler pass for kernels", "Summary of event {n}: loops to vector code.",
                    "Faster kernels.")}
    await session.execute(insert(Writeup), [{
        "event_id": n, "locale": locale, "title": title.format(n=n), "summary": summary.format(n=n),
        "why_it_matters": why, "watch": [], "mode": "extractive", "created_at": seen}
        for n in ids for locale, (title, summary, why) in texts.items()])
    ranked = sorted(ids, key=lambda n: -score[n])
    await session.execute(insert(DigestEvent), [{
        "digest_id": digest_id, "event_id": n, "rank": rank, "score": score[n],
        "score_breakdown": {"authority": 20.0, "relevance": score[n] - 20.0}, "layers": layers[n],
        "updated": False} for rank, n in enumerate(ranked, 1)])


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


Statement = tuple[str, Any]


@contextmanager
def _recording(engine: AsyncEngine) -> Iterator[list[Statement]]:
    """Every statement ``engine`` sends in the body, with its driver-level parameters."""
    seen: list[Statement] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        seen.append((statement, parameters))

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


async def _raw(engine: AsyncEngine, statements: list[Statement]) -> float:
    """The seconds ``statements`` take run again through the driver, every row fetched."""
    async with engine.connect() as conn:
        t0 = time.perf_counter()
        for statement, parameters in statements:
            (await conn.exec_driver_sql(statement, parameters)).fetchall()
        return time.perf_counter() - t0


async def _explain(engine: AsyncEngine, label: str, statements: list[Statement]) -> None:
    """The plan of the command's biggest query (SQLite's EXPLAIN QUERY PLAN, PostgreSQL's EXPLAIN)."""
    statement, parameters = max(statements, key=lambda s: len(s[0]))
    prefix = "EXPLAIN QUERY PLAN " if engine.dialect.name == "sqlite" else "EXPLAIN "
    async with engine.connect() as conn:
        rows = (await conn.exec_driver_sql(prefix + statement, parameters)).fetchall()
    print(f"  plan of /recent {label}:")
    for row in rows:
        print("    " + " ".join(str(v) for v in row[-1:]))


def _tables(statements: list[Statement]) -> str:
    """What each statement reads first (``subscriber+event``): the yardstick named in the output."""
    found = (re.search(r"\bFROM\s+\(?\s*(?:SELECT\b.*?\bFROM\s+)*([a-z_]+)", s, re.I | re.S)
             for s, _ in statements)
    return "+".join(m.group(1) if m else "?" for m in found)


def _ms(samples: list[float]) -> str:
    return f"p50 {1000 * statistics.median(samples):5.1f} ms, p99 {1000 * _percentile(samples, 0.99):5.1f} ms"


async def recent_latency(events: int, queries: int, url: str, explain: bool = False) -> None:
    """Fill the database, then time /recent from command to Telegram HTML, and its raw SQL alone."""
    async with open_database(url) as sessions:
        started = time.monotonic()
        end = await _events(sessions, events, 100)
        print(f"/recent: {events} events in {-(-events // 100)} digests, inserted in "
              f"{time.monotonic() - started:.1f} s")
        engine = sessions.kw["bind"]
        bootstrap.settle_heap()  # as `digest serve` does once it has started
        commands = Commands(sessions, channel="telegram", clock=lambda: end + dt.timedelta(hours=2))
        forms: list[list[str]] = [[], ["kernel_codegen"], ["7"], ["runtime", "30"]]
        labels = [" ".join(f) or "(default)" for f in forms]

        async def allowed() -> bool:
            return True

        sent: dict[str, list[Statement]] = {}
        for form, label in zip(forms, labels, strict=True):  # the first round warms the caches
            with _recording(engine) as sent[label]:
                await commands.run(Chat("telegram", "900"), "recent", form, allowed)
            if explain:
                await _explain(engine, label, sent[label])
                for statement, _ in sent[label]:
                    print("    sent: " + " ".join(statement.split())[:150])
        timings: dict[str, list[float]] = {label: [] for label in labels}
        raw: dict[str, list[float]] = {label: [] for label in labels}
        for n in range(queries):
            form, label = forms[n % len(forms)], labels[n % len(forms)]
            t0 = time.perf_counter()
            reply = await commands.run(Chat("telegram", str(900 + n % 50)), "recent", form, allowed)
            reply_parts(reply.lines)
            timings[label].append(time.perf_counter() - t0)
            raw[label].append(await _raw(engine, sent[label]))
    every = [t for samples in timings.values() for t in samples]
    print(f"  all {len(every)} queries: {_ms(every)}; raw SQL: {_ms([t for s in raw.values() for t in s])}")
    for label in labels:
        ratio = _percentile(timings[label], 0.99) / _percentile(raw[label], 0.99)
        print(f"  /recent {label:<16} {_ms(timings[label])}   raw SQL ({_tables(sent[label])}) "
              f"{_ms(raw[label])}   p99 x raw {ratio:.2f}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=3000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=800,
                        help="/recent commands timed, shared by the four forms (800: a form's p99 is not"
                             " its one slowest sample)")
    parser.add_argument("--database-url", default=None,
                        help="an empty database for the /recent part (default: a fresh SQLite file)")
    parser.add_argument("--skip-broadcast", action="store_true")
    parser.add_argument("--explain", action="store_true", help="print the query plan of each /recent form")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{tmp}/broadcast.db"
        if not args.skip_broadcast:
            await broadcast(args.chats, url, Path(tmp))
        url = args.database_url or f"sqlite+aiosqlite:///{tmp}/recent.db"
        await recent_latency(args.events, args.queries, url, args.explain)


if __name__ == "__main__":
    asyncio.run(main())
