"""The command line explains itself: help pages, layer ids, one score rule, typo hints, ``remove``'s reading.

The parser tree is walked, so a command added later without a description or an
option without a help line fails here. Removal runs through ``digest.cli.main.main``
on a private SQLite database.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from digest.cli import main as cli
from digest.cli.output import layers_arg, score_arg
from digest.domain.layers import LAYER_IDS
from tests.cli_env import private_env

Run = Callable[..., tuple[int, str, str]]


def _walk(parser: argparse.ArgumentParser,
          path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (command path, parser) of the tree, the top level first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, (*path, name))


PAGES = [path for path, _ in _walk(cli.build_parser())]
OPTIONS = [(path, action) for path, parser in _walk(cli.build_parser()) for action in parser._actions
           if not isinstance(action, argparse._SubParsersAction)]


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The stderr of ``digest ARGV``, which must be a usage error (exit 2) raised while parsing."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_the_tree_has_every_command() -> None:
    names = {" ".join(path) for path in PAGES}
    assert {"build", "preview", "subscribers remove", "sources add", "mail test", "db upgrade"} <= names
    assert len(PAGES) > 30


@pytest.mark.parametrize("path", PAGES, ids=lambda p: " ".join(p) or "digest")
def test_every_command_page_opens_with_its_description(
        path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    parser = dict(_walk(cli.build_parser()))[path]
    assert parser.description and "`" not in parser.description
    with pytest.raises(SystemExit) as exit_:
        cli.main([*path, "--help"])
    page = capsys.readouterr().out
    assert exit_.value.code == 0 and "`" not in page
    first_words = " ".join(parser.description.split()[:4])
    assert first_words in " ".join(page.split()), page


@pytest.mark.parametrize(("path", "action"), OPTIONS,
                         ids=lambda x: " ".join(x) if isinstance(x, tuple) else x.dest)
def test_every_option_has_a_one_line_help_without_rest_markup(
        path: tuple[str, ...], action: argparse.Action) -> None:
    assert action.help and "\n" not in action.help and "`" not in action.help, (path, action.dest)


def test_every_command_has_a_line_in_its_parents_list() -> None:
    for path, parser in _walk(cli.build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert {c.dest for c in action._choices_actions} == set(action.choices), path
                assert all(c.help and "`" not in c.help for c in action._choices_actions), path


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    return list(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)


def test_each_group_adds_the_commands_main_names_for_it_in_the_help_order() -> None:
    assert _commands(cli.build_parser()) == [name for names in cli.GROUPS.values() for name in names]
    for names in cli.GROUPS.values():
        for name in names:
            assert _commands(cli.build_parser(name)) == list(names)


@pytest.mark.parametrize("path", [p for p in PAGES if p], ids=" ".join)
def test_a_command_built_with_its_group_alone_reads_and_explains_itself_alike(path: tuple[str, ...]) -> None:
    alone, every = dict(_walk(cli.build_parser(path[0])))[path], dict(_walk(cli.build_parser()))[path]
    assert alone.format_help() == every.format_help()
    assert [_reading(a) for a in alone._actions] == [_reading(a) for a in every._actions]


def _reading(action: argparse.Action) -> tuple[object, ...]:
    return (action.option_strings, action.dest, action.default, action.required, action.nargs,
            action.type, action.const, None if action.choices is None else list(action.choices))


@pytest.mark.parametrize(("argv", "command"), [
    (["status"], "status"), (["-v", "-v", "preview", "--date", "x"], "preview"),
    (["status", "--help"], "status"), (["--help", "status"], None), (["-h"], None), ([], None),
    (["--version"], None), (["buidl"], "buidl"),
])
def test_the_command_of_a_command_line(argv: list[str], command: str | None) -> None:
    assert cli.command_of(argv) == command


def test_the_top_level_help_lists_every_command_also_before_one(capsys: pytest.CaptureFixture[str]) -> None:
    pages = []
    for argv in (["--help"], ["-h", "status"], ["-v", "--help", "preview"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        pages.append(capsys.readouterr().out)
    assert pages[0] == pages[1] == pages[2]
    assert all(f" {name} " in pages[0] for name in ("fetch", "status", "bot"))


def test_every_layers_option_lists_the_nine_ids_and_all_and_takes_them() -> None:
    layer_options = [(path, action) for path, action in OPTIONS if "layers" in action.dest]
    assert {" ".join(path) for path, _ in layer_options} >= {"preview", "subscribers add"}
    for path, action in layer_options:
        help_text = action.help or ""
        assert all(layer in help_text for layer in LAYER_IDS) and "all" in help_text, path
        assert action.type is layers_arg, path  # so "all" is taken wherever the help shows it


def test_every_score_option_has_the_one_rule() -> None:
    score_options = [(path, action) for path, action in OPTIONS if "score" in action.dest]
    assert {" ".join(path) for path, _ in score_options} >= {"preview", "subscribers add"}
    for path, action in score_options:
        assert action.type is score_arg and "0 to 100" in (action.help or ""), path


ADD = ["subscribers", "add", "--channel", "email", "--address", "a@example.com"]


@pytest.mark.parametrize("argv", [
    ["preview", "--date", "2026-11-29", "--min-score", "150"], [*ADD, "--min-score", "200"],
    ["preview", "--date", "2026-11-29", "--min-score", "nan"], [*ADD, "--min-score", "-1"],
])
def test_a_score_outside_0_to_100_is_refused_alike(argv: list[str],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(argv, capsys)
    assert err.startswith("usage: digest " + " ".join(argv[:2] if argv[0] == "subscribers" else argv[:1]))
    assert "error: argument --min-score: must be a number from 0 to 100, not " in err


def test_a_score_that_is_no_number_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(["preview", "--date", "2026-11-29", "--min-score", "high"], capsys)
    assert "argument --min-score: must be a number from 0 to 100, not 'high'" in err


@pytest.mark.parametrize(("text", "layers"), [
    ("all", list(LAYER_IDS)), ("ALL", list(LAYER_IDS)), ("runtime,all", list(LAYER_IDS)),
    ("runtime,frontend", ["frontend", "runtime"]), ("benchmark graph_ir", ["graph_ir", "benchmark"]),
])
def test_layers_are_read_in_id_order_and_all_is_every_layer(text: str, layers: list[str]) -> None:
    assert layers_arg(text) == layers


@pytest.mark.parametrize(("argv", "usage", "hint"), [
    (["buidl"], "usage: digest [", "did you mean build?"),
    (["preview", "--formt", "md"], "usage: digest preview", "did you mean --format?"),
    (["preview", "--date", "2026-01-01", "--formt", "md"], "usage: digest preview", "did you mean --format?"),
    (["preview", "--date", "2026-01-01", "--format", "mdd"], "usage: digest preview", "did you mean md?"),
    (["subscribers", "remov", "1"], "usage: digest subscribers", "did you mean remove?"),
    (["subscribers", "add", "--channel", "telegarm", "--address", "1"], "usage: digest subscribers add",
     "did you mean telegram?"),
    (["preview", "--date", "2026-01-01", "--layers", "kernal_codegen,runtime"], "usage: digest preview",
     "did you mean kernel_codegen?"),
    (["sources", "ad", "k", "https://example.org/feed"], "usage: digest sources", "did you mean add?"),
])
def test_a_typo_gets_the_closest_word_and_the_right_usage(
        capsys: pytest.CaptureFixture[str], argv: list[str], usage: str, hint: str) -> None:
    err = _usage_error(argv, capsys)
    assert err.startswith(usage) and hint in err
    assert err.strip().splitlines()[-1].count(hint) == 1  # the hint is on the one error line


def test_a_missing_argument_alone_gets_no_option_hint(capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(["preview", "--format", "md"], capsys)
    last = err.strip().splitlines()[-1]
    assert last == "digest preview: error: the following arguments are required: --date"


def test_a_negative_chat_id_is_a_value_not_a_mistyped_option(capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(["subscribers", "add", "--address", "-1001234567890"], capsys)
    last = err.strip().splitlines()[-1]
    assert "required: --channel" in last and "unrecognized" not in last


# -- removal on a real database ------------------------------------------------

@pytest.fixture
def digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
           capsys: pytest.CaptureFixture[str]) -> Iterator[Run]:
    """``digest ARGS`` in-process on a private SQLite database: (exit code, stdout, stderr)."""
    private_env(monkeypatch, tmp_path, "help.db")

    def run(*args: str) -> tuple[int, str, str]:
        code = cli.main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    yield run


def _ids(digest: Run) -> list[tuple[object, object, object]]:
    code, out, err = digest("subscribers", "list", "--json")
    assert code == 0, err
    return [(row["id"], row["channel"], row["address"]) for row in json.loads(out)]


def test_layers_all_subscribes_to_every_layer(digest: Run) -> None:
    assert digest("subscribers", "add", "--channel", "email", "--address", "a@example.com",
                  "--layers", "all")[0] == 0
    code, out, _ = digest("subscribers", "list", "--json")
    assert code == 0 and json.loads(out)[0]["layers"] == list(LAYER_IDS)


def test_a_number_that_is_an_id_and_a_chat_id_is_refused_until_told_which(digest: Run) -> None:
    assert digest("subscribers", "add", "--channel", "email", "--address", "a@example.com")[0] == 0
    assert digest("subscribers", "add", "--channel", "telegram", "--address", "1")[0] == 0
    assert digest("subscribers", "add", "--channel", "telegram", "--address", "77")[0] == 0

    code, out, err = digest("subscribers", "remove", "1")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert re.fullmatch(r"digest: 1 is subscriber #1's id and the address of subscriber #2 \(telegram 1\): "
                        r"say which with --id or --channel telegram\n", err), err
    assert len(_ids(digest)) == 3, "nothing was removed"

    assert digest("subscribers", "remove", "1", "--id")[:2] == (
        0, "removed subscriber #1 (email a@example.com) and its deliveries\n")
    assert digest("subscribers", "remove", "1")[:2] == (
        0, "removed subscriber #2 (telegram 1) and its deliveries (1 read as its telegram address)\n")
    assert digest("subscribers", "remove", "3")[:2] == (
        0, "removed subscriber #3 (telegram 77) and its deliveries (3 read as its subscriber id)\n")
    assert _ids(digest) == []


def test_remove_by_channel_and_the_misses(digest: Run) -> None:
    assert digest("subscribers", "add", "--channel", "telegram", "--address", "-42")[0] == 0
    assert digest("subscribers", "add", "--channel", "telegram", "--address", "5")[0] == 0
    code, _, err = digest("subscribers", "remove", "9")
    assert code == 1 and err == "digest: error: no subscriber has the id or the chat address 9\n"
    code, _, err = digest("subscribers", "remove", "x", "--id")
    assert code == 2 and err == "digest: --id: a subscriber id is a positive number, not 'x'\n"
    code, _, err = digest("subscribers", "remove", "someone")
    assert code == 2 and err.startswith("digest: --channel: needed to remove the address 'someone'")
    assert digest("subscribers", "remove", "5", "--channel", "telegram")[:2] == (
        0, "removed subscriber #2 (telegram 5) and its deliveries\n")
    assert digest("subscribers", "remove", "-42")[:2] == (
        0, "removed subscriber #1 (telegram -42) and its deliveries (-42 read as its telegram address)\n")
    assert _ids(digest) == []


@pytest.mark.parametrize("poll", ["0", "-1", "nan", "inf", "soon"])
def test_worker_poll_must_be_a_time_above_zero(poll: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(["worker", "--poll", poll], capsys)
    assert f"argument --poll: must be a number of seconds above 0, not {poll!r}" in err


@pytest.mark.parametrize("argv", [["mail", "test", "--to", "nobody"],
                                  ["publish", "--date", "2026-11-29", "--to", "nobody"]])
def test_a_bad_to_address_names_the_option_once(digest: Run, argv: list[str]) -> None:
    code, out, err = digest(*argv)
    assert (code, out) == (2, "")
    assert err.startswith("digest: --to: not a valid email address") and err.count("\n") == 1


@pytest.mark.parametrize("extra", [["--dry-run"], ["--to", "me@example.org"]])
def test_plan_only_takes_neither_dry_run_nor_to(digest: Run, extra: list[str]) -> None:
    """--plan-only sends nothing: a check copy or a dry run with it is a usage error, not a no-op."""
    code, out, err = digest("publish", "--date", "2026-12-01", "--plan-only", *extra)
    assert (code, out) == (2, "")
    assert err == "digest: --plan-only sends nothing: it takes neither --dry-run nor --to\n"
