"""Handlers of the digest commands: ``build``, ``preview``, ``events``."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import TYPE_CHECKING, Any

from digest import bootstrap
from digest.cli.output import format_table, iso_date, print_json, tell_wait
from digest.config import Settings
from digest.domain.errors import UsageError
from digest.domain.layers import parse_layers
from digest.domain.locales import LOCALES
from digest.domain.window import latest_closed, window_for

if TYPE_CHECKING:
    from digest.build.pipeline import BuildReport

PREVIEW_FORMATS = ("md", "text", "html", "json", "telegram", "discord", "email")


def add_commands(sub: Any) -> None:
    """Register ``build``, ``preview`` and ``events`` on the CLI."""
    build = sub.add_parser("build", help="build and store the digest of a date")
    build.add_argument("--date", type=iso_date, help="YYYY-MM-DD (default: latest closed window)")
    build.add_argument("--force", action="store_true", help="rebuild even if already built")
    build.add_argument("--json", action="store_true", help="print the build report as JSON")
    build.add_argument("--no-wait", dest="wait", action="store_false",
                       help="exit 1 if another build of the date is running (default: wait for it)")
    build.set_defaults(handler=build_cmd)

    preview = sub.add_parser("preview", help="print a built digest in one format")
    preview.add_argument("--date", type=iso_date, required=True)
    preview.add_argument("--format", choices=PREVIEW_FORMATS, default="md")
    preview.add_argument("--locale", choices=LOCALES, default=None)
    preview.add_argument("--layers", default=None, help="comma-separated layer ids")
    preview.add_argument("--min-score", type=float, default=None)
    preview.set_defaults(handler=preview_cmd)

    events = sub.add_parser("events", help="every candidate event of a date's window")
    events.add_argument("--date", type=iso_date, required=True)
    events.add_argument("--json", action="store_true")
    events.set_defaults(handler=events_cmd)


async def _build(settings: Settings, date: dt.date, now: dt.datetime, force: bool,
                 wait: bool) -> BuildReport:
    """Build under the date's lock: a concurrent build of it is waited for, then found built."""
    # the build pipeline brings SQLAlchemy, the analysers and openai: imported here, not for --help
    from digest.build.pipeline import build_digest
    from digest.store.locks import build_lock

    async with bootstrap.run_lock(settings, build_lock(date), wait=wait, on_wait=tell_wait), \
            bootstrap.database(settings) as sessions, \
            bootstrap.llm_client(settings, sessions, now) as llm:
        return await build_digest(sessions, date, bootstrap.build_options(settings), now=now,
                                  force=force, llm=llm)


def print_build(report: BuildReport, as_json: bool) -> None:
    """The build report: one line, or JSON."""
    from dataclasses import asdict

    if as_json:
        data = asdict(report)
        data["date"] = report.date.isoformat()
        print_json(data)
        return
    verb = "built" if report.created else "already built (use --force to rebuild)"
    print(f"digest {report.date}: {verb}; {report.events} events from {report.entries} entries"
          f" ({report.late} late); mode {report.generation_mode}; {report.tokens} LLM tokens")


async def build_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest build --date D [--force]``."""
    now = bootstrap.clock(settings)()
    date = args.date or latest_closed(now, settings.timezone)
    if window_for(date, settings.timezone).end > now and not args.force:
        print(f"digest: note: the window of {date} is still open; building what is there",
              file=sys.stderr)
    print_build(await _build(settings, date, now, args.force, args.wait), args.json)
    return 0


async def preview_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest preview --date D --format F``."""
    from digest.domain.views import filter_view
    from digest.store.queries import load_view

    try:
        layers = parse_layers(args.layers) if args.layers is not None else None
    except ValueError as exc:
        raise UsageError(f"--layers: {exc}") from None
    locale = args.locale or settings.locales[0]
    async with bootstrap.database(settings) as sessions, sessions() as session:
        view = await load_view(session, args.date, locale)
    view = filter_view(view, layers, args.min_score)
    if args.format == "email":
        sys.stdout.write(bootstrap.preview_eml(view, settings))
    else:
        sys.stdout.write(bootstrap.renderer(settings).render(view, args.format))
    return 0


async def events_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest events --date D``: every candidate event of the window, relevant or not."""
    async with bootstrap.database(settings) as sessions, sessions() as session:
        rows = await candidate_events(session, args.date, settings.timezone)
    if args.json:
        print_json(rows)
    else:
        table = [(r["id"], "yes" if r["relevant"] else "no", f"{r['score']:.1f}",
                  ",".join(r["layers"]), str(r["title"])[:70]) for r in rows]
        print(format_table(("id", "relevant", "score", "layers", "title"), table, right=(0, 2)))
    return 0


async def candidate_events(session: Any, date: dt.date, tz: str) -> list[dict[str, Any]]:
    """Events holding any entry of the window of ``date``, best first."""
    from sqlalchemy import select

    from digest.store.models import Entry, Event, EventEntry
    from digest.store.queries import get_digest

    digest = await get_digest(session, date)
    rows = (await session.execute(
        select(Event, Entry.canonical_url, Entry.url)
        .join(EventEntry, EventEntry.event_id == Event.id)
        .join(Entry, Entry.id == EventEntry.entry_id)
        .where(Entry.digest_id == digest.id)
    )).all()
    found: dict[int, dict[str, Any]] = {}
    for event, canonical, url in rows:
        row = found.setdefault(event.id, {
            "id": event.id, "title": event.title, "relevant": event.relevant,
            "layers": list(event.layers), "score": event.score, "entry_urls": [],
        })
        link = canonical or url
        if link and link not in row["entry_urls"]:
            row["entry_urls"].append(link)
    return sorted(found.values(), key=lambda r: (-r["score"], r["id"]))
