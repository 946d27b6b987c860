"""Crash safety: SIGKILL ``digest publish`` at random points, publish again, count what went twice.

The publisher is the real CLI (``python -m digest publish``) in a subprocess,
against a slowed test SMTP server (each message waits before the server
answers, so ``c`` messages are in flight at any moment). Each kill may
duplicate at most those ``c`` (the server took the message, the process died
before committing ``sent``); nothing may be missing once a publish completes,
every duplicate carries the Message-ID of its first copy, and the final run's
report counts them (``resent``).

Time is injected, not waited for: every run before the last starts its clock
at the same pinned instant (``DIGEST_NOW``), so the rows the killed runs left
``sending`` are still under their lease for the next one. A rerun that
completes then must report them as ``held`` (with when they fall due) instead
of silently sending fewer. The final run's clock starts after the latest
lease any killed run can have renewed (its start + how long it lived + the
lease), so it sees every lease expired and reclaims the rows.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from digest.domain.status import DeliveryStatus
from digest.store.db import open_database
from digest.store.models import Delivery
from tests.publish_runner import DAY, NOW, add_subscriber, build_day
from tests.smtpserver import Faults, SMTPTestServer, smtp_server

ROOT = Path(__file__).resolve().parent.parent
SEED = 20260929
SUBSCRIBERS = 45
CONCURRENCY = 3
LEASE = 60.0
KILLS = 3
PINNED = NOW + dt.timedelta(hours=1)  # every run but the last starts its clock here


def _env(tmp: Path, server: SMTPTestServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env.update(
        DIGEST_DATABASE_URL=f"sqlite+aiosqlite:///{tmp / 'crash.db'}", DIGEST_VAR_DIR=str(tmp / "var"),
        DIGEST_SMTP_HOST=server.host, DIGEST_SMTP_PORT=str(server.port), DIGEST_SMTP_TLS="none",
        DIGEST_SMTP_CONCURRENCY=str(CONCURRENCY), DIGEST_OUTBOX_LEASE=str(LEASE),
        DIGEST_OUTBOX_HEARTBEAT=str(LEASE / 4), DIGEST_SEND_BACKOFF="0.05",
        DIGEST_MAIL_FROM="digest@example.org", DIGEST_SECRET_KEY="crash-test-signing-key-0123456789abcdef",
        DIGEST_NOW=PINNED.isoformat(),
    )
    return env


def _publish(env: dict[str, str], **more: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "digest", "publish", "--date", str(DAY), "--json"],
                            cwd=ROOT, env={**env, **more}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _kill_after(env: dict[str, str], server: SMTPTestServer, more: int) -> float:
    """Start a publish, SIGKILL it once the server has accepted ``more`` further messages.

    Returns how long it lived at most (seconds): its clock ran no further than that.
    """
    target = len(server.received) + more
    started = time.monotonic()
    proc = _publish(env)
    deadline = started + 60  # only a guard against a hang, never a speed requirement
    while len(server.received) < target:
        assert proc.poll() is None, f"seed {SEED}: publish ended before the kill: {proc.communicate()}"
        assert time.monotonic() < deadline, f"seed {SEED}: the publisher made no progress"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return time.monotonic() - started


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"seed {SEED}: {err}"
    email: dict[str, Any] = json.loads(out)["channels"]["email"]
    return email


async def _sending_rows(url: str) -> int:
    async with open_database(url) as sessions, sessions() as session:
        sending = select(func.count()).where(Delivery.status == DeliveryStatus.SENDING)
        return int(await session.scalar(sending) or 0)


async def test_killed_publishes_lose_nothing_and_duplicate_at_most_the_messages_in_flight(
        tmp_path: Path) -> None:
    rng = random.Random(SEED)
    url = f"sqlite+aiosqlite:///{tmp_path / 'crash.db'}"
    async with open_database(url) as sessions:
        await build_day(sessions)
        for n in range(SUBSCRIBERS):
            await add_subscriber(sessions, f"r{n}@example.com")
    with smtp_server(Faults(delay=0.04)) as server:
        env = _env(tmp_path, server)
        lived = max(_kill_after(env, server, rng.randint(1, 8)) for _ in range(KILLS))
        stuck = await _sending_rows(url)
        assert stuck > 0, f"seed {SEED}: the kills left no row sending"

        rerun = _finish(_publish(env))  # the dead runs' leases still hold on its clock
        held_until = dt.datetime.fromisoformat(rerun["held_until"])
        assert rerun["held"] == stuck, f"seed {SEED}: {rerun}"
        assert PINNED < held_until <= PINNED + dt.timedelta(seconds=lived + LEASE), f"seed {SEED}: {rerun}"
        assert rerun["resent"] == 0 and rerun["failed"] == 0, f"seed {SEED}: {rerun}"

        after_leases = held_until + dt.timedelta(seconds=1)
        final = _finish(_publish(env, DIGEST_NOW=after_leases.isoformat()))
        received = server.received
    per_id = Counter(item.message_id for item in received)
    duplicates = sum(n - 1 for n in per_id.values())
    owners = {item.message_id: item.rcpt_tos for item in received}
    everyone = {f"r{n}@example.com" for n in range(SUBSCRIBERS)}
    assert {rcpt for item in received for rcpt in item.rcpt_tos} == everyone, f"seed {SEED}"
    assert len(per_id) == SUBSCRIBERS and all(len(set(owners[m])) == 1 for m in per_id), f"seed {SEED}"
    assert duplicates <= CONCURRENCY * KILLS, f"seed {SEED}: {duplicates} duplicates"
    assert final["held"] == 0 and final["sent"] == stuck, f"seed {SEED}: {final}"
    assert duplicates <= final["resent"] <= 2 * CONCURRENCY * KILLS, f"seed {SEED}: {final}"
    assert final["failed"] == 0 and final["deferred"] == 0, f"seed {SEED}: {final}"
    assert await _sending_rows(url) == 0, f"seed {SEED}"
