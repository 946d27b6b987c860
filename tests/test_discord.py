"""The Discord adapter: the real discord.py (gateway, commands) and the REST push channel, over real
sockets against tests/fake_discord.py."""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.util
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from sqlalchemy import select, update

from bot.cli import run_discord
from bot.commands import Span
from bot.discord_bot import (
    DigestBot,
    ShardedDigestBot,
    build_bot,
    create_channel,
    layer_completions,
    login,
    reply_payloads,
)
from bot.discord_push import DiscordChannel, DiscordLimits, Limits, make_client, thread_name
from digest.build.pipeline import BuildOptions, build_digest
from digest.config import Settings, load_settings
from digest.deliver.channels import Message, Outcome, PushChannel, load_channel
from digest.deliver.mailer import MailIdentity
from digest.deliver.publish import Channels, Composer, PublishOptions, Runner
from digest.deliver.sending import DeliveryError, SendOptions
from digest.domain.errors import ConfigError, DigestError
from digest.domain.views import DigestView
from digest.render.renderer import Renderer
from digest.store.db import SessionFactory
from digest.store.models import Delivery, Subscriber
from digest.subscribe.subscriptions import find_by_address, list_subscribers, subscribe
from tests.builders import DAY, NOW, WINDOW, add_compiler_papers, add_entry, add_source
from tests.fake_discord import DM, GUILD_ID, MANAGE_CHANNELS, SEND, TOKEN, FakeDiscord

LATER = NOW + dt.timedelta(hours=2)
HOSTILE = "@everyone runtime news <@123> **bold** [click](https://evil.example) vLLM serving"


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        yield server


class FakeTime:
    """A clock that moves only when slept on; the sleeps are recorded (no test waits for real)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.naps: list[float] = []

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.naps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> FakeTime:
    return FakeTime()


@pytest.fixture
def settings(fake: FakeDiscord, sqlite_url: str, tmp_path: Path) -> Settings:
    return load_settings(database_url=sqlite_url, var_dir=tmp_path, discord_token=TOKEN,
                         discord_api_base=fake.api_base, discord_gateway=fake.gateway_url,
                         site_url="https://digest.example")


async def started(bot: DigestBot) -> asyncio.Task[None]:
    await login(bot, TOKEN)
    task = asyncio.create_task(bot.connect(reconnect=False))
    await asyncio.wait_for(bot.wait_until_ready(), 10)
    return task


@pytest.fixture
async def bot(settings: Settings, sqlite_sessions: SessionFactory) -> AsyncIterator[DigestBot]:
    client = build_bot(settings, sqlite_sessions, clock=lambda: LATER, guild_ready_timeout=0.05)
    task = await started(client)
    yield client
    await client.close()
    await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
async def channel(fake: FakeDiscord, clock: FakeTime) -> AsyncIterator[DiscordChannel]:
    pushed = DiscordChannel(make_client(TOKEN, fake.api_base),
                            limits=DiscordLimits(clock=clock.time, sleep=clock.sleep))
    yield pushed
    await pushed.aclose()


async def build_runtime_day(sessions: SessionFactory) -> None:
    """The compiler papers, plus a runtime event with hostile text (mentions, markdown, a link)."""
    await add_compiler_papers(sessions)
    blog = await add_source(sessions, "serving-blog", name="Serving Blog", weight=0.9)
    await add_entry(sessions, blog, HOSTILE,
                    "The vLLM serving engine runtime now captures CUDA graphs and manages KV-cache memory "
                    "for inference serving; @here <@&456> ~~runtime~~ memory allocator and runtime "
                    "scheduling.",
                    WINDOW.start + dt.timedelta(hours=6), url="https://blog.example/vllm")
    await build_digest(sessions, DAY, BuildOptions(locales=("zh", "en")), now=NOW)


async def publish(sessions: SessionFactory, channel: PushChannel, *, renderer: Renderer | None = None,
                  now: dt.datetime = LATER) -> Any:
    """``digest publish --date DAY`` through the core's Runner, with this channel as "discord"."""
    def factory(name: str) -> PushChannel:
        if name != "discord":
            raise ConfigError(f"{name} is not configured in this test")
        return channel

    composer = Composer(sessions, renderer or Renderer(site_url="https://digest.example"),
                        MailIdentity.from_settings("d <d@digest.example>"), site_url="https://digest.example",
                        secret="s3cret", clock=lambda: now)
    options = PublishOptions(send=SendOptions(attempts_per_run=1, backoff=0.0, retry_later=dt.timedelta(0)))
    return await Runner(sessions, Channels(factory), composer, lambda: now, options).publish(DAY, "en")


def text_of(payload: dict[str, Any]) -> str:
    embeds = payload.get("embeds", [])
    return str(payload.get("content") or "") + "".join(
        str(e.get("title", "")) + str(e.get("description", "")) + "".join(
            str(f["value"]) for f in e.get("fields", [])) for e in embeds)


# -- the gateway bot ------------------------------------------------------------

async def test_commands_are_synced_globally_with_chinese_names_and_descriptions(
        bot: DigestBot, fake: FakeDiscord) -> None:
    synced = {c["name"]: c for c in fake.commands["global"]}
    assert sorted(synced) == ["digest", "event", "layers", "recent", "search", "settings", "subscribe",
                              "unsubscribe"]
    sub = synced["subscribe"]
    assert sub["name_localizations"]["zh-CN"] == "订阅"
    assert "订阅" in sub["description_localizations"]["zh-TW"]
    assert int(sub["default_member_permissions"]) == MANAGE_CHANNELS
    assert {o["name"]: o.get("autocomplete") for o in sub["options"]}["layers"] is True


async def test_with_a_guild_id_the_commands_go_to_that_guild(fake: FakeDiscord, settings: Settings,
                                                             sqlite_sessions: SessionFactory) -> None:
    guilded = settings.replace(discord_guild_id=GUILD_ID)
    client = build_bot(guilded, sqlite_sessions, guild_ready_timeout=0.05)
    task = await started(client)
    await client.close()
    await asyncio.gather(task, return_exceptions=True)
    assert len(fake.commands[str(GUILD_ID)]) == 8 and "global" not in fake.commands


async def test_the_gateway_is_compressed_as_the_client_asked(bot: DigestBot, fake: FakeDiscord) -> None:
    # discord.py asks for zstd-stream only when zstandard is importable (it is not a dependency here)
    asked = "zstd-stream" if importlib.util.find_spec("zstandard") else "zlib-stream"
    assert fake.compression == [asked]
    assert (fake.zlib_frames > 0) == (asked == "zlib-stream")  # HELLO, READY, GUILD_CREATE at least
    answer = await fake.interact("layers", {}, channel=fake.text_channel)
    assert answer["type"] == 4


async def test_uncompressed_text_frames_are_understood_too(fake: FakeDiscord, settings: Settings,
                                                           sqlite_sessions: SessionFactory) -> None:
    fake.plain = True
    client = build_bot(settings, sqlite_sessions, clock=lambda: LATER, guild_ready_timeout=0.05)
    task = await started(client)
    try:
        answer = await fake.interact("layers", {}, channel=fake.text_channel)
    finally:
        await client.close()
        await asyncio.gather(task, return_exceptions=True)
    assert fake.zlib_frames == 0 and answer["type"] == 4 and answer["data"]["embeds"]


async def test_auto_shards_identify_every_shard_and_a_command_works_on_the_guilds_shard(
        fake: FakeDiscord, settings: Settings, sqlite_sessions: SessionFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake.shards = 2
    sharded = settings.replace(discord_shards="auto")
    client = build_bot(sharded, sqlite_sessions, clock=lambda: LATER, guild_ready_timeout=0.05)
    assert isinstance(client, ShardedDigestBot)

    async def at_once(shard_id: int | None, *, initial: bool = False) -> None:
        """discord.py waits 5 s between IDENTIFYs (Discord's limit); the fake has none."""

    monkeypatch.setattr(client, "before_identify_hook", at_once)
    task = await started(client)
    try:
        answer = await fake.interact("subscribe", {"layers": "runtime"}, channel=fake.text_channel)
        guild = client.get_guild(GUILD_ID)
        assert client.shard_count == 2 and guild is not None and guild.shard_id == 1
    finally:
        await client.close()
        await asyncio.gather(task, return_exceptions=True)
    assert ("GET", "gateway/bot") in fake.requests
    assert sorted(i["shard"] for i in fake.identifies) == [[0, 2], [1, 2]]
    assert answer["type"] == 4 and not answer["data"].get("flags")
    async with sqlite_sessions() as session:
        sub = await find_by_address(session, "discord", f"{fake.text_channel}")
    assert sub is not None and sub.layers == ["runtime"]


async def test_subscribe_from_a_manager_is_stored_as_the_channel(bot: DigestBot, fake: FakeDiscord,
                                                                 sqlite_sessions: SessionFactory) -> None:
    answer = await fake.interact("subscribe", {"layers": "runtime", "min_score": 20},
                                 channel=fake.text_channel)
    assert answer["type"] == 4 and not answer["data"].get("flags")
    async with sqlite_sessions() as session:
        subs = await list_subscribers(session, "discord")
    assert [(s.channel, s.address, s.layers, s.min_score) for s in subs] == [
        ("discord", f"{fake.text_channel}", ["runtime"], 20.0)]


async def test_subscribe_inside_a_thread_subscribes_its_parent_channel(
        bot: DigestBot, fake: FakeDiscord, sqlite_sessions: SessionFactory) -> None:
    thread = fake.add_thread(fake.text_channel)
    await fake.interact("subscribe", {"layers": "runtime"}, channel=thread)
    async with sqlite_sessions() as session:
        assert await find_by_address(session, "discord", f"{fake.text_channel}") is not None
        assert await find_by_address(session, "discord", f"{thread}") is None


async def test_subscribe_without_manage_channels_is_refused_ephemeral_in_the_users_locale(
        bot: DigestBot, fake: FakeDiscord, sqlite_sessions: SessionFactory) -> None:
    answer = await fake.interact("subscribe", {"layers": "runtime"}, channel=fake.text_channel,
                                 permissions=SEND, locale="zh-TW")
    assert answer["data"]["flags"] == 64
    assert "管理员" in answer["data"]["embeds"][0]["description"]
    assert answer["data"]["allowed_mentions"] == {"parse": []}
    async with sqlite_sessions() as session:
        assert await list_subscribers(session, "discord") == []


async def test_a_dm_subscribes_the_dm_channel(bot: DigestBot, fake: FakeDiscord,
                                              sqlite_sessions: SessionFactory) -> None:
    dm = fake.add_channel(DM, guild=False)
    answer = await fake.interact("subscribe", {"layers": "runtime"}, channel=dm, permissions=0, dm=True)
    assert not answer["data"].get("flags")
    async with sqlite_sessions() as session:
        assert await find_by_address(session, "discord", f"{dm}") is not None


async def test_recent_answers_an_embed_in_the_callback(bot: DigestBot, fake: FakeDiscord,
                                                       sqlite_sessions: SessionFactory) -> None:
    await build_runtime_day(sqlite_sessions)
    answer = await fake.interact("recent", {"days": 3}, channel=fake.text_channel)
    description = answer["data"]["embeds"][0]["description"]
    assert "Splyce" in description and "/event" in description
    assert "@everyone" not in description and "<@123>" not in description


async def test_bad_input_and_unknown_things_are_ephemeral(bot: DigestBot, fake: FakeDiscord,
                                                          sqlite_sessions: SessionFactory) -> None:
    await build_runtime_day(sqlite_sessions)
    bad_date = await fake.interact("digest", {"date": "2026-13-45"}, channel=fake.text_channel)
    unknown = await fake.interact("event", {"id": 9999}, channel=fake.text_channel, locale="zh-CN")
    missing = await fake.interact("digest", {"date": "2020-01-01"}, channel=fake.text_channel)
    assert [a["data"]["flags"] for a in (bad_date, unknown, missing)] == [64, 64, 64]
    assert "#9999" in unknown["data"]["embeds"][0]["description"]
    assert "没有" in unknown["data"]["embeds"][0]["description"]


async def damage(sessions: SessionFactory, address: str, layers: object) -> None:
    """Write a filter no command accepts into one subscriber row (a layer id renamed away, garbage)."""
    async with sessions.begin() as session:
        await session.execute(update(Subscriber).where(Subscriber.address == address).values(layers=layers))


@pytest.mark.parametrize("layers", [["gone_layer"], 5], ids=["gone-id", "a-number"])
async def test_a_stored_filter_that_no_longer_reads_is_an_ephemeral_localised_error(
        bot: DigestBot, fake: FakeDiscord, sqlite_sessions: SessionFactory, layers: object) -> None:
    await build_runtime_day(sqlite_sessions)
    await fake.interact("subscribe", {"layers": "runtime"}, channel=fake.text_channel, locale="zh-CN")
    await damage(sqlite_sessions, f"{fake.text_channel}", layers)
    answers = [await fake.interact(name, {}, channel=fake.text_channel, locale="zh-CN")
               for name in ("settings", "digest")]
    for answer in answers:
        assert answer["data"]["flags"] == 64 and "无法读取" in answer["data"]["embeds"][0]["description"]
    layers_answer = await fake.interact("layers", {}, channel=fake.text_channel)
    assert not layers_answer["data"].get("flags")  # what does not use the filter still works
    fixed = await fake.interact("subscribe", {"layers": "runtime"}, channel=fake.text_channel)
    assert not fixed["data"].get("flags")
    settings = await fake.interact("settings", {}, channel=fake.text_channel)
    assert "无法读取" not in settings["data"]["embeds"][0]["description"]


async def test_event_shows_the_breakdown_and_every_source(bot: DigestBot, fake: FakeDiscord,
                                                          sqlite_sessions: SessionFactory) -> None:
    await build_runtime_day(sqlite_sessions)
    answer = await fake.interact("event", {"id": 1}, channel=fake.text_channel)
    description = answer["data"]["embeds"][0]["description"]
    assert not answer["data"].get("flags") and "Splyce" in description and "arxiv.org/abs" in description


async def test_digest_sends_the_rendered_payloads(bot: DigestBot, fake: FakeDiscord,
                                                  sqlite_sessions: SessionFactory) -> None:
    await build_runtime_day(sqlite_sessions)
    answer = await fake.interact("digest", {"date": DAY.isoformat()}, channel=fake.text_channel)
    assert DAY.isoformat() in answer["data"]["content"] and answer["data"]["embeds"]


async def test_autocomplete_offers_labels_with_ids_as_values() -> None:
    choices = layer_completions("runtime,ker", "zh")
    assert [(c.name, c.value) for c in choices] == [("runtime,内核生成", "runtime,kernel_codegen")]
    assert len(layer_completions("", "en")) == 9


async def test_the_cli_entry_runs_until_stopped(settings: Settings, fake: FakeDiscord) -> None:
    stop = asyncio.Event()
    running = asyncio.create_task(run_discord(settings, stop=stop))
    await fake.until(lambda: "global" in fake.commands)
    await fake.connected()
    stop.set()
    assert await asyncio.wait_for(running, 10) == 0


async def test_a_missing_token_or_an_unreachable_api_is_one_line(settings: Settings) -> None:
    with pytest.raises(ConfigError, match="DIGEST_DISCORD_TOKEN"):
        await run_discord(settings.replace(discord_token=None))
    nowhere = settings.replace(discord_api_base="http://127.0.0.1:9/api/v10")
    with pytest.raises(DigestError, match="cannot reach the Discord API") as caught:
        await run_discord(nowhere)
    assert TOKEN not in str(caught.value) and "\n" not in str(caught.value)


# -- the push channel -------------------------------------------------------------

def message(address: str, *parts: str, start: int = 0, thread: str | None = None) -> Message:
    payloads = tuple({"content": text, "embeds": []} for text in parts)
    return Message(1, 1, address, payloads, start_part=start, thread_id=thread)


async def test_publish_sends_only_the_chosen_layers_in_a_thread_named_after_the_day(
        bot: DigestBot, fake: FakeDiscord, sqlite_sessions: SessionFactory, settings: Settings) -> None:
    await build_runtime_day(sqlite_sessions)
    await fake.interact("subscribe", {"layers": "runtime"}, channel=fake.text_channel)
    pushed = load_channel("discord", settings)
    try:
        report = await publish(sqlite_sessions, pushed)
    finally:
        await pushed.aclose()
    assert report.channels["discord"].sent == 1
    [thread] = fake.threads.values()
    assert (thread["name"], thread["parent_id"]) == (DAY.isoformat(), str(fake.text_channel))
    body = "".join(text_of(p) for p in fake.sent_to(fake.text_channel) + fake.sent_to(int(thread["id"])))
    assert "vLLM" in body and "Splyce" not in body and "SASS" not in body
    assert "@everyone" not in body and "@here" not in body and "<@123>" not in body and "<@&456>" not in body
    assert "\\*\\*bold\\*\\*" in body and "[click](https://evil.example)" not in body
    assert all(m.payload["allowed_mentions"] == {"parse": []} for m in fake.messages)


class OnePerEmbed(Renderer):
    """Every embed in a payload of its own: a digest of several parts."""

    def discord(self, view: DigestView) -> list[dict[str, Any]]:
        return [{**p, "embeds": [e]} for p in super().discord(view) for e in p["embeds"]]


async def test_a_resumed_send_continues_in_the_days_thread(fake: FakeDiscord, channel: DiscordChannel,
                                                           sqlite_sessions: SessionFactory) -> None:
    await build_runtime_day(sqlite_sessions)
    async with sqlite_sessions.begin() as session:
        await subscribe(session, "discord", f"{fake.text_channel}", confirmed=True, now=LATER)
    fake.thread_script = [(502, {"message": "Bad Gateway", "code": 0})]  # the thread's first part fails
    first = await publish(sqlite_sessions, channel, renderer=OnePerEmbed(site_url="https://digest.example"))
    assert first.channels["discord"].deferred == 1
    async with sqlite_sessions() as session:
        row = (await session.scalars(select(Delivery))).one()
    [thread_id] = fake.threads
    assert (row.thread_id, row.parts_sent) == (str(thread_id), 1)
    second = await publish(sqlite_sessions, channel, renderer=OnePerEmbed(site_url="https://digest.example"),
                           now=LATER + dt.timedelta(minutes=30))
    assert second.channels["discord"].sent == 1 and len(fake.threads) == 1
    assert len(fake.sent_to(fake.text_channel)) == 1 and len(fake.sent_to(thread_id)) == row.parts_total - 1


async def test_a_429_is_waited_out_for_retry_after(fake: FakeDiscord, channel: DiscordChannel,
                                                   clock: FakeTime) -> None:
    fake.script[fake.text_channel] = [(429, {"message": "slow down", "retry_after": 2.5, "global": False})]
    result = await channel.send(message(f"{fake.text_channel}", "one"))
    assert result.outcome is Outcome.SENT and 2.5 in clock.naps
    assert len(fake.sent_to(fake.text_channel)) == 1 and channel.rate_limited == 1


async def test_a_global_429_holds_every_request(fake: FakeDiscord, channel: DiscordChannel,
                                               clock: FakeTime) -> None:
    fake.script[fake.text_channel] = [(429, {"message": "slow down", "retry_after": 4.0, "global": True})]
    result = await channel.send(message(f"{fake.text_channel}", "one"))
    assert result.outcome is Outcome.SENT and channel.limits.blocked_until == pytest.approx(4.0)
    other = await channel.send(message(f"{fake.forum_channel}", "two"))
    assert other.outcome is Outcome.SENT and clock.now >= 4.0


async def test_refusals_map_to_outcomes_and_block_the_subscriber(fake: FakeDiscord, channel: DiscordChannel,
                                                                 sqlite_sessions: SessionFactory) -> None:
    await build_runtime_day(sqlite_sessions)
    gone, ok = fake.add_channel(0), fake.add_channel(0)
    async with sqlite_sessions.begin() as session:
        for cid in (gone, ok):
            await subscribe(session, "discord", f"{cid}", confirmed=True, now=LATER)
    fake.script[gone] = [(404, {"message": "Unknown Channel", "code": 10003})]
    report = await publish(sqlite_sessions, channel)
    assert (report.channels["discord"].sent, report.channels["discord"].failed) == (1, 1)
    async with sqlite_sessions() as session:
        blocked = await find_by_address(session, "discord", f"{gone}")
    assert blocked is not None and blocked.status == "blocked"


async def test_publish_leaves_out_a_subscriber_whose_filter_names_no_layer_and_sends_the_rest(
        fake: FakeDiscord, channel: DiscordChannel, sqlite_sessions: SessionFactory) -> None:
    """Today such a subscriber counts as ``empty`` (its filter keeps no event): no row, nothing sent to it."""
    await build_runtime_day(sqlite_sessions)
    gone, ok = fake.add_channel(0), fake.add_channel(0)
    async with sqlite_sessions.begin() as session:
        for cid in (gone, ok):
            await subscribe(session, "discord", f"{cid}", confirmed=True, now=LATER)
    await damage(sqlite_sessions, f"{gone}", ["gone_layer"])
    report = await publish(sqlite_sessions, channel)
    assert (report.channels["discord"].sent, report.channels["discord"].empty) == (1, 1)
    assert fake.sent_to(gone) == [] and fake.sent_to(ok)
    async with sqlite_sessions() as session:
        assert len((await session.scalars(select(Delivery))).all()) == 1


async def test_publish_skips_a_subscriber_whose_stored_layers_are_garbage(
        fake: FakeDiscord, channel: DiscordChannel, sqlite_sessions: SessionFactory) -> None:
    await build_runtime_day(sqlite_sessions)
    garbage, ok = fake.add_channel(0), fake.add_channel(0)
    async with sqlite_sessions.begin() as session:
        for cid in (garbage, ok):
            await subscribe(session, "discord", f"{cid}", confirmed=True, now=LATER)
    await damage(sqlite_sessions, f"{garbage}", 5)
    report = await publish(sqlite_sessions, channel)
    assert report.channels["discord"].sent == 1 and fake.sent_to(garbage) == [] and fake.sent_to(ok)


@pytest.mark.parametrize(("status", "code", "outcome"), [
    (403, 50001, Outcome.PERMANENT), (403, 50013, Outcome.PERMANENT), (403, 50007, Outcome.PERMANENT),
    (500, 0, Outcome.TRANSIENT), (400, 50035, Outcome.BUG), (401, 0, Outcome.FATAL),
])
async def test_each_refusal_means_what_it_says(fake: FakeDiscord, channel: DiscordChannel, status: int,
                                               code: int, outcome: Outcome) -> None:
    fake.script[fake.text_channel] = [(status, {"message": "no", "code": code})]
    result = await channel.send(message(f"{fake.text_channel}", "one", "two"))
    assert (result.outcome, result.parts_sent) == (outcome, 0)


async def test_a_refused_token_stops_the_run_and_marks_nobody(fake: FakeDiscord,
                                                              sqlite_sessions: SessionFactory) -> None:
    await build_runtime_day(sqlite_sessions)
    async with sqlite_sessions.begin() as session:
        await subscribe(session, "discord", f"{fake.text_channel}", confirmed=True, now=LATER)
    pushed = DiscordChannel(make_client("wrong", fake.api_base))
    with pytest.raises(DeliveryError, match="401"):
        await publish(sqlite_sessions, pushed)
    await pushed.aclose()
    async with sqlite_sessions() as session:
        sub = await find_by_address(session, "discord", f"{fake.text_channel}")
    assert sub is not None and sub.status == "active"


async def test_a_dropped_connection_is_transient() -> None:
    pushed = DiscordChannel(httpx.AsyncClient(base_url="http://127.0.0.1:9/api/v10/"))
    result = await pushed.send(message("channel:120000000000000001", "one"))
    await pushed.aclose()
    assert result.outcome is Outcome.TRANSIENT


async def test_dms_get_no_thread_and_forums_get_a_post(fake: FakeDiscord, channel: DiscordChannel) -> None:
    dm = fake.dm_with(120_000_000_000_000_077)
    sent = await channel.send(message("user:120000000000000077", "2026-09-29 one", "two"))
    assert sent.outcome is Outcome.SENT and sent.thread_id is None and len(fake.sent_to(dm)) == 2
    posted = await channel.send(message(f"{fake.forum_channel}", "**Digest 2026-09-29**", "two"))
    [post] = [t for t in fake.threads.values() if t["parent_id"] == str(fake.forum_channel)]
    assert posted.thread_id == post["id"] and post["name"] == "2026-09-29"
    assert len(fake.sent_to(int(post["id"]))) == 2


async def test_threads_can_be_turned_off(fake: FakeDiscord, settings: Settings) -> None:
    pushed = create_channel(settings.replace(discord_threads=False))
    result = await pushed.send(message(f"{fake.text_channel}", "2026-09-29", "two"))
    await pushed.aclose()
    assert result.thread_id is None and fake.threads == {} and len(fake.sent_to(fake.text_channel)) == 2


async def test_a_start_part_and_a_thread_resume_where_they_were(fake: FakeDiscord,
                                                                channel: DiscordChannel) -> None:
    thread = fake.add_thread(fake.text_channel, "2026-09-29")
    result = await channel.send(message(f"{fake.text_channel}", "a", "b", "c", start=1,
                                        thread=str(thread)))
    assert (result.parts_sent, result.thread_id) == (3, str(thread))
    assert [p["content"] for p in fake.sent_to(thread)] == ["b", "c"]
    assert fake.sent_to(fake.text_channel) == []


async def test_limits_keep_five_per_five_seconds_per_channel_and_fifty_per_second_overall(
        clock: FakeTime) -> None:
    limits = DiscordLimits(Limits(), clock=clock.time, sleep=clock.sleep)
    one: list[float] = []
    for _ in range(12):
        await limits.acquire("POST channels/1/messages", "1")
        one.append(clock.now)
    assert all(b - a >= 5.0 for a, b in zip(one, one[5:], strict=False))
    clock.now, many = 100.0, []
    for n in range(120):
        await limits.acquire(f"POST channels/{n}/messages", str(n))
        many.append(clock.now)
    assert all(b - a >= 1.0 for a, b in zip(many, many[50:], strict=False))


async def test_a_learnt_bucket_with_nothing_left_waits_for_its_reset(clock: FakeTime) -> None:
    limits = DiscordLimits(clock=clock.time, sleep=clock.sleep)
    limits.learn("POST x", httpx.Headers({"X-RateLimit-Bucket": "b", "X-RateLimit-Remaining": "0",
                                          "X-RateLimit-Reset-After": "3.5"}))
    await limits.acquire("POST x", None)
    assert clock.now >= 3.5


def test_the_thread_is_named_after_the_date_in_the_header() -> None:
    header = {"content": "**Compiler digest 2026-09-29**\n<https://x/d/2026-09-29>"}
    assert thread_name([header]) == "2026-09-29"
    assert thread_name([{"content": "", "embeds": []}]) == "digest"


@hsettings(max_examples=200, deadline=None)
@given(st.text())
def test_no_reply_text_can_mention_or_link_anyone(text: str) -> None:
    payloads = reply_payloads([(Span(text), Span(text, "b"), Span(text, "code"))])
    out = "".join(str(e.get("description", "")) for p in payloads for e in p["embeds"])
    assert "@everyone" not in out.lower() and "@here" not in out.lower()
    assert re.search(r"<(@|#\d)", out) is None
    assert all(p["allowed_mentions"] == {"parse": []} for p in payloads)
