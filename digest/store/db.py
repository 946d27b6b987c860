"""Engine and session factory, and migration to the Alembic head.

The service owns the transaction: query helpers never commit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from alembic.config import Config  # alembic (and mako) load only to migrate

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
        if make_url(url).get_backend_name() != "sqlite":  # [reconnection] a restarted server's
            kwargs.setdefault("pool_pre_ping", True)      # dead connections are replaced at checkout
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
    from alembic.config import Config

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
    from alembic import command

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


# -- [reconnection] a restart or failover of the database server ----------------------------------

_DISCONNECT_STATES = frozenset({"57P01", "57P02", "57P03"})  # admin/crash shutdown, cannot connect now


def is_disconnect(exc: BaseException) -> bool:
    """True when ``exc`` means the database connection was lost or cannot be opened right now.

    A server restart or failover ends every connection (SQLAlchemy flags the error
    ``connection_invalidated`` and renews its pool) and refuses new ones until it is
    back (connection refused; PostgreSQL's 57P03 "the database system is starting
    up"). Anything else (a constraint, a bad statement, a full disk) is not one.
    """
    from sqlalchemy.exc import DBAPIError

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DBAPIError) and current.connection_invalidated:
            return True
        if isinstance(current, OSError):
            return True
        state = str(getattr(current, "sqlstate", None) or getattr(current, "pgcode", None) or "")
        if state.startswith("08") or state in _DISCONNECT_STATES:
            return True
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) and id(orig) not in seen else current.__cause__
    return False

