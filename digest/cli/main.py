"""The ``digest`` command line (also ``python -m digest``).

Machine output goes to stdout, logs and progress to stderr. Exit codes: 0 on
success, 2 on bad usage, 1 on failure with a one-line reason.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from digest import __version__
from digest.config import Settings, load_settings
from digest.domain.errors import DigestError, UsageError

Handler = Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]



def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    from digest.cli import ingest as commands

    parser = argparse.ArgumentParser(prog="digest", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"compiler-digest {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    db = sub.add_parser("db", help="database maintenance")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    db_sub.add_parser("upgrade", help="apply migrations up to head").set_defaults(
        handler=commands.db_upgrade
    )

    fetch = sub.add_parser("fetch", help="fetch every enabled source and store new entries")
    fetch.add_argument("--json", action="store_true", help="print a JSON array, one object per source")
    fetch.set_defaults(handler=commands.fetch)

    sources = sub.add_parser("sources", help="the configured sources")
    src_sub = sources.add_subparsers(dest="sources_command", required=True, metavar="ACTION")
    src_list = src_sub.add_parser("list", help="each source, its last outcome and failure run")
    src_list.add_argument("--json", action="store_true")
    src_list.set_defaults(handler=commands.sources_list)
    src_check = src_sub.add_parser("check", help="fetch each source once; store nothing")
    src_check.add_argument("--json", action="store_true")
    src_check.set_defaults(handler=commands.sources_check)

    samples = sub.add_parser("samples", help="write the bundled offline sample feeds")
    samples.add_argument("--out", default="var/samples", help="folder to write (default var/samples)")
    samples.set_defaults(handler=commands.samples)

    run = sub.add_parser("run", help="the daily job: fetch, build and publish the latest closed window")
    run.add_argument("--json", action="store_true", help="print the fetch results as JSON")
    run.set_defaults(handler=commands.run)

    from digest.cli import digests as cmd_digest

    cmd_digest.add_commands(sub, _date)

    from digest.cli import publish as cmd_publish

    cmd_publish.add_commands(sub, _date)

    from digest.cli import subscribers as cmd_subscribers

    cmd_subscribers.add_commands(sub)

    from digest.cli import web as cmd_web

    cmd_web.add_commands(sub)

    bot = sub.add_parser("bot", help="run a chat bot in the foreground (long polling)")
    bot.add_argument("platform", metavar="PLATFORM", help="telegram (installed bots are entry points)")
    bot.set_defaults(handler=bot_cmd)
    return parser


async def bot_cmd(settings: Settings, args: argparse.Namespace) -> int:
    """``digest bot PLATFORM``: run the bot registered under that entry point until SIGINT/SIGTERM."""
    from importlib.metadata import entry_points

    group = "compiler_digest.bots"
    found = [ep for ep in entry_points(group=group) if ep.name == args.platform]
    if not found:
        known = ", ".join(sorted(ep.name for ep in entry_points(group=group))) or "none"
        raise UsageError(f"no bot named {args.platform!r} is installed (installed: {known})")
    run: Callable[[Settings], Coroutine[Any, Any, int]] = found[0].load()
    return await run(settings)


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    handler: Handler = args.handler
    try:
        settings = load_settings()
        return asyncio.run(handler(settings, args))
    except UsageError as exc:
        print(f"digest: {exc}", file=sys.stderr)
        return 2
    except DigestError as exc:
        print(f"digest: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("digest: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `digest fetch --json | head`: the reader left
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def print_json(data: Any) -> None:
    """Machine output: JSON on stdout."""
    json.dump(data, sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")
