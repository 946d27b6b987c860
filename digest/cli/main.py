"""The ``digest`` command line (also ``python -m digest``).

Machine output goes to stdout, logs and progress to stderr. Exit codes: 0 on
success, 2 on bad usage, 1 on failure with a one-line reason, 130 when interrupted.
A mistyped command or option gets the closest one; an error in a subcommand
shows that subcommand's usage.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import logging
import os
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from digest import __version__
from digest.cli import (
    bots,
    delete,
    digests,
    ingest,
    mail,
    publish,
    report,
    run,
    sources,
    status,
    subscribers,
    web,
)
from digest.domain.errors import DigestError, UsageError

if TYPE_CHECKING:
    from digest.config import Settings

Handler = Callable[["Settings", argparse.Namespace], Coroutine[Any, Any, int]]
# the order of `digest --help`
GROUPS = (ingest, sources, run, report, digests, delete, publish, mail, subscribers, web, bots, status)
DESCRIPTION = "compiler-digest: fetch compiler news, build the daily digest, publish and serve it."
EPILOG = ("exit codes: 0 success, 1 failure (one line on stderr), 2 bad usage, 130 interrupted. "
          "Run 'digest COMMAND --help' for a command's options.")
_CHOICE = re.compile(r"invalid choice: '(?P<word>[^']*)' \(choose from (?P<choices>.*)\)")


class Parser(argparse.ArgumentParser):
    """argparse with a "did you mean" hint for a mistyped choice (exit 2, as every usage error)."""

    def error(self, message: str) -> NoReturn:
        """Usage, the one-line error, and the closest choice when a word was mistyped."""
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}{_did_you_mean(message)}\n")


class SubParser(Parser):
    """A subcommand's parser: an unknown option is its own error, shown with its own usage."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # argparse's overloads
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{_close_option(self, extras[0])}")
        return namespace, extras


def _did_you_mean(message: str) -> str:
    found = _CHOICE.search(message)
    if not found:
        return ""
    choices = re.findall(r"'([^']*)'", found["choices"])
    close = difflib.get_close_matches(found["word"], choices, n=1)
    return f"; did you mean {close[0]}?" if close else ""


def _close_option(parser: argparse.ArgumentParser, word: str) -> str:
    options = [o for action in parser._actions for o in action.option_strings]
    close = difflib.get_close_matches(word.split("=")[0], options, n=1)
    return f"; did you mean {close[0]}?" if close else ""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command group's subcommands."""
    parser = Parser(prog="digest", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"compiler-digest {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=SubParser)
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
        from digest.config import load_settings  # pydantic-settings: not for `digest --help`

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
    except Exception as exc:
        if not _is_database_error(exc):
            raise  # a bug: the traceback is what a report needs
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"digest: error: database: {first[:300]}", file=sys.stderr)
        return 1


def _is_database_error(exc: BaseException) -> bool:
    """An error from the database or the way to it (SQLAlchemy, the driver, a refused connection).

    Checked by module name so that ``digest --help`` never imports SQLAlchemy.
    """
    module = type(exc).__module__
    return (module.split(".")[0] in {"sqlalchemy", "asyncpg", "sqlite3", "aiosqlite"}
            or isinstance(exc, ConnectionError | TimeoutError))
