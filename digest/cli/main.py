"""The ``digest`` command line (also ``python -m digest``).

Machine output goes to stdout, logs and progress to stderr. Exit codes: 0 on
success, 2 on bad usage, 1 on failure with a one-line reason, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from digest import __version__
from digest.cli import bots, digests, ingest, publish, run, subscribers, web
from digest.config import Settings, load_settings
from digest.domain.errors import DigestError, UsageError

Handler = Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]
GROUPS = (ingest, run, digests, publish, subscribers, web, bots)  # the order of `digest --help`


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command group's subcommands."""
    parser = argparse.ArgumentParser(prog="digest", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"compiler-digest {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.add_commands(sub)
    return parser


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
