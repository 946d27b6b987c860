"""The web archive: an ASGI app (Starlette) over the stored digests.

Routes (the JSON API is in :mod:`digest.web.api`, documented at ``/api/openapi.json``)::

    GET /                 archive index, newest first (?page=, ?layer=)
    GET /d/YYYY-MM-DD     a digest page; a browser's GET counts one read (digest.web.reads)
    GET /e/<id>           an event: score breakdown, every source, the digests that showed it
    GET /feed.xml         Atom feed of the latest digests (?layer=: of one layer's; 400 on an unknown layer)
    GET /robots.txt, /sitemap.xml   for crawlers (digest.web.meta): the sitemap lists listed digests only
    GET /style.css        the only stylesheet (there are no scripts)
    GET /healthz          200 JSON when the database answers (with the last daily run and the next), else 503
    GET /metrics          the digest_* metrics, Prometheus text (digest.metrics)
    /subscribe, /confirm, /unsubscribe, /preferences   the email subscription (digest.web.subscribe)

Language: ``?lang=zh|en``, else Accept-Language (q-values), else the default (:mod:`digest.web.locale`).
Everything shown comes from feeds or an LLM: templates autoescape, only http(s)
links survive, and the Content-Security-Policy allows no script at all.
Each request owns its transaction; query helpers never commit. Every integer
query parameter is read by :func:`digest.web.api.int_param` (ASCII digits in a
range, else a 400). The client is the connection's peer; X-Forwarded-For counts
only from a trusted proxy (:func:`proxy_headers`). Link tokens never reach a log
line (:class:`RedactSecrets`).

Built pages (a digest, the index, an event, ``/api/events``) are rendered once per
stamp of their data and served from :class:`digest.web.cache.PageCache` with an
ETag (304 on If-None-Match); read counts are tallied in memory and stored by the
app's lifespan task (:class:`digest.web.reads.ReadCounts`); bodies over 1 KB are
gzipped when the client accepts it: a cached page once, with its body (:class:`digest.web.cache.Gzipped`),
anything else per response by the gzip middleware.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from urllib.parse import unquote_plus, urlencode

from sqlalchemy.exc import SQLAlchemyError
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from digest import metrics as counters
from digest.domain.clock import system_now
from digest.domain.errors import BuildError
from digest.domain.layers import BY_ID
from digest.render.renderer import Renderer
from digest.store import queries
from digest.store.db import SessionFactory
from digest.store.reports import latest_report
from digest.web.api import MAX_PAGE, JsonApi, int_param, parse_date
from digest.web.cache import GZIP_LEVEL, GZIP_OVER, HTML, Cached, PageCache, respond
from digest.web.locale import content_language, negotiate
from digest.web.meta import Discussion, MetaRoutes
from digest.web.pages import Chrome, Pages, WebLinks, lang_switch
from digest.web.reads import ReadCounts, archive_stamp, digest_stamp
from digest.web.search import SearchPages
from digest.web.subscribe import SubscribeLinks, SubscriptionPages, SubscriptionSetup

log = logging.getLogger(__name__)
Clock = Callable[[], dt.datetime]
NextRun = Callable[[], dt.datetime | None]
FEED_ENTRIES = 20
NO_STORE = {"cache-control": "no-store"}

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


class CompressPublic:
    """Gzip bodies over a kilobyte for clients that accept it, except on pages that carry secrets.

    The subscription pages hold form and link tokens next to what the client sent: compressing
    them would let a watcher of sizes guess a token (BREACH), and they are small anyway.
    """

    def __init__(self, app: ASGIApp, secret_paths: frozenset[str] = frozenset()) -> None:
        self.plain = app
        self.zipped = GZipMiddleware(app, minimum_size=GZIP_OVER, compresslevel=GZIP_LEVEL)
        self.secret_paths = secret_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass through gzip unless the path is a secret one."""
        plain = scope["type"] != "http" or scope["path"] in self.secret_paths
        await (self.plain if plain else self.zipped)(scope, receive, send)


@dataclass(frozen=True)
class _Reader:
    """Who is asking: their locale, whether they chose it (``?lang=``), and their page chrome."""

    locale: str
    lang: str | None
    chrome: Chrome


class WebPages:
    """The HTML routes; holds its dependencies, no globals."""

    def __init__(self, sessions: SessionFactory, pages: Pages, *, site_url: str, default_locale: str,
                 page_size: int, clock: Clock, link_type: type[WebLinks] = WebLinks,
                 next_run: NextRun | None = None, metrics: counters.Metrics | None = None,
                 cache: PageCache, reads: ReadCounts, discussion: Discussion | None = None) -> None:
        self.sessions = sessions
        self.discussion = discussion or Discussion()
        self.cache = cache
        self.reads = reads
        self.link_type = link_type
        self.pages = pages
        self.site_url = site_url.rstrip("/")
        self.default_locale = default_locale
        self.page_size = page_size
        self.clock = clock
        self.next_run = next_run or (lambda: None)
        self.metrics = metrics

    def reader(self, request: Request) -> _Reader:
        """The reader's locale, and links that keep an explicit ``?lang=``."""
        locale, explicit = negotiate(request.query_params.get("lang"),
                                     request.headers.get("accept-language"), self.default_locale)
        lang = locale if explicit else None
        kept = {k: v for k, v in request.query_params.items() if k in ("layer", "page")}

        def href(code: str) -> str:
            return request.url.path + "?" + urlencode(kept | {"lang": code})

        return _Reader(locale, lang, Chrome(self.link_type(lang=lang), langs=lang_switch(locale, href)))

    @staticmethod
    def headers(reader: _Reader) -> dict[str, str]:
        """What an HTML page says of itself: its language, what it varies on, revalidate before reuse."""
        return {"content-language": content_language(reader.locale), "vary": "Accept-Language",
                "cache-control": "no-cache"}

    def html(self, body: str, reader: _Reader, status: int = 200) -> Response:
        """An HTML response (an error page: never cached here)."""
        return HTMLResponse(body, status, headers=self.headers(reader))

    async def index(self, request: Request) -> Response:
        """``/``: one page of the archive, optionally filtered by layer."""
        reader = self.reader(request)
        layer = request.query_params.get("layer") or None
        page = int_param(request, "page", 1, 1, MAX_PAGE)
        if layer is not None and layer not in BY_ID:
            raise HTTPException(400, f"unknown layer: {layer}")
        stamp = await archive_stamp(self.sessions)

        async def make() -> Cached:
            async with self.sessions() as session:
                found = await queries.list_digests(session, reader.locale, page=page,
                                                   per_page=self.page_size, layer=layer)
            if page > found.pages:
                raise HTTPException(404)
            body = self.pages.index(found, reader.locale, reader.chrome, layer)
            return Cached.of(body, HTML, stamp.changed(self.clock()))

        found = await self.cache.get(("index", reader, layer, page, self.page_size, stamp), make)
        return respond(request, found, self.headers(reader))

    async def digest(self, request: Request) -> Response:
        """``/d/YYYY-MM-DD``: the digest page, rendered once per build; a browser's GET counts one read."""
        date = parse_date(request.path_params["date"])
        if date is None:
            raise HTTPException(404)
        reader = self.reader(request)
        stamp = await digest_stamp(self.sessions, date)
        if stamp is None:
            raise HTTPException(404)
        self.reads.record(date, request.client.host if request.client else "", request.method,
                          request.headers.get("user-agent"))
        talk = await self.discussion.links(self.sessions, date)  # a day's thread comes after its build

        async def make() -> Cached:
            async with self.sessions() as session:
                try:
                    view = await queries.load_view(session, date, reader.locale, listed_only=True)
                except BuildError:
                    raise HTTPException(404) from None
            body = self.pages.digest(view, replace(reader.chrome, reads_slot=True), talk)
            return Cached.of(body, HTML, stamp.built_at)

        found = await self.cache.get(("digest", reader, date, stamp.built_at, talk), make)
        return respond(request, found, self.headers(reader), reads=self.reads.shown(date, stamp.read_count))

    async def event(self, request: Request) -> Response:
        """``/e/<id>``: an event that was shown in a digest."""
        reader, event_id = self.reader(request), request.path_params["event_id"]
        if not 0 < event_id <= queries.MAX_INT32:
            raise HTTPException(404)
        stamp = await archive_stamp(self.sessions, event_id=event_id)
        if stamp.count == 0:  # shown in no listed digest
            raise HTTPException(404)

        async def make() -> Cached:
            async with self.sessions() as session:
                found = await queries.event_detail(session, event_id, reader.locale)
            if found is None:
                raise HTTPException(404)
            body = self.pages.event(found, reader.locale, reader.chrome)
            return Cached.of(body, HTML, stamp.changed(self.clock()))

        found = await self.cache.get(("event", reader, event_id, stamp), make)
        return respond(request, found, self.headers(reader))

    async def feed(self, request: Request) -> Response:
        """``/feed.xml``: the latest digests as Atom (absolute links); ``?layer=``: of one layer."""
        reader = self.reader(request)
        layer = request.query_params.get("layer") or None
        if layer is not None and layer not in BY_ID:
            raise HTTPException(400, f"unknown layer: {layer}")
        async with self.sessions() as session:
            listed = await queries.list_digests(session, reader.locale, per_page=FEED_ENTRIES, layer=layer)
            views = [(await queries.load_view(session, d.date, reader.locale), d.built_at)
                     for d in listed.items]
        links = WebLinks(self.site_url, reader.lang)
        body = self.pages.feed(views, reader.locale, links, self.clock(), layer)
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
        """``/healthz``: 200 with the last daily run and the next scheduled one when the database answers."""
        try:
            async with self.sessions() as session:
                await queries.ping(session)
                last = await latest_report(session)
        except (SQLAlchemyError, OSError) as exc:
            log.warning("healthz: database unavailable: %s", exc)
            data = {"status": "error", "database": "unavailable", "error": "database unavailable"}
            return JSONResponse(data, 503, headers=NO_STORE)
        due = self.next_run()
        run = None if last is None else {
            "date": last.date.isoformat(), "trigger": last.trigger, "ok": last.ok,
            "started_at": last.started_at.isoformat(), "finished_at": last.finished_at.isoformat()}
        return JSONResponse({"status": "ok", "database": "ok", "last_run": run,
                             "next_run": due.isoformat() if due else None}, headers=NO_STORE)

    async def prometheus(self, request: Request) -> Response:
        """``/metrics``: the process's digest_* metrics as Prometheus text."""
        found = self.metrics or counters.active()
        return Response(found.text(), headers={"content-type": counters.CONTENT_TYPE, **NO_STORE})

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
               trusted_proxies: Sequence[str] = (), next_run: NextRun | None = None,
               metrics: counters.Metrics | None = None, cache: PageCache | None = None,
               reads: ReadCounts | None = None, discussion: Discussion | None = None) -> Starlette:
    """The web archive app; every dependency is passed in (no settings are read here).

    With ``subscriptions`` (key, mail sender, limits) the email subscription pages are mounted too.
    ``trusted_proxies`` (IPs or networks) are the only peers whose X-Forwarded-For is believed.
    ``next_run`` says when the service runs the daily job next (/healthz); ``metrics`` are the
    process's (/metrics; default: :func:`digest.metrics.active`). ``cache`` (rendered pages) and
    ``reads`` (the read tally, stored by the app's lifespan) are made here unless given.
    ``discussion`` says where digests are discussed (the digest page's "Comments" links).
    """
    now = clock or system_now
    cache, reads = cache or PageCache(), reads or ReadCounts(sessions, now)
    pages = Pages(renderer, site_url=site_url, timezone=timezone)
    extra: list[Route] = []
    link_type = WebLinks
    if subscriptions is not None:
        extra = SubscriptionPages(sessions, renderer, subscriptions, site_url=site_url,
                                  default_locale=default_locale, clock=now).routes()
        link_type = SubscribeLinks
    web = WebPages(sessions, pages, site_url=site_url, default_locale=default_locale,
                   page_size=page_size, clock=now, link_type=link_type, next_run=next_run, metrics=metrics,
                   cache=cache, reads=reads, discussion=discussion)
    api = JsonApi(sessions, renderer, site_url=site_url, default_locale=default_locale,
                  page_size=page_size, clock=now, cache=cache)
    routes = [
        Route("/", web.index), Route("/d/{date}", web.digest),
        Route("/e/{event_id:int}", web.event), Route("/feed.xml", web.feed),
        Route("/style.css", web.css), Route("/favicon.ico", web.favicon), Route("/healthz", web.healthz),
        Route("/metrics", web.prometheus),
        *api.routes(), *extra, *SearchPages(web).routes(),
        *MetaRoutes(sessions, WebLinks(site_url.rstrip("/")), site_url).routes(),
    ]
    middleware = [*proxy_headers(trusted_proxies), Middleware(SecurityHeaders),
                  Middleware(CompressPublic, secret_paths=frozenset(route.path for route in extra))]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with reads.running():  # store the read tally every few seconds and on shutdown
            yield

    return Starlette(routes=routes, middleware=middleware, exception_handlers={HTTPException: web.error},
                     lifespan=lifespan)
