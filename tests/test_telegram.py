"""The Telegram adapter: the real python-telegram-bot over real sockets against tests/fake_telegram.py."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from telegram import Update

from bot.cli import run_telegram
from bot.commands import Span
from bot.ratelimit import Limits, RateLimiter
from bot.telegram_bot import (
    App,
    PerChatUpdates,
    TelegramChannel,
    build_application,
    create_channel,
    make_bot,
    reply_parts,
    running,
    span_html,
)
from digest.config import Settings, load_settings
from digest.deliver.channels import Message, Outcome, PushChannel
from digest.deliver.mailer import MailIdentity
from digest.deliver.publish import Channels, Composer, PublishOptions, Runner
from digest.deliver.sending import SendOptions
from digest.domain.errors import ConfigError
from digest.render.renderer import Renderer
from digest.store.db import SessionFactory
from digest.subscribe.subscriptions import find_by_address, subscribe
from tests.chatday import DAY, LATER, build_day
from tests.fake_telegram import TOKEN, FakeTelegram, check_html

USER, GROUP, ADMIN, MEMBER = 1001, -2002, 6, 5
# python-telegram-bot's own RetryAfter reads its deprecated int attribute.
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


@pytest.fixture
def settings(fake: FakeTelegram, sqlite_url: str, tmp_path: Path) -> Settings:
    return load_settings(database_url=sqlite_url, var_dir=tmp_path, telegram_token=TOKEN,
                         telegram_api_base=fake.base_url, site_url="https://digest.example")


@pytest.fixture
def limiter() -> RateLimiter:
    """One limiter for the bot's replies and the pushes, as when both run in one process."""
    return RateLimiter()


@pytest.fixture
async def app(settings: Settings, sqlite_sessions: SessionFactory,
              limiter: RateLimiter) -> AsyncIterator[App]:
    application = build_application(settings, sqlite_sessions, limiter=limiter, clock=lambda: LATER)
    async with running(application, poll_timeout=1):
        yield application


def texts(fake: FakeTelegram, chat: int) -> list[str]:
    return [str(m["text"]) for m in fake.sent(chat)]


def keyboards(fake: FakeTelegram, chat: int) -> list[int]:
    """Ids of the bot's messages to ``chat`` that carry an inline keyboard."""
    return [mid for (to, mid), m in fake.messages.items() if to == chat and m.get("reply_markup")]


async def say(fake: FakeTelegram, chat: int, command: str, **kw: Any) -> str:
    """Send a command and return the bot's next message to that chat."""
    before = len(fake.sent(chat))
    fake.command(chat, command, **kw)
    await fake.wait_until(lambda: len(fake.sent(chat)) > before)
    return texts(fake, chat)[before]


async def publish(sessions: SessionFactory, channel: PushChannel) -> Any:
    """``digest publish --date DAY`` through the core's Runner, with this channel as "telegram"."""
    def factory(name: str) -> PushChannel:
        if name != "telegram":
            raise ConfigError(f"{name} is not configured in this test")
        return channel

    renderer = Renderer(site_url="https://digest.example")
    composer = Composer(sessions, renderer, MailIdentity.from_settings("d <d@digest.example>"),
                        site_url="https://digest.example", secret="s3cret", clock=lambda: LATER)
    options = PublishOptions(send=SendOptions(attempts_per_run=1, backoff=0.01))
    return await Runner(sessions, Channels(factory), composer, lambda: LATER, options).publish(DAY, "zh")


# -- the interactive bot ------------------------------------------------------

async def test_commands_are_registered_in_both_languages(app: App, fake: FakeTelegram) -> None:
    calls = fake.calls_of("setMyCommands")
    assert sorted(str(c.params.get("language_code")) for c in calls) == ["None", "en", "zh"]
    for call in calls:
        assert [c["command"] for c in call.params["commands"]][:3] == ["start", "help", "subscribe"]
    zh = next(c for c in calls if c.params.get("language_code") == "zh")
    assert "订阅" in zh.params["commands"][2]["description"]


async def test_subscribe_in_private_then_publish_sends_only_those_layers(
        app: App, fake: FakeTelegram, sqlite_sessions: SessionFactory, settings: Settings,
        limiter: RateLimiter) -> None:
    await build_day(sqlite_sessions)
    assert "Subscribed" in await say(fake, USER, "/subscribe@digest_test_bot kernel_codegen")
    assert "我每天推送" in await say(fake, 3003, "/start", language_code="zh-hans")
    channel = create_channel(settings)
    channel.limiter = limiter
    try:
        report = await publish(sqlite_sessions, channel)
    finally:
        await channel.aclose()
    assert report.channels["telegram"].sent == 1
    pushed = fake.sent(USER)[1:]
    body = "".join(str(m["text"]) for m in pushed)
    assert "SASS" in body and "Splyce" in body and "Hopper" in body and "Torch-PIM" not in body
    assert "Triton kernels &amp; &#34;PTX&#34; codegen with tiles &lt; 256" in body
    assert "javascript:" not in body
    assert all(m["parse_mode"] == "HTML" and m["link_preview_options"] == {"is_disabled": True}
               for m in fake.sent())
    assert fake.too_many == 0


async def test_a_group_member_who_is_not_an_admin_cannot_subscribe_the_group(
        app: App, fake: FakeTelegram, sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    fake.set_member(GROUP, ADMIN, "administrator")
    refused = await say(fake, GROUP, "/subscribe@digest_test_bot runtime", user_id=MEMBER)
    assert "administrator" in refused
    async with sqlite_sessions() as session:
        assert await find_by_address(session, "telegram", str(GROUP)) is None
    assert "Subscribed" in await say(fake, GROUP, "/subscribe kernel_codegen", user_id=ADMIN)
    assert "SASS" in await say(fake, GROUP, "/recent kernel_codegen", user_id=MEMBER)
    assert len(fake.calls_of("getChatMember")) == 2  # queries never ask
    async with sqlite_sessions() as session:
        sub = await find_by_address(session, "telegram", str(GROUP))
    assert sub is not None and sub.layers == ["kernel_codegen"]


async def test_an_inline_keyboard_toggle_changes_the_stored_layers(
        app: App, fake: FakeTelegram, sqlite_sessions: SessionFactory) -> None:
    await say(fake, USER, "/subscribe")
    (message_id,) = keyboards(fake, USER)
    rows = fake.messages[(USER, message_id)]["reply_markup"]["inline_keyboard"]
    assert len([b for row in rows for b in row]) == 11
    fake.press(USER, message_id, "L:4")
    await fake.wait_until(lambda: bool(fake.calls_of("editMessageText")))
    async with sqlite_sessions() as session:
        sub = await find_by_address(session, "telegram", str(USER))
    assert sub is not None and "kernel_codegen" not in sub.layers and len(sub.layers) == 8
    assert fake.calls_of("answerCallbackQuery")
    edited = fake.messages[(USER, message_id)]["reply_markup"]["inline_keyboard"]
    assert edited[1][1]["text"].startswith("▫️") and edited[1][1]["callback_data"] == "L:4"


async def test_a_non_admin_press_in_a_group_is_refused(app: App, fake: FakeTelegram,
                                                       sqlite_sessions: SessionFactory) -> None:
    fake.set_member(GROUP, ADMIN, "creator")
    await say(fake, GROUP, "/subscribe", user_id=ADMIN)
    (message_id,) = keyboards(fake, GROUP)
    fake.press(GROUP, message_id, "L:0", user_id=MEMBER)
    await fake.wait_until(lambda: bool(fake.calls_of("answerCallbackQuery")))
    answer = fake.calls_of("answerCallbackQuery")[0].params
    assert answer["show_alert"] is True and "administrator" in answer["text"]
    async with sqlite_sessions() as session:
        sub = await find_by_address(session, "telegram", str(GROUP))
    assert sub is not None and len(sub.layers) == 9 and not fake.calls_of("editMessageText")


async def test_an_unexpected_error_gets_one_reply(app: App, fake: FakeTelegram) -> None:
    fake.fail("getChatMember", 400, "Bad Request: user not found")
    reply = await say(fake, GROUP, "/unsubscribe", user_id=MEMBER)
    assert "not subscribed" in reply
    reply = await say(fake, GROUP, "/subscribe runtime", user_id=MEMBER)
    assert "went wrong" in reply


async def test_digest_command_sends_the_rendered_parts(app: App, fake: FakeTelegram,
                                                       sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    first = await say(fake, USER, f"/digest {DAY.isoformat()}")
    assert "Splyce" in "".join(texts(fake, USER)) or "Torch-PIM" in first
    assert check_html(first) is None


async def test_the_cli_entry_runs_until_stopped(settings: Settings, fake: FakeTelegram) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(run_telegram(settings, stop=stop))
    await fake.wait_until(lambda: bool(fake.calls_of("getUpdates")))
    assert "Subscribed" in await say(fake, USER, "/subscribe runtime")
    stop.set()
    assert await asyncio.wait_for(task, 10) == 0
    with pytest.raises(ConfigError, match="DIGEST_TELEGRAM_TOKEN"):
        await run_telegram(settings.replace(telegram_token=None))


async def test_one_chats_updates_run_in_order_and_others_alongside() -> None:
    processor, order = PerChatUpdates(), []

    async def work(name: str, pause: float) -> None:
        await asyncio.sleep(pause)
        order.append(name)

    def update(chat: int) -> Update:
        return Update.de_json({"update_id": chat, "message": {
            "message_id": 1, "date": 0, "chat": {"id": chat, "type": "private"}, "text": "x"}}, None)

    await asyncio.gather(processor.do_process_update(update(1), work("1a", 0.05)),
                         processor.do_process_update(update(1), work("1b", 0.0)),
                         processor.do_process_update(update(2), work("2", 0.0)))
    assert order == ["2", "1a", "1b"] and processor._chats == {}


# -- the push channel ---------------------------------------------------------

def message(chat: int, *parts: str, start: int = 0) -> Message:
    return Message(delivery_id=1, subscriber_id=1, address=str(chat), parts=parts, start_part=start)


@pytest.fixture
async def channel(fake: FakeTelegram) -> AsyncIterator[TelegramChannel]:
    sender = TelegramChannel(make_bot(TOKEN, fake.base_url))
    yield sender
    await sender.aclose()


async def test_parts_go_in_order_from_the_start_part(channel: TelegramChannel, fake: FakeTelegram) -> None:
    result = await channel.send(message(USER, "<b>one</b>", "two", "three", start=1))
    assert (result.outcome, result.parts_sent) == (Outcome.SENT, 3)
    assert texts(fake, USER) == ["two", "three"]
    times = [c.at for c in fake.calls_of("sendMessage")]
    assert times[1] - times[0] >= 1.0 and fake.too_many == 0


async def test_429_is_retried_after_the_given_delay(channel: TelegramChannel, fake: FakeTelegram) -> None:
    fake.fail("sendMessage", 429, "Too Many Requests: retry after 1", chat_id=USER, retry_after=1)
    result = await channel.send(message(USER, "hello"))
    assert (result.outcome, result.parts_sent) == (Outcome.SENT, 1)
    refused, accepted = fake.calls_of("sendMessage")
    assert refused.status == 429 and accepted.at - refused.at >= 1.0
    fake.fail("sendMessage", 429, "Too Many Requests: retry after 7", times=9, retry_after=7)
    channel.max_retries = 0
    result = await channel.send(message(USER + 1, "again"))
    assert (result.outcome, result.retry_after, result.parts_sent) == (Outcome.TRANSIENT, 7.0, 0)


@pytest.mark.parametrize(("status", "description", "outcome"), [
    (403, "Forbidden: bot was blocked by the user", Outcome.PERMANENT),
    (403, "Forbidden: bot was kicked from the group chat", Outcome.PERMANENT),
    (400, "Bad Request: chat not found", Outcome.PERMANENT),
    (400, "Bad Request: can't parse entities: Unsupported start tag \"x\"", Outcome.BUG),
    (400, "Bad Request: message is too long", Outcome.BUG),
    (502, "Bad Gateway", Outcome.TRANSIENT),
])
async def test_refusals_map_to_outcomes(channel: TelegramChannel, fake: FakeTelegram, status: int,
                                        description: str, outcome: Outcome) -> None:
    fake.fail("sendMessage", status, description, chat_id=USER)
    result = await channel.send(message(USER, "one", "two", start=0))
    assert (result.outcome, result.parts_sent) == (outcome, 0)
    assert result.error and description.split(": ")[-1].lower()[:20] in result.error.lower()


async def test_our_broken_html_is_a_bug_and_a_bad_token_is_fatal(channel: TelegramChannel,
                                                                  fake: FakeTelegram) -> None:
    result = await channel.send(message(USER, "fine", "<b>unclosed"))
    assert (result.outcome, result.parts_sent) == (Outcome.BUG, 1)
    wrong = TelegramChannel(make_bot("999:wrong", fake.base_url))
    try:
        assert (await wrong.send(message(USER, "x"))).outcome is Outcome.FATAL
    finally:
        await wrong.aclose()


async def test_a_migrated_group_is_followed_and_reported(channel: TelegramChannel,
                                                         fake: FakeTelegram) -> None:
    fake.fail("sendMessage", 400, "Bad Request: group chat was upgraded to a supergroup chat",
              chat_id=GROUP, migrate_to_chat_id=-1009990001)
    result = await channel.send(message(GROUP, "one", "two"))
    assert (result.outcome, result.parts_sent, result.new_address) == (Outcome.SENT, 2, "-1009990001")
    assert len(fake.sent(-1009990001)) == 2 and fake.sent(GROUP) == []


async def test_publish_blocks_refusing_chats_and_moves_migrated_groups(
        fake: FakeTelegram, sqlite_sessions: SessionFactory, channel: TelegramChannel) -> None:
    await build_day(sqlite_sessions)
    async with sqlite_sessions.begin() as session:
        for chat in (USER, USER + 1, GROUP):
            await subscribe(session, "telegram", str(chat), confirmed=True, now=LATER)
    fake.fail("sendMessage", 403, "Forbidden: bot was blocked by the user", chat_id=USER + 1)
    fake.fail("sendMessage", 400, "Bad Request: group chat was upgraded to a supergroup chat",
              chat_id=GROUP, migrate_to_chat_id=-1005550001)
    report = await publish(sqlite_sessions, channel)
    tally = report.channels["telegram"]
    assert (tally.sent, tally.failed) == (2, 1)
    async with sqlite_sessions() as session:
        blocked = await find_by_address(session, "telegram", str(USER + 1))
        moved = await find_by_address(session, "telegram", "-1005550001")
    assert blocked is not None and blocked.status == "blocked"
    assert moved is not None and moved.status == "active"
    assert fake.sent(USER) and fake.sent(-1005550001)


async def test_broadcast_stays_within_telegrams_limits(channel: TelegramChannel, fake: FakeTelegram) -> None:
    chats = [message(5000 + n, f"hello {n}") for n in range(40)]
    results = await asyncio.gather(*(channel.send(m) for m in [*chats, message(USER, "a", "b", "c")]))
    assert all(r.outcome is Outcome.SENT for r in results)
    assert fake.too_many == 0 and len(fake.sent()) == 43
    times = [c.at for c in fake.calls_of("sendMessage")]
    assert max(sum(1 for t in times if start <= t < start + 1.0) for start in times) <= 30
    mine = [c.at for c in fake.calls_of("sendMessage") if c.params["chat_id"] == USER]
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(mine))


# -- pure parts: the limiter's schedule, escaping, splitting --------------------

class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def test_limiter_schedule() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Limits(), clock=clock.time, sleep=clock.sleep)
    taken = []
    for n in range(90):
        await limiter.acquire(n)
        taken.append(clock.now)
    assert max(sum(1 for t in taken if start <= t < start + 1.0) for start in taken) <= 30
    assert 27 < 89 / (taken[-1] - taken[0]) < 30  # paced: 28.6 messages/s
    start = clock.now
    for _ in range(3):
        await limiter.acquire(USER)
    assert clock.now - start >= 2 * 1.05 - 1e-9
    start = clock.now
    for _ in range(21):
        await limiter.acquire(GROUP)
    assert clock.now - start >= 60 * 1.05 - 1e-9


def test_untrusted_text_is_escaped_and_only_http_links_survive() -> None:
    assert span_html('<script>"x" & y</script>', "b") == '<b>&lt;script&gt;"x" &amp; y&lt;/script&gt;</b>'
    assert span_html("click", url="javascript:alert(1)") == "click"
    assert span_html("ok", url='https://e.org/?a="b"&c') == '<a href="https://e.org/?a=&quot;b&quot;&amp;c">ok</a>'
    lines = [(Span(f"line {n} " + "x" * 300 + " <&>", "i", "https://e.org"),) for n in range(40)]
    parts = reply_parts(lines)
    assert len(parts) > 2 and all(check_html(p) is None for p in parts)
    assert "".join(parts).count("<a href") == 40
