"""The Telegram webhook end to end: the fake Bot API posts updates to the web app on a real socket.

uvicorn serves the real web app (with the webhook routes the entry point
contributes) on 127.0.0.1; at start the app calls setWebhook on the fake, which
then posts every update there with the secret header, as Telegram does; the
bot's answers go back to the fake through python-telegram-bot.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.cli import run_telegram
from bot.telegram_bot import WEBHOOK_HEADER, build_application, create_webhook, running, webhook_secret
from digest.cli.web import make_server
from digest.config import Settings, load_settings
from digest.domain.errors import ConfigError
from digest.store.db import SessionFactory
from digest.web.app import create_app
from digest.web.hooks import MAX_UPDATE_BYTES, WebhookRoutes, load_webhooks, mount_webhooks, parse_update
from tests.archive import SITE_URL, TZ, renderer
from tests.fake_telegram import TOKEN, FakeTelegram

HOOK_SECRET = "hook-secret-0123456789_abcdef"
PATH = "/telegram/webhook"
USER, OTHER = 1001, 1002
WAIT = 30.0  # a hang guard, not a speed check
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """The web app's socket, bound first: the webhook URL names its port before the server starts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        yield sock


def hook_settings(fake: FakeTelegram, sqlite_url: str, tmp_path: Path, port: int, **more: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": sqlite_url, "var_dir": tmp_path, "telegram_token": TOKEN,
        "telegram_api_base": fake.base_url, "site_url": SITE_URL,
        "telegram_webhook_url": f"http://127.0.0.1:{port}{PATH}", "telegram_webhook_secret": HOOK_SECRET,
    }
    return load_settings(**(values | more))


@asynccontextmanager
async def serving(settings: Settings, sessions: SessionFactory, sock: socket.socket,
                  ) -> AsyncIterator[httpx.AsyncClient]:
    """The web app with its webhooks on uvicorn, on ``sock``; a client of it."""
    archive = create_app(sessions, renderer(), site_url=SITE_URL, default_locale="zh", timezone=TZ)
    app = mount_webhooks(archive, load_webhooks(settings, sessions))
    port = sock.getsockname()[1]
    server = make_server(app, "127.0.0.1", port)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    for _ in range(int(WAIT / 0.02)):
        if server.started or task.done():
            break
        await asyncio.sleep(0.02)
    assert server.started, task.exception() if task.done() else "uvicorn did not start"
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            yield client
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, WAIT)


def update(update_id: int, chat: int, text: str) -> dict[str, Any]:
    """A Telegram update: a private message with a command."""
    word = text.split()[0]
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": 1_700_000_000, "text": text,
        "chat": {"id": chat, "type": "private", "first_name": "u"},
        "from": {"id": chat, "is_bot": False, "first_name": "u", "language_code": "en"},
        "entities": [{"type": "bot_command", "offset": 0, "length": len(word)}]}}


async def test_updates_posted_to_the_web_app_are_answered_through_the_bot_api(
        fake: FakeTelegram, listener: socket.socket, sqlite_url: str, tmp_path: Path,
        sqlite_sessions: SessionFactory) -> None:
    settings = hook_settings(fake, sqlite_url, tmp_path, listener.getsockname()[1])
    async with serving(settings, sqlite_sessions, listener) as web:
        assert fake.webhook["url"] == settings.telegram_webhook_url
        assert fake.webhook["secret_token"] == HOOK_SECRET
        assert fake.webhook["allowed_updates"] == ["message", "callback_query"]
        fake.command(USER, "/start")
        await fake.wait_until(lambda: len(fake.sent(USER)) == 1, WAIT)
        assert "/subscribe" in str(fake.sent(USER)[0]["text"])
        assert [p.status for p in fake.posted] == [200]

        # a wrong or missing secret: 403, and nothing is handled (a later update of the chat is its first)
        body = json.dumps(update(9000, OTHER, "/help"))
        for headers in ({WEBHOOK_HEADER: "wrong-secret-0123456789"}, {}, {WEBHOOK_HEADER: HOOK_SECRET + "x"}):
            refused = await web.post(PATH, content=body,
                                     headers={"content-type": "application/json", **headers})
            assert refused.status_code == 403
        fake.command(OTHER, "/start")
        await fake.wait_until(lambda: len(fake.sent(OTHER)) >= 1, WAIT)

        # hostile bodies with the right secret: refused, the server unharmed
        good = {WEBHOOK_HEADER: HOOK_SECRET}
        for bad in (b"not json", b"\xff\xfe", b"[1, 2]", b'"text"', b"[" * 200_000 + b"]" * 200_000,
                    b'{"update_id": "seven"}', b'{"message": {}}',
                    b'{"update_id": 77, "message": 7}'):
            answer = await web.post(PATH, content=bad, headers=good)
            assert answer.status_code == 400, (bad[:40], answer.text)
        huge = b'{"update_id": 1, "pad": "' + b"a" * MAX_UPDATE_BYTES + b'"}'
        assert (await web.post(PATH, content=huge, headers=good)).status_code == 413

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the cap counts what arrives
            for _ in range(MAX_UPDATE_BYTES // 65536 + 2):
                yield b" " * 65536

        assert (await web.post(PATH, content=chunks(), headers=good)).status_code == 413
        assert (await web.get(PATH)).status_code == 405

        fake.command(USER, "/help")
        await fake.wait_until(lambda: len(fake.sent(USER)) == 2, WAIT)
        assert len(fake.sent(OTHER)) == 1  # the refused /help never ran
    assert fake.calls_of("getUpdates") == [] and fake.calls_of("deleteWebhook") == []
    assert fake.webhook  # left set: the other web processes still serve it


async def test_a_webhook_that_cannot_start_answers_503_and_the_archive_serves_on(
        fake: FakeTelegram, listener: socket.socket, sqlite_url: str, tmp_path: Path,
        sqlite_sessions: SessionFactory, caplog: pytest.LogCaptureFixture) -> None:
    fake.fail("setWebhook", 400, "Bad Request: bad webhook: IP address 127.0.0.1 is reserved")
    settings = hook_settings(fake, sqlite_url, tmp_path, listener.getsockname()[1])
    async with serving(settings, sqlite_sessions, listener) as web:
        assert (await web.get("/healthz")).status_code == 200
        body = json.dumps(update(1, USER, "/start"))
        answer = await web.post(PATH, content=body, headers={WEBHOOK_HEADER: HOOK_SECRET})
        assert answer.status_code == 503
        assert (await web.post(PATH, content=body)).status_code == 403
    assert fake.sent() == [] and not fake.webhook
    [line] = [r.getMessage() for r in caplog.records if "webhook not started" in r.getMessage()]
    assert "ip address 127.0.0.1 is reserved" in line.lower() and TOKEN not in line and "\n" not in line


def test_the_secret_is_configured_or_derived_or_a_one_line_error(tmp_path: Path, sqlite_url: str) -> None:
    base = {"database_url": sqlite_url, "var_dir": tmp_path, "telegram_token": TOKEN,
            "telegram_webhook_url": "https://digest.example/tg"}
    key = "k" * 40
    derived = webhook_secret(load_settings(**base, secret_key=key))
    assert derived == webhook_secret(load_settings(**base, secret_key=key)) and len(derived) == 64
    assert derived != webhook_secret(load_settings(**base, secret_key="j" * 40))
    given = load_settings(**base, secret_key=key, telegram_webhook_secret=HOOK_SECRET)
    assert webhook_secret(given) == HOOK_SECRET
    with pytest.raises(ConfigError) as missing:
        webhook_secret(load_settings(**base))  # a generated key file would differ between machines
    assert "DIGEST_TELEGRAM_WEBHOOK_SECRET" in str(missing.value) and "\n" not in str(missing.value)
    for bad in ("short", "has space in it 0123456789", "ü" * 20, "x" * 257):
        with pytest.raises(ConfigError, match="DIGEST_TELEGRAM_WEBHOOK_SECRET"):
            load_settings(**base, telegram_webhook_secret=bad)
    for url in ("https://digest.example", "https://digest.example/", "https://digest.example/tg?x=1", "https://d.example/t%67",
                "ftp://digest.example/tg"):
        with pytest.raises(ConfigError, match="DIGEST_TELEGRAM_WEBHOOK_URL"):
            load_settings(**{**base, "telegram_webhook_url": url})


async def test_without_a_webhook_url_nothing_is_mounted_and_the_bot_polls(
        tmp_path: Path, sqlite_url: str, sqlite_sessions: SessionFactory) -> None:
    settings = load_settings(database_url=sqlite_url, var_dir=tmp_path, telegram_token=TOKEN)
    assert create_webhook(settings, sqlite_sessions) is None
    assert load_webhooks(settings, sqlite_sessions) == []
    app = create_app(sqlite_sessions, renderer(), site_url=SITE_URL, default_locale="zh", timezone=TZ)
    assert mount_webhooks(app, []) is app


async def test_in_webhook_mode_nothing_polls(fake: FakeTelegram, tmp_path: Path, sqlite_url: str) -> None:
    settings = load_settings(database_url=sqlite_url, var_dir=tmp_path, telegram_token=TOKEN,
                             telegram_api_base=fake.base_url, telegram_webhook_url="https://digest.example/tg",
                             telegram_webhook_secret=HOOK_SECRET)
    with pytest.raises(ConfigError, match="the web app"):
        await run_telegram(settings)  # `digest bot telegram`: one line, nothing polled
    assert await run_telegram(settings, stop=asyncio.Event()) == 0  # in `digest serve`: the web app's job
    assert fake.calls == []


async def test_a_path_the_web_app_already_serves_is_refused(
        tmp_path: Path, sqlite_url: str, sqlite_sessions: SessionFactory, fake: FakeTelegram) -> None:
    settings = load_settings(database_url=sqlite_url, var_dir=tmp_path, telegram_token=TOKEN,
                             telegram_api_base=fake.base_url, telegram_webhook_url="https://digest.example/healthz",
                             telegram_webhook_secret=HOOK_SECRET)
    app = create_app(sqlite_sessions, renderer(), site_url=SITE_URL, default_locale="zh", timezone=TZ)
    hooks = load_webhooks(settings, sqlite_sessions)
    with pytest.raises(ConfigError, match="/healthz"):
        mount_webhooks(app, hooks)
    with pytest.raises(ConfigError, match="share one path"):
        WebhookRoutes([*hooks, *hooks])


def test_parse_update_accepts_objects_only() -> None:
    assert parse_update(b'{"update_id": 1}') == {"update_id": 1}
    for bad in (b"", b"null", b"1", b"[]", b"{", b"\x00", "{}".encode("utf-16"), b"[" * 100_000):
        assert parse_update(bad) is None


async def test_back_to_polling_the_poller_deletes_the_webhook_first(
        fake: FakeTelegram, tmp_path: Path, sqlite_url: str, sqlite_sessions: SessionFactory) -> None:
    fake.webhook = {"url": "https://digest.example/tg", "secret_token": HOOK_SECRET}  # left by a web process
    settings = load_settings(database_url=sqlite_url, var_dir=tmp_path, telegram_token=TOKEN,
                             telegram_api_base=fake.base_url)
    async with running(build_application(settings, sqlite_sessions), poll_timeout=1):
        fake.command(USER, "/start")
        await fake.wait_until(lambda: len(fake.sent(USER)) == 1, WAIT)
    assert len(fake.calls_of("deleteWebhook")) == 1 and not fake.webhook
    assert 409 not in {c.status for c in fake.calls_of("getUpdates")}  # never polled while it was set
