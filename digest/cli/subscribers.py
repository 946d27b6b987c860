"""Handlers of ``digest subscribers add|list|remove|import|export|confirm-resend``, and the CSV format.

CSV columns: channel,address,layers,min_score,locale[,status]. ``layers`` is
space-separated (empty: all nine), ``min_score`` empty is 0, ``locale`` empty
is zh. Export adds ``status`` so that an unsubscribed, bounced or blocked
address keeps its suppression when the file is imported elsewhere; import
reads it when present (it never upgrades anyone: see ``import_subscriber``).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from digest import bootstrap
from digest.cli.output import format_table, layers_arg, layers_help, print_json, score_arg
from digest.domain.errors import DigestError, SubscriberNotFound, SubscriptionError, UsageError
from digest.domain.layers import LAYER_IDS
from digest.domain.locales import DEFAULT_LOCALE, LOCALES
from digest.domain.status import ChannelName, SubscriberStatus

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from digest.config import Settings
    from digest.subscribe import subscriptions as subs
    from digest.subscribe import validation
    from digest.subscribe.confirm import ResendReport

CHANNELS = tuple(ChannelName)
STATUSES = tuple(SubscriberStatus)
CSV_COLUMNS = ("channel", "address", "layers", "min_score", "locale", "status")
REQUIRED_COLUMNS = ("channel", "address")
OPTIONS = {"channel": "--channel", "address": "--address", "layers": "--layers",
           "min_score": "--min-score", "locale": "--locale", "status": "--status"}


def add_commands(sub: Any) -> None:
    """Register ``subscribers`` and its actions on the CLI."""
    group = sub.add_parser("subscribers", help="email and chat subscribers")
    actions = group.add_subparsers(dest="subscribers_command", required=True, metavar="ACTION")

    add = actions.add_parser("add", help="add a subscriber (active at once) or update one")
    add.add_argument("--channel", choices=CHANNELS, required=True, help="where the digest goes")
    add.add_argument("--address", required=True, help="email address, Telegram chat id, "
                     "Discord channel id or user:<id>")
    add.add_argument("--layers", type=layers_arg, help=layers_help("the layers to receive (default: all)"))
    add.add_argument("--min-score", type=score_arg, metavar="N",
                     help="only events scoring at least N, 0 to 100 (default 0)")
    add.add_argument("--locale", choices=LOCALES, help="digest language (default zh)")
    add.set_defaults(handler=add_cmd)

    lst = actions.add_parser("list", help="list subscribers")
    lst.add_argument("--json", action="store_true", help="print a JSON array")
    lst.add_argument("--channel", choices=CHANNELS, help="only subscribers of this channel")
    lst.add_argument("--status", choices=STATUSES, help="only subscribers in this state")
    lst.set_defaults(handler=list_cmd)

    rm = actions.add_parser(
        "remove", help="delete a subscriber, its personal data and deliveries",
        description="delete a subscriber, its personal data and its deliveries. A bare number is "
                    "a subscriber id (the id column of 'digest subscribers list') or a Telegram or "
                    "Discord chat id; a number that is both is refused: say --id or --channel.")
    rm.add_argument("target", metavar="ID-or-ADDRESS",
                    help="a subscriber id, an email address, or a chat id")
    kind = rm.add_mutually_exclusive_group()
    kind.add_argument("--channel", choices=CHANNELS, help="the target is an address on this channel")
    kind.add_argument("--id", dest="by_id", action="store_true", help="the target is a subscriber id")
    rm.set_defaults(handler=remove_cmd)

    imp = actions.add_parser(
        "import", help="import subscribers from a CSV file",
        description="import subscribers from a CSV file (the columns of 'digest subscribers export'; "
                    "layers separated by spaces, empty for all). An unsubscribed, bounced or blocked "
                    "address is never re-activated; new email addresses stay pending unless "
                    "--confirmed, and are sent the confirmation mail.")
    imp.add_argument("file", metavar="FILE.csv", type=Path,
                     help="columns: " + ",".join(CSV_COLUMNS) + " (status optional)")
    imp.add_argument("--confirmed", action="store_true",
                     help="new email addresses are active (they opted in elsewhere), not pending")
    imp.set_defaults(handler=import_cmd)

    resend = actions.add_parser("confirm-resend", help="mail the confirmation link again to pending "
                                "email subscribers (all of them when no address is named)")
    resend.add_argument("addresses", metavar="ADDRESS", nargs="*",
                        help="pending email addresses (default: every pending one)")
    resend.set_defaults(handler=confirm_resend_cmd)

    exp = actions.add_parser("export", help="write subscribers as CSV (stdout by default)")
    exp.add_argument("--out", type=Path, help="write to this file instead of stdout")
    exp.add_argument("--active-only", action="store_true", help="only active subscribers")
    exp.set_defaults(handler=export_cmd)


def usage(exc: SubscriptionError) -> UsageError:
    """A one-line usage error naming the command-line option."""
    option = OPTIONS.get(exc.field or "", exc.field)
    return UsageError(f"{option}: {exc.detail}" if option else exc.detail)


def as_json(view: subs.SubscriberView) -> dict[str, Any]:
    """The ``list --json`` object of one subscriber."""
    return {"id": view.id, "channel": view.channel, "address": view.address, "status": view.status,
            "layers": view.layers, "min_score": view.min_score, "locale": view.locale,
            "created_at": view.created_at.isoformat()}


def _describe(view: subs.SubscriberView) -> str:
    """``subscriber #12 (telegram 123456789)``: the id and the address, so nobody guesses which was meant."""
    return f"subscriber #{view.id} ({view.channel} {view.address})"


# -- add, list, remove ----------------------------------------------------------

async def add_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest subscribers add``: active at once (the operator vouches); updates an existing one."""
    from digest.subscribe import subscriptions as subs  # SQLAlchemy: not for --help
    from digest.subscribe import validation  # the mail headers' address rules: not for --help

    try:
        address = validation.validate_address(args.channel, args.address)
        async with bootstrap.database(settings) as sessions, sessions() as session, \
                session.begin():
            before = await subs.find_by_address(session, args.channel, address)
            view, _ = await subs.subscribe(session, args.channel, address,
                                           layers=args.layers, min_score=args.min_score, locale=args.locale,
                                           confirmed=True, now=bootstrap.clock(settings)())
    except SubscriptionError as exc:
        raise usage(exc) from None
    if before is None:
        print(f"added {_describe(view)}: active")
    else:
        was = "" if before.status == view.status else f" (was {before.status})"
        print(f"updated the preferences of {_describe(view)}: {view.status}{was}")
    return 0


async def list_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest subscribers list``: a table, or a JSON array with ``--json``."""
    from digest.subscribe import subscriptions as subs  # SQLAlchemy: not for --help

    async with bootstrap.database(settings) as sessions, sessions() as session:
        views = await subs.list_subscribers(session, channel=args.channel, status=args.status)
    if args.json:
        print_json([as_json(view) for view in views])
        return 0
    rows = [(v.id, v.channel, v.address, v.status, _layers_text(v.layers), f"{v.min_score:g}",
             v.locale, v.created_at.date().isoformat()) for v in views]
    print(format_table(("id", "channel", "address", "status", "layers", "min", "locale", "created"),
                       rows, right=(0, 5)))
    return 0


def _layers_text(layers: list[str]) -> str:
    return "all" if len(layers) == len(LAYER_IDS) else ",".join(layers)


async def remove_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest subscribers remove ID-or-ADDRESS [--channel C | --id]``: says which one it took."""
    from digest.subscribe import subscriptions as subs  # SQLAlchemy: not for --help

    async with bootstrap.database(settings) as sessions, sessions() as session, \
            session.begin():
        view, read_as = await _resolve(session, args.target.strip(), args.channel, args.by_id)
        await subs.remove(session, view.id)
    print(f"removed {_describe(view)} and its deliveries{read_as}")
    return 0


async def _resolve(session: AsyncSession, target: str, channel: str | None,
                   by_id: bool) -> tuple[subs.SubscriberView, str]:
    """The subscriber ``target`` names, and how a bare number was read (empty when it was told).

    ``--id``: an id. ``--channel``: an address there. Else "@" is email, and a number is an id
    or a chat address: when it is an id and another subscriber's address, a usage error asks.
    """
    from digest.subscribe import subscriptions as subs  # SQLAlchemy: not for --help

    if by_id:
        if not target.isdigit():
            raise UsageError(f"--id: a subscriber id is a positive number, not {target!r}")
        return await subs.get(session, int(target)), ""
    if channel is None and "@" in target:
        channel = ChannelName.EMAIL
    if channel is not None:
        return await _by_address(session, channel, target), ""
    if not _NUMBER.fullmatch(target):
        raise UsageError(f"--channel: needed to remove the address {target!r} "
                         "(a number is a subscriber id or a chat id; an email address has an @)")
    by_number = await _by_id(session, target)
    chats = [view for view in await _chat_subscribers(session, target)
             if by_number is None or view.id != by_number.id]
    if by_number is not None and not chats:
        return by_number, f" ({target} read as its subscriber id)"
    if by_number is None and len(chats) == 1:
        return chats[0], f" ({target} read as its {chats[0].channel} address)"
    if not chats:
        raise SubscriberNotFound(f"no subscriber has the id or the chat address {target}")
    both = [f"subscriber #{by_number.id}'s id"] if by_number is not None else []
    both += [f"the address of {_describe(view)}" for view in chats]
    options = (["--id"] if by_number is not None else []) + [f"--channel {v.channel}" for v in chats]
    raise UsageError(f"{target} is {' and '.join(both)}: say which with {' or '.join(options)}")


_NUMBER = re.compile(r"-?[0-9]+")


async def _by_id(session: AsyncSession, target: str) -> subs.SubscriberView | None:
    from digest.subscribe import subscriptions as subs  # SQLAlchemy: not for --help

    if not target.isdigit() or int(target) >= 2**63:  # ids are positive 64-bit integers at most
        return None
    try:
        return await subs.get(session, int(target))
    except SubscriberNotFound:
        return None


async def _chat_subscribers(session: AsyncSession, number: str) -> list[subs.SubscriberView]:
    """The Telegram and Discord subscribers whose address is ``number``."""
    from digest.subscribe import subscriptions as subs  # SQLAlchemy: not for --help

    found = []
    for channel in (ChannelName.TELEGRAM, ChannelName.DISCORD):
        try:
            view = await subs.find_by_address(session, channel, number)
        except SubscriptionError:  # not a valid address on that channel (length, sign)
            continue
        if view is not None:
            found.append(view)
    return found


async def _by_address(session: AsyncSession, channel: str, target: str) -> subs.SubscriberView:
    from digest.subscribe import subscriptions as subs  # SQLAlchemy: not for --help

    try:
        view = await subs.find_by_address(session, channel, target)
    except SubscriptionError as exc:
        raise usage(exc) from None
    if view is None:
        raise SubscriberNotFound(f"no {channel} subscriber at {target}")
    return view


# -- import and export ----------------------------------------------------------

@dataclass
class ImportReport:
    """What an import did: counts, and the line of every skipped or bad row."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)
    to_confirm: list[int] = field(default_factory=list)

    def summary(self) -> str:
        """One line of counts."""
        return (f"{self.added} added, {self.updated} updated, {self.unchanged} unchanged, "
                f"{len(self.skipped)} skipped, {len(self.errors)} with errors")


def _reader(text: str) -> csv.DictReader[str]:
    """A reader over ``text`` whose header names are checked (file-level error otherwise)."""
    reader = csv.DictReader(io.StringIO(text))
    names = [name.strip().lower() for name in reader.fieldnames or ()]
    missing = [col for col in REQUIRED_COLUMNS if col not in names]
    unknown = [name for name in names if name not in CSV_COLUMNS]
    if missing or unknown:
        problem = f"missing column(s) {', '.join(missing)}" if missing else \
            f"unknown column(s) {', '.join(unknown)}"
        raise SubscriptionError(f"line 1: {problem}; the columns are {','.join(CSV_COLUMNS)}")
    reader.fieldnames = names
    return reader


def parse_row(row: dict[str | Any, Any]) -> tuple[str, str, validation.Preferences, str | None]:
    """(channel, address, full preferences, file status) of one CSV row; SubscriptionError if bad."""
    from digest.subscribe import validation

    if None in row:
        raise SubscriptionError("more fields than the header has columns")
    cell = {key: (value or "").strip() for key, value in row.items()}
    channel = validation.validate_channel(cell["channel"])
    if not cell["address"]:
        raise SubscriptionError("empty", field="address")
    try:
        min_score = float(cell.get("min_score") or 0)
    except ValueError:
        raise SubscriptionError(f"not a number: {cell['min_score']!r}", field="min_score") from None
    status = cell.get("status") or None
    if status is not None and status not in STATUSES:
        raise SubscriptionError(f"unknown status {status!r}", field="status")
    layers = validation.validate_layers(cell.get("layers") or None)  # an empty cell is all nine, explicitly
    prefs = validation.preferences(layers, min_score, cell.get("locale") or DEFAULT_LOCALE)
    return channel, cell["address"], prefs, status


async def import_csv(session: AsyncSession, text: str, *, confirmed: bool,
                     now: dt.datetime) -> ImportReport:
    """Import every row of a CSV text; a bad row is reported by line and never stops the others."""
    from digest.subscribe import subscriptions as subs  # SQLAlchemy: not for --help

    report = ImportReport()
    reader = _reader(text)
    for row in reader:
        try:
            channel, address, prefs, status = parse_row(row)
            outcome = await subs.import_subscriber(session, channel, address, prefs,
                                                   confirmed=confirmed, now=now, file_status=status)
        except SubscriptionError as exc:
            report.errors.append((reader.line_num, str(exc)))
            continue
        _count(report, outcome, reader.line_num)
    return report


def _count(report: ImportReport, outcome: subs.ImportOutcome, line: int) -> None:
    if outcome.kind == "skipped":
        report.skipped.append((line, f"{outcome.view.address}: {outcome.reason}"))
        return
    setattr(report, outcome.kind, getattr(report, outcome.kind) + 1)
    if outcome.kind == "added" and outcome.view.status == SubscriberStatus.PENDING:
        report.to_confirm.append(outcome.view.id)


def export_csv(views: list[subs.SubscriberView]) -> str:
    """The CSV text of ``views`` (layers written out explicitly, status last)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for v in views:
        writer.writerow((v.channel, v.address, " ".join(v.layers), f"{v.min_score:g}", v.locale,
                         v.status))
    return out.getvalue()


async def import_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest subscribers import FILE.csv [--confirmed]``: prints the report."""
    from digest.subscribe import subscriptions as subs  # SQLAlchemy: not for --help

    try:
        text = args.file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise DigestError(f"cannot read {args.file}: {getattr(exc, 'strerror', None) or exc}") from None
    async with bootstrap.database(settings) as sessions:
        async with sessions.begin() as session:
            try:
                report = await import_csv(session, text, confirmed=args.confirmed,
                                          now=bootstrap.clock(settings)())
            except SubscriptionError as exc:
                raise DigestError(f"{args.file}: {exc}") from None
        _print_report(args.file, report)
        mail_failed = 0
        if report.to_confirm:
            async with sessions() as session:
                views = [await subs.get(session, sid) for sid in report.to_confirm]
            mailed = await mail_confirmations(settings, views)
            mail_failed = mailed.failed
            print(f"{len(views)} new email subscriber(s) are pending until they confirm; {mailed.summary()}")
    return 1 if report.errors or mail_failed else 0  # the good rows are in: a script still sees the rest


async def confirm_resend_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest subscribers confirm-resend [ADDRESS...]``: one line of sent/failed counts."""
    async with bootstrap.database(settings) as sessions, sessions() as session:
        views = await pending_email(session, args.addresses)
    report = await mail_confirmations(settings, views)
    print(f"{len(views)} pending email subscriber(s); {report.summary()}")
    return 1 if report.failed else 0


async def pending_email(session: AsyncSession, addresses: list[str]) -> list[subs.SubscriberView]:
    """The named pending email subscribers (DigestError naming one that is not), or every one."""
    from digest.subscribe import subscriptions as subs  # SQLAlchemy: not for --help

    if not addresses:
        return await subs.list_subscribers(session, ChannelName.EMAIL, SubscriberStatus.PENDING)
    views = []
    for address in addresses:
        try:
            view = await subs.find_by_address(session, ChannelName.EMAIL, address)
        except SubscriptionError as exc:
            raise usage(exc) from None
        if view is None or view.status != SubscriberStatus.PENDING:
            raise DigestError(f"{address}: not a pending email subscriber "
                              f"({'unknown' if view is None else view.status})")
        views.append(view)
    return views


async def mail_confirmations(settings: Settings, views: list[subs.SubscriberView]) -> ResendReport:
    """The web form's confirmation mail to each of ``views``, on the email channel, paced."""
    from digest.domain.ratelimit import per_second
    from digest.subscribe.confirm import CONFIRM_RATE, ConfirmSetup, send_confirmations
    from digest.web.subscribe import CONFIRM_PATH  # the page the link opens (Starlette: a command's cost)

    setup = ConfirmSetup(bootstrap.mail_identity(settings), settings.secret(), settings.site_url,
                         CONFIRM_PATH, bootstrap.clock(settings))
    channel = bootstrap.email_channel(settings)
    try:
        return await send_confirmations(views, setup, channel.send, per_second(CONFIRM_RATE))
    finally:
        await channel.aclose()


def _print_report(path: Path, report: ImportReport) -> None:
    print(f"imported {path}: {report.summary()}")
    for line, reason in report.skipped:
        print(f"line {line}: skipped: {reason}")
    for line, reason in report.errors:
        print(f"line {line}: error: {reason}")


async def export_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest subscribers export [--out FILE] [--active-only]``."""
    from digest.subscribe import subscriptions as subs  # SQLAlchemy: not for --help

    async with bootstrap.database(settings) as sessions, sessions() as session:
        status = SubscriberStatus.ACTIVE if args.active_only else None
        views = await subs.list_subscribers(session, status=status)
    text = export_csv(views)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        args.out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise DigestError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    print(f"exported {len(views)} subscriber(s) to {args.out}", file=sys.stderr)
    return 0
