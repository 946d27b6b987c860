"""Handlers of the web commands: ``serve`` (the service, or with ``--web`` the archive alone) and ``site``.

``digest serve`` runs :mod:`digest.service`: the web app, the bots whose token
is set and the daily schedule in one process, until SIGTERM or SIGINT (exit 0);
``--no-schedule`` and ``--no-bots`` leave parts out. Its log is one line per
event (JSON lines with DIGEST_LOG_JSON=1), every configured secret redacted.

The app and its uvicorn server are built by plain functions, so the service
(bots and the daily schedule in the same process) can run
``await make_server(app, host, port).serve(sockets=[listen_socket(host, port)])``
inside its own asyncio program. The socket is bound first, so a taken port
is one line and exit 1 before anything else happens; the server trusts no
forwarded header itself (the app does, from ``DIGEST_TRUSTED_PROXIES`` only)
and its log lines never carry a link token.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import logging
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from digest import bootstrap
from digest.domain.errors import DigestError, UsageError
from digest.domain.locales import LOCALES

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette

    from digest.config import Settings

OnServer = Callable[["uvicorn.Server"], None]


class ListenError(DigestError):
    """The web server cannot listen where it was told to (port taken, no such address, no permission)."""


def add_commands(sub: Any) -> None:
    """Register ``serve`` and ``site`` on the CLI."""
    serve = sub.add_parser("serve", help="run the service: web app, bots, daily schedule (--web: web alone)")
    serve.add_argument("--web", action="store_true", help="run the web app alone (no bots, no schedule)")
    serve.add_argument("--no-schedule", action="store_true", help="no daily schedule (nor catch-up)")
    serve.add_argument("--no-bots", action="store_true", help="leave the chat bots out")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    serve.set_defaults(handler=serve_cmd)

    site = sub.add_parser("site", help="write the archive as static files for plain hosting")
    site.add_argument("--out", type=Path, required=True, help="folder to write")
    site.add_argument("--locale", choices=LOCALES, default=None,
                      help="language (default: the first of DIGEST_LOCALES)")
    site.set_defaults(handler=site_cmd)


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (uvicorn listens on it), or ListenError in one line."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sock: socket.socket | None = None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restarts rebind at once
        sock.bind(address)
    except OSError as exc:
        if sock is not None:
            sock.close()
        reason = exc.strerror or str(exc)
        raise ListenError(f"cannot listen on {where}: {reason[:1].lower()}{reason[1:]}") from None
    return sock


def served_url(server: uvicorn.Server) -> str:
    """``http://host:port/`` of the first socket ``server`` listens on."""
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def log_config() -> dict[str, Any]:
    """uvicorn's own logging setup, with every line its handlers write redacted (no link tokens).

    The process's other handlers (the CLI's stderr) get the same filter, so no line of the
    web process carries a token whoever logs it.
    """
    from uvicorn.config import LOGGING_CONFIG

    from digest.web.app import RedactSecrets

    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactSecrets) for f in handler.filters):
            handler.addFilter(RedactSecrets())
    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"redact": {"()": RedactSecrets}}
    for handler_config in config["handlers"].values():
        handler_config["filters"] = ["redact"]
    return config


def make_server(app: Starlette, host: str, port: int, on_started: OnServer | None = None, *,
                in_service: bool = False) -> uvicorn.Server:
    """A uvicorn server for ``app``; ``on_started`` runs once it accepts connections.

    ``proxy_headers`` is off: uvicorn would otherwise believe X-Forwarded-For from any
    loopback peer; the app applies ``DIGEST_TRUSTED_PROXIES`` itself. ``in_service``: the
    service owns the signals and the log handlers (uvicorn's lines go to the root logger).
    """
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, telling ``on_started`` once it listens."""

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_started is not None:
                on_started(self)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if in_service:
                yield
                return
            with super().capture_signals():
                yield

    config = uvicorn.Config(app, host=host, port=port, proxy_headers=False, server_header=False,
                            log_config=None if in_service else log_config(), log_level="info",
                            access_log=True)
    return Server(config)


async def run_web(settings: Settings, host: str, port: int, on_server: OnServer | None = None,
                  on_started: OnServer | None = None) -> None:
    """Bind ``host:port`` (ListenError if it cannot), open (and migrate) the database, serve until stopped."""
    sock = listen_socket(host, port)
    try:
        async with bootstrap.database(settings) as sessions:
            server = make_server(bootstrap.web_app(settings, sessions), host, port, on_started)
            if on_server is not None:
                on_server(server)
            bootstrap.settle_heap()
            await server.serve(sockets=[sock])
    finally:
        sock.close()


async def serve_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest serve --web [--host H] [--port P]``: says it is serving only once it is."""
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port: {args.port} is not a port number (0-65535)")

    def announce(server: uvicorn.Server) -> None:
        print(f"digest: serving the web archive on {served_url(server)}", file=sys.stderr, flush=True)

    if args.web:
        await run_web(settings, args.host, args.port, on_started=announce)
    else:
        await run_service(settings, args, announce)
    return 0


async def run_service(settings: Settings, args: argparse.Namespace, on_started: OnServer) -> None:
    """The web app, the bots and the schedule until SIGTERM/SIGINT (digest.service)."""
    from digest import logs, metrics
    from digest.service import until_signal
    from digest.web.app import RedactSecrets

    redact = logs.configure(bootstrap.secrets(settings), json_lines=settings.log_json,
                            level=logging.DEBUG if args.verbose > 1 else logging.INFO)
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactSecrets())  # link tokens in request lines, besides the configured secrets
    sock = listen_socket(args.host, args.port)
    stop, counts = asyncio.Event(), metrics.Metrics()
    metrics.use(counts)
    await until_signal(stop)
    try:
        async with bootstrap.database(settings) as sessions:
            parts = [] if args.no_bots else bootstrap.bots(settings)
            service = bootstrap.service(settings, sessions, stop, parts, scheduled=not args.no_schedule)
            app = bootstrap.web_app(settings, sessions, next_run=service.due, metrics=counts)
            server = make_server(app, args.host, args.port, on_started, in_service=True)
            service.parts = [("web", lambda stop: serve_until(server, sock, stop)), *parts]
            logging.getLogger("digest.service").info(
                "service starting: web, %s, schedule %s", ", ".join(n for n, _ in parts) or "no bots",
                "off" if args.no_schedule else redact.clean(settings.schedule))
            bootstrap.settle_heap()
            await service.run()
    finally:
        sock.close()


async def serve_until(server: uvicorn.Server, sock: socket.socket, stop: asyncio.Event) -> None:
    """Serve on ``sock`` until ``stop`` is set (or the server ends by itself), then shut down."""
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait([serving, stopped], return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    server.should_exit = True
    await serving


async def site_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest site --out DIR [--locale zh|en]``."""
    from digest.web.site import export_site

    locale = args.locale or settings.locales[0]
    async with bootstrap.database(settings) as sessions:
        report = await export_site(sessions, bootstrap.renderer(settings), Path(args.out), locale=locale,
                                   site_url=settings.site_url, timezone=settings.timezone,
                                   now=bootstrap.clock(settings)())
    print(f"{report.out}: {report.files} files ({report.digests} digests, {report.events} events)")
    return 0
