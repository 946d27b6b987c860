"""bot.commands on a real database (SQLite and PostgreSQL): replies, subscriptions, permissions."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import update

from bot.commands import (
    ArgError,
    Chat,
    Commands,
    Reply,
    parse_date,
    parse_event_id,
    parse_recent,
    parse_subscribe,
)
from bot.texts import locale_from
from digest.domain.layers import LAYER_IDS
from digest.store.db import SessionFactory
from digest.store.models import Subscriber
from digest.subscribe.subscriptions import SubscriberView, find_by_address
from tests.chatday import DAY, LATER, build_day

PRIVATE = Chat("telegram", "1001", user_locale="en-US")
GROUP = Chat("telegram", "-2002", is_group=True, user_locale="zh-hans")


class Permission:
    """A can_manage answer that records whether it was asked."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked = 0

    async def __call__(self) -> bool:
        self.asked += 1
        return self.answer


def text(reply: Reply) -> str:
    """The reply's lines as plain text."""
    return "\n".join("".join(span.text for span in line) for line in reply.lines)


def actions(reply: Reply) -> list[str]:
    """Every button action of the reply."""
    return [button.action for row in reply.buttons for button in row]


@pytest.fixture
def commands(sessions: SessionFactory) -> Commands:
    return Commands(sessions, channel="telegram", clock=lambda: LATER)


async def stored(sessions: SessionFactory, chat: Chat) -> SubscriberView | None:
    async with sessions() as session:
        return await find_by_address(session, chat.channel, chat.address)


# -- parsing (pure) -----------------------------------------------------------

def test_parse_subscribe_arguments() -> None:
    assert parse_subscribe([]) == (None, None)
    assert parse_subscribe(["Kernel_Codegen,runtime", "min=40"]) == (["kernel_codegen", "runtime"], 40.0)
    assert parse_subscribe(["all"]) == (list(LAYER_IDS), None)
    with pytest.raises(ArgError) as bad:
        parse_subscribe(["kernels", "runtime"])
    assert bad.value.key == "unknown_layers" and bad.value.fields["bad"] == "kernels"
    for wrong in ("min=abc", "min=101", "min=-1"):
        with pytest.raises(ArgError, match="bad_min"):
            parse_subscribe([wrong])


def test_a_chat_users_language_reads_as_a_locale_english_when_unknown() -> None:
    for code in ("zh", "zh-hans", "zh-Hant-TW", "ZH_tw"):
        assert locale_from(code) == "zh"
    for code in (None, "", "en", "en-US", "fr", "pt-br", "-"):
        assert locale_from(code) == "en"


def test_parse_query_arguments() -> None:
    assert parse_recent([]) == (None, 3)
    assert parse_recent(["7", "runtime"]) == ("runtime", 7)
    for wrong in (["0"], ["31"], ["nope"]):
        with pytest.raises(ArgError):
            parse_recent(wrong)
    assert parse_date([]) is None and parse_date(["2026-09-29"]) == DAY
    assert parse_event_id(["#12"]) == 12
    for wrong in ([], ["2026-13-01"]):
        with pytest.raises(ArgError):
            parse_date(wrong) if wrong else parse_event_id(wrong)


# -- help and layers ----------------------------------------------------------

async def test_help_follows_the_users_language(commands: Commands) -> None:
    english = text(await commands.run(PRIVATE, "start", [], Permission(True)))
    chinese = text(await commands.run(GROUP, "help", [], Permission(True)))
    for name in Commands.NAMES:
        assert f"/{name}" in english and f"/{name}" in chinese
    assert "daily digest" in english and "内核生成" in chinese and "kernel_codegen" in chinese
    layers = text(await commands.run(PRIVATE, "layers", [], Permission(True)))
    assert "Kernel codegen" in layers and "CUTLASS" in layers


# -- subscribing --------------------------------------------------------------

async def test_subscribe_with_arguments_sets_the_filter(commands: Commands, sessions: SessionFactory) -> None:
    reply = await commands.run(PRIVATE, "subscribe", ["kernel_codegen", "min=40"], Permission(True))
    assert "Subscribed" in text(reply) and "Kernel codegen" in text(reply)
    sub = await stored(sessions, PRIVATE)
    assert sub is not None
    assert (sub.status, sub.layers, sub.min_score, sub.locale) == ("active", ["kernel_codegen"], 40.0, "en")


async def test_unknown_layers_are_refused_with_the_valid_ones(commands: Commands,
                                                              sessions: SessionFactory) -> None:
    reply = await commands.run(PRIVATE, "subscribe", ["kernels"], Permission(True))
    assert "kernels" in text(reply)
    assert all(lid in text(reply) for lid in LAYER_IDS)
    assert await stored(sessions, PRIVATE) is None


async def test_subscribe_without_arguments_shows_the_layer_keyboard(commands: Commands,
                                                                    sessions: SessionFactory) -> None:
    reply = await commands.run(PRIVATE, "subscribe", [], Permission(True))
    assert actions(reply) == [f"L:{n}" for n in range(9)] + ["L:all", "L:done"]
    assert all(len(action.encode()) <= 64 for action in actions(reply))
    sub = await stored(sessions, PRIVATE)
    assert sub is not None and sub.layers == list(LAYER_IDS)


async def test_toggles_change_the_stored_layers(commands: Commands, sessions: SessionFactory) -> None:
    await commands.run(PRIVATE, "subscribe", [], Permission(True))
    reply = await commands.press(PRIVATE, "L:4", Permission(True))
    sub = await stored(sessions, PRIVATE)
    assert sub is not None and "kernel_codegen" not in sub.layers and len(sub.layers) == 8
    assert "▫️ Kernel codegen" in [b.label for row in reply.buttons for b in row]
    for n in [i for i in range(9) if i != 4][:-1]:
        await commands.press(PRIVATE, f"L:{n}", Permission(True))
    last = await commands.press(PRIVATE, "L:8", Permission(True))
    assert last.alert and "at least one" in str(last.notice)
    sub = await stored(sessions, PRIVATE)
    assert sub is not None and sub.layers == ["benchmark"]
    await commands.press(PRIVATE, "L:all", Permission(True))
    done = await commands.press(PRIVATE, "L:done", Permission(True))
    assert done.buttons == () and "Saved" in text(done)
    sub = await stored(sessions, PRIVATE)
    assert sub is not None and sub.layers == list(LAYER_IDS)


async def test_settings_buttons_change_language_and_minimum(commands: Commands,
                                                            sessions: SessionFactory) -> None:
    await commands.run(PRIVATE, "subscribe", ["runtime"], Permission(True))
    reply = await commands.run(PRIVATE, "settings", [], Permission(False))
    assert {"S:layers", "S:loc:zh", "S:loc:en", "S:min:50"} <= set(actions(reply))
    chinese = await commands.press(PRIVATE, "S:loc:zh", Permission(True))
    assert "已保存" in text(chinese) and "运行时" in text(chinese)
    await commands.press(PRIVATE, "S:min:50", Permission(True))
    expired = await commands.press(PRIVATE, "S:min:55", Permission(True))
    assert expired.alert and expired.lines == ()
    sub = await stored(sessions, PRIVATE)
    assert sub is not None and (sub.locale, sub.min_score, sub.layers) == ("zh", 50.0, ["runtime"])


async def test_only_a_manager_changes_a_groups_subscription(commands: Commands,
                                                            sessions: SessionFactory) -> None:
    member = Permission(False)
    refused = await commands.run(GROUP, "subscribe", ["runtime"], member)
    assert "管理员" in text(refused) and member.asked == 1
    assert await stored(sessions, GROUP) is None
    await commands.run(GROUP, "subscribe", ["runtime"], Permission(True))
    pressed = await commands.press(GROUP, "L:0", member)
    assert pressed.alert and pressed.lines == ()
    assert "管理员" in text(await commands.run(GROUP, "unsubscribe", [], member))
    sub = await stored(sessions, GROUP)
    assert sub is not None and (sub.status, sub.layers, sub.locale) == ("active", ["runtime"], "zh")


async def test_unsubscribe(commands: Commands, sessions: SessionFactory) -> None:
    assert "not subscribed" in text(await commands.run(PRIVATE, "unsubscribe", [], Permission(True)))
    await commands.run(PRIVATE, "subscribe", ["runtime"], Permission(True))
    assert "Unsubscribed" in text(await commands.run(PRIVATE, "unsubscribe", [], Permission(True)))
    sub = await stored(sessions, PRIVATE)
    assert sub is not None and sub.status == "unsubscribed"
    assert "not subscribed" in text(await commands.run(PRIVATE, "settings", [], Permission(True)))
    await commands.run(PRIVATE, "subscribe", [], Permission(True))
    sub = await stored(sessions, PRIVATE)
    assert sub is not None and sub.status == "active" and sub.layers == ["runtime"]  # kept


# -- queries ------------------------------------------------------------------

async def test_recent_lists_events_best_first(commands: Commands, sessions: SessionFactory) -> None:
    await build_day(sessions)
    anyone = Permission(False)
    reply = await commands.run(GROUP, "recent", [], anyone)
    scores = [float(line[0].text) for line in reply.lines if line and line[0].style == "b"
              and line[0].text.replace(".", "").isdigit()]
    assert len(scores) == 4 and scores == sorted(scores, reverse=True)
    assert anyone.asked == 0
    codegen = text(await commands.run(PRIVATE, "recent", ["kernel_codegen"], anyone))
    assert "SASS" in codegen and "Splyce" in codegen and "Torch-PIM" not in codegen
    links = [span.url for line in reply.lines for span in line if span.url]
    assert "https://arxiv.org/abs/2609.00001" in links
    assert "/event " in codegen
    later = Commands(sessions, channel="telegram", clock=lambda: LATER + dt.timedelta(days=5))
    assert "No events in the last 3 days" in text(await later.run(PRIVATE, "recent", [], anyone))
    assert "Events of the last 7 days" in text(await later.run(PRIVATE, "recent", ["7"], anyone))
    assert "1 to 30" in text(await commands.run(PRIVATE, "recent", ["90"], anyone))


async def test_digest_for_the_chats_filter(commands: Commands, sessions: SessionFactory) -> None:
    assert "No digest" in text(await commands.run(PRIVATE, "digest", [], Permission(False)))
    await build_day(sessions)
    whole = await commands.run(PRIVATE, "digest", [], Permission(False))
    assert whole.digest is not None and len(whole.digest.events) == 4 and whole.digest.locale == "en"
    await commands.run(PRIVATE, "subscribe", ["kernel_codegen"], Permission(True))
    mine = await commands.run(PRIVATE, "digest", [DAY.isoformat()], Permission(False))
    assert mine.digest is not None and mine.digest.filtered
    assert all("kernel_codegen" in e.layers for e in mine.digest.events) and len(mine.digest.events) == 3
    assert "2026-09-30" in text(await commands.run(PRIVATE, "digest", ["2026-09-30"], Permission(False)))
    assert "YYYY-MM-DD" in text(await commands.run(PRIVATE, "digest", ["yesterday"], Permission(False)))


async def test_event_shows_breakdown_and_every_source(commands: Commands, sessions: SessionFactory) -> None:
    await build_day(sessions)
    recent = await commands.run(PRIVATE, "recent", [], Permission(False))
    codes = [s.text for line in recent.lines for s in line if s.style == "code"]
    titles = [line[1].text for line in recent.lines if len(line) == 2 and line[1].style == "b"]
    event_id = int(codes[next(n for n, title in enumerate(titles) if "SASS" in title)].split()[1])
    reply = await commands.run(PRIVATE, "event", [str(event_id)], Permission(False))
    body = text(reply)
    assert f"#{event_id}" in body and "Score breakdown" in body and "authority" in body
    assert "Sources" in body and "arXiv cs.PL" in body
    assert "No digest has shown an event #999999" in text(
        await commands.run(PRIVATE, "event", ["999999"], Permission(False)))
    assert "Usage" in text(await commands.run(PRIVATE, "event", ["x"], Permission(False)))


# -- a stored filter that no longer reads -------------------------------------

async def damage(sessions: SessionFactory, **values: object) -> None:
    """Write what no form accepts straight into the subscriber rows (a layer renamed away, garbage)."""
    async with sessions.begin() as session:
        await session.execute(update(Subscriber).values(**values))


BROKEN = [{"layers": ["gone_layer"]}, {"layers": "garbage"}, {"layers": 5}, {"layers": [3, None]},
          {"min_score": 500.0}]


@pytest.mark.parametrize("values", BROKEN, ids=["gone-id", "a-string", "a-number", "not-ids", "score"])
async def test_a_filter_that_no_longer_reads_is_named_where_it_is_used(
        commands: Commands, sessions: SessionFactory, values: dict[str, object]) -> None:
    await build_day(sessions)
    await commands.run(GROUP, "subscribe", ["runtime"], Permission(True))
    await damage(sessions, **values)
    for name in ("settings", "digest"):
        reply = await commands.run(GROUP, name, [], Permission(True))
        assert reply.error and reply.digest is None and "无法读取" in text(reply), name
    for name, args in (("help", []), ("layers", []), ("recent", []), ("event", ["999999"])):
        assert "无法读取" not in text(await commands.run(GROUP, name, args, Permission(True))), name
    keep = await commands.run(GROUP, "subscribe", [], Permission(True))  # keeping the layers keeps the damage
    assert keep.error and "/subscribe all" in text(keep)
    fixed = await commands.run(GROUP, "subscribe", ["runtime", "min=0"], Permission(True))
    assert not fixed.error and "运行时" in text(fixed)
    settings = await commands.run(GROUP, "settings", [], Permission(True))
    assert not settings.error and "运行时" in text(settings)


async def test_a_broken_filter_is_repaired_by_a_layer_toggle_not_by_other_buttons(
        commands: Commands, sessions: SessionFactory) -> None:
    await commands.run(PRIVATE, "subscribe", ["runtime"], Permission(True))
    await damage(sessions, layers=["gone_layer"])
    for action in ("L:done", "S:min:50", "S:loc:zh"):
        pressed = await commands.press(PRIVATE, action, Permission(True))
        assert pressed.alert and "can no longer be read" in str(pressed.notice), action
    toggled = await commands.press(PRIVATE, "L:4", Permission(True))
    assert not toggled.alert and "✅ Kernel codegen" in [b.label for row in toggled.buttons for b in row]
    sub = await stored(sessions, PRIVATE)
    assert sub is not None and sub.layers == ["kernel_codegen"]
    assert not (await commands.run(PRIVATE, "settings", [], Permission(True))).error
