"""``digest subscribers ...`` through the real ``digest.cli.main``: exit codes, output, JSON shape."""

from __future__ import annotations

import argparse
import csv
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from digest.cli import main as cli
from digest.cli import subscribers as cmd_subscribers
from digest.domain.layers import LAYER_IDS
from tests.cli_env import private_env

Run = Callable[..., tuple[int, str, str]]
_build_parser = cli.build_parser


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI parser, with ``subscribers`` registered if cli.py does not do it (yet)."""
    parser = _build_parser(command)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if "subscribers" not in commands.choices:
        cmd_subscribers.add_commands(commands)
    return parser


@pytest.fixture
def digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
           capsys: pytest.CaptureFixture[str]) -> Iterator[Run]:
    """Run ``digest subscribers ARGS`` in-process on a private SQLite database: (code, stdout, stderr)."""
    private_env(monkeypatch, tmp_path, "cli.db")
    monkeypatch.setattr(cli, "build_parser", _parser)

    def run(*args: str) -> tuple[int, str, str]:
        code = cli.main(["subscribers", *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    yield run


def _listed(digest: Run, *args: str) -> list[dict[str, object]]:
    code, out, err = digest("list", "--json", *args)
    assert code == 0, err
    rows: list[dict[str, object]] = json.loads(out)
    return rows


def test_add_is_active_at_once_and_list_json_has_the_contract_shape(digest: Run) -> None:
    code, out, _ = digest("add", "--channel", "email", "--address", "Reader@Example.com")
    assert code == 0 and out == "added subscriber #1 (email reader@example.com): active\n"
    code, _, _ = digest("add", "--channel", "telegram", "--address", "-1001234567890",
                        "--layers", "runtime,frontend", "--min-score", "40", "--locale", "en")
    assert code == 0
    rows = _listed(digest)
    assert [set(row) for row in rows] == [{"id", "channel", "address", "status", "layers", "min_score",
                                          "locale", "created_at"}] * 2
    assert rows[0] | {"created_at": None} == {
        "id": 1, "channel": "email", "address": "reader@example.com", "status": "active",
        "layers": list(LAYER_IDS), "min_score": 0.0, "locale": "zh", "created_at": None}
    chat = rows[1]
    assert (chat["layers"], chat["min_score"], chat["locale"]) == (["frontend", "runtime"], 40.0, "en")
    assert [r["address"] for r in _listed(digest, "--channel", "telegram")] == ["-1001234567890"]
    assert _listed(digest, "--status", "pending") == []
    code, table, _ = digest("list")
    assert code == 0 and "reader@example.com" in table and "all" in table


def test_add_existing_updates_preferences_and_says_so(digest: Run) -> None:
    digest("add", "--channel", "discord", "--address", "123456789012345678")
    code, out, _ = digest("add", "--channel", "discord", "--address", "channel:123456789012345678",
                          "--layers", "benchmark", "--min-score", "12.5")
    assert code == 0 and out.startswith("updated the preferences of subscriber #1 (discord ")
    (row,) = _listed(digest)
    assert (row["address"], row["layers"], row["min_score"]) == ("123456789012345678",
                                                                  ["benchmark"], 12.5)


@pytest.mark.parametrize(("args", "option"), [
    (("--channel", "email", "--address", "not-an-email"), "--address: not a valid email address"),
    (("--channel", "telegram", "--address", "@name"), "--address: not a Telegram chat id"),
])
def test_bad_add_exits_2_naming_the_option(digest: Run, args: tuple[str, ...], option: str) -> None:
    code, out, err = digest("add", *args)
    assert (code, out) == (2, "")
    assert err.startswith(f"digest: {option}") and err.count("\n") == 1
    assert _listed(digest) == []


@pytest.mark.parametrize(("args", "option"), [
    (("--layers", ""), "--layers: no layers given"),
    (("--layers", "frontend,warp"), "--layers: unknown layer(s) warp"),
    (("--min-score", "101"), "--min-score: must be a number from 0 to 100"),
])
def test_bad_preferences_are_refused_while_parsing(digest: Run, args: tuple[str, ...], option: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        digest("add", "--channel", "email", "--address", "a@example.com", *args)
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"digest subscribers add: error: argument {option}" in err
    assert _listed(digest) == []


def test_argparse_refuses_unknown_channel_with_exit_2(digest: Run) -> None:
    with pytest.raises(SystemExit) as info:
        digest("add", "--channel", "sms", "--address", "x")
    assert info.value.code == 2


def test_remove_by_id_or_address(digest: Run) -> None:
    digest("add", "--channel", "email", "--address", "a@example.com")
    digest("add", "--channel", "telegram", "--address", "-42")
    digest("add", "--channel", "email", "--address", "b@example.com")
    assert digest("remove", "1")[:2] == (
        0, "removed subscriber #1 (email a@example.com) and its deliveries (1 read as its subscriber id)\n")
    assert digest("remove", "-42", "--channel", "telegram")[0] == 0
    assert digest("remove", "B@example.com")[:2] == (
        0, "removed subscriber #3 (email b@example.com) and its deliveries\n")
    code, _, err = digest("remove", "7", "--id")
    assert code == 1 and err == "digest: error: no subscriber 7\n"
    code, _, err = digest("remove", "nobody@example.com")
    assert code == 1 and "no email subscriber at nobody@example.com" in err
    assert _listed(digest) == []


def test_import_prints_the_report_and_exit_codes(digest: Run, tmp_path: Path) -> None:
    code, _, err = digest("import", str(tmp_path / "missing.csv"))
    assert code == 1 and err.startswith("digest: error: cannot read") and err.count("\n") == 1
    bad_header = tmp_path / "bad.csv"
    bad_header.write_text("email,addr\nx,y\n")
    code, _, err = digest("import", str(bad_header))
    assert code == 1 and "missing column(s) channel, address" in err
    digest("add", "--channel", "email", "--address", "left@example.com")
    _unsubscribe("left@example.com", tmp_path)
    good = tmp_path / "list.csv"
    good.write_text("\ufeffchannel,address,layers,min_score,locale\n"
                    "email,new@example.com,,,\n"
                    "email,left@example.com,,,\n"
                    "telegram,12345,frontend,50,en\n"
                    "email,broken,,,\n", encoding="utf-8")
    code, out, _ = digest("import", str(good))
    assert code == 1, "a row with errors fails the command; the good rows are imported all the same"
    lines = out.splitlines()
    assert lines[:2] == [
        f"imported {good}: 2 added, 0 updated, 0 unchanged, 1 skipped, 1 with errors",
        "line 3: skipped: left@example.com: unsubscribed; an import never re-activates it",
    ]
    assert lines[2].startswith("line 5: error: address: not a valid email address")
    assert lines[3:] == ["1 new email subscriber(s) are pending until they confirm; "
                         "confirmation mail: 1 sent, 0 failed"]
    statuses = {r["address"]: r["status"] for r in _listed(digest)}
    assert statuses == {"left@example.com": "unsubscribed", "new@example.com": "pending",
                        "12345": "active"}
    code, out, _ = digest("import", "--confirmed", str(good))
    assert code == 1 and "0 added, 1 updated, 1 unchanged, 1 skipped, 1 with errors" in out
    good.write_text("channel,address\nemail,left@example.com\nemail,new@example.com\n", encoding="utf-8")
    code, out, _ = digest("import", "--confirmed", str(good))
    assert code == 0 and "0 added, 0 updated, 1 unchanged, 1 skipped, 0 with errors" in out, out
    assert {r["address"]: r["status"] for r in _listed(digest)}["new@example.com"] == "active"


def _confirm_links(outbox: Path) -> dict[str, str]:
    """The confirm link of each confirmation mail in the file outbox, by recipient."""
    from email import message_from_bytes, policy
    from email.message import EmailMessage

    found = {}
    for path in sorted(outbox.glob("confirm-*.eml")):
        message = message_from_bytes(path.read_bytes(), policy=policy.default)
        assert isinstance(message, EmailMessage)
        body = message.get_body(("plain",))
        assert body is not None
        link = next(line for line in body.get_content().splitlines() if "/confirm?token=" in line)
        found[str(message["To"])] = link.strip()
    return found


def test_import_mails_the_web_forms_confirmation_link(digest: Run, tmp_path: Path) -> None:
    import asyncio
    from urllib.parse import parse_qs, urlsplit

    from digest.config import load_settings
    from digest.store.db import open_database
    from digest.subscribe import subscriptions
    from digest.subscribe.tokens import CONFIRM

    good = tmp_path / "list.csv"
    good.write_text("channel,address,layers,min_score,locale\nemail,new@example.com,,,en\n"
                    "telegram,12345,,,\n", encoding="utf-8")
    code, out, _ = digest("import", str(good))
    assert code == 0 and out.splitlines()[-1].endswith("confirmation mail: 1 sent, 0 failed")
    links = _confirm_links(tmp_path / "var" / "outbox")
    assert list(links) == ["new@example.com"]
    url = urlsplit(links["new@example.com"])
    assert url.path == "/confirm" and parse_qs(url.query)["lang"] == ["en"]

    async def named() -> str:
        async with open_database(f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}") as sessions, \
                sessions() as session:
            view = await subscriptions.subscriber_for_token(session, load_settings().secret(), CONFIRM,
                                                            parse_qs(url.query)["token"][0])
            return view.address

    assert asyncio.run(named()) == "new@example.com"


def test_confirm_resend_mails_every_pending_address_or_the_named_ones(
        digest: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.smtpserver import Faults, smtp_server

    good = tmp_path / "list.csv"
    good.write_text("channel,address\nemail,one@example.com\nemail,two@example.com\n", encoding="utf-8")
    digest("import", str(good))
    digest("add", "--channel", "email", "--address", "active@example.com")
    with smtp_server(Faults(refuse={"two@example.com"})) as server:
        monkeypatch.setenv("DIGEST_SMTP_HOST", server.host)
        monkeypatch.setenv("DIGEST_SMTP_PORT", str(server.port))
        code, out, _ = digest("confirm-resend")
        assert code == 1 and out == "2 pending email subscriber(s); confirmation mail: 1 sent, 1 failed\n"
        code, out, _ = digest("confirm-resend", "One@Example.com")
        assert code == 0 and out == "1 pending email subscriber(s); confirmation mail: 1 sent, 0 failed\n"
        assert [r.rcpt_tos for r in server.received] == [("one@example.com",), ("one@example.com",)]
        code, _, err = digest("confirm-resend", "active@example.com")
        assert code == 1 and "not a pending email subscriber (active)" in err and err.count("\n") == 1
    code, _, err = digest("confirm-resend", "not-an-address")
    assert code == 2 and err.count("\n") == 1


def _unsubscribe(address: str, tmp_path: Path) -> None:
    """Unsubscribe through the service, as the web link would."""
    import asyncio

    from digest.store.db import open_database
    from digest.store.models import utcnow
    from digest.subscribe import subscriptions

    async def go() -> None:
        async with open_database(f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}") as sessions, \
                sessions() as session, session.begin():
            view = await subscriptions.find_by_address(session, "email", address)
            assert view is not None
            await subscriptions.unsubscribe(session, view.id, utcnow())

    asyncio.run(go())


def test_export_to_stdout_and_file(digest: Run, tmp_path: Path) -> None:
    digest("add", "--channel", "email", "--address", "a@example.com", "--layers", "runtime")
    digest("add", "--channel", "discord", "--address", "user:12345678901234567", "--min-score", "7.5")
    _unsubscribe("a@example.com", tmp_path)
    code, out, _ = digest("export")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [r["address"] for r in rows] == ["a@example.com", "user:12345678901234567"]
    assert rows[0] == {"channel": "email", "address": "a@example.com", "layers": "runtime",
                       "min_score": "0", "locale": "zh", "status": "unsubscribed"}
    assert rows[1]["layers"] == " ".join(LAYER_IDS) and rows[1]["min_score"] == "7.5"
    target = tmp_path / "out.csv"
    code, out, err = digest("export", "--active-only", "--out", str(target))
    assert (code, out) == (0, "") and "exported 1 subscriber(s)" in err
    assert [r["address"] for r in csv.DictReader(target.open())] == ["user:12345678901234567"]
