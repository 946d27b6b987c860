"""The JSON API of the web archive (described by :mod:`digest.web.openapi` at ``/api/openapi.json``).

Every error is ``{"error": "..."}`` with a 4xx status. The JSON shapes are
built here so the static export writes the same objects.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from digest.domain.errors import BuildError
from digest.domain.layers import BY_ID, LAYER_IDS
from digest.domain.locales import LOCALES
from digest.render.renderer import Renderer, safe_url
from digest.store import queries
from digest.store.db import SessionFactory
from digest.web.cache import JSON, Cached, PageCache, respond
from digest.web.openapi import openapi
from digest.web.pages import Links, WebLinks
from digest.web.reads import archive_stamp

MAX_DAYS = 365
MAX_PAGE = 100_000
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DIGITS = re.compile(r"[0-9]+")  # ASCII: str.isdigit() also passes "²" and "٣", which int() refuses


def digest_summary_json(d: queries.DigestSummary, locale: str, links: Links) -> dict[str, Any]:
    """One digest of the archive list."""
    return {
        "date": d.date.isoformat(), "locale": locale, "title": d.title, "events": d.events,
        "layers": list(d.layers), "top_score": round(d.top_score, 1),
        "built_at": d.built_at.isoformat(),
        "published_at": d.published_at.isoformat() if d.published_at else None,
        "url": links.digest(d.date),
    }


def recent_event_json(e: queries.RecentEvent, links: Links) -> dict[str, Any]:
    """One event of the events list (as its latest digest showed it)."""
    return {
        "id": e.id, "title": e.title, "summary": e.summary, "url": safe_url(e.url),
        "score": round(e.score, 1), "score_breakdown": e.score_breakdown, "layers": list(e.layers),
        "date": e.date.isoformat(), "rank": e.rank, "first_seen": e.first_seen.isoformat(),
        "page": links.event(e.id),
    }


def event_detail_json(e: queries.EventDetail, locale: str, links: Links) -> dict[str, Any]:
    """An event with every source and every digest that showed it."""
    return {
        "id": e.id, "locale": locale, "title": e.title, "summary": e.summary,
        "why_it_matters": e.why_it_matters, "watch": list(e.watch), "written_by": e.written_by,
        "url": safe_url(e.url), "score": round(e.score, 1), "score_breakdown": e.score_breakdown,
        "layers": list(e.layers), "first_seen": e.first_seen.isoformat(), "page": links.event(e.id),
        "sources": [{"name": s.name, "title": s.title, "url": safe_url(s.url),
                     "published": s.published.isoformat()} for s in e.sources],
        "digests": [{"date": a.date.isoformat(), "title": a.title, "rank": a.rank,
                     "score": round(a.score, 1), "url": links.digest(a.date)} for a in e.digests],
    }


def parse_date(text: str) -> dt.date | None:
    """A ``YYYY-MM-DD`` date (ASCII digits), or None."""
    if not _DATE.fullmatch(text):
        return None
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None


def _bad(message: str) -> HTTPException:
    return HTTPException(400, message)


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    """The integer query parameter ``name`` (``default`` when absent), else a 400 saying what fits.

    Every integer parameter of every route goes through here: ASCII digits only, and no more
    of them than ``high`` has, so nothing a client sends reaches ``int()`` unchecked.
    """
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    if not (_DIGITS.fullmatch(text) and len(text) <= len(str(high)) and low <= int(text) <= high):
        raise _bad(f"{name} must be a whole number from {low} to {high}")
    return int(text)


def _score_param(request: Request) -> float:
    text = request.query_params.get("min_score")
    if text is None or text == "":
        return 0.0
    try:
        value = float(text)
    except ValueError:
        raise _bad("min_score must be a number from 0 to 100") from None
    if not 0.0 <= value <= 100.0:
        raise _bad("min_score must be a number from 0 to 100")
    return value


def _layer_param(request: Request) -> str | None:
    layer = request.query_params.get("layer") or None
    if layer is not None and layer not in BY_ID:
        raise _bad(f"unknown layer {layer!r}; valid: {', '.join(LAYER_IDS)}")
    return layer


class JsonApi:
    """The ``/api/*`` routes; holds its dependencies, no globals."""

    def __init__(self, sessions: SessionFactory, renderer: Renderer, *, site_url: str,
                 default_locale: str, page_size: int, clock: Callable[[], dt.datetime],
                 cache: PageCache | None = None) -> None:
        self.sessions = sessions
        self.cache = cache or PageCache()
        self.renderer = renderer
        self.links = WebLinks(site_url.rstrip("/"))
        self.site_url = site_url.rstrip("/")
        self.default_locale = default_locale
        self.page_size = page_size
        self.clock = clock

    def routes(self) -> list[Route]:
        """The API's routes."""
        return [
            Route("/api/digests", self.digests), Route("/api/digests/{date}", self.digest),
            Route("/api/events", self.events), Route("/api/events/{event_id:int}", self.event),
            Route("/api/openapi.json", self.spec),
        ]

    def locale(self, request: Request) -> str:
        """``?lang=`` when valid (else 400), or the default locale."""
        lang = request.query_params.get("lang") or self.default_locale
        if lang not in LOCALES:
            raise _bad(f"lang must be one of {', '.join(LOCALES)}")
        return lang

    async def digests(self, request: Request) -> Response:
        """``/api/digests?page=&layer=&lang=``: built digests, newest first."""
        locale, layer = self.locale(request), _layer_param(request)
        page = int_param(request, "page", 1, 1, MAX_PAGE)
        async with self.sessions() as session:
            found = await queries.list_digests(session, locale, page=page, per_page=self.page_size,
                                               layer=layer)
        return JSONResponse({
            "page": found.page, "pages": found.pages, "total": found.total, "layer": layer,
            "digests": [digest_summary_json(d, locale, self.links) for d in found.items],
        })

    async def digest(self, request: Request) -> Response:
        """``/api/digests/<date>``: the digest object of ``digest preview --format json``."""
        date = parse_date(request.path_params["date"])
        if date is None:
            raise _bad("date must be YYYY-MM-DD")
        locale = self.locale(request)
        async with self.sessions() as session:
            try:
                view = await queries.load_view(session, date, locale, listed_only=True)
            except BuildError:
                raise HTTPException(404, f"no digest for {date}") from None
        return JSONResponse(self.renderer.as_json(view))

    async def events(self, request: Request) -> Response:
        """``/api/events?layer=&days=&min_score=&lang=``: events shown in recent digests."""
        locale, layer = self.locale(request), _layer_param(request)
        days = int_param(request, "days", 7, 1, MAX_DAYS)
        min_score = _score_param(request)
        since = self.clock() - dt.timedelta(days=days)
        stamp = await archive_stamp(self.sessions, since=since)  # the digests in the window

        async def make() -> Cached:
            async with self.sessions() as session:
                found = await queries.recent_events(session, locale, since=since, layer=layer,
                                                    min_score=min_score)
            body = bytes(JSONResponse({
                "days": days, "layer": layer, "min_score": min_score, "locale": locale,
                "events": [recent_event_json(e, self.links) for e in found],
            }).body)
            return Cached.of(body, JSON, stamp.changed(self.clock()))

        key = ("events", locale, layer, days, min_score, stamp)
        cached = await self.cache.get(key, make, query=True)
        return respond(request, cached, {"cache-control": "no-cache"})

    async def event(self, request: Request) -> Response:
        """``/api/events/<id>``: one event with all its sources and digests."""
        locale = self.locale(request)
        async with self.sessions() as session:
            found = await queries.event_detail(session, request.path_params["event_id"], locale)
        if found is None:
            raise HTTPException(404, "no such event in any digest")
        return JSONResponse(event_detail_json(found, locale, self.links))

    async def spec(self, request: Request) -> Response:
        """``/api/openapi.json``."""
        return JSONResponse(openapi(self.site_url))
