"""Webhooks: routes that a chat platform posts its updates to, contributed by adapters through an entry point.

The core never imports ``bot``: :func:`load_webhooks` asks each entry point of
the group ``compiler_digest.webhooks`` (``telegram = bot.telegram_bot:create_webhook``)
for a :class:`Webhook`, handing it the settings (an adapter receives them, as
the channels do) and the database; one that is not configured answers None.
:func:`mount_webhooks` adds their routes to the web app and starts and stops
them with it (its lifespan: the adapter registers its URL with the platform at
start, e.g. Telegram's ``setWebhook``).

    POST <path>  ─► the secret header?  no: 403, the body unread
                 ─► at most MAX_UPDATE_BYTES?  no: 413
                 ─► a JSON object?  no: 400
                 ─► Webhook.handle(update)  (ValueError: 400) ─► 200

A webhook whose start failed (the platform unreachable, the token refused) is
one log line; the web app serves on and that route answers 503, so the
platform keeps the update and tries again later.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from importlib.metadata import entry_points
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from digest.domain.errors import ConfigError
from digest.store.db import SessionFactory

log = logging.getLogger(__name__)
GROUP = "compiler_digest.webhooks"
MAX_UPDATE_BYTES = 1 << 20  # a Telegram update is a few KB; anything near this is not one


class Webhook(Protocol):
    """One platform's webhook, as an adapter makes it."""

    name: str  # the platform, for log lines
    path: str  # the route, from the configured URL
    header: str  # the request header that carries ``secret``
    secret: str

    async def start(self) -> None:
        """Get ready to handle updates and register the URL with the platform."""
        ...

    async def stop(self) -> None:
        """Finish the updates handed over, then close (the URL stays registered)."""
        ...

    async def handle(self, update: dict[str, Any]) -> None:
        """Take one update; ValueError when it is not one the platform would send."""
        ...


def load_webhooks(settings: object, sessions: SessionFactory) -> list[Webhook]:
    """The configured webhooks of the installed adapters (none when no webhook URL is set)."""
    hooks: list[Webhook] = []
    for point in sorted(entry_points(group=GROUP), key=lambda p: p.name):
        made = point.load()(settings, sessions)
        if made is not None:
            hooks.append(made)
    return hooks


def _json_error(status: int, error: str) -> Response:
    return JSONResponse({"error": error}, status, headers={"cache-control": "no-store"})


async def read_body(request: Request, limit: int) -> bytes | None:
    """The request body, or None when it is (or says it is) over ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdecimal() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def parse_update(body: bytes) -> dict[str, Any] | None:
    """The JSON object in ``body``, or None (not UTF-8, not JSON, nested too deep, not an object)."""
    try:
        update = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return update if isinstance(update, dict) else None


class WebhookRoutes:
    """The POST route of each webhook, and their start and stop."""

    def __init__(self, hooks: Sequence[Webhook], *, max_bytes: int = MAX_UPDATE_BYTES) -> None:
        paths = [hook.path for hook in hooks]
        if len(set(paths)) != len(paths):
            raise ConfigError(f"two webhooks share one path: {', '.join(sorted(paths))}")
        self.hooks = tuple(hooks)
        self.max_bytes = max_bytes
        self.live: set[str] = set()  # the paths whose webhook started

    def routes(self) -> list[Route]:
        """One ``POST`` route per webhook."""
        return [Route(hook.path, self._endpoint(hook), methods=["POST"], name=f"webhook-{hook.name}")
                for hook in self.hooks]

    def _endpoint(self, hook: Webhook) -> Any:
        async def endpoint(request: Request) -> Response:
            return await self.receive(hook, request)

        return endpoint

    async def receive(self, hook: Webhook, request: Request) -> Response:
        """One POST from the platform (or from anyone: only the secret tells)."""
        given = request.headers.get(hook.header, "").encode("utf-8", "replace")
        if not hmac.compare_digest(given, hook.secret.encode()):
            return _json_error(403, "wrong secret token")
        if hook.path not in self.live:
            return _json_error(503, "not ready")
        body = await read_body(request, self.max_bytes)
        if body is None:
            return _json_error(413, "update too large")
        update = parse_update(body)
        if update is None:
            return _json_error(400, "not a JSON object")
        try:
            await hook.handle(update)
        except ValueError as exc:
            return _json_error(400, str(exc) or "not an update")
        return Response(status_code=200)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Start every webhook (one that fails is logged and answers 503), stop them on the way out."""
        async with AsyncExitStack() as stack:
            for hook in self.hooks:
                try:
                    await hook.start()
                except Exception as exc:  # the platform down must not keep the archive from serving
                    log.error("%s webhook not started: %s", hook.name, exc)
                    continue
                stack.push_async_callback(self._stop, hook)
                self.live.add(hook.path)
            yield

    async def _stop(self, hook: Webhook) -> None:
        self.live.discard(hook.path)
        try:
            await hook.stop()
        except Exception as exc:
            log.error("%s webhook did not stop cleanly: %s", hook.name, exc)


def mount_webhooks(app: Starlette, hooks: Sequence[Webhook]) -> Starlette:
    """``app`` with the routes of ``hooks``, which start and stop with it (its lifespan); ``app`` itself."""
    if not hooks:
        return app
    webhooks = WebhookRoutes(hooks)
    taken = {getattr(route, "path", None) for route in app.router.routes}
    for hook in hooks:
        if hook.path in taken:
            raise ConfigError(f"the {hook.name} webhook path {hook.path} is a page of the web app already")
    app.router.routes.extend(webhooks.routes())
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[Any]:
        async with inner(app) as state, webhooks.running():
            yield state

    app.router.lifespan_context = lifespan
    return app
