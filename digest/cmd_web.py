"""Handlers of the web commands: ``serve`` (the web archive) and ``site`` (static export).

The app and its uvicorn server are built by plain functions, so the service
(bots and the daily schedule in the same process) can run
``await make_server(app, host, port).serve()`` inside its own asyncio program.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from digest.config import LOCALES, Settings
from digest.db import SessionFactory, open_database
from digest.errors import UsageError

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette


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


def make_app(settings: Settings, sessions: SessionFactory) -> Starlette:
    """The web app wired from settings (the one place settings meet the app)."""
    from digest.confirm_mail import one_shot
    from digest.mailer import MailIdentity, create_channel
    from digest.render import Renderer
    from digest.web import create_app
    from digest.web_subscribe import SubscriptionSetup

    renderer = Renderer(site_url=settings.site_url, timezone=settings.timezone)
    mail = SubscriptionSetup(
        secret=settings.secret(),
        identity=MailIdentity.from_settings(settings.mail_from, settings.unsubscribe_mailto),
        send_mail=one_shot(lambda: create_channel(settings)),  # the newsletters' channel, one per mail
    )
    return create_app(sessions, renderer, site_url=settings.site_url, default_locale=settings.locales[0],
                      timezone=settings.timezone, subscriptions=mail)


def make_server(app: Starlette, host: str, port: int) -> uvicorn.Server:
    """A uvicorn server for ``app``; ``await server.serve()`` runs it in the current event loop."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, proxy_headers=True, server_header=False,
                            log_level="info", access_log=True)
    return uvicorn.Server(config)


async def run_web(settings: Settings, host: str, port: int,
                  on_server: Callable[[uvicorn.Server], None] | None = None) -> None:
    """Open (and migrate) the database, then serve the web app until stopped."""
    async with open_database(settings.database_url) as sessions:
        server = make_server(make_app(settings, sessions), host, port)
        if on_server is not None:
            on_server(server)
        await server.serve()


async def serve_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest serve --web [--host H] [--port P]``."""
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port: {args.port} is not a port number (0-65535)")
    print(f"digest: serving the web archive on http://{args.host}:{args.port}/", file=sys.stderr)
    await run_web(settings, args.host, args.port)
    return 0


async def site_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest site --out DIR [--locale zh|en]``."""
    from digest.render import Renderer
    from digest.site import export_site

    locale = args.locale or settings.locales[0]
    renderer = Renderer(site_url=settings.site_url, timezone=settings.timezone)
    async with open_database(settings.database_url) as sessions:
        report = await export_site(sessions, renderer, Path(args.out), locale=locale,
                                   site_url=settings.site_url, timezone=settings.timezone,
                                   now=dt.datetime.now(dt.UTC))
    print(f"{report.out}: {report.files} files ({report.digests} digests, {report.events} events)")
    return 0
