"""``run_daily`` called directly: the bundled samples as local feeds, real SQLite, the file outbox."""

from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
from pathlib import Path

import pytest

from digest import bootstrap
from digest.config import Settings, load_settings
from digest.daily import NO_SOURCE, DailyReport, run_daily
from digest.domain.window import latest_closed
from digest.ingest.samples import write_samples
from digest.subscribe.subscriptions import subscribe

# A Saturday 03:00 UTC: the latest closed window (Shanghai) holds the samples' early-morning items.
NOW = dt.datetime(2026, 12, 5, 3, 0, tzinfo=dt.UTC)
DAY = latest_closed(NOW, "Asia/Shanghai")
READER = "reader@example.org"
TALLY = {"planned", "empty", "sent", "skipped", "retried", "deferred", "held", "failed", "resent"}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("DIGEST_") and not name.startswith("DIGEST_TEST_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _settings(tmp: Path, sources: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "database_url": f"sqlite+aiosqlite:///{tmp / 'daily.db'}", "var_dir": tmp / "var",
        "sources": sources, "mail_outbox": tmp / "outbox", "now": NOW, **overrides}
    return load_settings(**values)


def _samples(tmp: Path) -> Path:
    return write_samples(tmp / "samples", NOW)


async def _run(settings: Settings, date: dt.date | None = None, *, reader: bool = True) -> DailyReport:
    """One daily run on the real wiring, with one active email reader (added once)."""
    async with bootstrap.database(settings) as sessions:
        if reader:
            async with sessions.begin() as session:
                await subscribe(session, "email", READER, confirmed=True, now=NOW)
        return await run_daily(date, bootstrap.daily_deps(settings, sessions))


def _count(tmp: Path, table: str) -> int:
    db = sqlite3.connect(tmp / "daily.db")
    try:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        db.close()


async def test_a_run_fetches_builds_and_sends_and_a_second_run_sends_nothing_twice(tmp_path: Path) -> None:
    settings = _settings(tmp_path, _samples(tmp_path))
    first = (await _run(settings)).as_json()
    assert first["ok"] is True and first["error"] is None and first["date"] == DAY.isoformat()
    assert first["sources"]["ok"] > 0 and first["sources"]["failed"] == []
    assert first["entries"] > 0 and first["events"] > 0
    assert first["built"] is True and "built_reason" not in first
    assert first["published"] is True and "published_reason" not in first
    email = first["deliveries"]["email"]
    assert set(email) >= TALLY and (email["planned"], email["sent"], email["failed"]) == (1, 1, 0)
    assert first["llm"] == {"calls": 0, "tokens": 0}  # no key: extractive
    assert isinstance(first["seconds"], float) and first["seconds"] >= 0
    assert len(list((tmp_path / "outbox").glob("*.eml"))) == 1

    second = (await _run(settings, reader=False)).as_json()
    assert second["ok"] is True and second["date"] == first["date"]
    assert (second["built"], second["built_reason"]) == (False, "already built")
    assert (second["published"], second["published_reason"]) == (False, "already published")
    assert all(t["planned"] == t["sent"] == 0 for t in second["deliveries"].values())
    assert second["entries"] == first["entries"] and second["events"] == first["events"]
    assert len(list((tmp_path / "outbox").glob("*.eml"))) == 1
    assert (_count(tmp_path, "digest"), _count(tmp_path, "delivery")) == (1, 1)
    json.dumps(second)  # the --json document is plain JSON


async def test_a_given_date_is_the_one_built_and_published(tmp_path: Path) -> None:
    earlier = DAY - dt.timedelta(days=1)
    report = await _run(_settings(tmp_path, _samples(tmp_path)), earlier)
    assert report.ok and report.date == earlier
    assert report.built and report.build is not None and report.build.date == earlier
    assert report.published and report.publish is not None and report.publish.date == earlier


async def test_no_reachable_source_stops_the_run_with_the_reason(tmp_path: Path) -> None:
    toml = tmp_path / "sources.toml"
    toml.write_text('[[source]]\nkey = "dead"\nname = "Dead"\nurl = "http://127.0.0.1:9/feed"\n')
    report = await _run(_settings(tmp_path, toml))
    data = report.as_json()
    assert not report.ok and (report.error or "").startswith(NO_SOURCE)
    assert data["sources"]["ok"] == 0 and [f["source"] for f in data["sources"]["failed"]] == ["dead"]
    assert data["sources"]["failed"][0]["error"]
    assert (data["built"], data["built_reason"]) == (False, report.error)
    assert (data["published"], data["published_reason"]) == (False, report.error)
    assert data["deliveries"] == {} and data["date"] == DAY.isoformat()
    assert _count(tmp_path, "digest") == 0


async def test_a_channel_that_stops_the_run_keeps_the_report(tmp_path: Path) -> None:
    """The outbox cannot be written (FATAL): the run fails in one line, what happened is still reported."""
    (tmp_path / "file").write_text("not a folder")
    report = await _run(_settings(tmp_path, _samples(tmp_path), mail_outbox=tmp_path / "file" / "outbox"))
    data = report.as_json()
    assert not report.ok and "mail outbox" in (report.error or "") and "\n" not in (report.error or "")
    assert data["built"] is True and data["published"] is True
    assert data["deliveries"]["email"]["planned"] == 1 and data["deliveries"]["email"]["sent"] == 0


def _reports(tmp: Path) -> list[tuple[str, str, int, dict[str, object]]]:
    db = sqlite3.connect(tmp / "daily.db")
    try:
        rows = db.execute("SELECT date, trigger, ok, report FROM run_report ORDER BY id").fetchall()
    finally:
        db.close()
    return [(date, trigger, ok, json.loads(report)) for date, trigger, ok, report in rows]


async def test_every_run_stores_its_report_with_its_trigger(tmp_path: Path) -> None:
    settings = _settings(tmp_path, _samples(tmp_path))
    first = await _run(settings)
    async with bootstrap.database(settings) as sessions:
        await run_daily(None, bootstrap.daily_deps(settings, sessions), "schedule")
    stored = _reports(tmp_path)
    day = DAY.isoformat()
    assert [(d, t, ok) for d, t, ok, _ in stored] == [(day, "run", 1), (day, "schedule", 1)]
    assert stored[0][3] == first.as_json()


async def test_a_failed_run_is_stored_too_and_a_day_without_events_says_so(tmp_path: Path) -> None:
    from digest.render.report_text import admin_text

    toml = tmp_path / "sources.toml"
    toml.write_text('[[source]]\nkey = "dead"\nname = "Dead"\nurl = "http://127.0.0.1:9/feed"\n')
    report = await _run(_settings(tmp_path, toml))
    [(date, trigger, ok, data)] = _reports(tmp_path)
    assert (date, trigger, ok) == (DAY.isoformat(), "run", 0) and data["error"] == report.error
    text = admin_text(data, trigger, [])
    assert "no events in this window" in text and "dead" in text and "FAILED" in text


async def test_the_admin_copy_goes_to_the_admin_email_and_names_a_source_failing_days_in_a_row(
        tmp_path: Path) -> None:
    samples = _samples(tmp_path)
    toml = tmp_path / "sources.toml"
    toml.write_text(samples.read_text() + '\n[[source]]\nkey = "dead"\nname = "Dead"\nurl = "http://127.0.0.1:9/f"\n')
    settings = _settings(tmp_path, toml, admin_email="admin@example.org")
    await _run(settings)
    await _run(settings, reader=False)
    mails = sorted((tmp_path / "outbox").glob("*.eml"), key=lambda p: p.stat().st_mtime_ns)
    admin = [p.read_bytes() for p in mails if b"To: admin@example.org" in p.read_bytes()]
    assert len(admin) == 2
    assert b"failing several days in a row" not in admin[0]
    assert b"dead: 2 fetches in a row" in admin[1]
