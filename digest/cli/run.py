"""``digest run [--json]``: the daily job (``digest.daily.run_daily``), and its report.

The text report is what ``fetch``, ``build`` and ``publish`` print, in that
order, for the steps that ran; ``--json`` prints one document (see
:meth:`digest.daily.DailyReport.as_json`), also when the run fails. Exit 1,
after the report, when the run failed (one line on stderr says why) or a
delivery failed because of our bug or configuration.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from digest import bootstrap
from digest.cli.digests import print_build
from digest.cli.ingest import fetch_progress, print_failure, print_results
from digest.cli.output import print_json, tell_wait
from digest.cli.publish import print_report, send_progress

if TYPE_CHECKING:
    from digest.config import Settings
    from digest.daily import DailyReport
    from digest.domain.clock import Clock


def add_commands(sub: Any) -> None:
    """Register ``run`` on the CLI."""
    run = sub.add_parser(
        "run", help="the daily job: fetch, build and publish the latest closed window",
        description="the daily job once: fetch every source, build the latest closed window and "
                    "publish it; running it again builds and sends nothing twice. Exit 1 when the "
                    "run failed (one line says why) or a delivery failed because of our bug or "
                    "configuration.")
    run.add_argument("--json", action="store_true", help="print the run report as one JSON document")
    run.set_defaults(handler=run_cmd)


async def run_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest run``: fetch, build and publish the latest closed window; print what happened."""
    # the job brings every part (SQLAlchemy, httpx, Jinja2...): imported here, not for `digest --help`
    from digest.daily import run_daily

    async with bootstrap.database(settings) as sessions:
        deps = bootstrap.daily_deps(settings, sessions, on_wait=tell_wait, send_progress=send_progress())
        deps = replace(deps, fetch_progress=fetch_progress(sum(s.enabled for s in deps.sources)))
        report = await run_daily(None, deps)
    if args.json:
        print_json(report.as_json())
    else:
        _print_text(report, bootstrap.clock(settings))
    if report.error:
        print_failure(report.error)
    return 0 if report.ok else 1


def _print_text(report: DailyReport, clock: Clock) -> None:
    """The sections of the steps that ran, each as its own command prints it."""
    if report.fetched:
        print_results(report.fetched, False)
    if report.build is not None:
        print_build(report.build, False)
    if report.publish is not None:
        print_report(report.publish, False, clock())
