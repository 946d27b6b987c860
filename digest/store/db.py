"""Engine and session factory, and migration to the Alembic head.

The service owns the transaction: query helpers never commit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, event, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from digest.domain.errors import StorageError
from digest.resources import alembic_dir

SessionFactory = async_sessionmaker[AsyncSession]


def _prepare_sqlite_path(url: str) -> None:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def make_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """An async engine for ``url``; SQLite gets foreign keys, WAL and a busy timeout."""
    try:
        _prepare_sqlite_path(url)
        engine = create_async_engine(url, **kwargs)
    except (SQLAlchemyError, ValueError, ImportError) as exc:
        raise StorageError(f"DIGEST_DATABASE_URL: cannot use {url!r}: {exc}") from exc
    if engine.dialect.name == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def make_session_factory(engine: AsyncEngine) -> SessionFactory:
    """Sessions that keep loaded attributes after commit (no lazy loads across awaits)."""
    return async_sessionmaker(engine, expire_on_commit=False)


def alembic_config(url: str | None = None) -> Config:
    """An Alembic config pointing at the shipped scripts."""
    cfg = Config()
    cfg.set_main_option("script_location", str(alembic_dir()))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


MIGRATION_LOCK_KEY = 0x6469676573740001  # PostgreSQL advisory key: "digest" + 1


def _one_migration_at_a_time(connection: Connection) -> None:
    """Concurrent first runs would both create the tables: the second waits, then finds them."""
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    elif connection.dialect.name == "postgresql":
        connection.execute(select(func.pg_advisory_xact_lock(MIGRATION_LOCK_KEY)))


def _run_upgrade(connection: Connection, revision: str) -> None:
    _one_migration_at_a_time(connection)
    cfg = alembic_config()
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` on ``engine``'s database."""
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run_upgrade, revision)
    except (SQLAlchemyError, OSError) as exc:
        raise StorageError(f"database migration failed: {_short(exc)}") from exc


def _short(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


@asynccontextmanager
async def open_database(url: str, *, upgrade: bool = True) -> AsyncIterator[SessionFactory]:
    """Open the database, migrate it to head, yield a session factory, dispose at the end."""
    engine = make_engine(url)
    try:
        if upgrade:
            await migrate(engine)
        yield make_session_factory(engine)
    finally:
        await engine.dispose()
