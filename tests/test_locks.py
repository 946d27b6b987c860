"""Run locks: one build, publish or fetch at a time, on SQLite and PostgreSQL, across processes.

Contenders use separate engines (as separate processes would): PostgreSQL
advisory locks are re-entrant within one session, so sharing a pool could hide
a lock left on a pooled connection. Expiry is driven by an injected clock;
nothing sleeps for a lease.
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
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from digest.domain.clock import system_now
from digest.domain.window import window_for
from digest.ingest.samples import write_samples
from digest.store.db import make_engine, migrate, open_database
from digest.store.locks import (
    FETCH_LOCK,
    LEASE,
    LockBusy,
    _Row,
    advisory_key,
    build_lock,
    holder_alive,
    new_holder,
    publish_lock,
    run_lock,
)
from digest.store.models import RunLock
from tests.builders import COMPILER_PAPERS, add_compiler_papers

ROOT = Path(__file__).resolve().parent.parent
T0 = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
DAY = dt.date(2026, 9, 29)
NAME = build_lock(DAY)
WAITING = f"digest: waiting for another build of {DAY} ..."


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: dt.datetime = T0) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


@pytest.fixture
async def engines(db_url: str) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine]]:
    """Two engines on one migrated database, as two processes would have."""
    first, second = make_engine(db_url), make_engine(db_url)
    await migrate(first)
    try:
        yield first, second
    finally:
        await first.dispose()
        await second.dispose()


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll until ``check`` holds; the bound only keeps a broken test from hanging."""
    deadline = asyncio.get_running_loop().time() + 30
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.01)


async def _free(engine: AsyncEngine, name: str, clock: FakeClock) -> bool:
    """Whether ``name`` can be taken right now (taken and left at once)."""
    try:
        async with run_lock(engine, name, wait=False, clock=clock):
            return True
    except LockBusy:
        return False


def test_lock_names_and_keys() -> None:
    assert build_lock(DAY) == "build of 2026-09-29" and publish_lock(DAY) == "publish of 2026-09-29"
    assert str(LockBusy(NAME)) == "another build of 2026-09-29 is running"
    keys = {advisory_key(n) for n in (build_lock(DAY), publish_lock(DAY), FETCH_LOCK)}
    assert len(keys) == 3 and all(-(2**63) <= k < 2**63 for k in keys)
    assert advisory_key(FETCH_LOCK) == advisory_key("fetch")


async def test_second_holder_waits_until_the_first_leaves(
        engines: tuple[AsyncEngine, AsyncEngine]) -> None:
    first, second = engines
    clock, log = FakeClock(), []
    waiting, leave = asyncio.Event(), asyncio.Event()

    def told(name: str) -> None:
        log.append(f"waiting for {name}")
        waiting.set()

    async def a() -> None:
        async with run_lock(first, NAME, wait=True, clock=clock):
            log.append("a in")
            await leave.wait()
            log.append("a out")

    async def b() -> None:
        async with run_lock(second, NAME, wait=True, clock=clock, poll=0.01, on_wait=told):
            log.append("b in")

    holder = asyncio.create_task(a())
    await _until(lambda: asyncio.sleep(0, "a in" in log), "a holds the lock")
    contender = asyncio.create_task(b())
    await asyncio.wait_for(waiting.wait(), 30)
    assert log == ["a in", f"waiting for {NAME}"]
    leave.set()
    await asyncio.wait_for(asyncio.gather(holder, contender), 30)
    assert log == ["a in", f"waiting for {NAME}", "a out", "b in"]


async def test_not_waiting_gets_a_one_line_lock_busy_and_the_lock_is_freed_after(
        engines: tuple[AsyncEngine, AsyncEngine]) -> None:
    first, second = engines
    clock = FakeClock()
    async with run_lock(first, NAME, wait=False, clock=clock):
        with pytest.raises(LockBusy) as busy:
            async with run_lock(second, NAME, wait=False, clock=clock):
                pytest.fail("two holders at once")
        assert str(busy.value) == "another build of 2026-09-29 is running"
        assert await _free(second, publish_lock(DAY), clock), "another name is another lock"
        assert await _free(second, build_lock(DAY + dt.timedelta(days=1)), clock)
    assert await _free(second, NAME, clock)


async def test_a_failing_body_frees_the_lock(engines: tuple[AsyncEngine, AsyncEngine]) -> None:
    first, second = engines
    clock = FakeClock()
    with pytest.raises(RuntimeError):
        async with run_lock(first, NAME, wait=False, clock=clock):
            raise RuntimeError("the build failed")
    assert await _free(second, NAME, clock)


async def _expiry(engine: AsyncEngine, name: str) -> dt.datetime | None:
    async with engine.connect() as conn:
        found: dt.datetime | None = await conn.scalar(
            select(RunLock.expires_at).where(RunLock.name == name))
        return found


async def test_the_heartbeat_keeps_a_hold_longer_than_the_lease(sqlite_url: str) -> None:
    first, second = make_engine(sqlite_url), make_engine(sqlite_url)
    await migrate(first)
    clock = FakeClock()
    try:
        async with run_lock(first, NAME, wait=False, clock=clock, heartbeat=0.01):
            assert await _expiry(second, NAME) == T0 + LEASE
            clock.advance(50)
            await _until(lambda: _is(_expiry(second, NAME), clock.now + LEASE), "the lease renewed")
            clock.advance(50)  # 100 s after taking it: past the first lease, within the renewed one
            assert not await _free(second, NAME, clock)
        assert await _expiry(second, NAME) is None, "leaving deletes the row"
    finally:
        await first.dispose()
        await second.dispose()


async def _is(value: Awaitable[object], expected: object) -> bool:
    return await value == expected


HOLDER = """
import asyncio, datetime as dt, sys
from digest.store.db import make_engine, migrate
from digest.store.locks import run_lock

async def main(url, name, start):
    engine = make_engine(url)
    await migrate(engine)
    at = dt.datetime.fromisoformat(start)
    async with run_lock(engine, name, wait=False, clock=lambda: at, heartbeat=3600):
        print("held", flush=True)
        await asyncio.Event().wait()

asyncio.run(main(*sys.argv[1:]))
"""


async def _hold_in_a_process(url: str, name: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, url, name, T0.isoformat(), cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    if line != b"held\n":
        proc.kill()
        raise AssertionError(f"the holder did not start: {(await proc.stderr.read()).decode()}")
    return proc


async def test_a_killed_holder_frees_the_lock(db_url: str) -> None:
    engine = make_engine(db_url)
    await migrate(engine)
    try:
        proc = await _hold_in_a_process(db_url, NAME)
        clock = FakeClock()
        try:
            assert not await _free(engine, NAME, clock)
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        if engine.dialect.name == "sqlite":  # a dead process of this host: no need to wait out its lease
            assert await _free(engine, NAME, clock), "a dead holder on this host keeps the lock"
        else:  # the server frees the lock once the dead process's connection is gone
            async with asyncio.timeout(30):
                async with run_lock(engine, NAME, wait=True, clock=clock):
                    pass
    finally:
        await engine.dispose()


async def test_a_holder_on_another_host_is_trusted_until_its_lease_expires(sqlite_url: str) -> None:
    engine, clock = make_engine(sqlite_url), FakeClock()
    await migrate(engine)
    try:
        elsewhere = _Row(engine, NAME, "another-host:1:0123456789ab", clock, LEASE)
        assert await elsewhere.take()
        clock.advance(LEASE.total_seconds() - 1)
        assert not await _free(engine, NAME, clock), "another host's live lease was taken"
        clock.advance(1)
        assert await _free(engine, NAME, clock), "an expired lease still holds"
    finally:
        await engine.dispose()


def test_only_a_missing_process_of_this_host_is_dead() -> None:
    import socket

    host = socket.gethostname()
    assert holder_alive(new_holder())
    assert holder_alive("another-host:1:abc") and holder_alive("a") and holder_alive(f"{host}:x:abc")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert not holder_alive(f"{host}:{dead}:abc")


@pytest.mark.postgres
async def test_an_advisory_lock_goes_with_its_connection(postgres_url: str) -> None:
    """Closing the lock's connection (here: the server ends it) frees the lock at once."""
    from sqlalchemy import func, text

    first, second = make_engine(postgres_url), make_engine(postgres_url)
    await migrate(first)
    clock = FakeClock()
    try:
        async with run_lock(first, NAME, wait=False, clock=clock):
            async with second.connect() as conn:
                pids = (await conn.scalars(
                    select(text("pid")).select_from(text("pg_locks"))
                    .where(text("locktype = 'advisory'"), text("granted")))).all()
                assert len(pids) == 1
                assert await conn.scalar(select(func.pg_terminate_backend(pids[0])))
                await conn.commit()
            await _until(lambda: _free(second, NAME, clock), "the lock went with its connection")
        # leaving after losing the connection is quiet, and leaves nothing held
        assert await _free(second, NAME, clock)
        assert await _free(first, NAME, clock)
    finally:
        await first.dispose()
        await second.dispose()


MIGRATE = """
import asyncio, sys
from digest.store.db import make_engine, migrate

async def main(url):
    engine = make_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()

asyncio.run(main(sys.argv[1]))
"""


async def test_migrations_started_together_on_a_fresh_database(db_url: str) -> None:
    """Three first runs at once: one creates the schema, the others wait and find it."""
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, "-c", MIGRATE, db_url, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE) for _ in range(3)]
    try:
        results = [await _finish(proc) for proc in procs]
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert [code for code, _, _ in results] == [0, 0, 0], [err[-300:] for _, _, err in results]
    engine = make_engine(db_url)
    try:
        async with engine.connect() as conn:
            assert await conn.scalar(select(RunLock.name).limit(1)) is None
    finally:
        await engine.dispose()


# The lease rules, against a model: who holds the lock at any time.


OPS = st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(("take", "renew", "drop")),
                         st.integers(0, 90)), min_size=1, max_size=12)


@pytest.fixture(scope="module")
def lease_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('lease') / 'lease.db'}"

    async def create() -> None:
        async with open_database(url):
            pass

    asyncio.run(create())
    return url


@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_a_lease_belongs_to_one_holder_until_it_expires(
        lease_db: str, ops: list[tuple[str, str, int]]) -> None:
    asyncio.run(_check_lease(lease_db, ops))


async def _check_lease(url: str, ops: list[tuple[str, str, int]]) -> None:
    engine, clock, name = make_engine(url), FakeClock(), new_holder()
    rows = {who: _Row(engine, name, who, clock, LEASE) for who in "abc"}
    holder: str | None = None
    expires = T0
    try:
        for who, op, seconds in ops:
            clock.advance(seconds)
            live = holder is not None and expires > clock.now
            if op == "take":
                expected = not live or holder == who
                assert await rows[who].take() is expected
                if expected:
                    holder, expires = who, clock.now + LEASE
            elif op == "renew":
                assert await rows[who].renew() is (holder == who)
                if holder == who:
                    expires = clock.now + LEASE
            else:
                await rows[who].drop()
                holder = None if holder == who else holder
    finally:
        await engine.dispose()


# The command line: real processes on one SQLite file.


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env.update(DIGEST_DATABASE_URL=f"sqlite+aiosqlite:///{tmp / 'locks.db'}", DIGEST_VAR_DIR=str(tmp / "var"),
               DIGEST_NOW="2026-09-29T12:00:00+00:00")
    return env


async def _day_of_entries(tmp: Path) -> None:
    window = window_for(DAY, "Asia/Shanghai")
    async with open_database(_env(tmp)["DIGEST_DATABASE_URL"]) as sessions:
        await add_compiler_papers(sessions, window.start)


async def _digest(tmp: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "digest", *args, cwd=tmp, env=_env(tmp),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def _finish(proc: asyncio.subprocess.Process) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _assert_one_consistent_digest(tmp: Path) -> None:
    """One digest holding every entry; each entry in one event; the snapshot matches the stats."""
    db = sqlite3.connect(tmp / "locks.db")
    try:
        digests = db.execute("SELECT id, stats FROM digest").fetchall()
        assert len(digests) == 1, digests
        digest_id = digests[0][0]

        def count(sql: str, *args: object) -> int:
            return int(db.execute(sql, args).fetchone()[0])

        assert count("SELECT count(*) FROM entry WHERE digest_id IS NOT ?", digest_id) == 0
        assert count("SELECT count(*) FROM entry") == len(COMPILER_PAPERS)
        assert count("SELECT count(*) FROM (SELECT entry_id FROM event_entry GROUP BY entry_id"
                     " HAVING count(*) > 1)") == 0, "an entry in two events"
        assert count("SELECT count(*) FROM event WHERE id NOT IN (SELECT event_id FROM event_entry)") == 0
        shown = db.execute("SELECT count(*) FROM digest_event WHERE digest_id = ?", (digest_id,)).fetchone()
        assert shown == (json.loads(digests[0][1])["events"],) and shown[0] > 0
        assert db.execute("SELECT count(*) FROM run_lock").fetchone() == (0,), "every lock was left"
    finally:
        db.close()


def _verbs(outs: list[str]) -> list[str]:
    return sorted("already" if "already built" in out else "built" if ": built;" in out else out
                  for out in outs)


async def test_three_builds_wait_for_a_running_build_then_find_it_built(tmp_path: Path) -> None:
    await _day_of_entries(tmp_path)
    engine = make_engine(_env(tmp_path)["DIGEST_DATABASE_URL"])
    try:
        async with run_lock(engine, NAME, wait=False, clock=system_now):
            procs = [await _digest(tmp_path, "build", "--date", str(DAY)) for _ in range(3)]
            for proc in procs:  # each one says, once, that it waits; none goes on meanwhile
                assert proc.stderr is not None
                first = await asyncio.wait_for(proc.stderr.readline(), 120)
                assert first.decode() == WAITING + "\n", (await _finish(proc))[2]
        results = [await _finish(proc) for proc in procs]
    finally:
        await engine.dispose()
    assert [code for code, _, _ in results] == [0, 0, 0], results
    assert [err for _, _, err in results] == ["", "", ""], "one line each on stderr, already read"
    assert _verbs([out for _, out, _ in results]) == ["already", "already", "built"]
    _assert_one_consistent_digest(tmp_path)


async def test_build_no_wait_exits_1_with_one_line(tmp_path: Path) -> None:
    await _day_of_entries(tmp_path)
    engine = make_engine(_env(tmp_path)["DIGEST_DATABASE_URL"])
    try:
        async with run_lock(engine, NAME, wait=False, clock=system_now):
            code, out, err = await _finish(await _digest(tmp_path, "build", "--date", str(DAY), "--no-wait"))
    finally:
        await engine.dispose()
    assert (code, out, err) == (1, "", f"digest: error: another build of {DAY} is running\n")


async def test_three_builds_started_together_build_once(tmp_path: Path) -> None:
    await _day_of_entries(tmp_path)
    procs = [await _digest(tmp_path, "build", "--date", str(DAY)) for _ in range(3)]
    results = [await _finish(proc) for proc in procs]
    assert [code for code, _, _ in results] == [0, 0, 0], results
    assert all(err in ("", WAITING + "\n") for _, _, err in results), results
    assert _verbs([out for _, out, _ in results]) == ["already", "already", "built"]
    _assert_one_consistent_digest(tmp_path)


async def test_three_runs_on_a_fresh_database_fetch_build_and_publish_once(tmp_path: Path) -> None:
    """The finding: three ``digest run`` at once on a fresh database all succeed, one digest."""
    now = dt.datetime.fromisoformat(_env(tmp_path)["DIGEST_NOW"])  # what `digest samples` would date them by
    env = {**_env(tmp_path), "DIGEST_SOURCES": str(write_samples(tmp_path / "samples", now))}
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, "-m", "digest", "run", cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE) for _ in range(3)]
    results = [await _finish(proc) for proc in procs]
    assert [code for code, _, _ in results] == [0, 0, 0], [err for _, _, err in results]
    waits = re.compile(r"digest: waiting for another (fetch|(build|publish) of \d{4}-\d\d-\d\d) \.\.\."
                       r"|fetched \d+ sources in [\d.]+ s: .*")  # the progress summary on a pipe
    assert all(waits.fullmatch(line) for _, _, err in results for line in err.splitlines()), results
    assert _verbs([_build_line(out) for _, out, _ in results]) == ["already", "already", "built"]
    db = sqlite3.connect(tmp_path / "locks.db")
    try:
        assert db.execute("SELECT count(*) FROM digest").fetchone() == (1,)
        assert db.execute("SELECT count(*) FROM run_lock").fetchone() == (0,)
    finally:
        db.close()


def _build_line(out: str) -> str:
    return next((line for line in out.splitlines() if line.startswith("digest 20")), out)
