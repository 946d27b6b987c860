"""Handlers of the digest commands: ``build``, ``preview``, ``events``."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from sqlalchemy import select

from digest.config import Settings
from digest.domain.errors import UsageError
from digest.domain.layers import parse_layers
from digest.domain.window import latest_closed, window_for
from digest.store.db import SessionFactory, open_database

if TYPE_CHECKING:
    from digest.build.pipeline import BuildOptions

PREVIEW_FORMATS = ("md", "text", "html", "json", "telegram", "discord", "email")


def add_commands(sub: Any, date_type: Callable[[str], dt.date]) -> None:
    """Register ``build``, ``preview`` and ``events`` on the CLI."""
    build = sub.add_parser("build", help="build and store the digest of a date")
    build.add_argument("--date", type=date_type, help="YYYY-MM-DD (default: latest closed window)")
    build.add_argument("--force", action="store_true", help="rebuild even if already built")
    build.add_argument("--json", action="store_true", help="print the build report as JSON")
    build.add_argument("--no-wait", dest="wait", action="store_false",
                       help="exit 1 if another build of the date is running (default: wait for it)")
    build.set_defaults(handler=build_cmd)

    preview = sub.add_parser("preview", help="print a built digest in one format")
    preview.add_argument("--date", type=date_type, required=True)
    preview.add_argument("--format", choices=PREVIEW_FORMATS, default="md")
    preview.add_argument("--locale", choices=("zh", "en"), default=None)
    preview.add_argument("--layers", default=None, help="comma-separated layer ids")
    preview.add_argument("--min-score", type=float, default=None)
    preview.set_defaults(handler=preview_cmd)

    events = sub.add_parser("events", help="every candidate event of a date's window")
    events.add_argument("--date", type=date_type, required=True)
    events.add_argument("--json", action="store_true")
    events.set_defaults(handler=events_cmd)



def build_options(settings: Settings) -> BuildOptions:
    """Build options from settings."""
    from digest.analyze.score import ScoreWeights
    from digest.build.pipeline import BuildOptions

    weights = ScoreWeights.from_mapping(settings.score_weights)
    return BuildOptions(timezone=settings.timezone, locales=tuple(settings.locales),
                        max_events=settings.max_events, llm_top_events=settings.llm_top_events,
                        include_prereleases=settings.include_prereleases, weights=weights)


@asynccontextmanager
async def llm_client(settings: Settings, sessions: SessionFactory,
                     now: dt.datetime) -> AsyncIterator[Any]:
    """The LLM client when a key is set, else None (extractive mode)."""
    if settings.llm_api_key is None:
        yield None
        return
    from digest.write.llm import LLMClient

    local = now.astimezone(ZoneInfo(settings.timezone))
    day_start = local.replace(hour=0, minute=0, second=0, microsecond=0).astimezone(dt.UTC)
    client = LLMClient(
        api_key=settings.llm_api_key.get_secret_value(), base_url=settings.llm_base_url,
        model=settings.llm_model, timeout=settings.llm_timeout,
        daily_tokens=settings.llm_daily_tokens, sessions=sessions, day_start=day_start,
    )
    try:
        yield client
    finally:
        await client.aclose()


async def _build(settings: Settings, date: dt.date, now: dt.datetime, force: bool,
                 wait: bool = True) -> Any:
    """Build under the date's lock: a concurrent build of it is waited for, then found built."""
    from digest.build.pipeline import build_digest
    from digest.store.locks import build_lock, cli_lock

    async with cli_lock(settings, build_lock(date), wait=wait), \
            open_database(settings.database_url) as sessions, \
            llm_client(settings, sessions, now) as llm:
        return await build_digest(sessions, date, build_options(settings), now=now,
                                  force=force, llm=llm)


def _print_report(report: Any, as_json: bool) -> None:
    from dataclasses import asdict

    from digest.cli.main import print_json

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
    now = settings.clock()
    date = args.date or latest_closed(now, settings.timezone)
    if window_for(date, settings.timezone).end > now and not args.force:
        print(f"digest: note: the window of {date} is still open; building what is there",
              file=sys.stderr)
    _print_report(await _build(settings, date, now, args.force, args.wait), args.json)
    return 0


async def build_latest(settings: Settings, now: dt.datetime) -> int:
    """Build the latest closed window (the tail of ``digest run``)."""
    report = await _build(settings, latest_closed(now, settings.timezone), now, False)
    _print_report(report, False)
    return 0


async def preview_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest preview --date D --format F``."""
    from digest.domain.views import filter_view
    from digest.render.renderer import Renderer
    from digest.store.queries import load_view

    try:
        layers = parse_layers(args.layers) if args.layers is not None else None
    except ValueError as exc:
        raise UsageError(f"--layers: {exc}") from None
    locale = args.locale or settings.locales[0]
    async with open_database(settings.database_url) as sessions, sessions() as session:
        view = await load_view(session, args.date, locale)
    view = filter_view(view, layers, args.min_score)
    renderer = Renderer(site_url=settings.site_url, timezone=settings.timezone)
    if args.format == "email":
        from digest.deliver.mailer import preview_eml

        sys.stdout.write(preview_eml(view, settings))
        return 0
    sys.stdout.write(renderer.render(view, args.format))
    return 0


async def events_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest events --date D``: every candidate event of the window, relevant or not."""
    from digest.cli.main import print_json
    from digest.cli.output import format_table

    async with open_database(settings.database_url) as sessions, sessions() as session:
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
