"""Discord past one machine: N ``digest worker`` processes on one PostgreSQL against a fake Discord that
enforces Discord's limits, 50 requests per second overall and 5 messages per 5 s to one channel
(answering 429 with ``retry_after`` and a ``Via`` header past them, and counting those 429s).

Six days are planned for the same channels (in process, as ``digest publish --plan-only`` plans:
that command is tested in test_workers.py; six more interpreters starting here only cost time),
so each channel is due six messages (the day's first message; the thread it starts takes the
rest) while the workers send side by side, each day's rows claimed by whichever worker comes
first. Per-process limiters would send each channel up to six at once and four times the overall
pace; only the shared token buckets in ``rate_bucket`` (``discord``, ``discord:channel:<id>``)
keep both limits across the processes.
The workers are the real CLI in subprocesses; the fake runs in the test's event loop, so they are
awaited as asyncio subprocesses. Real time (the fake times what it receives), but nothing asserts
a duration.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from digest.store.db import open_database
from digest.store.models import RateBucket
from tests.fake_discord import TEXT, TOKEN, FakeDiscord
from tests.publish_runner import DAY
from tests.test_chat_worker_kill import plan_days

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 4
CHANNELS = 24
DAYS = [DAY - dt.timedelta(days=n) for n in range(5, -1, -1)]  # six days, each one message per channel
# A worker process can stall (a 2-core machine running four workers, PostgreSQL and the fake) after
# booking its slot, so its request arrives late and bunched with the next ones; the buckets leave
# 2.4 requests/s of margin under 50 and 0.14 messages per 5 s under 5 per channel. A few such 429s
# are tolerated (each is waited out and retried, so nothing is lost or sent twice): seen 0-1 on a
# quiet machine, 2 in a whole-suite run under libfaketime; per-process limiters make ~200 here.
TOLERATED_429 = 5


def _env(url: str, tmp: Path, fake: FakeDiscord) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env.update(DIGEST_DATABASE_URL=url, DIGEST_VAR_DIR=str(tmp / "var"), DIGEST_OUTBOX_LEASE="60",
               DIGEST_OUTBOX_HEARTBEAT="15", DIGEST_SEND_BACKOFF="0.05",
               DIGEST_SECRET_KEY="discord-workers-test-key-0123456789", DIGEST_DISCORD_TOKEN=TOKEN,
               DIGEST_DISCORD_API_BASE=fake.api_base)  # one real clock for all: no DIGEST_NOW
    return env


async def _report(env: dict[str, str], *command: str) -> dict[str, Any]:
    """Run ``digest <command> --json``; its report for the discord channel."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "digest", *command, "--json", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 300)  # a guard against a hang, not a speed test
    assert proc.returncode == 0, err.decode()
    return dict(json.loads(out)["channels"].get("discord", {}))


async def _bucket_keys(url: str) -> set[str]:
    async with open_database(url) as sessions, sessions() as session:
        return set((await session.scalars(select(RateBucket.key))).all())


@pytest.mark.postgres
async def test_four_discord_workers_together_keep_discords_limits(postgres_url: str, tmp_path: Path) -> None:
    async with FakeDiscord(enforce=True) as fake:
        channels = [fake.add_channel(TEXT, name=f"c{n}") for n in range(CHANNELS)]
        planned = await plan_days(postgres_url, DAYS, map(str, channels), "discord")
        assert planned == [CHANNELS] * len(DAYS)
        env = _env(postgres_url, tmp_path, fake)
        reports = await asyncio.gather(*(_report(env, "worker", "--once") for _ in range(WORKERS)))
        too_many = fake.too_many
        messages = list(fake.messages)
        threads = list(fake.threads.values())
    assert sum(r.get("sent", 0) for r in reports) == CHANNELS * len(DAYS), reports
    assert sum(r.get("resent", 0) for r in reports) == 0
    assert too_many <= TOLERATED_429, f"the fake answered {too_many} 429s"
    # each channel: one message a day, each starting that day's thread; none twice
    assert Counter(m.channel for m in messages if m.channel in channels) == dict.fromkeys(channels, len(DAYS))
    named = Counter((t["parent_id"], t["name"]) for t in threads)
    assert set(named) == {(str(cid), day.isoformat()) for cid in channels for day in DAYS}
    assert set(named.values()) == {1}
    keys = await _bucket_keys(postgres_url)
    assert {"discord", *(f"discord:channel:{cid}" for cid in channels)} <= keys
