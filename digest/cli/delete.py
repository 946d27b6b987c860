"""``digest delete --date D [--force]``: take a digest back.

An unpublished digest loses its snapshot (texts, ranked events); its events and
entries stay, the entries free for the next build. A published one is only
hidden with ``--force``: readers got it, so its rows and delivery records stay
(and its published_at, so its deliveries are never planned again).
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import TYPE_CHECKING, Any

from digest import bootstrap
from digest.cli.output import iso_date
from digest.domain.errors import BuildError

if TYPE_CHECKING:
    from digest.config import Settings
    from digest.store.db import SessionFactory


def add_commands(sub: Any) -> None:
    """Register ``delete`` on the CLI."""
    delete = sub.add_parser("delete", help="remove an unpublished digest, or hide a published one")
    delete.add_argument("--date", type=iso_date, required=True, help="the digest's date, YYYY-MM-DD")
    delete.add_argument("--force", action="store_true",
                        help="hide a published digest from the archive and feeds (its deliveries stay)")
    delete.set_defaults(handler=delete_cmd)


async def delete_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest delete --date D [--force]``: one line saying what was done."""
    async with bootstrap.database(settings) as sessions:
        print(await delete_digest(sessions, args.date, force=args.force, now=bootstrap.clock(settings)()))
    return 0


async def delete_digest(sessions: SessionFactory, date: dt.date, *, force: bool, now: dt.datetime) -> str:
    """Delete (unpublished) or hide (published, ``force``) the digest of ``date``; what was done."""
    from sqlalchemy import delete, update

    from digest.store.models import Digest, Entry
    from digest.store.queries import get_digest

    async with sessions.begin() as session:
        digest = await get_digest(session, date)
        if digest.published_at is None:
            await session.execute(update(Entry).where(Entry.digest_id == digest.id).values(late=False))
            await session.execute(delete(Digest).where(Digest.id == digest.id))
            return f"digest {date}: deleted (its events and entries stay)"
        if not force:
            when = f"{digest.published_at:%Y-%m-%d %H:%M} UTC"
            raise BuildError(f"the digest of {date} was published at {when}; "
                             f"digest delete --date {date} --force hides it (its deliveries stay)")
        if digest.hidden_at is None:
            digest.hidden_at = now
        return f"digest {date}: hidden from the archive and feeds (published, its deliveries stay)"
