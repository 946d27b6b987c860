"""What an operator runs into, end to end (the real CLI on real files): dates that cannot be built,
partial and deleted digests, late subscribers, ``digest status``, and a database made by mistake.

Most commands run through :func:`run_cli`: the CLI's own ``main`` in this process, with the
command's environment, folder, stdout, stderr and exit code, but without a new interpreter's
start-up for each step (its imports cost a second or more per command on a loaded machine). What
only a new process shows (the entry point, a message said once per process) runs ``python -m
digest`` in a subprocess (``fresh=True``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import func, select

from digest.domain.window import latest_closed
from digest.store.db import SessionFactory, open_database
from digest.store.models import Delivery, Digest, RunReport
from digest.store.queries import list_digests

# A Saturday 03:00 UTC (11:00 in Shanghai): the window of Dec 5 has closed, Dec 6's is open.
NOW = dt.datetime(2026, 12, 5, 3, 0, tzinfo=dt.UTC)
CLOSED = latest_closed(NOW, "Asia/Shanghai")
OPEN = CLOSED + dt.timedelta(days=1)
T = TypeVar("T")


def run_cli(cwd: Path, args: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m digest ARGS`` run by ``digest.cli.main.main`` in this process, as a subprocess would be.

    The environment is exactly ``env`` and the folder ``cwd`` for the call; stdout and stderr are
    the call's own (not terminals, as with a pipe); the exit code is main's return or its
    ``SystemExit`` (argparse's usage errors). The root logger is emptied first, so main's
    ``basicConfig`` sets it up on this call's stderr as in a fresh process (a stray log line shows
    in ``stderr``); it, the gc thresholds main sets, the folder and the environment are put back after.
    """
    from digest.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level, thresholds = root.handlers[:], root.level, gc.get_threshold()
    environ, here = dict(os.environ), os.getcwd()
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        root.handlers[:] = []
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:], root.level = handlers, level
        gc.set_threshold(*thresholds)
        os.chdir(here)
        os.environ.clear()
        os.environ.update(environ)
    return subprocess.CompletedProcess(["digest", *args], code, out.getvalue(), err.getvalue())


def digest(tmp: Path, *args: str, now: dt.datetime = NOW, db: bool = True,
           sources: Path | None = None, fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the CLI in ``tmp`` (with a private database unless ``db`` is False); ``fresh``: a new process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    if db:
        env["DIGEST_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp / 'cli.db'}"
    env["DIGEST_NOW"] = now.isoformat()
    if sources is not None:
        env["DIGEST_SOURCES"] = str(sources)
    if not fresh:
        return run_cli(tmp, args, env)
    return subprocess.run([sys.executable, "-m", "digest", *args], capture_output=True, text=True,
                          env=env, cwd=tmp, timeout=120)


def ok(out: subprocess.CompletedProcess[str]) -> str:
    """The stdout of a command that must succeed."""
    assert out.returncode == 0, out.stderr
    return out.stdout


def on_db(tmp: Path, work: Callable[[SessionFactory], Awaitable[T]]) -> T:
    """Run ``work`` on the test's database file, in this process."""
    async def go() -> T:
        async with open_database(f"sqlite+aiosqlite:///{tmp / 'cli.db'}") as sessions:
            return await work(sessions)

    return asyncio.run(go())


@pytest.fixture(scope="module")
def fetched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The offline samples written and fetched once (entries stored, nothing built)."""
    tmp = tmp_path_factory.mktemp("operator")
    sources = Path(ok(digest(tmp, "samples", "--out", str(tmp / "samples"))).strip())
    ok(digest(tmp, "fetch", sources=sources))
    return tmp, sources


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.stderr.strip() and "\n" not in out.stderr.strip(), out.stderr
    return out.stderr.strip()


def test_dates_that_can_never_be_built_are_refused_as_bad_usage(fetched: tuple[Path, Path]) -> None:
    tmp, sources = fetched
    before = digest(tmp, "build", "--date", "1999-01-01", sources=sources)
    assert before.returncode == 2 and "before the first stored entry" in one_line(before)
    future = digest(tmp, "build", "--date", "2027-06-01", sources=sources)
    assert future.returncode == 2 and "in the future" in one_line(future)
    still_open = digest(tmp, "build", "--date", OPEN.isoformat(), sources=sources)
    assert still_open.returncode == 2 and "--partial" in one_line(still_open)

    async def stored(sessions: SessionFactory) -> list[dt.date]:
        async with sessions() as session:
            return list((await session.scalars(select(Digest.date))).all())

    assert on_db(tmp, stored) == [], "a refused date stores nothing"


def test_a_partial_digest_is_never_published_or_listed_and_is_replaced_later(
        fetched: tuple[Path, Path]) -> None:
    tmp, sources = fetched
    out = ok(digest(tmp, "build", "--date", OPEN.isoformat(), "--partial", sources=sources))
    assert "partial" in out
    assert ok(digest(tmp, "preview", "--date", OPEN.isoformat(), "--format", "json"))
    refused = digest(tmp, "publish", "--date", OPEN.isoformat())
    assert refused.returncode == 1 and "partial" in one_line(refused)

    async def listed(sessions: SessionFactory) -> tuple[list[dt.date], bool, Any]:
        async with sessions() as session:
            page = await list_digests(session, "zh")
            row = await session.scalar(select(Digest).where(Digest.date == OPEN))
            assert row is not None
            return [d.date for d in page.items], row.partial, row.published_at

    dates, partial, published = on_db(tmp, listed)
    assert OPEN not in dates and partial and published is None
    later = NOW + dt.timedelta(days=1)  # the window has closed: the normal build replaces the draft
    assert "partial" not in ok(digest(tmp, "build", "--date", OPEN.isoformat(), now=later, sources=sources))
    dates, partial, _ = on_db(tmp, listed)
    assert OPEN in dates and not partial


def test_delete_removes_an_unpublished_digest_and_hides_a_published_one(fetched: tuple[Path, Path]) -> None:
    tmp, sources = fetched
    date = CLOSED.isoformat()
    ok(digest(tmp, "build", "--date", date, sources=sources))
    assert "deleted" in ok(digest(tmp, "delete", "--date", date))
    assert "built" in ok(digest(tmp, "build", "--date", date, sources=sources)), "entries are free again"
    ok(digest(tmp, "subscribers", "add", "--channel", "email", "--address", "early@example.org"))
    ok(digest(tmp, "publish", "--date", date))
    published = digest(tmp, "delete", "--date", date)
    assert published.returncode == 1 and "--force" in one_line(published)
    assert "hidden" in ok(digest(tmp, "delete", "--date", date, "--force"))
    again = json.loads(ok(digest(tmp, "publish", "--date", date, "--json")))
    assert again["total"]["planned"] == 0

    async def state(sessions: SessionFactory) -> tuple[list[dt.date], int, Any]:
        async with sessions() as session:
            page = await list_digests(session, "zh")
            rows = await session.scalar(select(func.count()).select_from(Delivery))
            hidden = await session.scalar(select(Digest.hidden_at).where(Digest.date == CLOSED))
            return [d.date for d in page.items], int(rows or 0), hidden

    dates, deliveries, hidden = on_db(tmp, state)
    assert CLOSED not in dates and deliveries == 1 and hidden is not None


def test_publish_says_who_joined_after_the_first_publish(tmp_path: Path,
                                                         fetched: tuple[Path, Path]) -> None:
    _, sources = fetched
    tmp = tmp_path
    ok(digest(tmp, "fetch", sources=sources))
    date = CLOSED.isoformat()
    ok(digest(tmp, "build", "--date", date, sources=sources))
    ok(digest(tmp, "subscribers", "add", "--channel", "email", "--address", "first@example.org"))
    assert "joined after" not in ok(digest(tmp, "publish", "--date", date))
    later = NOW + dt.timedelta(hours=2)
    for address in ("late1@example.org", "late2@example.org"):
        ok(digest(tmp, "subscribers", "add", "--channel", "email", "--address", address, now=later))
    out = ok(digest(tmp, "publish", "--date", date, now=later))
    assert "2 subscribers joined after this digest was first published; they get the next one" in out
    report = json.loads(ok(digest(tmp, "publish", "--date", date, "--json", now=later)))
    assert report["joined_after"] == 2 and report["total"]["planned"] == 0


def test_status_names_the_database_files_runs_and_subscribers(tmp_path: Path) -> None:
    ok(digest(tmp_path, "subscribers", "add", "--channel", "email", "--address", "a@example.org"))
    ok(digest(tmp_path, "subscribers", "add", "--channel", "telegram", "--address", "12345"))

    async def add_run(sessions: SessionFactory) -> None:
        async with sessions.begin() as session:
            session.add(RunReport(date=CLOSED, trigger="schedule", started_at=NOW,
                                  finished_at=NOW + dt.timedelta(minutes=1), ok=True, report={}))

    before = json.loads(ok(digest(tmp_path, "status", "--json")))
    assert before["last_run"] is None
    on_db(tmp_path, add_run)
    status = json.loads(ok(digest(tmp_path, "status", "--json")))
    assert status["database"] == f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"
    assert status["sources"].endswith("(built in)") and status["outbox"].endswith("outbox")
    assert status["last_run"] == {"date": CLOSED.isoformat(), "trigger": "schedule", "ok": True,
                                  "started_at": NOW.isoformat(),
                                  "finished_at": (NOW + dt.timedelta(minutes=1)).isoformat()}
    assert status["next_run"] == "2026-12-06T08:00:00+08:00"
    assert status["subscribers"] == {"email": {"active": 1}, "telegram": {"active": 1}}
    text = ok(digest(tmp_path, "status"))
    assert "next run:    2026-12-06T08:00:00+08:00" in text and "email: 1 active" in text


def test_status_hides_the_database_password() -> None:
    from digest.cli.status import redacted

    shown = redacted("postgresql+asyncpg://digest:s3cret@db.internal:5432/digest")
    assert "s3cret" not in shown and shown.startswith("postgresql+asyncpg://digest:***@db.internal")


def test_a_new_default_database_is_named_once_on_stderr(tmp_path: Path) -> None:
    first = digest(tmp_path, "subscribers", "list", db=False, fresh=True)
    assert first.returncode == 0
    assert first.stderr.count("digest: created a new database at ./var/digest.db") == 1
    assert (tmp_path / "var" / "digest.db").exists()
    second = digest(tmp_path, "subscribers", "list", db=False, fresh=True)
    assert second.returncode == 0 and "created a new database" not in second.stderr
    chosen = digest(tmp_path / "var", "subscribers", "list", fresh=True)  # DIGEST_DATABASE_URL names the file
    assert chosen.returncode == 0 and "created a new database" not in chosen.stderr


def test_a_run_lock_and_the_database_say_it_once(tmp_path: Path) -> None:
    """``publish`` opens the database twice (its run lock, then the runner): one line all the same."""
    out = digest(tmp_path, "publish", "--date", CLOSED.isoformat(), db=False, fresh=True)
    assert out.returncode == 1 and f"no digest for {CLOSED}" in out.stderr
    assert out.stderr.count("created a new database") == 1


def test_failed_sources_in_the_data_notes_are_those_of_the_sources_file_in_use(
        tmp_path: Path, fetched: tuple[Path, Path]) -> None:
    """``make run`` (other sources, all failing) then ``make demo`` (the samples): no stranger is named."""
    _, sources = fetched
    dead = tmp_path / "dead.toml"
    dead.write_text('[[source]]\nkey = "dead"\nname = "Dead"\nurl = "http://127.0.0.1:9/feed"\n')
    assert digest(tmp_path, "run", sources=dead).returncode == 1
    ok(digest(tmp_path, "run", sources=sources))
    view = json.loads(ok(digest(tmp_path, "preview", "--date", CLOSED.isoformat(), "--format", "json")))
    assert view["stats"]["failed_sources"] == []
