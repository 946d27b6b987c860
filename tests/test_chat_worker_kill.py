"""SIGKILL one of four chat workers mid-send (PostgreSQL), against fakes that enforce the platforms' limits.

The Telegram and Discord versions of ``test_workers.py``'s killed SMTP worker. Several days are
planned for many chats (in process, as ``publish --plan-only`` would), four ``digest worker --once``
processes (the real CLI) send them side by side through the shared ``rate_bucket`` limits, and
once the fake has accepted a third of the messages the busiest running worker (by the requests
its ``-v`` log shows) is SIGKILLed. The others finish; the dead worker's rows stay ``sending``
under its lease. Then that lease is aged in the database (it ends at its claim: what an
unrenewed lease comes to) and a fifth worker takes the rows over and reports them as
``resent``. Aging the lease, rather than starting the last worker's clock past it
(``DIGEST_NOW``, as the SMTP test does), keeps one real clock for the buckets and the fake, so
the resends into chats served a moment before are paced and checked like any send.

What the fake received is compared per chat with the deliveries (their ``parts_total``): every
part of every delivery arrived (none lost); a part arrived twice only for a row the dead worker
held, and at most twice; the deliveries with a duplicate are at most the ``resent`` count, which
is exactly the dead worker's rows, at most the ``2 x concurrency`` one worker keeps claimed.

The fakes count their 429s: five are tolerated per test (:data:`TOLERATED_429`: the first sends
of four workers opening their connections at once); a dead worker's booked slots are only lost
pace, so the kill itself makes none. The fakes run in this process, so the wait for the kill
looks at them only every :data:`POLL` seconds (a busy poll delays the fake's own readings of
the clock and bunches what it sees: polling every 5 ms, runs saw up to 5). Real time (the fakes
time what they receive), but nothing asserts a duration; the waits are guards against a hang.

Telegram sends 32 at a time per worker and claims 64 rows: 200 rows keep all four busy. Discord
sends 64 and claims up to 128 rows of one digest: 90 channels on 3 days give three workers a day
each (so a channel's days go through different workers; the fourth finds none left). That is all
the property needs (a victim, survivors beside it on the shared buckets, a taker), with a third
fewer messages than 130 channels, each paced at the real 50 requests/s.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from digest.deliver.planning import plan_deliveries
from digest.domain.status import DeliveryStatus
from digest.store.db import open_database
from digest.store.models import Delivery, Digest, Subscriber
from tests.fake_discord import TEXT, FakeDiscord
from tests.fake_discord import TOKEN as DISCORD_TOKEN
from tests.fake_telegram import TOKEN as TELEGRAM_TOKEN
from tests.fake_telegram import FakeTelegram
from tests.publish_runner import DAY, NOW, add_subscriber, build_day

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 4
# Each worker opens its connections (32 for Telegram, 64 for Discord) with its first sends, and the
# fake starts a handler for each: those first sends arrive late and bunched with the next ones, so
# the fake can count one over its window about a second in (seen: 0 or 1 on a quiet machine, once
# 3 while other test suites ran on the same 2 cores, and in a whole-suite run under libfaketime;
# per-process limiters make hundreds). Each 429 is waited out (``retry_after``) and
# retried: none lost, none sent twice. (The figures printed split them: at the kill, after the
# survivors, at the end.)
TOLERATED_429 = 5
GUARD = 240.0  # seconds: a hang fails the test; nothing here is a speed requirement
POLL = 0.05  # seconds between looks at the fake while waiting for the kill: it shares this process
TELEGRAM_CONCURRENCY = 32  # bot/telegram_bot.py: TelegramChannel.concurrency
DISCORD_CONCURRENCY = 64  # bot/discord_push.py: DiscordChannel.concurrency
ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
Received = list[tuple[str, dt.date, str]]  # (address, the digest's date, one part as sent)


def _days(n: int) -> list[dt.date]:
    return [DAY - dt.timedelta(days=k) for k in range(n - 1, -1, -1)]


def _env(url: str, tmp: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env.update(DIGEST_DATABASE_URL=url, DIGEST_VAR_DIR=str(tmp / "var"), DIGEST_OUTBOX_LEASE="60",
               DIGEST_OUTBOX_HEARTBEAT="15", DIGEST_SEND_BACKOFF="0.05",
               DIGEST_SECRET_KEY="chat-kill-test-key-0123456789abcdef", **more)  # no DIGEST_NOW: one clock
    return env


def _argv(*command: str) -> list[str]:
    """The real CLI, ``-v``: its log has a line for each HTTP request (how the busiest worker is found)."""
    return [sys.executable, "-m", "digest", "-v", *command, "--json"]


def _requests_made(log: Path) -> int:
    return log.read_text(errors="replace").count("HTTP Request: POST") if log.exists() else 0


def _busiest(running: list[bool], logs: list[Path]) -> int | None:
    """The running worker that has made the most requests so far, if one has made any: it holds rows."""
    made = max(((_requests_made(logs[n]), n) for n, alive in enumerate(running) if alive), default=(0, -1))
    return made[1] if made[0] > 0 else None


def _still_going(running: list[bool], logs: list[Path], deadline: float) -> None:
    """Fail at once when every worker ended before the kill (the first one's log says why)."""
    assert any(running), f"every worker ended before the kill: {logs[0].read_text()[-2000:]}"
    assert time.monotonic() < deadline, "the workers made no progress"


def _channel_report(out: bytes | str, channel: str) -> dict[str, Any]:
    return dict(json.loads(out)["channels"].get(channel, {}))


async def plan_days(url: str, days: list[dt.date], addresses: Iterable[str], channel: str) -> list[int]:
    """Build ``days``, add the subscribers, plan every day's deliveries; the rows planned each day.

    In process, as ``publish --plan-only`` plans (that command is tested in test_workers.py).
    """
    planned = []
    async with open_database(url) as sessions:
        ids = [await build_day(sessions, day) for day in days]
        for address in addresses:
            await add_subscriber(sessions, address, channel=channel)
        for digest_id in ids:
            async with sessions.begin() as session:
                digest = await session.get_one(Digest, digest_id)
                plan = await plan_deliveries(session, digest, NOW, message_id=lambda _channel, _sid: None)
                planned.append(plan.planned.get(channel, 0))
    return planned


LONG_AGO = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


async def _expire_dead_leases(url: str) -> list[tuple[str, dt.date]]:
    """End the lease of every ``sending`` row (the dead worker's) long ago; (address, date) of each.

    Long ago, not at its claim: each process's clock is its own (under libfaketime every process
    starts at the same instant), and the taker's may be behind the dead worker's claim time.
    """
    async with open_database(url) as sessions, sessions.begin() as session:
        rows = (await session.execute(
            select(Subscriber.address, Digest.date).select_from(Delivery)
            .join(Subscriber, Subscriber.id == Delivery.subscriber_id)
            .join(Digest, Digest.id == Delivery.digest_id)
            .where(Delivery.status == DeliveryStatus.SENDING))).all()
        await session.execute(update(Delivery).where(Delivery.status == DeliveryStatus.SENDING)
                              .values(lease_until=LONG_AGO))
    return [(str(address), day) for address, day in rows]


async def _deliveries(url: str) -> dict[tuple[str, dt.date], tuple[str, int]]:
    """(address, date) -> (status, parts_total) of every delivery."""
    async with open_database(url) as sessions, sessions() as session:
        rows = (await session.execute(
            select(Subscriber.address, Digest.date, Delivery.status, Delivery.parts_total)
            .select_from(Delivery)
            .join(Subscriber, Subscriber.id == Delivery.subscriber_id)
            .join(Digest, Digest.id == Delivery.digest_id))).all()
    return {(str(a), d): (str(s), int(n)) for a, d, s, n in rows}


def _day_of(text: str) -> dt.date:
    """The digest date a message part names (each part's header links the day's page)."""
    found = ISO_DAY.search(text)
    assert found, f"no date in {text[:120]!r}"
    return dt.date.fromisoformat(found.group(0))


def _check(received: Received, deliveries: dict[tuple[str, dt.date], tuple[str, int]],
           stuck: list[tuple[str, dt.date]], final: dict[str, Any], concurrency: int) -> dict[str, int]:
    """Compare what the fake accepted with the deliveries; the figures of the run."""
    assert {status for status, _ in deliveries.values()} == {DeliveryStatus.SENT}
    parts = Counter(received)
    arrived: dict[tuple[str, dt.date], set[str]] = {}
    for address, day, text in parts:
        arrived.setdefault((address, day), set()).add(text)
    # none lost: each delivery's parts arrived, as many different ones as the row says it has
    assert {key: len(texts) for key, texts in arrived.items()} == {
        key: total for key, (_, total) in deliveries.items()}
    twice = Counter((address, day) for (address, day, _), n in parts.items() if n > 1)
    assert set(twice) <= set(stuck), "a part arrived twice for a row the dead worker did not hold"
    assert max(parts.values()) <= 2  # once before the kill, once from the worker that took over
    assert len(twice) <= final["resent"] == final["sent"] == len(stuck) <= 2 * concurrency, final
    return {"rows": len(deliveries), "messages": len(received), "held_by_the_dead": len(stuck),
            "resent": final["resent"], "duplicated_rows": len(twice),
            "duplicate_messages": sum(n - 1 for n in parts.values())}


def _say(channel: str, figures: dict[str, int], too_many: list[int], survivors: list[dict[str, Any]]) -> None:
    """The figures of the run (shown with ``pytest -s``)."""
    print(f"\n{channel}: {figures}; 429s so far at the kill, after the survivors, at the end: {too_many}; "
          f"the survivors sent {[r.get('sent', 0) for r in survivors]}")


# -- Telegram: 30 messages/s overall, 1/s to a chat -------------------------------------------------------

TELEGRAM_DAYS = _days(1)
TELEGRAM_CHATS = [str(300_000 + n) for n in range(200)]  # 200 rows: claims of 64 keep all four busy


def _start(env: dict[str, str], log: Path, *command: str) -> subprocess.Popen[str]:
    with log.open("w") as err:
        return subprocess.Popen(_argv(*command), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err,
                                text=True)


def _report(proc: subprocess.Popen[str], log: Path, channel: str) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=GUARD)
    assert proc.returncode == 0, log.read_text()[-4000:]
    return _channel_report(out, channel)


def _kill_busiest(fake: FakeTelegram, workers: list[subprocess.Popen[str]], logs: list[Path],
                  accepted: int) -> int:
    """Once the fake accepted ``accepted`` messages, SIGKILL the busiest running worker; its index."""
    deadline = time.monotonic() + GUARD
    while True:
        running = [proc.poll() is None for proc in workers]
        if len(fake.sent()) >= accepted and (victim := _busiest(running, logs)) is not None:
            break
        _still_going(running, logs, deadline)
        time.sleep(POLL)
    workers[victim].send_signal(signal.SIGKILL)
    workers[victim].wait()
    return victim


@pytest.mark.postgres
async def test_a_killed_telegram_worker_loses_nothing_and_the_limits_hold(
        postgres_url: str, tmp_path: Path) -> None:
    rows = sum(await plan_days(postgres_url, TELEGRAM_DAYS, TELEGRAM_CHATS, "telegram"))
    assert rows == len(TELEGRAM_CHATS) * len(TELEGRAM_DAYS)
    with FakeTelegram() as fake:
        env = _env(postgres_url, tmp_path, DIGEST_TELEGRAM_TOKEN=TELEGRAM_TOKEN,
                   DIGEST_TELEGRAM_API_BASE=fake.base_url)
        logs = [tmp_path / f"worker-{n}.log" for n in range(WORKERS + 1)]
        workers = [_start(env, log, "worker", "--once") for log in logs[:WORKERS]]
        victim = _kill_busiest(fake, workers, logs, rows // 3)
        phases = [fake.too_many]
        survivors = [_report(proc, logs[n], "telegram") for n, proc in enumerate(workers) if n != victim]
        phases.append(fake.too_many)
        stuck = await _expire_dead_leases(postgres_url)
        assert stuck, "the killed worker held no rows"
        final = _report(_start(env, logs[-1], "worker", "--once"), logs[-1], "telegram")
        received = [(str(p["chat_id"]), _day_of(str(p["text"])), str(p["text"])) for p in fake.sent()]
        too_many = fake.too_many
    assert sum(r.get("resent", 0) for r in survivors) == 0
    figures = _check(received, await _deliveries(postgres_url), stuck, final, TELEGRAM_CONCURRENCY)
    _say("telegram", figures, [*phases, too_many], survivors)
    assert too_many <= TOLERATED_429, f"the fake answered {too_many} 429s"


# -- Discord: 50 requests/s overall, 5 messages per 5 s to a channel -------------------------------------

DISCORD_DAYS = _days(3)  # a channel's days mostly claimed by different workers
DISCORD_CHANNELS = 90  # 270 rows, a day's 90 in one claim: three workers busy, one day each


async def _astart(env: dict[str, str], log: Path, *command: str) -> asyncio.subprocess.Process:
    with log.open("w") as err:
        return await asyncio.create_subprocess_exec(*_argv(*command), cwd=ROOT, env=env,
                                                    stdout=asyncio.subprocess.PIPE, stderr=err)


async def _areport(proc: asyncio.subprocess.Process, log: Path, channel: str) -> dict[str, Any]:
    out, _ = await asyncio.wait_for(proc.communicate(), GUARD)
    assert proc.returncode == 0, log.read_text()[-4000:]
    return _channel_report(out, channel)


async def _akill_busiest(fake: FakeDiscord, workers: list[asyncio.subprocess.Process], logs: list[Path],
                         accepted: int) -> int:
    """Once the fake accepted ``accepted`` messages, SIGKILL the busiest running worker; its index."""
    deadline = time.monotonic() + GUARD
    while True:
        running = [proc.returncode is None for proc in workers]
        if len(fake.messages) >= accepted and (victim := _busiest(running, logs)) is not None:
            break
        _still_going(running, logs, deadline)
        await asyncio.sleep(POLL)  # the fake serves meanwhile (the same loop)
    workers[victim].send_signal(signal.SIGKILL)
    await workers[victim].wait()
    return victim


@pytest.mark.postgres
async def test_a_killed_discord_worker_loses_nothing_and_the_limits_hold(
        postgres_url: str, tmp_path: Path) -> None:
    async with FakeDiscord(enforce=True) as fake:
        channels = [fake.add_channel(TEXT, name=f"c{n}") for n in range(DISCORD_CHANNELS)]
        rows = sum(await plan_days(postgres_url, DISCORD_DAYS, map(str, channels), "discord"))
        assert rows == len(channels) * len(DISCORD_DAYS)
        env = _env(postgres_url, tmp_path, DIGEST_DISCORD_TOKEN=DISCORD_TOKEN,
                   DIGEST_DISCORD_API_BASE=fake.api_base)
        logs = [tmp_path / f"worker-{n}.log" for n in range(WORKERS + 1)]
        workers = [await _astart(env, log, "worker", "--once") for log in logs[:WORKERS]]
        victim = await _akill_busiest(fake, workers, logs, rows // 3)
        phases = [fake.too_many]
        survivors = [await _areport(p, logs[n], "discord") for n, p in enumerate(workers) if n != victim]
        phases.append(fake.too_many)
        stuck = await _expire_dead_leases(postgres_url)
        assert stuck, "the killed worker held no rows"
        final = await _areport(await _astart(env, logs[-1], "worker", "--once"), logs[-1], "discord")
        parent = {tid: str(thread["parent_id"]) for tid, thread in fake.threads.items()}
        received = [(parent.get(m.channel, str(m.channel)), _day_of(str(m.payload.get("content", ""))),
                     json.dumps(m.payload, sort_keys=True)) for m in fake.messages]
        threads = Counter((str(t["parent_id"]), dt.date.fromisoformat(t["name"]))
                          for t in fake.threads.values())
        too_many = fake.too_many
    assert sum(r.get("resent", 0) for r in survivors) == 0
    figures = _check(received, await _deliveries(postgres_url), stuck, final, DISCORD_CONCURRENCY)
    # each day's message started that day's thread: one per channel and day, a second only for a resend
    assert set(threads) == {(str(cid), day) for cid in channels for day in DISCORD_DAYS}
    assert {key for key, n in threads.items() if n > 1} <= set(stuck) and max(threads.values()) <= 2
    _say("discord", {**figures, "threads_twice": sum(n - 1 for n in threads.values())},
         [*phases, too_many], survivors)
    assert too_many <= TOLERATED_429, f"the fake answered {too_many} 429s"
