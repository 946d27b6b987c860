"""Crash safety: SIGKILL ``digest publish`` at random points, publish again, count what went twice.

The publisher runs as a subprocess against a slowed test SMTP server (each
message waits before the server answers, so ``c`` messages are in flight at
any moment). Each kill may duplicate at most those ``c`` (the server took the
message, the process died before committing ``sent``); nothing may be
missing once a publish completes, every duplicate carries the Message-ID of
its first copy, and the final run's report counts them (``resent``).

Reruns start at once, while the dead runs' leases still hold (those rows are
not theirs to take yet); the final run starts after the lease and reclaims
every row left ``sending`` by the kills. The test checks that timing rather
than trusting it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from digest.db import open_database
from tests.publish_runner import DAY, add_subscriber, build_day
from tests.smtpserver import Faults, SMTPTestServer, smtp_server

ROOT = Path(__file__).resolve().parent.parent
SUBSCRIBERS = 45
CONCURRENCY = 3
LEASE = 8.0
KILLS = 3


def _env(tmp: Path, server: SMTPTestServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env.update(
        DIGEST_DATABASE_URL=f"sqlite+aiosqlite:///{tmp / 'crash.db'}", DIGEST_VAR_DIR=str(tmp / "var"),
        DIGEST_SMTP_HOST=server.host, DIGEST_SMTP_PORT=str(server.port), DIGEST_SMTP_TLS="none",
        DIGEST_SMTP_CONCURRENCY=str(CONCURRENCY), DIGEST_OUTBOX_LEASE=str(LEASE),
        DIGEST_SEND_BACKOFF="0.05", DIGEST_MAIL_FROM="digest@example.org", DIGEST_SECRET_KEY="k",
    )
    return env


def _publish(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.publish_runner", "publish", "--date", str(DAY),
                             "--json"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _kill_after(proc: subprocess.Popen[str], server: SMTPTestServer, more: int) -> None:
    """SIGKILL ``proc`` once the server has accepted ``more`` further messages."""
    target = len(server.received) + more
    deadline = time.monotonic() + 30
    while len(server.received) < target:
        assert proc.poll() is None, f"publish ended before the kill: {proc.communicate()}"
        assert time.monotonic() < deadline, "the publisher made no progress"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


async def test_killed_publishes_lose_nothing_and_duplicate_at_most_the_messages_in_flight(
        tmp_path: Path) -> None:
    rng = random.Random()
    async with open_database(f"sqlite+aiosqlite:///{tmp_path / 'crash.db'}") as sessions:
        await build_day(sessions)
        for n in range(SUBSCRIBERS):
            await add_subscriber(sessions, f"r{n}@example.com")
    with smtp_server(Faults(delay=0.04)) as server:
        env = _env(tmp_path, server)
        first_kill = None
        for _ in range(KILLS):
            _kill_after(_publish(env), server, rng.randint(1, 8))
            first_kill = first_kill or time.monotonic()
        assert first_kill is not None
        assert time.monotonic() - first_kill < LEASE - 1, "the reruns outlived the lease"
        time.sleep(LEASE + 0.5)
        final = _publish(env)
        out, err = final.communicate(timeout=60)
        assert final.returncode == 0, err
        received = server.received
    report = json.loads(out)["channels"]["email"]
    per_id = Counter(item.message_id for item in received)
    duplicates = sum(n - 1 for n in per_id.values())
    owners = {item.message_id: item.rcpt_tos for item in received}
    everyone = {f"r{n}@example.com" for n in range(SUBSCRIBERS)}
    assert {rcpt for item in received for rcpt in item.rcpt_tos} == everyone
    assert len(per_id) == SUBSCRIBERS and all(len(set(owners[m])) == 1 for m in per_id)
    assert duplicates <= CONCURRENCY * KILLS
    assert duplicates <= report["resent"] <= 2 * CONCURRENCY * KILLS
    assert report["failed"] == 0 and report["deferred"] == 0
