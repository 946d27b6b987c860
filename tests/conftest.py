"""Shared fixtures: real databases (SQLite always, PostgreSQL when a server is given).

PostgreSQL tests use ``DIGEST_TEST_POSTGRES_URL`` (an asyncpg URL to a server
where we may create databases; `.ci/run` exports it). Without it they skip
locally; in CI (``CI=true``) a missing server is a failure, never a skip.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from digest.analyze.taxonomy import Taxonomy, load_taxonomy
from digest.domain.views import DigestView, EventView, SourceLink
from digest.store.db import SessionFactory, open_database

POSTGRES_URL = os.environ.get("DIGEST_TEST_POSTGRES_URL", "")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--regen-golden`` rewrites tests/golden/ from the current output (review the diff)."""
    parser.addoption("--regen-golden", action="store_true", default=False,
                     help="rewrite the golden files in tests/golden/ instead of comparing")


@pytest.fixture
def regen_golden(request: pytest.FixtureRequest) -> bool:
    """True when the run was asked to rewrite the golden files."""
    return bool(request.config.getoption("--regen-golden"))


def build_event(n: int, **fields: Any) -> EventView:
    """An event view with plain defaults; any field can be given."""
    values: dict[str, Any] = {
        "id": 100 + n, "rank": n, "title": f"Event {n}", "url": f"https://example.org/e{n}",
        "score": 80.0 - n, "score_breakdown": {"authority": 40.0, "relevance": 40.0 - n},
        "layers": ("kernel_codegen",), "sources": (SourceLink("arXiv", f"https://arxiv.org/abs/{n}"),),
        "summary": f"Summary of event {n}.", "why_it_matters": f"Why event {n} matters.",
        "watch": (), "written_by": "deepseek-chat",
    }
    values.update(fields)
    return EventView(**values)


def build_view(events: tuple[EventView, ...], **fields: Any) -> DigestView:
    """A digest view (2026-09-29, zh) around ``events``; any field can be given."""
    values: dict[str, Any] = {
        "date": dt.date(2026, 9, 29), "locale": "zh", "title": "Title", "overview": "Overview.",
        "watchlist": (), "day_mode": "deepseek-chat",
        "window_start": dt.datetime(2026, 9, 28, 0, 0, tzinfo=dt.UTC),
        "window_end": dt.datetime(2026, 9, 29, 0, 0, tzinfo=dt.UTC), "events": events,
        "stats": {"entries_by_source": {"arxiv": 3}, "entries": 3, "late": 0, "failed_sources": []},
    }
    values.update(fields)
    return DigestView(**values)


@pytest.fixture
def make_event() -> Callable[..., EventView]:
    """:func:`build_event`, for tests that render views made in code."""
    return build_event


@pytest.fixture
def make_view() -> Callable[..., DigestView]:
    """:func:`build_view`, for tests that render views made in code."""
    return build_view


def require_postgres() -> str:
    """The server URL, or skip (locally) / fail (in CI) when there is none."""
    if not POSTGRES_URL:
        if IN_CI:
            pytest.fail("CI=true but DIGEST_TEST_POSTGRES_URL is not set: PostgreSQL tests must run")
        pytest.skip("PostgreSQL tests need DIGEST_TEST_POSTGRES_URL (see .ci/run)")
    return POSTGRES_URL


async def _admin(sql: str) -> None:
    import asyncpg

    url = make_url(POSTGRES_URL).set(drivername="postgresql", database="postgres")
    conn = await asyncpg.connect(url.render_as_string(hide_password=False))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextmanager
def _postgres_database(prefix: str = "digest_test", template: str | None = None) -> Iterator[str]:
    """A new PostgreSQL database (empty, or a copy of ``template``), its URL; dropped on leaving."""
    require_postgres()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test; dropped afterwards."""
    with _postgres_database() as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite database file for one test."""
    return f"sqlite+aiosqlite:///{tmp_path / 'digest.store.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """Run a storage test once on SQLite and once on PostgreSQL."""
    name = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    return str(request.getfixturevalue(name))


# Migrating takes a tenth of a second or more per database; a test that only needs a migrated one
# gets a copy of a database migrated once per run (the migrations themselves are tested on empty
# databases: tests/test_migrations.py, tests/test_locks.py, through db_url and postgres_url).

@pytest.fixture(scope="session")
def taxonomy() -> Taxonomy:
    """The shipped taxonomy with its learned models (read once; tests vary it with replace())."""
    return load_taxonomy()


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "migrated.db"
    asyncio.run(_migrate(f"sqlite+aiosqlite:///{path}"))
    return path


@pytest.fixture(scope="session")
def _postgres_template() -> Iterator[str]:
    """The name of a database migrated once per run (copied with CREATE DATABASE ... TEMPLATE)."""
    with _postgres_database("digest_template") as url:
        asyncio.run(_migrate(url))  # the engine is disposed after: no connection blocks copying it
        yield str(make_url(url).database)


async def _migrate(url: str) -> None:
    async with open_database(url):
        pass


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def migrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database at the migrations' head (a copy of the run's template), SQLite and PostgreSQL."""
    if request.param == "sqlite":
        yield _sqlite_copy(request.getfixturevalue("_sqlite_template"), tmp_path)
        return
    with _postgres_database(template=request.getfixturevalue("_postgres_template")) as url:
        yield url


def _sqlite_copy(template: Path, tmp_path: Path) -> str:
    target = tmp_path / "digest.store.db"
    shutil.copyfile(template, target)
    return f"sqlite+aiosqlite:///{target}"


@pytest.fixture
async def sessions(migrated_url: str) -> AsyncIterator[SessionFactory]:
    """A migrated database (SQLite and PostgreSQL) and its session factory (its URL: ``migrated_url``)."""
    async with open_database(migrated_url) as factory:
        yield factory


@pytest.fixture
async def sqlite_sessions(_sqlite_template: Path, tmp_path: Path) -> AsyncIterator[SessionFactory]:
    """A migrated SQLite database, for tests where the backend does not matter."""
    async with open_database(_sqlite_copy(_sqlite_template, tmp_path)) as factory:
        yield factory
