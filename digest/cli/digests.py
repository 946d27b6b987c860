"""Handlers of the digest commands: ``build``, ``preview``, ``events``."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import TYPE_CHECKING, Any

from digest import bootstrap
from digest.cli.output import (
    format_table,
    iso_date,
    layers_arg,
    layers_help,
    print_json,
    score_arg,
    tell_wait,
)
from digest.domain.locales import LOCALES
from digest.domain.window import latest_closed, window_for

if TYPE_CHECKING:
    from digest.build.pipeline import BuildReport
    from digest.config import Settings

PREVIEW_FORMATS = ("md", "text", "html", "json", "telegram", "discord", "email")


def add_commands(sub: Any) -> None:
    """Register ``build``, ``preview`` and ``events`` on the CLI."""
    build = sub.add_parser(
        "build", help="build and store the digest of a date",
        description="build and store the digest of a date (default: the latest closed window). "
                    "Building again returns the same digest; --force rebuilds. A date in the future "
                    "or before the first stored entry is refused (exit 2).")
    build.add_argument("--date", type=iso_date, help="YYYY-MM-DD (default: latest closed window)")
    build.add_argument("--force", action="store_true", help="rebuild even if already built")
    build.add_argument("--json", action="store_true", help="print the build report as JSON")
    build.add_argument("--partial", action="store_true",
                       help="build today's still-open window as a draft: never published or listed")
    build.add_argument("--no-wait", dest="wait", action="store_false",
                       help="exit 1 if another build of the date is running (default: wait for it)")
    build.set_defaults(handler=build_cmd)

    preview = sub.add_parser("preview", help="print a built digest in one format")
    preview.add_argument("--date", type=iso_date, required=True, help="the digest's date, YYYY-MM-DD")
    preview.add_argument("--format", choices=PREVIEW_FORMATS, default="md",
                         help="output format (default md; email is the whole .eml)")
    preview.add_argument("--locale", choices=LOCALES, default=None,
                         help="language (default: the first of DIGEST_LOCALES)")
    preview.add_argument("--layers", type=layers_arg, default=None,
                         help=layers_help("only events in these layers"))
    preview.add_argument("--min-score", type=score_arg, default=None, metavar="N",
                         help="only events scoring at least N, 0 to 100")
    preview.set_defaults(handler=preview_cmd)

    events = sub.add_parser("events", help="every candidate event of a date's window")
    events.add_argument("--date", type=iso_date, required=True, help="the window's date, YYYY-MM-DD")
    events.add_argument("--json", action="store_true", help="print a JSON array")
    events.set_defaults(handler=events_cmd)


async def _build(settings: Settings, date: dt.date, now: dt.datetime,
                 args: argparse.Namespace) -> BuildReport:
    """Build under the date's lock: a concurrent build of it is waited for, then found built."""
    # the build pipeline brings SQLAlchemy, the analysers and openai: imported here, not for --help
    from dataclasses import replace

    from digest.build.pipeline import build_digest, check_buildable
    from digest.store.locks import build_lock

    partial = window_for(date, settings.timezone).end > now
    options = replace(bootstrap.build_options(settings), partial=partial)  # a bad setting first
    async with bootstrap.run_lock(settings, build_lock(date), wait=args.wait, on_wait=tell_wait), \
            bootstrap.database(settings) as sessions:
        await check_buildable(sessions, date, now, settings.timezone, partial=args.partial)
        async with bootstrap.llm_client(settings, sessions, now) as llm:
            return await build_digest(sessions, date, options, now=now, force=args.force, llm=llm)


def print_build(report: BuildReport, as_json: bool) -> None:
    """The build report: one line, or JSON."""
    from dataclasses import asdict

    if as_json:
        data = asdict(report)
        data["date"] = report.date.isoformat()
        print_json(data)
        return
    verb = "built" if report.created else "already built (use --force to rebuild)"
    draft = " (partial: not published or listed; rebuilt once the window closes)" if report.partial else ""
    print(f"digest {report.date}: {verb}{draft}; {report.events} events from {report.entries} entries"
          f" ({report.late} late); mode {report.generation_mode}; {report.tokens} LLM tokens")


async def build_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest build --date D [--force] [--partial]``: a date that can never be built is refused (exit 2)."""
    now = bootstrap.clock(settings)()
    date = args.date or latest_closed(now, settings.timezone)
    print_build(await _build(settings, date, now, args), args.json)
    return 0


async def preview_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest preview --date D --format F``."""
    from digest.domain.views import filter_view
    from digest.store.queries import load_view

    locale = args.locale or settings.locales[0]
    async with bootstrap.database(settings) as sessions, sessions() as session:
        view = await load_view(session, args.date, locale)
    view = filter_view(view, args.layers, args.min_score)
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
