"""The web archive: an ASGI app (Starlette) over the stored digests.

Routes (the JSON API is in :mod:`digest.web.api`, documented at ``/api/openapi.json``)::

    GET /                 archive index, newest first (?page=, ?layer=)
    GET /d/YYYY-MM-DD     a digest page; every GET adds one to its read count
    GET /e/<id>           an event: score breakdown, every source, the digests that showed it
    GET /feed.xml         Atom feed of the latest digests
    GET /style.css        the only stylesheet (there are no scripts)
    GET /healthz          200 {"status": "ok"} when the database answers, else 503
    /subscribe, /confirm, /unsubscribe, /preferences   the email subscription (digest.web.subscribe)

Language: ``?lang=zh|en``, else Accept-Language (q-values), else the default (:mod:`digest.web.locale`).
Everything shown comes from feeds or an LLM: templates autoescape, only http(s)
links survive, and the Content-Security-Policy allows no script at all.
Each request owns its transaction; query helpers never commit. Every integer
query parameter is read by :func:`digest.web.api.int_param` (ASCII digits in a
range, else a 400). The client is the connection's peer; X-Forwarded-For counts
only from a trusted proxy (:func:`proxy_headers`). Link tokens never reach a log
line (:class:`RedactSecrets`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote_plus, urlencode

from sqlalchemy.exc import SQLAlchemyError
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from digest.domain.clock import system_now
from digest.domain.errors import BuildError
from digest.domain.layers import BY_ID
from digest.render.renderer import Renderer
from digest.store import queries
from digest.store.db import SessionFactory
from digest.web.api import MAX_PAGE, JsonApi, int_param, parse_date
from digest.web.locale import content_language, negotiate
from digest.web.pages import Chrome, Pages, WebLinks, lang_switch
from digest.web.subscribe import SubscribeLinks, SubscriptionPages, SubscriptionSetup

log = logging.getLogger(__name__)
Clock = Callable[[], dt.datetime]
FEED_ENTRIES = 20

SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "permissions-policy": "camera=(), microphone=(), geolocation=(), interest-cohort=()",
}


REDACTED = "REDACTED"
# Query parameters whose values are keys: the link tokens (which never expire), form tokens, and
# anything else that looks like a credential. Matched on the decoded name, anywhere in it.
_SECRET_NAME = re.compile(r"token|secret|passw|sig|key|auth|code|session", re.IGNORECASE)
_QUERY = re.compile(r"\?(\S*)")  # a query string in free text, up to a space (a value may hold quotes)


def redact_query(query: str) -> str:
    """``query`` with every secret-looking parameter's value replaced (names, order and the rest kept)."""
    parts = re.split(r"([&;?])", query)
    for n in range(0, len(parts), 2):
        name, eq, _ = parts[n].partition("=")
        if eq and _SECRET_NAME.search(unquote_plus(name)):
            parts[n] = f"{name}={REDACTED}"
    return "".join(parts)


def redact_urls(text: str) -> str:
    """``text`` (a URL, a request line, a log message) with the secrets of every query string redacted."""
    return _QUERY.sub(lambda m: "?" + redact_query(m.group(1)), text)


class RedactSecrets(logging.Filter):
    """A logging filter: no link token (or other secret query value) reaches a log line.

    Set on uvicorn's handlers (the access log carries every request's path and query) by
    :func:`digest.cli.web.make_server`; the message and any traceback are redacted.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact in place; never drops a record."""
        if record.name == "uvicorn.access" and isinstance(record.args, tuple):
            # its formatter unpacks the arguments (client, method, path, version, status): keep the shape
            record.args = tuple(redact_urls(a) if isinstance(a, str) else a for a in record.args)
        else:
            message = record.getMessage()
            if (clean := redact_urls(message)) != message:
                record.msg, record.args = clean, ()
                record.__dict__.pop("color_message", None)  # uvicorn's coloured copy of the original
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_urls(logging.Formatter().formatException(record.exc_info))
        return True


class SecurityHeaders:
    """Adds the security headers to every response (pure ASGI middleware)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Wrap ``send`` so each response start carries the headers."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


@dataclass(frozen=True)
class _Reader:
    """Who is asking: their locale, whether they chose it (``?lang=``), and their page chrome."""

    locale: str
    lang: str | None
    chrome: Chrome


class WebPages:
    """The HTML routes; holds its dependencies, no globals."""

    def __init__(self, sessions: SessionFactory, pages: Pages, *, site_url: str, default_locale: str,
                 page_size: int, clock: Clock, link_type: type[WebLinks] = WebLinks) -> None:
        self.sessions = sessions
        self.link_type = link_type
        self.pages = pages
        self.site_url = site_url.rstrip("/")
        self.default_locale = default_locale
        self.page_size = page_size
        self.clock = clock

    def reader(self, request: Request) -> _Reader:
        """The reader's locale, and links that keep an explicit ``?lang=``."""
        locale, explicit = negotiate(request.query_params.get("lang"),
                                     request.headers.get("accept-language"), self.default_locale)
        lang = locale if explicit else None
        kept = {k: v for k, v in request.query_params.items() if k in ("layer", "page")}

        def href(code: str) -> str:
            return request.url.path + "?" + urlencode(kept | {"lang": code})

        return _Reader(locale, lang, Chrome(self.link_type(lang=lang), langs=lang_switch(locale, href)))

    def html(self, body: str, reader: _Reader, status: int = 200, cache: str = "no-cache") -> Response:
        """An HTML response that says its language and what it varies on."""
        return HTMLResponse(body, status, headers={
            "content-language": content_language(reader.locale),
            "vary": "Accept-Language", "cache-control": cache,
        })

    async def index(self, request: Request) -> Response:
        """``/``: one page of the archive, optionally filtered by layer."""
        reader = self.reader(request)
        layer = request.query_params.get("layer") or None
        page = int_param(request, "page", 1, 1, MAX_PAGE)
        if layer is not None and layer not in BY_ID:
            raise HTTPException(400, f"unknown layer: {layer}")
        async with self.sessions() as session:
            found = await queries.list_digests(session, reader.locale, page=page,
                                               per_page=self.page_size, layer=layer)
        if page > found.pages:
            raise HTTPException(404)
        return self.html(self.pages.index(found, reader.locale, reader.chrome, layer), reader)

    async def digest(self, request: Request) -> Response:
        """``/d/YYYY-MM-DD``: the digest page; a GET counts one read."""
        date = parse_date(request.path_params["date"])
        if date is None:
            raise HTTPException(404)
        reader = self.reader(request)
        if request.method == "GET":
            async with self.sessions.begin() as session:  # short write: the count only
                if await queries.count_read(session, date) is None:
                    raise HTTPException(404)
        async with self.sessions() as session:
            try:
                view = await queries.load_view(session, date, reader.locale)
            except BuildError:
                raise HTTPException(404) from None
        return self.html(self.pages.digest(view, reader.chrome), reader, cache="no-store")

    async def event(self, request: Request) -> Response:
        """``/e/<id>``: an event that was shown in a digest."""
        reader = self.reader(request)
        async with self.sessions() as session:
            found = await queries.event_detail(session, request.path_params["event_id"], reader.locale)
        if found is None:
            raise HTTPException(404)
        return self.html(self.pages.event(found, reader.locale, reader.chrome), reader)

    async def feed(self, request: Request) -> Response:
        """``/feed.xml``: the latest digests as Atom (absolute links)."""
        reader = self.reader(request)
        async with self.sessions() as session:
            listed = await queries.list_digests(session, reader.locale, per_page=FEED_ENTRIES)
            views = [(await queries.load_view(session, d.date, reader.locale), d.built_at)
                     for d in listed.items]
        links = WebLinks(self.site_url, reader.lang)
        body = self.pages.feed(views, reader.locale, links, self.clock())
        return Response(body, media_type="application/atom+xml; charset=utf-8",
                        headers={"vary": "Accept-Language", "cache-control": "max-age=300"})

    async def css(self, request: Request) -> Response:
        """``/style.css``."""
        return Response(self.pages.css(), media_type="text/css; charset=utf-8",
                        headers={"cache-control": "max-age=3600"})

    async def favicon(self, request: Request) -> Response:
        """``/favicon.ico``: nothing (browsers ask; a 204 keeps logs quiet)."""
        return Response(status_code=204, headers={"cache-control": "max-age=86400"})

    async def healthz(self, request: Request) -> Response:
        """``/healthz``: 200 when the database answers, else 503."""
        try:
            async with self.sessions() as session:
                await queries.ping(session)
        except (SQLAlchemyError, OSError) as exc:
            log.warning("healthz: database unavailable: %s", exc)
            return JSONResponse({"status": "error", "error": "database unavailable"}, 503,
                                headers={"cache-control": "no-store"})
        return JSONResponse({"status": "ok"}, headers={"cache-control": "no-store"})

    async def error(self, request: Request, exc: Exception) -> Response:
        """Errors: JSON under ``/api/``, a small localised page elsewhere."""
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "error"
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": detail}, status, headers=getattr(exc, "headers", None))
        reader = self.reader(request)
        message = detail if status == 400 else None
        return self.html(self.pages.error(status, reader.locale, reader.chrome, message), reader, status)


def proxy_headers(trusted_proxies: Sequence[str]) -> list[Middleware]:
    """X-Forwarded-For/-Proto handling (uvicorn's), believed only from a peer in ``trusted_proxies``.

    The client is then the right-most address of X-Forwarded-For that is not itself a trusted
    proxy (each proxy appends the peer it saw, so anything left of that is the client's own say).
    With no trusted proxy the headers are ignored: the client is the peer of the connection.
    """
    if not trusted_proxies:
        return []
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    networks = [str(ipaddress.ip_network(p, strict=False)) for p in trusted_proxies]
    return [Middleware(ProxyHeadersMiddleware, trusted_hosts=networks)]


def create_app(sessions: SessionFactory, renderer: Renderer, *, site_url: str, default_locale: str,
               timezone: str, page_size: int = 20, clock: Clock | None = None,
               subscriptions: SubscriptionSetup | None = None,
               trusted_proxies: Sequence[str] = ()) -> Starlette:
    """The web archive app; every dependency is passed in (no settings are read here).

    With ``subscriptions`` (key, mail sender, limits) the email subscription pages are mounted too.
    ``trusted_proxies`` (IPs or networks) are the only peers whose X-Forwarded-For is believed.
    """
    now = clock or system_now
    pages = Pages(renderer, site_url=site_url, timezone=timezone)
    extra: list[Route] = []
    link_type = WebLinks
    if subscriptions is not None:
        extra = SubscriptionPages(sessions, renderer, subscriptions, site_url=site_url,
                                  default_locale=default_locale, clock=now).routes()
        link_type = SubscribeLinks
    web = WebPages(sessions, pages, site_url=site_url, default_locale=default_locale,
                   page_size=page_size, clock=now, link_type=link_type)
    api = JsonApi(sessions, renderer, site_url=site_url, default_locale=default_locale,
                  page_size=page_size, clock=now)
    routes = [
        Route("/", web.index), Route("/d/{date}", web.digest),
        Route("/e/{event_id:int}", web.event), Route("/feed.xml", web.feed),
        Route("/style.css", web.css), Route("/favicon.ico", web.favicon), Route("/healthz", web.healthz),
        *api.routes(), *extra,
    ]
    return Starlette(routes=routes, middleware=[*proxy_headers(trusted_proxies), Middleware(SecurityHeaders)],
                     exception_handlers={HTTPException: web.error})
