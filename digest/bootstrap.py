"""The composition root: the one place settings become the options and clients of each part.

The CLI (or the service) loads :class:`~digest.config.Settings` once and hands
them here; everything below receives plain values: option dataclasses, a
clock, a renderer, an open channel. Nothing under ``digest`` except this
module and ``digest.cli`` reads a setting. Adapters found by entry points
(``bot.telegram_bot.create_channel``) still receive the settings themselves.

The CLI imports this module to print ``digest --help``, so every part is
imported inside the function that builds it: the heavy libraries behind
them (SQLAlchemy, httpx, Jinja2, aiosmtplib, Starlette, openai) load only
when a command needs them.
"""

from __future__ import annotations

import ast
import asyncio
import atexit
import datetime as dt
import functools
import gc
import re
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from digest import __version__
from digest.domain.clock import Clock
from digest.domain.status import ChannelName

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from digest.build.pipeline import BuildOptions
    from digest.config import Settings
    from digest.daily import DailyDeps
    from digest.deliver.channels import PushChannel
    from digest.deliver.mailer import MailIdentity
    from digest.deliver.publish import PublishOptions, Runner
    from digest.deliver.sending import Progress, SendOptions
    from digest.deliver.smtp import SmtpConfig
    from digest.domain.ratelimit import SharedLimiter
    from digest.domain.views import DigestView
    from digest.ingest.fetch import FetchOptions
    from digest.ingest.sources import SourceSpec
    from digest.ingest.store import FetchResult
    from digest.metrics import Metrics
    from digest.render.renderer import Renderer
    from digest.service import AdminCopies, Service
    from digest.store.db import SessionFactory
    from digest.write.llm import LLMClient

OnWait = Callable[[str], None]
NextRun = Callable[[], dt.datetime | None]
Part = Callable[[asyncio.Event], Coroutine[Any, Any, object]]
PREVIEW_ADDRESS = "reader@example.org"


def clock(settings: Settings) -> Clock:
    """The one clock of the process: the system's, or DIGEST_NOW running on (one per loaded settings)."""
    return settings.clock


# -- options -------------------------------------------------------------------

def fetch_options(settings: Settings) -> FetchOptions:
    """Limits and politeness of a fetch run."""
    from digest.ingest.fetch import FetchOptions

    return FetchOptions(
        concurrency=settings.fetch_concurrency,
        per_host=settings.fetch_per_host,
        timeout=settings.fetch_timeout,
        max_bytes=settings.fetch_max_bytes,
        max_redirects=settings.fetch_max_redirects,
        user_agent=f"compiler-digest/{__version__} (+{settings.site_url})",
    )


def sources(settings: Settings) -> list[SourceSpec]:
    """The configured sources: DIGEST_SOURCES alone, or the built-in list plus DIGEST_SOURCES_EXTRA."""
    from digest.ingest.sources import load_sources

    return load_sources(settings.sources, settings.sources_extra)


def build_options(settings: Settings) -> BuildOptions:
    """What a build needs: time zone, locales, limits, score weights (ConfigError on an unknown weight)."""
    from digest.analyze.score import ScoreWeights
    from digest.build.pipeline import BuildOptions

    weights = ScoreWeights.from_mapping(settings.score_weights)
    keys = frozenset(spec.key for spec in sources(settings))  # failed sources: these only
    return BuildOptions(timezone=settings.timezone, locales=tuple(settings.locales),
                        max_events=settings.max_events, llm_top_events=settings.llm_top_events,
                        llm_triage=settings.llm_triage, llm_triage_limit=settings.llm_triage_limit,
                        include_prereleases=settings.include_prereleases, weights=weights,
                        source_keys=keys)


def send_options(settings: Settings) -> SendOptions:
    """Retry policy, lease and heartbeat of the senders."""
    from digest.deliver.sending import SendOptions

    return SendOptions(
        attempts_per_run=settings.send_attempts,
        backoff=settings.send_backoff,
        lease=dt.timedelta(seconds=settings.outbox_lease),
        heartbeat=dt.timedelta(seconds=settings.outbox_heartbeat),
        retry_later=dt.timedelta(seconds=settings.send_retry_later),
    )


def renderer(settings: Settings) -> Renderer:
    """The one renderer (links to the site, times in the digest's zone, compiled templates in the var dir)."""
    from digest.render.renderer import Renderer

    return Renderer(site_url=settings.site_url, timezone=settings.timezone,
                    compiled=settings.var_dir / "template_cache")


def mail_identity(settings: Settings) -> MailIdentity:
    """Who the mail is from, and where a reader unsubscribes by mail."""
    from digest.deliver.mailer import MailIdentity

    return MailIdentity.from_settings(settings.mail_from, settings.unsubscribe_mailto)


# -- locks and the database ----------------------------------------------------

@asynccontextmanager
async def run_lock(settings: Settings, name: str, *, wait: bool = True,
                   on_wait: OnWait | None = None) -> AsyncIterator[None]:
    """The run lock ``name`` on its own connection, on the process's clock (LockBusy if not ``wait``)."""
    from digest.store.locks import run_lock as lock

    async with database(settings) as sessions, \
            lock(sessions, name, wait=wait, clock=clock(settings), on_wait=on_wait):
        yield


@asynccontextmanager
async def database(settings: Settings) -> AsyncIterator[SessionFactory]:
    """The database, migrated to head, for the body's length; a new default one is named on stderr.

    A database already at the head costs one SELECT: Alembic (with Mako and every dialect's
    DDL, a tenth of a second to import) loads only when there is something to migrate.
    """
    from digest.store.db import open_database

    fresh = _fresh_default_sqlite(settings)
    async with open_database(settings.database_url, upgrade=False) as sessions:
        await _migrate_unless_current(sessions)
        if fresh is not None:  # run from another directory? say once which database that made
            print(f"digest: created a new database at {fresh}", file=sys.stderr)
        yield sessions


async def _migrate_unless_current(sessions: SessionFactory) -> None:
    """Migrate to head unless ``alembic_version`` already names the one head of the shipped scripts."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError
    from sqlalchemy.ext.asyncio import AsyncEngine

    from digest.domain.errors import StorageError
    from digest.store.db import migrate

    engine = sessions.kw["bind"]
    assert isinstance(engine, AsyncEngine)
    head = schema_head()
    if head is not None:
        try:
            async with engine.connect() as conn:
                try:
                    found = set((await conn.scalars(text("SELECT version_num FROM alembic_version"))).all())
                except DBAPIError:  # no such table yet: a new database
                    found = set()
        except (SQLAlchemyError, OSError) as exc:  # the server is not there: say so once, not twice
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StorageError(f"cannot open the database: {first}") from exc
        if found == {head}:
            return
    await migrate(engine)


_REVISION = re.compile(r"^(revision|down_revision)\s*(?::[^=\n]*)?=\s*(.+?)\s*$", re.MULTILINE)


@functools.cache
def schema_head() -> str | None:
    """The one head revision of the shipped migrations, read from their text without Alembic.

    None (so Alembic decides) when a script does not state both ids as literals or the
    scripts do not end in exactly one head.
    """
    from digest.resources import alembic_dir

    revisions: set[str] = set()
    parents: set[str] = set()
    for script in sorted((alembic_dir() / "versions").glob("*.py")):
        ids: dict[str, object] = {}
        for name, value in _REVISION.findall(script.read_text(encoding="utf-8")):
            try:
                ids[name] = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                return None
        revision, down = ids.get("revision"), ids.get("down_revision", ...)
        if not isinstance(revision, str) or down is ...:
            return None
        revisions.add(revision)
        downs = down if isinstance(down, (tuple, list)) else (down,)
        if not all(d is None or isinstance(d, str) for d in downs):
            return None
        parents.update(d for d in downs if isinstance(d, str))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def _fresh_default_sqlite(settings: Settings) -> str | None:
    """The path of the default SQLite file about to be created (no digest.toml, no DIGEST_DATABASE_URL)."""
    from sqlalchemy.engine import make_url

    from digest.config import TOML_FILE

    if "database_url" in settings.explicitly_set or Path(TOML_FILE).exists():
        return None
    url = make_url(settings.database_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    path = Path(str(url.database))
    return None if path.exists() and path.stat().st_size > 0 else str(url.database)


# -- clients -------------------------------------------------------------------

def llm_day_start(now: dt.datetime, timezone: str) -> dt.datetime:
    """Where the token budget's day begins: local midnight of ``now`` in the digest's zone, in UTC."""
    local = now.astimezone(ZoneInfo(timezone))
    return local.replace(hour=0, minute=0, second=0, microsecond=0).astimezone(dt.UTC)


@asynccontextmanager
async def llm_client(settings: Settings, sessions: SessionFactory,
                     now: dt.datetime) -> AsyncIterator[LLMClient | None]:
    """The LLM client when a key is set, else None (extractive mode); closed at the end."""
    if settings.llm_api_key is None:
        yield None
        return
    from digest.write.llm import LLMClient

    client = LLMClient(
        api_key=settings.llm_api_key.get_secret_value(), base_url=settings.llm_base_url,
        model=settings.llm_model, timeout=settings.llm_timeout, daily_tokens=settings.llm_daily_tokens,
        sessions=sessions, day_start=llm_day_start(now, settings.timezone), clock=clock(settings),
    )
    try:
        yield client
    finally:
        await client.aclose()


def smtp_config(settings: Settings) -> SmtpConfig:
    """Where and how to send mail (DIGEST_SMTP_*)."""
    from digest.deliver.smtp import SmtpConfig

    password = settings.smtp_password.get_secret_value() if settings.smtp_password else None
    return SmtpConfig(host=settings.smtp_host or "localhost", port=settings.smtp_port,
                      user=settings.smtp_user, password=password, tls=settings.smtp_tls,
                      timeout=settings.smtp_timeout, concurrency=settings.smtp_concurrency,
                      rate=settings.smtp_rate, envelope_from=mail_identity(settings).envelope_from)


def email_channel(settings: Settings) -> PushChannel:
    """The email channel (entry point ``email``): SMTP when DIGEST_SMTP_HOST is set, else the file outbox."""
    if not settings.smtp_host:
        from digest.deliver.mailer import FileOutbox

        return FileOutbox(settings.mail_outbox)
    from digest.deliver.smtp import SmtpChannel

    return SmtpChannel(smtp_config(settings))


def channel(name: str, settings: Settings, shared: SharedLimiter | None = None) -> PushChannel:
    """The channel named ``name`` (email is the core's own; the others are adapters' entry points).

    With ``shared`` (PostgreSQL: :func:`shared_limiter`), a channel that can keeps its
    platform's rate limits in it, together with every other worker.
    """
    from digest.deliver.channels import load_channel
    from digest.domain.ratelimit import SharesLimits

    made = email_channel(settings) if name == ChannelName.EMAIL else load_channel(name, settings)
    if shared is not None and isinstance(made, SharesLimits):
        made.share_limits(shared)
    return made


def shared_limiter(settings: Settings, sessions: SessionFactory) -> SharedLimiter | None:
    """Rate limits all workers keep together (the ``rate_bucket`` table) on PostgreSQL; None on SQLite.

    SQLite means one process, whose in-memory limiters already see every send.
    """
    from sqlalchemy.engine import make_url

    if make_url(settings.database_url).get_backend_name() != "postgresql":
        return None
    from digest.domain.ratelimit import SharedLimiter
    from digest.store.buckets import DbBuckets

    return SharedLimiter(DbBuckets(sessions, clock(settings)), clock(settings))


@asynccontextmanager
async def publish_runner(settings: Settings, sessions: SessionFactory, options: PublishOptions,
                         progress: Progress | None = None,
                         stop: asyncio.Event | None = None) -> AsyncIterator[Runner]:
    """A publish runner on ``sessions``; its channels are opened on first use and closed at the end.

    ``stop`` (the service's) lets in-flight sends finish and releases the rest.
    """
    from digest.deliver.publish import Channels, Composer, Runner

    composer = Composer(sessions, renderer(settings), mail_identity(settings), site_url=settings.site_url,
                        secret=settings.secret(), clock=clock(settings))
    shared = shared_limiter(settings, sessions)
    channels = Channels(lambda name: channel(name, settings, shared))
    try:
        runner = Runner(sessions, channels, composer, clock(settings), options, progress)
        if stop is not None:
            runner.stop = stop
        yield runner
    finally:
        await channels.aclose()


def web_app(settings: Settings, sessions: SessionFactory, *, next_run: NextRun | None = None,
            metrics: Metrics | None = None) -> Starlette:
    """The web app; its confirmation mails go out on the newsletters' channel, one channel per mail."""
    from digest.deliver.confirm_mail import one_shot
    from digest.web.app import create_app
    from digest.web.hooks import load_webhooks, mount_webhooks
    from digest.web.meta import Discussion
    from digest.web.subscribe import SubscriptionSetup

    talk = Discussion(settings.discord_discussion_channel, settings.discord_guild_id,
                      settings.telegram_discussion_url)  # where readers discuss a digest
    mail = SubscriptionSetup(secret=settings.secret(), identity=mail_identity(settings),
                             send_mail=one_shot(lambda: email_channel(settings)))
    app = create_app(sessions, renderer(settings), site_url=settings.site_url,
                     default_locale=settings.locales[0], timezone=settings.timezone, clock=clock(settings),
                     subscriptions=mail, trusted_proxies=settings.trusted_proxies,
                     next_run=next_run, metrics=metrics, discussion=talk)
    return mount_webhooks(app, load_webhooks(settings, sessions))  # e.g. Telegram's, when its URL is set


def preview_eml(view: DigestView, settings: Settings, address: str = PREVIEW_ADDRESS,
                now: dt.datetime | None = None) -> str:
    """The whole message (.eml) a reader with this view's filter would get (links for nobody: id 0)."""
    from digest.deliver.mailer import message_id, single_copy

    identity = mail_identity(settings)
    data = single_copy(view, renderer(settings), identity, site_url=settings.site_url,
                       secret=settings.secret(), address=address,
                       mid=message_id(view.date, 0, identity.domain), now=now or clock(settings)())
    return data.decode("ascii", errors="replace")


# -- the daily job -------------------------------------------------------------

def daily_deps(settings: Settings, sessions: SessionFactory, *, on_wait: OnWait | None = None,
               fetch_progress: Callable[[FetchResult], None] | None = None,
               send_progress: Progress | None = None, stop: asyncio.Event | None = None) -> DailyDeps:
    """Everything :func:`digest.daily.run_daily` needs, on ``sessions``; the callbacks are the caller's.

    ``stop`` is the service's: a publish under way lets its sends finish, then stops.
    """
    from digest.daily import DailyDeps
    from digest.deliver.publish import PublishOptions

    options = PublishOptions(send=send_options(settings))
    return DailyDeps(
        sessions=sessions,
        sources=sources(settings),
        fetch=fetch_options(settings), build=build_options(settings), clock=clock(settings),
        locale=settings.locales[0],
        llm=lambda now: llm_client(settings, sessions, now),
        publisher=lambda: publish_runner(settings, sessions, options, send_progress, stop),
        lock=lambda name: run_lock(settings, name, on_wait=on_wait),
        fetch_progress=fetch_progress, after=admin_copies(settings, sessions),
    )


def admin_copies(settings: Settings, sessions: SessionFactory) -> AdminCopies | None:
    """The admin copies of each run's report (DIGEST_ADMIN_*), or None when no admin address is set."""
    from digest.service import AdminCopies, admin_message, send_once

    targets = [(name, address) for name, address in (
        (ChannelName.EMAIL, settings.admin_email), (ChannelName.TELEGRAM, settings.admin_telegram_chat),
        (ChannelName.DISCORD, settings.admin_discord_channel)) if address]
    if not targets:
        return None

    async def send(name: str, address: str, text: str) -> None:
        message = admin_message(name, address, text, mail_identity(settings), clock(settings)())
        await send_once(channel(name, settings), message)

    return AdminCopies(sessions, targets, send)


# -- the service ---------------------------------------------------------------

def bots(settings: Settings) -> list[tuple[str, Part]]:
    """The installed bots (entry points ``compiler_digest.bots``) with a token set, awaited with ``stop``."""
    from importlib.metadata import entry_points

    def part(run: Callable[..., Coroutine[Any, Any, int]]) -> Part:
        return lambda stop: run(settings, stop=stop)

    return [(f"{point.name} bot", part(point.load())) for point in entry_points(group="compiler_digest.bots")
            if (token := getattr(settings, f"{point.name}_token", None)) and token.get_secret_value()]


def service(settings: Settings, sessions: SessionFactory, stop: asyncio.Event, parts: list[tuple[str, Part]],
            *, scheduled: bool) -> Service:
    """``digest serve``: the daily job on ``sessions`` with the schedule, and the ``parts`` beside it."""
    from digest.service import Schedule, Service

    deps = daily_deps(settings, sessions, stop=stop)
    return Service(deps, Schedule(settings.schedule, settings.timezone),
                   lambda name: run_lock(settings, name), clock(settings), stop, parts, scheduled)


_GC_THRESHOLDS = gc.get_threshold()  # the interpreter's own, restored by settle_heap
START_GC_YOUNG = 200_000  # allocations between young collections while a command starts


def start_heap() -> None:
    """Fewer cycle collections while a command imports its libraries, none at exit (the CLI's first step).

    Start-up builds objects that live as long as the process (modules, the ORM's mappings,
    the compiled templates); at the default threshold of 700 the collector walks them again some
    two hundred times before a short command such as ``digest preview`` has printed anything.
    A read command (``preview``, ``status``, ``events``) allocates some 90,000 objects from here
    on: it ends before the first young collection, which would walk them all once (11 ms at a
    threshold of 50,000). A long run collects as often as every 200,000 allocations.
    At exit, once every ``atexit`` handler registered after this one has run, the heap is frozen
    (``gc.freeze``): the interpreter's teardown then frees only what reference counting does,
    instead of collecting, in passes that run even with the collector disabled, the cycles the
    unloaded modules leave (0.07-0.09 s once SQLAlchemy is imported) just before the process
    ends and the system takes the memory back anyway.
    """
    gc.set_threshold(START_GC_YOUNG, *_GC_THRESHOLDS[1:])
    atexit.unregister(gc.freeze)  # once per process, however many times main runs in it (the tests)
    atexit.register(gc.freeze)


def settle_heap() -> None:
    """Hide what start-up built from the cycle collector (``gc.freeze``), once a long run begins.

    The modules, the ORM's mappings, the app: a couple of hundred thousand objects that live as
    long as the process, which every full collection would walk again, tens of milliseconds in
    the middle of some request. Garbage made so far is collected first, so none is kept for good;
    then the collector's thresholds are the interpreter's again (see :func:`start_heap`).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)


def secrets(settings: Settings) -> list[str]:
    """Every configured secret value: none of them may appear in a log line or a report."""
    values = [settings.llm_api_key, settings.smtp_password, settings.telegram_token, settings.discord_token,
              settings.secret_key, settings.telegram_webhook_secret]
    return [value.get_secret_value() for value in values if value is not None and value.get_secret_value()]
