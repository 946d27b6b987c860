"""``digest report [--date D] [--json]``: what the latest daily run of a date (or the latest run) did.

The text is the admin copy's (:func:`digest.render.report_text.admin_text`); ``--json``
prints one object: the run's stored report (``DailyReport.as_json``: date,
sources, entries, events, built, published, deliveries, llm, seconds) with
its trigger and times. Exit 1 with one line when no run was recorded.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from digest import bootstrap
from digest.cli.output import iso_date, print_json
from digest.domain.errors import DigestError

if TYPE_CHECKING:
    from digest.config import Settings


class NoReport(DigestError):
    """No daily run was recorded (for the date asked)."""


def add_commands(sub: Any) -> None:
    """Register ``report`` on the CLI."""
    report = sub.add_parser("report", help="show the report of the latest daily run (of --date)")
    report.add_argument("--date", type=iso_date, help="YYYY-MM-DD (default: the latest run)")
    report.add_argument("--json", action="store_true", help="print the report as one JSON object")
    report.set_defaults(handler=report_cmd)


async def report_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """Print the stored report; exit 0 when that run was ok, else 1."""
    # the store brings SQLAlchemy: imported here, not for `digest --help`
    from digest.render.report_text import STREAK, admin_text
    from digest.store.reports import failing_sources, latest_report

    async with bootstrap.database(settings) as sessions, sessions() as session:
        row = await latest_report(session, args.date)
        failing = await failing_sources(session, STREAK)
    if row is None:
        where = f" for {args.date.isoformat()}" if args.date else ""
        raise NoReport(f"no daily run was recorded{where} yet; run one: digest run")
    if args.json:
        print_json({**row.report, "trigger": row.trigger, "started_at": row.started_at.isoformat(),
                    "finished_at": row.finished_at.isoformat()})
    else:
        print(admin_text(row.report, row.trigger, failing), end="")
    return 0 if row.ok else 1
