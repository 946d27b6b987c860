"""``digest site``: the archive as static files for plain hosting.

Layout (every link is relative, so any static server or sub-path works; the
feed and the JSON files use absolute links built on the site URL)::

    index.html, page-2.html, ...             the archive index, newest first
    layer-<id>.html, layer-<id>-page-2.html  the index filtered by layer
    d/YYYY-MM-DD.html                        each digest (no read count: nothing counts views here)
    e/<id>.html                              each event shown in a digest
    feed.xml, feed-<layer>.xml, style.css, 404.html   the Atom feeds (all digests, one layer's)
    robots.txt, sitemap.xml                   for crawlers (digest.web.meta)
    api/digests.json, api/digests/YYYY-MM-DD.json, api/events/<id>.json

The export is written into a fresh folder beside ``--out`` and renamed onto it
only once every file is written, so a failure leaves ``--out`` as it was and
no half-written files around. ``--out`` may be missing, empty, or an earlier
export (which is replaced); anything else is refused rather than overwritten.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from digest.domain.errors import DigestError
from digest.domain.layers import LAYER_IDS
from digest.render.renderer import Renderer
from digest.store import queries
from digest.store.db import SessionFactory
from digest.web.api import digest_summary_json, event_detail_json
from digest.web.meta import robots_txt, sitemap, sitemap_entries
from digest.web.pages import Chrome, Pages, StaticLinks, index_file

FEED_ENTRIES = 20
ALL = 10**9
EXPORT_MARKS = ("index.html", "api/digests.json")  # a folder holding these is an earlier export


class ExportError(DigestError):
    """The site cannot be written where ``--out`` says (one line, naming the folder)."""


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
    """Write the whole archive in ``locale`` as the folder ``out`` (all of it, or nothing)."""
    with staged(out) as folder:
        return await _export(sessions, renderer, folder, out, locale=locale, site_url=site_url,
                             timezone=timezone, now=now, page_size=page_size)


async def _export(sessions: SessionFactory, renderer: Renderer, folder: Path, out: Path, *, locale: str,
                  site_url: str, timezone: str, now: dt.datetime, page_size: int) -> SiteReport:
    pages = Pages(renderer, site_url=site_url, timezone=timezone)
    absolute = StaticLinks(site_url.rstrip("/") + "/")
    writer = _Writer(folder)
    async with sessions() as session:
        listing = (await queries.list_digests(session, locale, per_page=ALL)).items
        _write_indexes(writer, pages, listing, locale, page_size)
        feed = await _write_digests(writer, pages, renderer, session, listing, locale)
        events = await _write_events(writer, pages, session, locale, absolute)
        writer.text("sitemap.xml", sitemap(await sitemap_entries(session), absolute))
    _write_feeds(writer, pages, listing, feed, locale, absolute, now)
    writer.text("robots.txt", robots_txt(site_url))
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


def _write_feeds(writer: _Writer, pages: Pages, listing: tuple[queries.DigestSummary, ...],
                 feed: list[Any], locale: str, absolute: StaticLinks, now: dt.datetime) -> None:
    """``feed.xml`` and each layer's ``feed-<layer>.xml`` (``feed`` pairs with ``listing``)."""
    for layer in (None, *LAYER_IDS):
        kept = [entry for summary, entry in zip(listing, feed, strict=True)
                if layer is None or layer in summary.layers]
        writer.text(absolute.feed(layer).removeprefix(absolute.prefix),
                    pages.feed(kept[:FEED_ENTRIES], locale, absolute, now, layer))


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


def _reason(exc: OSError) -> str:
    text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]


def _check_target(out: Path) -> None:
    """ExportError unless ``out`` is missing, an empty folder, or an earlier export."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out}: exists and is not a folder")
    try:
        foreign = out.is_dir() and any(out.iterdir()) and not all((out / m).is_file() for m in EXPORT_MARKS)
    except OSError as exc:
        raise ExportError(f"--out {out}: cannot read: {_reason(exc)}") from None
    if foreign:
        raise ExportError(f"--out {out}: the folder holds other files (not an earlier export); "
                          "choose an empty or new folder")


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A fresh folder beside ``out`` to write into, put in ``out``'s place only if the body succeeds.

    On any failure the new folder (and any parent made for it) is removed and ``out`` is untouched;
    an OSError becomes one ExportError line.
    """
    _check_target(out)
    made = [p for p in out.parents if not p.exists()]  # deepest first
    folder: Path | None = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        folder.chmod(out.stat().st_mode & 0o7777 if out.is_dir() else 0o755)  # mkdtemp makes it 0700
        yield folder
        _swap(folder, out)
    except OSError as exc:
        raise ExportError(f"--out {out}: cannot write: {_reason(exc)}") from None
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        for parent in made if not out.exists() else ():
            with contextlib.suppress(OSError):
                parent.rmdir()


def _swap(new: Path, out: Path) -> None:
    """Rename ``new`` onto ``out``; an earlier ``out`` is moved aside first and deleted after."""
    if not out.exists():
        new.rename(out)
        return
    old = out.with_name(f".{out.name}.old-{secrets.token_hex(4)}")
    out.rename(old)
    try:
        new.rename(out)
    except OSError:
        old.rename(out)
        raise
    shutil.rmtree(old, ignore_errors=True)
