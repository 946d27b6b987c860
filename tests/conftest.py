"""Shared fixtures: real databases (SQLite always, PostgreSQL when a server is given).

PostgreSQL tests use ``DIGEST_TEST_POSTGRES_URL`` (an asyncpg URL to a server
where we may create databases; `.ci/run` exports it). Without it they skip
locally; in CI (``CI=true``) a missing server is a failure, never a skip.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from digest.db import SessionFactory, open_database

POSTGRES_URL = os.environ.get("DIGEST_TEST_POSTGRES_URL", "")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


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


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test; dropped afterwards."""
    require_postgres()
    name = f"digest_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite database file for one test."""
    return f"sqlite+aiosqlite:///{tmp_path / 'digest.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """Run a storage test once on SQLite and once on PostgreSQL."""
    name = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
async def sessions(db_url: str) -> AsyncIterator[SessionFactory]:
    """A migrated database (SQLite and PostgreSQL) and its session factory."""
    async with open_database(db_url) as factory:
        yield factory


@pytest.fixture
async def sqlite_sessions(sqlite_url: str) -> AsyncIterator[SessionFactory]:
    """A migrated SQLite database, for tests where the backend does not matter."""
    async with open_database(sqlite_url) as factory:
        yield factory
