"""The Discord adapter: application commands over discord.py's gateway; the push channel's entry point.

    Discord ─gateway─► DigestBot (discord.py) ─► DigestTree ─► Commands (bot.commands) ─► the core
                                                  │ one on_error for every command
                                                  ▼
                   Reply ─► embeds (discord_escape, allowed_mentions none) ─► interaction callback

The push channel itself (REST only, no gateway) is :mod:`bot.discord_push`;
:func:`create_channel` builds it from the settings. A subscriber's address is
the bare channel id: the channel a command was used in, a thread's parent, or a
DM channel. Every reply carries ``allowed_mentions: {"parse": []}`` and only
Discord-escaped text.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import discord
import yarl
from discord import app_commands
from discord.ext import commands as ext

from bot.commands import Chat, Commands, Line, Reply, Span
from bot.discord_push import NAME, DiscordChannel, make_client
from bot.texts import DISCORD_DESCRIBE, DISCORD_NAMES, TEXTS, locale_from
from digest.domain.clock import system_now
from digest.domain.errors import ConfigError, DigestError
from digest.domain.layers import BY_ID, LAYERS
from digest.render.renderer import Renderer
from digest.render.safety import clean_text, discord_escape, discord_url, neutralise_mentions, safe_url
from digest.render.split import pack_discord, split_plain

if TYPE_CHECKING:
    from digest.config import Settings
    from digest.store.db import SessionFactory

log = logging.getLogger(__name__)
DEFAULT_API = "https://discord.com/api/v10"


def token_of(settings: Settings) -> str:
    """The bot token, or a ConfigError naming the variable (the token itself is never printed)."""
    token = getattr(settings, "discord_token", None)
    if token is None or not token.get_secret_value():
        raise ConfigError("DIGEST_DISCORD_TOKEN is not set (the bot token from the Discord developer portal)")
    return str(token.get_secret_value())


def api_base(settings: Settings) -> str:
    return (getattr(settings, "discord_api_base", None) or DEFAULT_API).rstrip("/")


def create_channel(settings: Settings) -> DiscordChannel:
    """The entry point ``compiler_digest.channels: discord``."""
    client = make_client(token_of(settings), api_base(settings))
    return DiscordChannel(client, threads=bool(getattr(settings, "discord_threads", True)))


# -- replies as embeds ------------------------------------------------------------

def span_md(text: str, style: str = "", url: str | None = None) -> str:
    """One span as Discord markdown: escaped text, its style, a masked link when the URL is http(s)."""
    md = discord_escape(text)
    code = neutralise_mentions(clean_text(text).replace("`", "ˋ"))
    md = {"b": f"**{md}**", "i": f"*{md}*", "code": f"`{code}`"}.get(style, md)
    link = safe_url(url)
    return f"[{md}]({discord_url(link)})" if link else md


def reply_payloads(lines: Sequence[Line]) -> list[dict[str, Any]]:
    """Reply lines as message payloads of embeds, within Discord's limits."""
    text = "\n".join("".join(span_md(s.text, s.style, s.url) for s in line) for line in lines)
    return pack_discord([], [{"description": chunk} for chunk in split_plain(text, 4096)])


def to_kwargs(payload: dict[str, Any]) -> dict[str, Any]:
    """A payload dict as discord.py send arguments (never a mention)."""
    return {"content": payload.get("content") or None, "allowed_mentions": discord.AllowedMentions.none(),
            "embeds": [discord.Embed.from_dict(e) for e in payload.get("embeds", [])]}


def chat_of(interaction: discord.Interaction[Any]) -> Chat:
    """The interaction's channel as the core addresses it: a thread's parent, or the DM channel."""
    channel = interaction.channel
    address = channel.parent_id if isinstance(channel, discord.Thread) else interaction.channel_id
    return Chat(channel=NAME, address=str(address), is_group=interaction.guild is not None,
                user_locale=str(interaction.locale))


async def answer(interaction: discord.Interaction[Any], payloads: Sequence[dict[str, Any]], *,
                 ephemeral: bool = False) -> None:
    """The first payload in the interaction callback, the rest as follow-ups."""
    for n, payload in enumerate(payloads):
        if n == 0 and not interaction.response.is_done():
            await interaction.response.send_message(**to_kwargs(payload), ephemeral=ephemeral)
        else:
            await interaction.followup.send(**to_kwargs(payload), ephemeral=ephemeral)


# -- the application commands ---------------------------------------------------------

class Texts(app_commands.Translator):
    """Localises command names and descriptions for zh-CN and zh-TW (``locale_str`` key extra)."""

    async def translate(self, string: app_commands.locale_str, locale: discord.Locale,
                        context: app_commands.TranslationContextTypes) -> str | None:
        key, kind = string.extras.get("key", ""), string.extras.get("kind", "describe")
        if locale_from(str(locale)) != "zh":
            return None
        table = DISCORD_NAMES if kind == "name" else DISCORD_DESCRIBE
        return table.get("zh", {}).get(key)


def describe(key: str) -> app_commands.locale_str:
    return app_commands.locale_str(DISCORD_DESCRIBE["en"][key], key=key)


def named(key: str) -> app_commands.locale_str:
    return app_commands.locale_str(key.rsplit(".", 1)[-1], key=key, kind="name")


class DigestTree(app_commands.CommandTree[Any]):
    """The command tree with the one error handler: every failure is one ephemeral line, localised."""

    async def on_error(self, interaction: discord.Interaction[Any],
                       error: app_commands.AppCommandError) -> None:
        locale = locale_from(str(interaction.locale))
        missing = isinstance(error, app_commands.MissingPermissions | app_commands.CheckFailure)
        if not missing:
            log.error("discord: /%s failed: %s", interaction.command.name if interaction.command else "?",
                      error, exc_info=error)
        line = TEXTS[locale]["admins_only" if missing else "error"]
        await answer(interaction, reply_payloads([(Span(line),)]), ephemeral=True)


@dataclass
class Handlers:
    """Interactions in, core calls through ``Commands``, embeds out."""

    commands: Commands
    renderer: Renderer

    async def run(self, interaction: discord.Interaction[Any], name: str, args: list[str]) -> None:
        async def can_manage() -> bool:
            return interaction.guild is None or interaction.permissions.manage_channels

        reply = await self.commands.run(chat_of(interaction), name, args, can_manage)
        await self.send(interaction, reply, ephemeral=reply.error or name == "settings")

    async def send(self, interaction: discord.Interaction[Any], reply: Reply, *, ephemeral: bool) -> None:
        payloads = self.renderer.discord(reply.digest) if reply.digest else reply_payloads(reply.lines)
        await answer(interaction, payloads, ephemeral=ephemeral)


Choices = list[app_commands.Choice[str]]


async def layer_choices(interaction: discord.Interaction[Any], current: str) -> Choices:
    """Layers for a comma-separated value: the ids typed so far, then each layer not yet chosen."""
    return layer_completions(current, locale_from(str(interaction.locale)))


def layer_completions(current: str, locale: str) -> Choices:
    """Localised labels, layer ids as values (at most 25, Discord's limit)."""
    *done, typing = [part.strip().lower() for part in current.split(",")]
    head = "".join(f"{d}," for d in done if d in BY_ID)
    found = [layer for layer in LAYERS
             if layer.id not in done and typing in layer.id + " " + layer.label(locale).lower()]
    return [app_commands.Choice(name=head + layer.label(locale), value=head + layer.id)
            for layer in found][:25]


def add_commands(tree: DigestTree, handlers: Handlers) -> None:
    """Register the seven application commands on ``tree``."""
    manage = app_commands.default_permissions(manage_channels=True)

    @tree.command(name=named("subscribe"), description=describe("subscribe"))
    @app_commands.describe(layers=describe("subscribe.layers"), min_score=describe("subscribe.min_score"))
    @app_commands.rename(layers=named("subscribe.layers"), min_score=named("subscribe.min_score"))
    @app_commands.autocomplete(layers=layer_choices)
    @manage
    async def subscribe(interaction: discord.Interaction[Any], layers: str = "all",
                        min_score: app_commands.Range[int, 0, 100] | None = None) -> None:
        await handlers.run(interaction, "subscribe",
                           [layers or "all", *([f"min={min_score}"] if min_score is not None else [])])

    @tree.command(name=named("unsubscribe"), description=describe("unsubscribe"))
    @manage
    async def unsubscribe(interaction: discord.Interaction[Any]) -> None:
        await handlers.run(interaction, "unsubscribe", [])

    @tree.command(name=named("settings"), description=describe("settings"))
    async def settings(interaction: discord.Interaction[Any]) -> None:
        await handlers.run(interaction, "settings", [])

    @tree.command(name=named("recent"), description=describe("recent"))
    @app_commands.describe(layer=describe("recent.layer"), days=describe("recent.days"))
    @app_commands.rename(layer=named("recent.layer"), days=named("recent.days"))
    @app_commands.autocomplete(layer=layer_choices)
    async def recent(interaction: discord.Interaction[Any], layer: str | None = None,
                     days: app_commands.Range[int, 1, 30] = 3) -> None:
        await handlers.run(interaction, "recent", [*([layer] if layer else []), str(days)])

    async def dates(interaction: discord.Interaction[Any], current: str) -> list[app_commands.Choice[str]]:
        return [app_commands.Choice(name=d, value=d) for d in await handlers.commands.built_dates(current)]

    @tree.command(name=named("digest"), description=describe("digest"))
    @app_commands.describe(date=describe("digest.date"))
    @app_commands.rename(date=named("digest.date"))
    @app_commands.autocomplete(date=dates)
    async def digest(interaction: discord.Interaction[Any], date: str | None = None) -> None:
        await handlers.run(interaction, "digest", [date] if date else [])

    @tree.command(name=named("event"), description=describe("event"))
    @app_commands.describe(id=describe("event.id"))
    @app_commands.rename(id=named("event.id"))
    async def event(interaction: discord.Interaction[Any], id: app_commands.Range[int, 1]) -> None:
        await handlers.run(interaction, "event", [str(id)])

    @tree.command(name=named("layers"), description=describe("layers"))
    async def layers(interaction: discord.Interaction[Any]) -> None:
        await handlers.run(interaction, "layers", [])

    @tree.command(name=named("search"), description=describe("search"))
    @app_commands.describe(words=describe("search.words"))
    @app_commands.rename(words=named("search.words"))
    async def search(interaction: discord.Interaction[Any], words: app_commands.Range[str, 1, 200]) -> None:
        await handlers.run(interaction, "search", words.split())


class DigestBot(ext.Bot):
    """The gateway bot: syncs the commands at start (to one guild when given, else globally)."""

    def __init__(self, *, guild_id: int | None, shards: int | None = None, **options: Any) -> None:
        super().__init__(command_prefix=ext.when_mentioned, intents=discord.Intents.default(),
                         allowed_mentions=discord.AllowedMentions.none(), tree_cls=DigestTree,
                         shard_count=shards, **options)
        self.guild_id = guild_id

    async def setup_hook(self) -> None:
        await self.tree.set_translator(Texts())
        guild = discord.Object(self.guild_id) if self.guild_id else None
        if guild is not None:
            self.tree.copy_global_to(guild=guild)
        await self.tree.sync(guild=guild)


class ShardedDigestBot(DigestBot, ext.AutoShardedBot):
    """The same bot over several shards (DIGEST_DISCORD_SHARDS=auto or a number)."""


def point_at(settings: Settings) -> None:
    """Aim discord.py at DIGEST_DISCORD_API_BASE / _GATEWAY (class attributes it reads on every use)."""
    discord.http.Route.BASE = api_base(settings)
    gateway = getattr(settings, "discord_gateway", None)
    if gateway:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway)


def build_bot(settings: Settings, sessions: SessionFactory, *, clock: Any = None,
              guild_ready_timeout: float = 2.0) -> DigestBot:
    """The bot with every command; DIGEST_DISCORD_SHARDS picks one plain bot or an auto-sharded one."""
    point_at(settings)
    discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False  # no voice here: no warning lines
    shards = getattr(settings, "discord_shards", None)
    cls = DigestBot if shards is None else ShardedDigestBot
    count = int(shards) if shards and shards != "auto" else None
    bot = cls(guild_id=getattr(settings, "discord_guild_id", None), shards=count,
              guild_ready_timeout=guild_ready_timeout)
    handlers = Handlers(Commands(sessions, channel=NAME, clock=clock or system_now),
                        Renderer(site_url=settings.site_url, timezone=settings.timezone))
    add_commands(bot.tree, handlers)  # type: ignore[arg-type]
    return bot


async def login(bot: DigestBot, token: str) -> None:
    """Log in; a refused token or an unreachable API is a one-line error (the token never in it)."""
    try:
        await bot.login(token)
    except discord.LoginFailure:
        raise ConfigError("DIGEST_DISCORD_TOKEN was refused by the Discord API") from None
    except (TimeoutError, OSError, discord.HTTPException) as exc:
        text = str(exc).replace(token, "<token>")
        raise DigestError(f"cannot reach the Discord API at {discord.http.Route.BASE}: {text}") from None
