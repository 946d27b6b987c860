"""``digest status [--json]``: which files and database this command line uses, and how the job stands.

Run from another directory, every command finds its own ``./var``: this says
which database (password hidden), var dir, sources file and outbox are in
use, the last daily run, the next scheduled one, and the subscribers.
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from digest import bootstrap
from digest.cli.output import print_json

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from digest.config import Settings


def add_commands(sub: Any) -> None:
    """Register ``status`` on the CLI."""
    status = sub.add_parser("status", help="the database, files, last and next run, subscribers in use")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(handler=status_cmd)


async def status_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest status``: a few labelled lines, or one JSON object."""
    now = bootstrap.clock(settings)()
    async with bootstrap.database(settings) as sessions, sessions() as session:
        data = {**paths(settings), "last_run": await last_run(session),
                "next_run": next_run(settings.schedule, settings.timezone, now).isoformat(),
                "subscribers": await subscriber_counts(session)}
    if args.json:
        print_json(data)
    else:
        print("\n".join(_lines(data)))
    return 0


def redacted(url: str) -> str:
    """The database URL with its password replaced by ``***``; a SQLite file's absolute path after it."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        where = Path(str(parsed.database)).resolve()
        return shown if str(where) == parsed.database else f"{shown} ({where})"
    return shown


def paths(settings: Settings) -> dict[str, Any]:
    """Where the database, var dir, sources file and outgoing mail are."""
    from digest.ingest.sources import default_sources_path

    sources = settings.sources or default_sources_path()
    smtp = f"smtp://{settings.smtp_host}:{settings.smtp_port}"
    outbox = smtp if settings.smtp_host else str(settings.mail_outbox.resolve())
    return {"database": redacted(settings.database_url), "var_dir": str(settings.var_dir.resolve()),
            "sources": str(sources.resolve()) if settings.sources else f"{sources} (built in)",
            "outbox": outbox}


def next_run(schedule: str, timezone: str, now: dt.datetime) -> dt.datetime:
    """The next instant DIGEST_SCHEDULE fires after ``now``, in DIGEST_TIMEZONE."""
    from croniter import croniter

    found: dt.datetime = croniter(schedule, now.astimezone(ZoneInfo(timezone))).get_next(dt.datetime)
    return found


async def last_run(session: AsyncSession) -> dict[str, Any] | None:
    """The newest ``run_report`` row (date, trigger, times, ok), or None before the first run."""
    from sqlalchemy import select

    from digest.store.models import RunReport

    row = await session.scalar(select(RunReport).order_by(RunReport.started_at.desc(), RunReport.id.desc()))
    if row is None:
        return None
    return {"date": row.date.isoformat(), "trigger": row.trigger, "ok": row.ok,
            "started_at": row.started_at.isoformat(), "finished_at": row.finished_at.isoformat()}


async def subscriber_counts(session: AsyncSession) -> dict[str, dict[str, int]]:
    """Subscribers per channel and status."""
    from sqlalchemy import func, select

    from digest.store.models import Subscriber

    rows = await session.execute(select(Subscriber.channel, Subscriber.status, func.count())
                                 .group_by(Subscriber.channel, Subscriber.status))
    counts: dict[str, dict[str, int]] = {}
    for channel, status, n in rows:
        counts.setdefault(channel, {})[status] = int(n)
    return {channel: dict(sorted(found.items())) for channel, found in sorted(counts.items())}


def _lines(data: dict[str, Any]) -> list[str]:
    last = data["last_run"]
    outcome = "" if last is None else "ok" if last["ok"] else "failed"
    ran = ("none yet" if last is None else
           f"{last['date']} ({last['trigger']}, {outcome}, finished {last['finished_at']})")
    people = "; ".join(f"{channel}: " + ", ".join(f"{n} {status}" for status, n in found.items())
                       for channel, found in data["subscribers"].items()) or "none"
    return [f"database:    {data['database']}", f"var dir:     {data['var_dir']}",
            f"sources:     {data['sources']}", f"outbox:      {data['outbox']}",
            f"last run:    {ran}", f"next run:    {data['next_run']}", f"subscribers: {people}"]
