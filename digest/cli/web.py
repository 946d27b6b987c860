"""Handlers of the web commands: ``serve`` (the web archive) and ``site`` (static export).

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
import copy
import logging
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from digest import bootstrap
from digest.config import Settings
from digest.domain.errors import DigestError, UsageError
from digest.domain.locales import LOCALES

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette

OnServer = Callable[["uvicorn.Server"], None]


class ListenError(DigestError):
    """The web server cannot listen where it was told to (port taken, no such address, no permission)."""


def add_commands(sub: Any) -> None:
    """Register ``serve`` and ``site`` on the CLI."""
    serve = sub.add_parser("serve", help="run the web archive (with --web: the web app alone)")
    serve.add_argument("--web", action="store_true",
                       help="run the web app alone (today the only part; bots and the schedule come later)")
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


def make_server(app: Starlette, host: str, port: int, on_started: OnServer | None = None) -> uvicorn.Server:
    """A uvicorn server for ``app``; ``on_started`` runs once it accepts connections.

    ``proxy_headers`` is off: uvicorn would otherwise believe X-Forwarded-For from any
    loopback peer; the app applies ``DIGEST_TRUSTED_PROXIES`` itself.
    """
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, telling ``on_started`` once it listens."""

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_started is not None:
                on_started(self)

    config = uvicorn.Config(app, host=host, port=port, proxy_headers=False, server_header=False,
                            log_config=log_config(), log_level="info", access_log=True)
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
            await server.serve(sockets=[sock])
    finally:
        sock.close()


async def serve_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest serve --web [--host H] [--port P]``: says it is serving only once it is."""
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port: {args.port} is not a port number (0-65535)")

    def announce(server: uvicorn.Server) -> None:
        print(f"digest: serving the web archive on {served_url(server)}", file=sys.stderr, flush=True)

    await run_web(settings, args.host, args.port, on_started=announce)
    return 0


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
