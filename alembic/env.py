"""Alembic environment: the URL comes from settings (or the caller's connection)."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import Connection

from digest.store.models import Base

config = context.config
target_metadata = Base.metadata


def _include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Leave the search index (migration 0005; FTS5 and its shadow tables) out of `alembic check`."""
    return not (type_ == "table" and name is not None and name.startswith("search_"))


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_name=_include_name,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def _run(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from digest.config import load_settings

    return load_settings().database_url


async def _run_async() -> None:
    from digest.store.db import make_engine

    engine = make_engine(_url())
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    else:
        asyncio.run(_run_async())


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
