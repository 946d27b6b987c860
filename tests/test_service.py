"""``digest serve`` as the service: real processes, the bundled samples as local feeds, a real SMTP server.

Each subprocess has DIGEST_NOW pinned; every wait is bounded (``WAIT``); the
schedule tick is either computed a few seconds ahead of the pinned clock (in
a subprocess) or fired at once through an injected clock and sleep (in process).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from digest import bootstrap
from digest.config import load_settings
from digest.domain.window import latest_closed
from digest.ingest.samples import write_samples
from digest.service import Schedule, Service
from digest.store.db import open_database
from digest.subscribe.subscriptions import subscribe
from tests.fake_llm import FakeLLM, Reply
from tests.smtpserver import Faults, SMTPTestServer, smtp_server
from tests.test_serve import SERVING, WAIT, Output

TZ = "Asia/Shanghai"
NOW = dt.datetime(2026, 12, 5, 3, 0, tzinfo=dt.UTC)  # 11:00 in Shanghai: the window of Dec 5 is closed
DAY = latest_closed(NOW, TZ)
READER, ADMIN = "reader@example.org", "admin@example.org"
SECRETS = {"DIGEST_SMTP_PASSWORD": "smtp-Pa55word-xyzzy", "DIGEST_LLM_API_KEY": "sk-llmKEY-0123456789abcdef",
           "DIGEST_SECRET_KEY": "signing-key-" + "k" * 40,
           "DIGEST_DISCORD_TOKEN": "discord.TOKEN.abcdef123456"}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("DIGEST_") and not name.startswith("DIGEST_TEST_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _env(tmp: Path, smtp: SMTPTestServer, now: dt.datetime, *, llm: bool = True,
         **extra: str) -> dict[str, str]:
    """The service's environment. ``llm``: an LLM key (its secret in play: :func:`_no_secret_in`),
    aimed at a closed port unless ``DIGEST_LLM_BASE_URL`` is given, where every call fails after
    its retries (0.5 + 1 s for each wave of calls, several waves a run); without it the job
    writes extractively, which is all a test of the schedule or of stopping needs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")} | {
        "DIGEST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'service.db'}",
        "DIGEST_VAR_DIR": str(tmp / "var"),
        "DIGEST_SOURCES": str(write_samples(tmp / "samples", NOW)), "DIGEST_NOW": now.isoformat(),
        "DIGEST_SMTP_HOST": smtp.host, "DIGEST_SMTP_PORT": str(smtp.port), "DIGEST_SMTP_TLS": "none",
        "DIGEST_SMTP_USER": "digest", "DIGEST_LLM_BASE_URL": "http://127.0.0.1:9/v1",
        "DIGEST_ADMIN_EMAIL": ADMIN, "DIGEST_LOG_JSON": "1", "PYTHONUNBUFFERED": "1", **SECRETS, **extra}
    if not llm:
        del env["DIGEST_LLM_API_KEY"]
    return env


async def _add_reader(tmp: Path) -> None:
    async with open_database(f"sqlite+aiosqlite:///{tmp / 'service.db'}") as sessions, sessions.begin() as s:
        await subscribe(s, "email", READER, confirmed=True, now=NOW)


class Served:
    """One ``digest serve`` process: its URL, its output; stopped with SIGTERM."""

    def __init__(self, tmp: Path, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "digest", "serve", "--port", "0", *args], cwd=tmp,
                                     env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out, self.err = Output(), Output()
        self.threads = [self.out.follow(self.proc.stdout), self.err.follow(self.proc.stderr)]  # type: ignore[arg-type]
        self.url = ""

    def started(self) -> str:
        self.url = self.err.wait_for(SERVING)[1]
        return self.url

    def stop(self) -> int:
        """SIGTERM, then the exit code (killed if it does not stop within WAIT: a hang guard)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=WAIT)
        finally:
            self.proc.kill()
            for thread in self.threads:
                thread.join(timeout=WAIT)

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url.rstrip("/") + path, timeout=WAIT)


@contextmanager
def services(tmp: Path, env: dict[str, str], count: int, *args: str) -> Iterator[list[Served]]:
    """``count`` services started together on one database; each is stopped (SIGTERM) on leaving."""
    with ExitStack() as stack:
        started = [Served(tmp, env, *args) for _ in range(count)]
        for one in started:
            stack.callback(one.stop)
        yield started


def _until(check: object, what: str) -> None:
    """Poll ``check()`` until it is true; fail after WAIT seconds (a hang guard, not a speed check)."""
    deadline = time.monotonic() + WAIT
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def _rows(tmp: Path, sql: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(tmp / "service.db")
    try:
        return list(db.execute(sql).fetchall())
    finally:
        db.close()


def _metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the Prometheus text (0 when absent)."""
    for line in text.splitlines():
        found = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
        if found and found[1] == name:
            have = dict(re.findall(r'(\w+)="([^"]*)"', found[2] or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                return float(found[3])
    return 0.0


def _refusing_llm() -> FakeLLM:
    """An LLM endpoint that refuses the key at once (no retries), its answer quoting the key, as
    real ones quote part of it: a secret the service might pass on in its logs or reports."""
    key = SECRETS["DIGEST_LLM_API_KEY"]
    return FakeLLM(Reply(status=401, body=json.dumps({"error": {
        "message": f"Incorrect API key provided: {key}", "type": "invalid_request_error",
        "code": "invalid_api_key"}}).encode()))


async def test_two_services_catch_up_once_report_it_and_stop_on_sigterm(tmp_path: Path) -> None:
    await _add_reader(tmp_path)
    with smtp_server(Faults(password=SECRETS["DIGEST_SMTP_PASSWORD"])) as smtp, _refusing_llm() as llm:
        env = _env(tmp_path, smtp, NOW, DIGEST_LLM_BASE_URL=llm.base_url)
        with services(tmp_path, env, 2, "--no-bots") as both:
            for one in both:
                one.started()
            _until(lambda: len(smtp.received) >= 2 and all(
                s.get("/healthz").json()["last_run"] for s in both), "the catch-up and its admin copy")
            _until(lambda: any("is published already" in s.err.text for s in both),
                   "the other service to find the day published")
            health = [s.get("/healthz").json() for s in both]
            metrics = [s.get("/metrics").text for s in both]
            codes = [s.stop() for s in both]
        by = smtp.by_recipient()
    assert codes == [0, 0], "\n".join(s.err.text for s in both)
    assert llm.requests and {r.headers["authorization"] for r in llm.requests} == {
        f"Bearer {SECRETS['DIGEST_LLM_API_KEY']}"}  # the key was in play
    assert len(by[READER]) == 1 and len(by[ADMIN]) == 1  # published once, one admin copy
    assert _rows(tmp_path, "SELECT date, trigger, ok FROM run_report") == [(DAY.isoformat(), "catch-up", 1)]
    assert _rows(tmp_path, "SELECT status FROM delivery") == [("sent",)]
    assert _rows(tmp_path, "SELECT count(*) FROM run_lock") == [(0,)]
    for one in health:
        assert one["status"] == one["database"] == "ok"
        assert (one["last_run"]["date"], one["last_run"]["ok"]) == (DAY.isoformat(), True)
        assert one["next_run"] == "2026-12-06T00:00:00+00:00"  # 08:00 in Shanghai
    worked = [m for m in metrics if _metric(m, "digest_digests_built_total") == 1]
    assert len(worked) == 1
    assert _metric(worked[0], "digest_deliveries_total", channel="email", outcome="sent") == 1
    assert _metric(worked[0], "digest_fetches_total", source="llvm-blog", status="ok") == 1
    assert _metric(worked[0], "digest_send_seconds_count", channel="email") == 1  # the reader's send
    assert _metric(worked[0], "digest_last_successful_run_timestamp_seconds") > NOW.timestamp()
    admin = by[ADMIN][0].message.get_body(("plain",))
    assert admin is not None and f"catch-up run of {DAY.isoformat()}: ok" in admin.get_content()
    mails = [m.data.decode(errors="replace") for m in smtp.received]
    _no_secret_in(tmp_path, [s.err.text + s.out.text for s in both] + mails)


def _no_secret_in(tmp: Path, outputs: list[str]) -> None:
    """No configured secret in any output, stored report or mail of the run."""
    stored = json.dumps(_rows(tmp, "SELECT report FROM run_report"))
    for secret in SECRETS.values():
        for text in [*outputs, stored]:
            assert secret not in text


async def test_a_tick_computed_ahead_of_the_pinned_clock_runs_the_new_window(tmp_path: Path) -> None:
    """07:59:58 in Shanghai: the catch-up publishes yesterday's window, the 08:00 tick today's."""
    now = dt.datetime(2026, 12, 5, 7, 59, 58, tzinfo=ZoneInfo(TZ))
    await _add_reader(tmp_path)
    with smtp_server(Faults(password=SECRETS["DIGEST_SMTP_PASSWORD"])) as smtp, \
            services(tmp_path, _env(tmp_path, smtp, now, llm=False), 1, "--no-bots") as (one,):
        one.started()
        _until(lambda: len(_rows(tmp_path, "SELECT id FROM run_report")) >= 2, "the scheduled run")
        health = one.get("/healthz").json()
        assert one.stop() == 0, one.err.text
    runs = _rows(tmp_path, "SELECT date, trigger FROM run_report ORDER BY id")
    assert runs == [("2026-12-04", "catch-up"), ("2026-12-05", "schedule")]
    assert health["last_run"]["trigger"] == "schedule"
    assert health["next_run"] == "2026-12-06T00:00:00+00:00"


async def test_sigterm_during_a_run_exits_0_with_nothing_half_recorded(tmp_path: Path) -> None:
    """The SMTP server answers slowly: SIGTERM lands while mail is going out."""
    await _add_reader(tmp_path)
    with smtp_server(Faults(password=SECRETS["DIGEST_SMTP_PASSWORD"], delay=2.0)) as smtp, \
            services(tmp_path, _env(tmp_path, smtp, NOW, llm=False), 1, "--no-bots") as (one,):
        one.started()
        _until(lambda: _rows(tmp_path, "SELECT count(*) FROM delivery") != [(0,)], "a planned delivery")
        assert one.stop() == 0, one.err.text
    statuses = {s for (s,) in _rows(tmp_path, "SELECT status FROM delivery")}
    assert statuses <= {"sent", "planned"}  # finished or released, never left "sending"
    assert _rows(tmp_path, "SELECT count(*) FROM run_lock") == [(0,)]
    assert [t for (t,) in _rows(tmp_path, "SELECT trigger FROM run_report")] in ([], ["catch-up"])


# -- in process: the schedule with an injected clock and sleep -------------------------------------

class FakeTime:
    """A clock that moves only when the service sleeps."""

    def __init__(self, start: dt.datetime) -> None:
        self.now, self.naps = start, []

    def clock(self) -> dt.datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.naps.append(seconds)
        self.now += dt.timedelta(seconds=seconds)
        await asyncio.sleep(0)


async def test_a_tick_fires_through_the_injected_sleep(tmp_path: Path) -> None:
    start = dt.datetime(2026, 12, 5, 7, 0, tzinfo=ZoneInfo(TZ))  # an hour before the 08:00 run
    fake = FakeTime(start.astimezone(dt.UTC))
    settings_ = load_settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'tick.db'}",
                              var_dir=tmp_path / "var", sources=write_samples(tmp_path / "samples", NOW),
                              mail_outbox=tmp_path / "outbox", now=NOW)
    async with bootstrap.database(settings_) as sessions:
        deps = replace(bootstrap.daily_deps(settings_, sessions), clock=fake.clock)
        service = Service(deps, Schedule("0 8 * * *", TZ), deps.lock, fake.clock, asyncio.Event(),
                          sleep=fake.sleep)
        report = await asyncio.wait_for(service.tick(), WAIT)
    assert report is not None and report.date == dt.date(2026, 12, 5)
    assert sum(fake.naps) == 3600 and max(fake.naps) <= 60
    assert service.next_run == dt.datetime(2026, 12, 6, 0, 0, tzinfo=dt.UTC)
    assert _count_reports(tmp_path / "tick.db") == [("2026-12-05", "schedule")]


def _count_reports(db: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return list(conn.execute("SELECT date, trigger FROM run_report").fetchall())
    finally:
        conn.close()


async def test_a_stopped_service_does_not_tick() -> None:
    fake = FakeTime(NOW)
    stop = asyncio.Event()
    stop.set()
    service = Service(None, Schedule("0 8 * * *", TZ), None, fake.clock, stop, sleep=fake.sleep)  # type: ignore[arg-type]
    assert await asyncio.wait_for(service.tick(), WAIT) is None and fake.naps == []


@settings(max_examples=60, deadline=None)
@given(st.datetimes(min_value=dt.datetime(2020, 1, 1), max_value=dt.datetime(2035, 1, 1),
                    timezones=st.just(dt.UTC)),
       st.integers(0, 59), st.integers(0, 23), st.sampled_from([TZ, "UTC", "America/New_York"]))
def test_the_next_run_is_the_first_matching_minute_after_now(now: dt.datetime, minute: int, hour: int,
                                                            zone: str) -> None:
    due = Schedule(f"{minute} {hour} * * *", zone).next_after(now)
    local = due.astimezone(ZoneInfo(zone))
    assert due > now and due - now <= dt.timedelta(days=1, hours=1)
    assert local.second == 0 and local.minute == minute
    assert local.hour == hour or zone == "America/New_York"  # a DST gap moves the wall time


def test_log_lines_are_json_and_never_carry_a_configured_secret(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from digest import logs

    secret, root = SECRETS["DIGEST_LLM_API_KEY"], logging.getLogger()
    kept, level = list(root.handlers), root.level
    logs.configure([secret, "abc"], json_lines=True)
    try:
        logging.getLogger("digest.test").warning("calling https://api.example/bot%s/getMe", secret)
        try:
            raise RuntimeError(f"refused key {secret}\nsecond line")
        except RuntimeError:
            logging.getLogger("digest.test").exception("failed")
    finally:
        root.handlers[:] = kept
        root.setLevel(level)
    lines = capsys.readouterr().err.splitlines()
    records = [json.loads(line) for line in lines]  # one JSON object per line, the traceback inside
    assert [r["message"] for r in records] == ["calling https://api.example/bot[redacted]/getMe", "failed"]
    assert secret not in "".join(lines) and "[redacted]" in records[1]["error"]
