"""The python-telegram-bot adapter: chat commands, inline keyboards and the push channel.

    Telegram ─getUpdates─► Application ─► TelegramBot.on_command / on_button
                                             │  Commands (bot.commands) ─► the core
                                             ▼
                            Reply ─► Telegram HTML (escaped here) ─► sendMessage / editMessageText

    digest publish ─► TelegramChannel.send(Message) ─► RateLimiter ─► sendMessage (parse_mode HTML)

    webhook mode (DIGEST_TELEGRAM_WEBHOOK_URL): Telegram ─POST─► the web app (digest.web.hooks)
        ─► TelegramWebhook.handle ─► Application.update_queue ─► the same handlers; no getUpdates

Everything untrusted is escaped with ``tg_escape``; only http(s) links are
kept; link previews are off. Every sendMessage, from a command reply or a
push, waits for a :class:`~bot.ratelimit.RateLimiter` first. Embedding (the
service runs the bot beside the web app)::

    app = build_application(settings, sessions)
    async with running(app):
        ...  # serve until told to stop
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
import logging
import warnings
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from telegram import (
    Bot,
    BotCommand,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    Message,
    Update,
)
from telegram.constants import ChatMemberStatus, ChatType, ParseMode
from telegram.error import BadRequest, ChatMigrated, Forbidden, InvalidToken, RetryAfter, TelegramError
from telegram.ext import (
    Application,
    ApplicationBuilder,
    BaseRateLimiter,
    BaseUpdateProcessor,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    filters,
)
from telegram.request import HTTPXRequest
from telegram.warnings import PTBDeprecationWarning

from bot.commands import Button, Chat, Commands, Line, Reply, command_descriptions
from bot.ratelimit import RateLimiter
from bot.texts import TEXTS, locale_from
from digest.deliver.channels import Message as PushMessage
from digest.deliver.channels import Outcome, SendResult
from digest.domain.clock import system_now
from digest.domain.errors import ConfigError, DigestError
from digest.domain.locales import LOCALES
from digest.domain.ratelimit import SharedLimiter
from digest.domain.status import ChannelName
from digest.render.renderer import Renderer
from digest.render.safety import safe_url, tg_attr, tg_escape
from digest.render.split import split_telegram

if TYPE_CHECKING:
    from digest.config import Settings
    from digest.store.db import SessionFactory

log = logging.getLogger(__name__)
NAME = ChannelName.TELEGRAM
NO_PREVIEW = LinkPreviewOptions(is_disabled=True)
MANAGERS = (ChatMemberStatus.OWNER, ChatMemberStatus.ADMINISTRATOR)
# 400s that mean "this chat is gone for us", not "our message is wrong".
GONE = ("chat not found", "have no rights to send", "not enough rights to send", "chat_write_forbidden",
        "user is deactivated", "peer_id_invalid", "bot was kicked", "group chat was deactivated")
App = Application[Any, Any, Any, Any, Any, Any]
ALLOWED_UPDATES = ["message", "callback_query"]  # what the handlers answer, polled or posted
WEBHOOK_HEADER = "X-Telegram-Bot-Api-Secret-Token"


# -- replies as Telegram HTML -------------------------------------------------

def span_html(text: str, style: str = "", url: str | None = None) -> str:
    """One span: escaped text, its style tag, and a link when the URL is http(s)."""
    html = tg_escape(text)
    if style in ("b", "i", "code"):
        html = f"<{style}>{html}</{style}>"
    link = safe_url(url)
    return f'<a href="{tg_attr(link)}">{html}</a>' if link else html


def reply_parts(lines: Sequence[Line]) -> list[str]:
    """Reply lines as Telegram HTML messages, each within Telegram's length limit."""
    text = "\n".join("".join(span_html(s.text, s.style, s.url) for s in line) for line in lines)
    return split_telegram([text])


def keyboard(rows: Sequence[Sequence[Button]]) -> InlineKeyboardMarkup | None:
    """An inline keyboard, or None when there are no buttons."""
    if not rows:
        return None
    return InlineKeyboardMarkup([[InlineKeyboardButton(b.label, callback_data=b.action) for b in row]
                                 for row in rows])


def retry_seconds(exc: RetryAfter) -> float:
    """``retry_after`` in seconds (python-telegram-bot gives an int or a timedelta)."""
    with warnings.catch_warnings():  # PTB 22.2+ warns that the type will become timedelta
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


# -- the push channel ---------------------------------------------------------

def classify(exc: TelegramError) -> Outcome:
    """What a Bot API error means for one delivery (DESIGN.md, "Semantics")."""
    if isinstance(exc, InvalidToken):
        return Outcome.FATAL
    if isinstance(exc, Forbidden):
        return Outcome.PERMANENT
    if isinstance(exc, BadRequest):  # the message is matched lowercased: PTB capitalises it
        text = exc.message.lower()
        return Outcome.PERMANENT if any(gone in text for gone in GONE) else Outcome.BUG
    return Outcome.TRANSIENT  # RetryAfter, TimedOut, NetworkError, Conflict


class TelegramChannel:
    """Sends rendered digest parts to Telegram chats through the real Bot API client."""

    name = NAME

    def __init__(self, bot: Bot, *, limiter: RateLimiter | None = None, max_retries: int = 3,
                 concurrency: int = 32) -> None:
        self.bot = bot
        self.limiter = limiter or RateLimiter()
        self.max_retries = max_retries
        self.concurrency = concurrency  # sends in flight: the limiter, not the latency, sets the pace
        self._ready = asyncio.Lock()
        self._initialized = False

    def share_limits(self, shared: SharedLimiter) -> None:
        """Keep Telegram's limits with every worker (bootstrap hands ``shared`` over on PostgreSQL)."""
        self.limiter.share(shared)

    async def send(self, message: PushMessage) -> SendResult:
        """Send the parts from ``message.start_part`` on; map every Bot API error to an outcome."""
        chat, sent, moved = message.address, message.start_part, None
        try:
            await self._initialize()
            for text in message.parts[message.start_part:]:
                chat, moved = await self._deliver(chat, str(text), moved)
                sent += 1
        except TelegramError as exc:
            wait = retry_seconds(exc) if isinstance(exc, RetryAfter) else None
            log.warning("telegram: delivery %s to %s: %s", message.delivery_id, chat, exc)
            return SendResult(classify(exc), sent, error=f"{type(exc).__name__}: {exc}",
                              retry_after=wait, new_address=moved)
        return SendResult(Outcome.SENT, sent, new_address=moved)

    async def _deliver(self, chat: str, text: str, moved: str | None) -> tuple[str, str | None]:
        """One part: follow a group's move to a supergroup, wait out 429s up to ``max_retries``."""
        for attempt in range(self.max_retries + 1):
            await self.limiter.acquire(chat)
            try:
                await self.bot.send_message(chat_id=int(chat), text=text, parse_mode=ParseMode.HTML,
                                            link_preview_options=NO_PREVIEW)
                return chat, moved
            except ChatMigrated as exc:
                if moved is not None:
                    raise
                chat = moved = str(exc.new_chat_id)
            except RetryAfter as exc:
                if attempt == self.max_retries:
                    raise
                await asyncio.sleep(retry_seconds(exc))
        raise TelegramError("gave up after a migration and retries")

    async def _initialize(self) -> None:
        if not self._initialized:
            async with self._ready:  # getMe once: a bad token is FATAL before anything is sent
                await self.bot.initialize()
                self._initialized = True

    async def aclose(self) -> None:
        """Close the HTTP connections (Bot.shutdown is a no-op when never initialized)."""
        await self.bot.shutdown()
        self._initialized = False


def make_bot(token: str, base_url: str | None) -> Bot:
    """A Bot API client (``base_url`` ends in ``/bot``; the library appends the token)."""
    request = HTTPXRequest(connection_pool_size=64)
    if base_url:
        return Bot(token, base_url=base_url, base_file_url=file_url(base_url), request=request)
    return Bot(token, request=request)


def file_url(base_url: str) -> str:
    """The file URL beside a Bot API ``base_url`` (``.../bot`` → ``.../file/bot``)."""
    root = base_url.removesuffix("/bot") if base_url.endswith("/bot") else base_url.rstrip("/")
    return f"{root}/file/bot"


def token_of(settings: Settings) -> str:
    """The bot token, or a ConfigError naming the variable."""
    if settings.telegram_token is None or not settings.telegram_token.get_secret_value():
        raise ConfigError("DIGEST_TELEGRAM_TOKEN is not set (the token @BotFather gave the bot)")
    return settings.telegram_token.get_secret_value()


def create_channel(settings: Settings) -> TelegramChannel:
    """The entry point ``compiler_digest.channels: telegram``."""
    return TelegramChannel(make_bot(token_of(settings), settings.telegram_api_base))


# -- the interactive bot --------------------------------------------------------

class LimitedRequests(BaseRateLimiter[None]):
    """Puts the bot's own sendMessage calls through the limiter, and waits out a 429 twice."""

    def __init__(self, limiter: RateLimiter, retries: int = 2) -> None:
        self.limiter = limiter
        self.retries = retries

    async def initialize(self) -> None:
        """Nothing to open."""

    async def shutdown(self) -> None:
        """Nothing to close."""

    async def process_request(
        self, callback: Callable[..., Coroutine[Any, Any, bool | dict[str, Any] | list[dict[str, Any]]]],
        args: Any, kwargs: dict[str, Any], endpoint: str, data: dict[str, Any],
        rate_limit_args: None,
    ) -> bool | dict[str, Any] | list[dict[str, Any]]:
        """Wait for the limiter before each message; retry after a 429."""
        for attempt in range(self.retries + 1):
            if endpoint == "sendMessage" and "chat_id" in data:
                await self.limiter.acquire(data["chat_id"])
            try:
                return await callback(*args, **kwargs)
            except RetryAfter as exc:
                if attempt == self.retries:
                    raise
                await asyncio.sleep(retry_seconds(exc))
        raise AssertionError("unreachable")


class PerChatUpdates(BaseUpdateProcessor):
    """Updates of different chats run concurrently; one chat's run in order (no lost toggles)."""

    def __init__(self, max_concurrent_updates: int = 64) -> None:
        super().__init__(max_concurrent_updates)
        self._chats: dict[int | None, tuple[asyncio.Lock, list[int]]] = {}

    async def do_process_update(self, update: object, coroutine: Any) -> None:
        """Run ``coroutine`` after the chat's earlier updates."""
        chat = update.effective_chat.id if isinstance(update, Update) and update.effective_chat else None
        lock, users = self._chats.setdefault(chat, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                await coroutine
        finally:
            users[0] -= 1
            if not users[0]:  # nobody else holds or waits for this chat's lock
                del self._chats[chat]

    async def initialize(self) -> None:
        """Nothing to open."""

    async def shutdown(self) -> None:
        """Nothing to close."""


class DigestApplication(Application):  # type: ignore[type-arg]
    """The Application, registering the command menus (zh, en, default) when it initializes."""

    async def initialize(self) -> None:
        """Initialize the bot, then describe the commands with setMyCommands."""
        await super().initialize()
        await register_commands(self.bot)


async def register_commands(bot: Bot) -> None:
    """setMyCommands for each locale, and English for everyone else."""
    for locale in (*LOCALES, None):
        pairs = command_descriptions(locale or "en")
        await bot.set_my_commands([BotCommand(name, text) for name, text in pairs], language_code=locale)


def chat_of(update: Update) -> Chat:
    """The command's chat as the core addresses it."""
    chat, user = update.effective_chat, update.effective_user
    assert chat is not None
    return Chat(channel=NAME, address=str(chat.id), is_group=chat.type != ChatType.PRIVATE,
                user_locale=user.language_code if user else None)


async def can_manage(update: Update, bot: Bot) -> bool:
    """A private chat's user, or a group's creator or administrator (anonymous admins too)."""
    chat, user, message = update.effective_chat, update.effective_user, update.message
    if chat is None or chat.type == ChatType.PRIVATE:
        return True
    if message is not None and message.sender_chat is not None and message.sender_chat.id == chat.id:
        return True  # an anonymous administrator speaks as the group itself
    if user is None:
        return False
    member = await bot.get_chat_member(chat.id, user.id)
    return member.status in MANAGERS


class TelegramBot:
    """The handlers: Telegram updates in, core calls through ``Commands``, Telegram replies out."""

    def __init__(self, commands: Commands, renderer: Renderer) -> None:
        self.commands = commands
        self.renderer = renderer

    async def on_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Any of the bot's commands, with or without the @botname suffix."""
        message = update.message
        if message is None or not message.text or update.effective_chat is None:
            return
        name = message.text.split()[0][1:].split("@")[0].lower()
        reply = await self.commands.run(chat_of(update), name, context.args or [],
                                        lambda: can_manage(update, context.bot))
        await self.send_reply(message, reply)

    async def send_reply(self, message: Message, reply: Reply) -> None:
        """Send a reply (or a rendered digest) to the message's chat and topic, in parts."""
        parts = self.renderer.telegram(reply.digest) if reply.digest else reply_parts(reply.lines)
        for n, text in enumerate(parts, 1):
            markup = keyboard(reply.buttons) if n == len(parts) else None
            await message.reply_text(text, parse_mode=ParseMode.HTML, link_preview_options=NO_PREVIEW,
                                     reply_markup=markup, do_quote=False)

    async def on_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """An inline-keyboard press: answer it, then redraw the message it belongs to."""
        query = update.callback_query
        if query is None or query.data is None or update.effective_chat is None:
            return
        reply = await self.commands.press(chat_of(update), query.data,
                                          lambda: can_manage(update, context.bot))
        await query.answer(reply.notice, show_alert=reply.alert)
        if reply.lines:
            await edit(query, reply)

    async def on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        """The one place errors become a reply: log it, tell the chat something went wrong."""
        log.error("telegram: update failed: %s", context.error, exc_info=context.error)
        if not isinstance(update, Update) or update.effective_chat is None:
            return
        user = update.effective_user
        with suppress(TelegramError):
            await context.bot.send_message(update.effective_chat.id,
                                           TEXTS[locale_from(user.language_code if user else None)]["error"])


async def edit(query: CallbackQuery, reply: Reply) -> None:
    """Redraw a keyboard message; an unchanged one is fine."""
    try:
        await query.edit_message_text(reply_parts(reply.lines)[0], parse_mode=ParseMode.HTML,
                                      link_preview_options=NO_PREVIEW, reply_markup=keyboard(reply.buttons))
    except BadRequest as exc:
        if "not modified" not in exc.message.lower():
            raise


def build_application(settings: Settings, sessions: SessionFactory, *,
                      limiter: RateLimiter | None = None,
                      clock: Callable[[], dt.datetime] | None = None, polling: bool = True) -> App:
    """The Application with every handler; pass ``limiter`` to share one with a TelegramChannel.

    ``polling=False``: no updater (a webhook puts the updates in ``update_queue``).
    """
    builder = (ApplicationBuilder().application_class(DigestApplication).token(token_of(settings))
               .rate_limiter(LimitedRequests(limiter or RateLimiter()))
               .concurrent_updates(PerChatUpdates()))
    if not polling:
        builder = builder.updater(None)
    if settings.telegram_api_base:
        base = settings.telegram_api_base
        builder = builder.base_url(base).base_file_url(file_url(base))
    app: App = builder.build()
    commands = Commands(sessions, channel=NAME, clock=clock or system_now)
    handlers = TelegramBot(commands, Renderer(site_url=settings.site_url, timezone=settings.timezone))
    app.add_handler(CommandHandler(Commands.NAMES, handlers.on_command, filters=filters.UpdateType.MESSAGE))
    app.add_handler(CallbackQueryHandler(handlers.on_button))
    app.add_error_handler(handlers.on_error)
    return app


@asynccontextmanager
async def running(app: App, *, poll_timeout: float = 10.0) -> AsyncIterator[App]:
    """Initialize, start and poll; stop and shut down on the way out.

    A Bot API that cannot be reached or refuses the token at start is a
    one-line :class:`DigestError`, not a traceback.
    """
    await _initialize(app)
    try:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(timeout=dt.timedelta(seconds=poll_timeout),
                                        allowed_updates=ALLOWED_UPDATES)
        try:
            yield app
        finally:
            await app.updater.stop()
            await app.stop()
    finally:
        await app.shutdown()


async def _initialize(app: App) -> None:
    try:
        await app.initialize()
    except InvalidToken:
        raise ConfigError("DIGEST_TELEGRAM_TOKEN was refused by the Telegram Bot API") from None
    except TelegramError as exc:
        token = app.bot.token
        base = app.bot.base_url.removesuffix(token)
        raise DigestError(f"cannot reach the Telegram Bot API at {base}: "
                          f"{exc.message.replace(token, '<token>')}") from None


# -- the webhook ----------------------------------------------------------------

def webhook_secret(settings: Settings) -> str:
    """DIGEST_TELEGRAM_WEBHOOK_SECRET, or one derived from DIGEST_SECRET_KEY; a ConfigError without either.

    Not from a generated key file: every web process behind a load balancer must check the same secret.
    """
    if settings.telegram_webhook_secret is not None:
        return settings.telegram_webhook_secret.get_secret_value()
    if settings.secret_key is not None and settings.secret_key.get_secret_value().strip():
        key = settings.secret_key.get_secret_value().strip().encode()
        return hmac.new(key, b"telegram-webhook", hashlib.sha256).hexdigest()
    raise ConfigError("DIGEST_TELEGRAM_WEBHOOK_URL needs DIGEST_TELEGRAM_WEBHOOK_SECRET "
                      "(or DIGEST_SECRET_KEY to derive it from), the same on every web process")


class TelegramWebhook:
    """The webhook the web app serves (:class:`digest.web.hooks.Webhook`): updates into the Application."""

    name = NAME
    header = WEBHOOK_HEADER

    def __init__(self, app: App, url: str, secret: str) -> None:
        self.app = app
        self.url = url
        self.secret = secret
        self.path = urlsplit(url).path

    async def start(self) -> None:
        """Initialize and start the Application, then setWebhook (one-line errors, token hidden)."""
        await _initialize(self.app)
        try:
            await self.app.start()
            await self.app.bot.set_webhook(self.url, secret_token=self.secret,
                                           allowed_updates=ALLOWED_UPDATES)
        except TelegramError as exc:
            await self.stop()
            raise DigestError(f"setWebhook failed: {exc.message.replace(self.app.bot.token, '<token>')}"
                              ) from None
        log.info("telegram: webhook set; updates arrive at %s", self.path)

    async def stop(self) -> None:
        """Let the updates handed over finish, then close; the webhook stays set for the other processes."""
        if self.app.running:
            await self.app.stop()
        await self.app.shutdown()

    async def handle(self, update: dict[str, Any]) -> None:
        """Queue one update for the handlers; ValueError when it is not an update."""
        if not isinstance(update.get("update_id"), int):
            raise ValueError("not a Telegram update (no update_id)")
        try:
            parsed = Update.de_json(update, self.app.bot)
        except Exception as exc:  # the library's own checks of a shape Telegram would never send
            raise ValueError(f"not a Telegram update ({type(exc).__name__})") from None
        await self.app.update_queue.put(parsed)


def create_webhook(settings: Settings, sessions: SessionFactory) -> TelegramWebhook | None:
    """The entry point ``compiler_digest.webhooks: telegram``; None without DIGEST_TELEGRAM_WEBHOOK_URL."""
    if not settings.telegram_webhook_url:
        return None
    secret = webhook_secret(settings)
    app = build_application(settings, sessions, clock=settings.clock, polling=False)
    return TelegramWebhook(app, settings.telegram_webhook_url, secret)
