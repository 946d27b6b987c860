"""``digest site``: the archive as static files for plain hosting.

Layout (every link is relative, so any static server or sub-path works; the
feed and the JSON files use absolute links built on the site URL)::

    index.html, page-2.html, ...             the archive index, newest first
    layer-<id>.html, layer-<id>-page-2.html  the index filtered by layer
    d/YYYY-MM-DD.html                        each digest (no read count: nothing counts views here)
    e/<id>.html                              each event shown in a digest
    feed.xml, style.css, 404.html
    api/digests.json, api/digests/YYYY-MM-DD.json, api/events/<id>.json
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from digest import queries
from digest.db import SessionFactory
from digest.layers import LAYER_IDS
from digest.pages import Chrome, Pages, StaticLinks, index_file
from digest.render import Renderer
from digest.web_api import digest_summary_json, event_detail_json

FEED_ENTRIES = 20
ALL = 10**9


@dataclass(frozen=True)
class SiteReport:
    """What an export wrote."""

    out: Path
    files: int
    digests: int
    events: int


class _Writer:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.count = 0

    def text(self, name: str, body: str) -> None:
        path = self.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
        self.count += 1

    def json(self, name: str, data: Any) -> None:
        self.text(name, json.dumps(data, ensure_ascii=False, indent=2) + "\n")


async def export_site(sessions: SessionFactory, renderer: Renderer, out: Path, *, locale: str,
                      site_url: str, timezone: str, now: dt.datetime, page_size: int = 20) -> SiteReport:
    """Write the whole archive in ``locale`` under ``out``."""
    pages = Pages(renderer, site_url=site_url, timezone=timezone)
    absolute = StaticLinks(site_url.rstrip("/") + "/")
    writer = _Writer(out)
    async with sessions() as session:
        listing = (await queries.list_digests(session, locale, per_page=ALL)).items
        _write_indexes(writer, pages, listing, locale, page_size)
        feed = await _write_digests(writer, pages, renderer, session, listing, locale)
        events = await _write_events(writer, pages, session, locale, absolute)
    writer.text("feed.xml", pages.feed(feed[:FEED_ENTRIES], locale, absolute, now))
    writer.text("style.css", pages.css())
    writer.text("404.html", pages.error(404, locale, Chrome(absolute, reads=False)))
    writer.json("api/digests.json", {"page": 1, "pages": 1, "total": len(listing), "layer": None,
                                     "digests": [digest_summary_json(d, locale, absolute) for d in listing]})
    return SiteReport(out, writer.count, len(listing), events)


def _write_indexes(writer: _Writer, pages: Pages, listing: tuple[queries.DigestSummary, ...],
                   locale: str, page_size: int) -> None:
    chrome = Chrome(StaticLinks(""), reads=False)
    for layer in (None, *LAYER_IDS):
        kept = [d for d in listing if layer is None or layer in d.layers]
        count = max(1, -(-len(kept) // page_size))
        for n in range(1, count + 1):
            chunk = tuple(kept[(n - 1) * page_size:n * page_size])
            page = queries.DigestPage(chunk, n, count, len(kept))
            writer.text(index_file(n, layer), pages.index(page, locale, chrome, layer))


async def _write_digests(writer: _Writer, pages: Pages, renderer: Renderer, session: AsyncSession,
                         listing: tuple[queries.DigestSummary, ...], locale: str) -> list[Any]:
    chrome = Chrome(StaticLinks("../"), reads=False)
    feed = []
    for summary in listing:
        view = await queries.load_view(session, summary.date, locale)
        writer.text(f"d/{summary.date.isoformat()}.html", pages.digest(view, chrome))
        writer.json(f"api/digests/{summary.date.isoformat()}.json", renderer.as_json(view))
        feed.append((view, summary.built_at))
    return feed


async def _write_events(writer: _Writer, pages: Pages, session: AsyncSession, locale: str,
                        absolute: StaticLinks) -> int:
    chrome = Chrome(StaticLinks("../"), reads=False)
    ids = await queries.all_event_ids(session)
    for event_id in ids:
        detail = await queries.event_detail(session, event_id, locale)
        if detail is None:
            continue
        writer.text(f"e/{event_id}.html", pages.event(detail, locale, chrome))
        writer.json(f"api/events/{event_id}.json", event_detail_json(detail, locale, absolute))
    return len(ids)
