"""Run a bot as its own process: ``digest bot telegram`` loads :func:`run_telegram` by entry point.

The core CLI never imports ``bot``: it finds ``run_telegram`` in the entry-point
group ``compiler_digest.bots`` and awaits it with the loaded settings.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import TYPE_CHECKING

from digest import bootstrap
from digest.domain.errors import ConfigError, DigestError

if TYPE_CHECKING:
    from digest.config import Settings

log = logging.getLogger(__name__)


async def until_signalled() -> None:
    """Return on SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def run_telegram(settings: Settings, *, stop: asyncio.Event | None = None) -> int:
    """Poll Telegram and answer commands until SIGINT or SIGTERM (or ``stop``); the exit code.

    With DIGEST_TELEGRAM_WEBHOOK_URL the web app receives the updates and nothing polls: in the
    service (``stop`` given) this part has nothing to do; alone (``digest bot telegram``) it is an error.
    """
    from bot.telegram_bot import build_application, running, token_of

    token_of(settings)  # a missing token is a one-line error before the database is opened
    if settings.telegram_webhook_url:
        if stop is None:
            raise ConfigError("DIGEST_TELEGRAM_WEBHOOK_URL is set: the web app (digest serve) receives "
                              "Telegram's updates; unset it to poll with `digest bot telegram`")
        log.info("telegram bot: webhook mode, the web app receives the updates (no polling)")
        return 0
    async with bootstrap.database(settings) as sessions:
        app = build_application(settings, sessions, clock=settings.clock)
        async with running(app):
            if stop is None:  # alone: its own long run (inside `digest serve` the service did it)
                bootstrap.settle_heap()
            log.warning("telegram bot @%s polling; stop with Ctrl-C", app.bot.username)
            await (stop.wait() if stop is not None else until_signalled())
    return 0


async def run_discord(settings: Settings, *, stop: asyncio.Event | None = None) -> int:
    """Answer Discord's application commands until SIGINT or SIGTERM (or ``stop``); the exit code."""
    from bot.discord_bot import build_bot, login, token_of  # discord.py is heavy: not for `digest --help`

    token = token_of(settings)  # a missing token is a one-line error before the database is opened
    async with bootstrap.database(settings) as sessions:
        bot = build_bot(settings, sessions, clock=settings.clock)
        try:
            await login(bot, token)
            gateway = asyncio.create_task(bot.connect(reconnect=True))
            waiting = asyncio.create_task(stop.wait() if stop is not None else until_signalled())
            await asyncio.wait({gateway, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
        finally:
            await bot.close()
        failed = gateway.exception() if gateway.done() else None
        if failed is not None:
            raise DigestError(f"the Discord gateway failed: {failed}".replace(token, "<token>"))
    return 0
