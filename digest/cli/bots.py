"""``digest bot PLATFORM``: run an installed chat bot (entry point group ``compiler_digest.bots``)."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from digest.domain.errors import UsageError

if TYPE_CHECKING:
    from digest.config import Settings

GROUP = "compiler_digest.bots"


def add_commands(sub: Any) -> None:
    """Register ``bot`` on the CLI."""
    bot = sub.add_parser("bot", help="run a chat bot in the foreground (long polling)")
    bot.add_argument("platform", metavar="PLATFORM",
                     help="telegram or discord (the bots installed as entry points of compiler_digest.bots)")
    bot.set_defaults(handler=bot_cmd)


async def bot_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """Run the bot registered under ``PLATFORM`` until SIGINT/SIGTERM; adapters receive the settings."""
    from importlib.metadata import entry_points  # slow to import: not for `digest --help`

    found = [ep for ep in entry_points(group=GROUP) if ep.name == args.platform]
    if not found:
        names = sorted(ep.name for ep in entry_points(group=GROUP))
        close = difflib.get_close_matches(args.platform, names, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise UsageError(f"no bot named {args.platform!r} is installed (installed: "
                         f"{', '.join(names) or 'none'}){hint}")
    run: Callable[[Settings], Coroutine[Any, Any, int]] = found[0].load()
    return await run(settings)
