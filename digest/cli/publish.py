"""Handlers of the sending commands: ``publish`` and ``worker``.

``digest publish --date D [--dry-run] [--to ADDRESS] [--retry-failed] [--json]``
plans (first publish only) and sends; ``digest worker [--once] [--retry-failed]``
sends what any publish left, for every published digest, until stopped
(SIGTERM/SIGINT finish the messages in flight first). Both print the run
report on stdout (a table, or JSON with ``--json``) and progress on stderr
when it is a terminal. ``--retry-failed`` first puts the deliveries failed by
our bug or configuration back to planned (never those the recipient refused).

``publish`` exits 1, after its report, when a delivery failed in this run
because of our bug or configuration; rows held by another run's lease are
reported with the time they fall due and do not change the exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from digest import bootstrap
from digest.cli.output import format_table, iso_date, print_json, seconds_arg, tell_wait
from digest.domain.errors import UsageError

if TYPE_CHECKING:
    from digest.config import Settings
    from digest.deliver.publish import PublishOptions, PublishReport, Runner
    from digest.deliver.sending import Progress, Tally

COLUMNS = ("planned", "empty", "sent", "skipped", "retried", "deferred", "held", "failed", "resent")
_RETRY_HELP = "first put the deliveries failed by our bug or configuration back to planned, and send them"


def add_commands(sub: Any) -> None:
    """Register ``publish`` and ``worker`` on the CLI."""
    publish = sub.add_parser(
        "publish", help="plan a built digest's deliveries (once) and send them",
        description="plan one delivery per active subscriber whose filter keeps an event (at the first "
                    "publish only), then send; publishing again sends nothing twice. Exit 1 when a "
                    "delivery failed because of our bug or configuration.")
    publish.add_argument("--date", type=iso_date, required=True, help="YYYY-MM-DD")
    publish.add_argument("--dry-run", action="store_true",
                         help="plan and render in memory; write and send nothing (--to still sends)")
    publish.add_argument("--to", metavar="ADDRESS", help="first send one unfiltered copy to ADDRESS")
    publish.add_argument("--retry-failed", action="store_true", help=_RETRY_HELP)
    publish.add_argument("--plan-only", action="store_true",
                         help="plan the deliveries (first publish only) and send nothing: workers send them")
    publish.add_argument("--json", action="store_true", help="print the run report as JSON")
    publish.set_defaults(handler=publish_cmd)

    worker = sub.add_parser("worker", help="send the planned deliveries of every published digest")
    worker.add_argument("--once", action="store_true",
                        help="one sweep, then exit (1 if a delivery failed by a bug or configuration)")
    worker.add_argument("--poll", type=seconds_arg, default=30.0, metavar="SECONDS",
                        help="seconds between sweeps (default 30)")
    worker.add_argument("--retry-failed", action="store_true", help=f"{_RETRY_HELP} (every published digest)")
    worker.add_argument("--json", action="store_true", help="print the run report as JSON")
    worker.set_defaults(handler=worker_cmd)


def send_progress() -> Progress | None:
    """A throttled one-line progress on stderr, or None when stderr is not a terminal."""
    if not sys.stderr.isatty():
        return None
    last = [0.0]

    def show(name: str, tally: Tally) -> None:
        if time.monotonic() - last[0] < 0.2:
            return
        last[0] = time.monotonic()
        print(f"\r{name}: {tally.sent} sent, {tally.deferred} deferred, {tally.failed} failed ",
              end="", file=sys.stderr, flush=True)

    return show


@asynccontextmanager
async def runner(settings: Settings, options: PublishOptions) -> AsyncIterator[Runner]:
    """A publish runner on its own database, with progress on stderr; closes both at the end."""
    async with bootstrap.database(settings) as sessions, \
            bootstrap.publish_runner(settings, sessions, options, send_progress()) as run:
        yield run


def print_report(report: PublishReport, as_json: bool, now: dt.datetime | None = None,
                 check_copy_where: str | None = None) -> None:
    """The run report: a table per channel (and notes), or JSON; ``now`` dates a far ``held_until``.

    ``check_copy_where``: where the ``--to`` copy went (the .eml path, or the SMTP server).
    """
    if sys.stderr.isatty():
        print(file=sys.stderr)
    if as_json:
        print_json(report.as_json())
        if report.check_copy and check_copy_where:
            print(f"check copy to {report.check_copy} {check_copy_where}", file=sys.stderr)
        return
    rows = [(name, *(getattr(t, c) for c in COLUMNS)) for name, t in sorted(report.channels.items())]
    total = report.total()
    rows.append(("total", *(getattr(total, c) for c in COLUMNS)))
    print(format_table(("channel", *COLUMNS), rows, right=range(1, len(COLUMNS) + 1)))
    for name, tally in sorted(report.channels.items()):
        for note in tally.notes:
            print(f"{name}: {note} (its rows stay planned)")
    for line in _notes(report, total, now):
        print(line)
    if total.resent:
        print(f"{total.resent} message(s) resent after a crash: they may have arrived twice "
              "(same Message-ID)")
    if report.check_copy:
        print(f"check copy to {report.check_copy} {check_copy_where or 'sent'}")
    if report.dry_run:
        print(f"dry run: {total.rendered} message(s) rendered, nothing written or sent")


def _deliveries(n: int, verb: str) -> str:
    """``1 delivery is`` / ``2 deliveries are`` (``verb`` as for several)."""
    singular = {"are": "is", "were": "was"}.get(verb, verb)
    return f"1 delivery {singular}" if n == 1 else f"{n} deliveries {verb}"


def _utc(when: dt.datetime, now: dt.datetime | None) -> str:
    """``17:05:12 UTC``; with the date when that is not today's (UTC)."""
    when = when.astimezone(dt.UTC)
    same_day = now is not None and now.astimezone(dt.UTC).date() == when.date()
    return when.strftime("%H:%M:%S UTC" if same_day else "%Y-%m-%d %H:%M:%S UTC")


def _notes(report: PublishReport, total: Tally, now: dt.datetime | None) -> list[str]:
    """What the operator must know or do: rows requeued, held by another run, failed by our bug."""
    again = "run publish again" if report.date else "run the worker again"
    lines = []
    if total.requeued:
        n = total.requeued
        verb = "would be" if report.dry_run else "was" if n == 1 else "were"
        lines.append(f"{n} failed {'delivery' if n == 1 else 'deliveries'} (bug or configuration) "
                     f"{verb} put back to send again")
    if total.held and total.held_until:
        lines.append(f"{_deliveries(total.held, 'are')} held by another run until "
                     f"{_utc(total.held_until, now)}; {again} after that")
    if report.joined_after:
        n = report.joined_after
        who = "1 subscriber" if n == 1 else f"{n} subscribers"
        lines.append(f"{who} joined after this digest was first published; they get the next one")
    if total.failed_bug and report.dry_run:
        lines.append(f"{_deliveries(total.failed_bug, 'would fail')} because of a bug or configuration")
    elif total.failed_bug:
        lines.append(f"{_deliveries(total.failed_bug, 'failed')} because of a bug or configuration; "
                     f"fix it and run {'publish' if report.date else 'worker'} --retry-failed")
    return lines


def _validated_to(address: str | None) -> str | None:
    from digest.cli.mail import validated_address

    return None if address is None else validated_address(address, "--to")


async def publish_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest publish --date D``."""
    from digest.deliver.publish import PublishOptions

    if args.plan_only and (args.dry_run or args.to):
        raise UsageError("--plan-only sends nothing: it takes neither --dry-run nor --to")
    options = PublishOptions(dry_run=args.dry_run, to=_validated_to(args.to), retry_failed=args.retry_failed,
                             plan_only=args.plan_only, send=bootstrap.send_options(settings))
    return await _publish(settings, args.date, options, args.json)


async def _publish(settings: Settings, date: dt.date, options: PublishOptions, as_json: bool) -> int:
    """Publish and print the report; 1 when a delivery failed because of our bug or configuration."""
    from digest.deliver.sending import DeliveryError
    from digest.store.locks import publish_lock

    lock = nullcontext() if options.dry_run else bootstrap.run_lock(settings, publish_lock(date),
                                                                     on_wait=tell_wait)
    before = _check_copies(settings, date)
    async with lock, runner(settings, options) as run:  # a second publish of the date waits
        try:
            await run.publish(date, settings.locales[0])
        except DeliveryError:
            if run.report.date is not None:
                print_report(run.report, as_json, bootstrap.clock(settings)())
            raise
    where = _check_copy_where(settings, date, before) if run.report.check_copy else None
    print_report(run.report, as_json, bootstrap.clock(settings)(), where)
    return 1 if run.report.total().failed_bug else 0


def _check_copies(settings: Settings, date: dt.date) -> set[Path]:
    """The check copies of ``date`` in the file outbox (named by their Message-ID ``digest-D-check-*``)."""
    if settings.smtp_host or not settings.mail_outbox.is_dir():
        return set()
    return set(settings.mail_outbox.glob(f"digest-{date.isoformat()}-check-*.eml"))


def _check_copy_where(settings: Settings, date: dt.date, before: set[Path]) -> str:
    """``via smtp HOST:PORT``, or ``written to PATH`` (the one new check copy in the outbox)."""
    from digest.cli.mail import destination

    if settings.smtp_host:
        return f"sent via {destination(settings)}"
    new = sorted(_check_copies(settings, date) - before)
    return f"written to {new[0]}" if len(new) == 1 else f"written to {settings.mail_outbox}"


async def worker_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest worker``: send planned deliveries until SIGTERM/SIGINT (or one sweep with --once)."""
    from digest.deliver.publish import PublishOptions

    options = PublishOptions(retry_failed=args.retry_failed, send=bootstrap.send_options(settings))
    async with runner(settings, options) as run:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, run.stop.set)
        try:
            report = await run.work(once=args.once, poll=args.poll)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
    print_report(report, args.json, bootstrap.clock(settings)())
    # one sweep (a cron job, a CI step) fails like publish; a worker stopped by a signal did as asked
    return 1 if args.once and report.total().failed_bug else 0
