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
from importlib import import_module
from typing import TYPE_CHECKING, Any, NoReturn

from digest import __version__, bootstrap
from digest.domain.errors import DigestError, UsageError

if TYPE_CHECKING:
    from digest.config import Settings

Handler = Callable[["Settings", argparse.Namespace], Coroutine[Any, Any, int]]
# Each command group (a module of digest.cli) and the commands it adds, in the order of `digest --help`.
# A command line builds its own group's parser alone: the other eleven groups' modules, and the
# thirty-odd parsers they would build, are left out (10 ms of `digest status`).
GROUPS: dict[str, tuple[str, ...]] = {
    "ingest": ("db", "fetch", "samples"), "sources": ("sources",), "run": ("run",), "report": ("report",),
    "digests": ("build", "preview", "events"), "delete": ("delete",), "publish": ("publish", "worker"),
    "mail": ("mail",), "subscribers": ("subscribers",), "web": ("serve", "site"), "bots": ("bot",),
    "status": ("status",),
}
DESCRIPTION = "compiler-digest: fetch compiler news, build the daily digest, publish and serve it."
EPILOG = ("exit codes: 0 success, 1 failure (one line on stderr), 2 bad usage, 130 interrupted. "
          "Run 'digest COMMAND --help' for a command's options.")
_NUMBER = re.compile(r"-\d+(\.\d*)?")  # a negative number is a value (a Telegram chat id), not an option
_CHOICE = re.compile(r"invalid choice: '(?P<word>[^']*)' \(choose from (?P<choices>.*)\)")


class Parser(argparse.ArgumentParser):
    """argparse with a "did you mean" hint for a mistyped choice (exit 2, as every usage error)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", Commands)

    def error(self, message: str) -> NoReturn:
        """Usage, the one-line error, and the closest choice when a word was mistyped."""
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}{_did_you_mean(message)}\n")


class Commands(argparse._SubParsersAction):  # type: ignore[type-arg]  # generic in typeshed only
    """Subcommands whose own ``--help`` page opens with their one-line help when no description is given."""

    def add_parser(self, name: str, **kwargs: Any) -> Any:  # argparse's signature
        kwargs.setdefault("description", kwargs.get("help"))
        return super().add_parser(name, **kwargs)


class SubParser(Parser):
    """A subcommand's parser: an unknown option is its own error, shown with its own usage.

    A missing required argument is reported with any unknown option beside it (``preview
    --formt md`` lacks --date because of a typo), and the closest real option.
    """

    _given: Sequence[str] = ()

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # argparse's overloads
        self._given = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{_close_option(self, extras[0])}")
        return namespace, extras

    def error(self, message: str) -> NoReturn:
        """As :meth:`Parser.error`; a missing argument's line also names a mistyped option."""
        unknown = _unknown_options(self, self._given) if message.startswith("the following") else []
        if unknown:
            message += f"; unrecognized option {unknown[0]}{_close_option(self, unknown[0])}"
        super().error(message)


def _did_you_mean(message: str) -> str:
    found = _CHOICE.search(message)
    if not found:
        return ""
    choices = re.findall(r"'([^']*)'", found["choices"])
    close = difflib.get_close_matches(found["word"], choices, n=1)
    return f"; did you mean {close[0]}?" if close else ""


def _unknown_options(parser: argparse.ArgumentParser, given: Sequence[str]) -> list[str]:
    """The words of ``given`` that look like options ``parser`` does not have (nor abbreviates)."""
    options = [o for action in parser._actions for o in action.option_strings]
    unknown = []
    for word in given:
        if word == "--":
            break
        name = word.split("=")[0]
        if not name.startswith("-") or _NUMBER.fullmatch(name) or name in options:
            continue
        if parser.allow_abbrev and name.startswith("--") and any(o.startswith(name) for o in options):
            continue
        unknown.append(name)
    return unknown


def _close_option(parser: argparse.ArgumentParser, word: str) -> str:
    options = [o for action in parser._actions for o in action.option_strings]
    close = difflib.get_close_matches(word.split("=")[0], options, n=1)
    return f"; did you mean {close[0]}?" if close else ""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: with the subcommands of ``command``'s group alone, else of every group.

    A word that no group adds (a typo, or none) gets every group: the usage error lists them
    all and names the closest one.
    """
    parser = Parser(prog="digest", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"compiler-digest {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=SubParser)
    for group in [group for group, names in GROUPS.items() if command in names] or GROUPS:
        import_module(f"digest.cli.{group}").add_commands(sub)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The command a command line runs: its first word that is not an option (the top level's take no value).

    None when ``--help`` comes first: the top level's help lists every command.
    """
    for word in argv:
        if word in ("-h", "--help"):
            return None
        if not word.startswith("-"):
            return word
    return None


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    bootstrap.start_heap()
    given = sys.argv[1:] if argv is None else argv
    args = build_parser(command_of(given)).parse_args(given)
    _configure_logging(args.verbose)
    handler: Handler = args.handler
    try:
        from digest.config import load_settings  # not for `digest --help`

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
