"""Publish a digest: plan its deliveries once, then send them through every configured channel.

    publish(date)
      ├─ [--to] one unfiltered copy to the operator, by email; a failure stops here
      ├─ plan (first publish only): one row per active subscriber with >= 1 event; published_at
      ├─ [--retry-failed] the rows failed by our bug or configuration back to planned
      ├─ drain: per channel with rows to send ─ sending.Dispatch (claim, compose, send, record)
      └─ count the rows held by another run's lease (``held``, ``held_until``)
    work()   the same drain over every published digest, in a loop (``digest worker``)

Rendering happens once per group of readers who get the same events in the
same locale on the same channel (:class:`Composer`); only the personal links
differ per email reader; a group whose rendering fails logs its traceback
once and fails its deliveries as our bug. A channel that is not configured
leaves its rows planned and the report says so. ``--dry-run`` writes nothing
at all (no row, no published_at): it plans in memory and renders every
message a real publish would send now, so a real publish afterwards does
exactly what it would have done.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from digest.deliver.channels import Message, Outcome, PushChannel
from digest.deliver.mailer import EmailTemplate, MailIdentity, message_id, personal_links, single_copy
from digest.deliver.outbox import (
    Claimed,
    Held,
    digests_with_work,
    failed_by_bug,
    held_rows,
    pending_counts,
    pending_rows,
    requeue_failed,
)
from digest.deliver.planning import KeptCache, digest_events, joined_after, plan_deliveries
from digest.deliver.retry import send_with_retry, through_outage
from digest.deliver.sending import (
    Clock,
    ComposeError,
    DeliveryError,
    Dispatch,
    Progress,
    SendOptions,
    Tally,
    traceback_for,
)
from digest.deliver.writer import Writer
from digest.domain.errors import BuildError, ConfigError
from digest.domain.ratelimit import Sleep
from digest.domain.status import ChannelName
from digest.domain.views import DigestView, filter_view
from digest.render.renderer import Renderer
from digest.store.db import SessionFactory, is_disconnect
from digest.store.queries import get_digest, load_view

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class PublishOptions:
    """What one publish does beyond the default."""

    dry_run: bool = False
    to: str | None = None
    retry_failed: bool = False  # first put the rows failed by our bug or configuration back to planned
    plan_only: bool = False  # plan (first publish only) and send nothing: ``digest worker`` processes send
    send: SendOptions = field(default_factory=SendOptions)


@dataclass
class PublishReport:
    """Per channel: planned, empty, sent, skipped, retried, deferred, held, failed, resent."""

    date: dt.date | None
    dry_run: bool = False
    channels: dict[str, Tally] = field(default_factory=dict)
    check_copy: str | None = None
    joined_after: int = 0  # active subscribers created after the first publish: they get the next one

    def tally(self, channel: str) -> Tally:
        return self.channels.setdefault(channel, Tally())

    def total(self) -> Tally:
        """Every channel added up."""
        total = Tally()
        for tally in self.channels.values():
            total.add(tally)
        total.notes = []
        return total

    def as_json(self) -> dict[str, Any]:
        return {"date": self.date.isoformat() if self.date else None, "dry_run": self.dry_run,
                "check_copy": self.check_copy, "joined_after": self.joined_after,
                "channels": {name: t.as_json() for name, t in sorted(self.channels.items())},
                "total": {k: v for k, v in self.total().as_json().items() if k != "notes"}}


@dataclass(frozen=True)
class Unconfigured:
    """A channel this run cannot use, and why (the report's note): its rows stay planned."""

    reason: str


class Channels:
    """The push channels of one run: built on first use, closed at the end."""

    def __init__(self, factory: Callable[[str], PushChannel]) -> None:
        self.factory = factory
        self._built: dict[str, PushChannel | Unconfigured] = {}

    def get(self, name: str) -> PushChannel | Unconfigured:
        """The channel, or why it is not configured."""
        if name not in self._built:
            try:
                self._built[name] = self.factory(name)
            except ConfigError as exc:
                self._built[name] = Unconfigured(f"not configured: {exc}")
        return self._built[name]

    def configured(self, name: str) -> bool:
        """True when channel ``name`` can be used in this run."""
        return not isinstance(self.get(name), Unconfigured)

    async def aclose(self) -> None:
        for channel in self._built.values():
            if not isinstance(channel, Unconfigured):
                await channel.aclose()


@dataclass
class _DigestState:
    date: dt.date
    kept: KeptCache
    views: dict[str, DigestView] = field(default_factory=dict)


class _Broken:
    """A group whose rendering failed (its traceback logged once): each of its deliveries fails as our bug."""

    def __init__(self, error: Exception) -> None:
        self.error = error


Group = EmailTemplate | tuple[Any, ...] | _Broken


class Composer:
    """Renders once per (digest, channel, locale, events kept) and personalises per reader."""

    def __init__(self, sessions: SessionFactory, renderer: Renderer, identity: MailIdentity, *,
                 site_url: str, secret: str, clock: Clock) -> None:
        self.sessions, self.renderer, self.identity = sessions, renderer, identity
        self.site_url, self.secret, self.clock = site_url, secret, clock
        self._digests: dict[int, _DigestState] = {}
        self._groups: dict[tuple[Any, ...], Group] = {}

    @property
    def groups(self) -> int:
        """How many groups were rendered."""
        return len(self._groups)

    def _key(self, item: Claimed) -> tuple[Any, ...]:
        kept = self._digests[item.digest_id].kept(item.layers, item.min_score)
        return item.digest_id, item.channel, item.locale, kept

    async def prepare(self, items: list[Claimed]) -> None:
        """Load the views and render the groups that ``items`` need and that are not cached yet."""
        await self._load({(i.digest_id, i.locale) for i in items})
        for item in items:
            key = self._key(item)
            if key not in self._groups:
                self._groups[key] = self._render(item)

    async def _load(self, wanted: set[tuple[int, str]]) -> None:
        from digest.store.models import Digest

        if all(d in self._digests and loc in self._digests[d].views for d, loc in wanted):
            return
        async with self.sessions() as session:
            for digest_id, locale in sorted(wanted):
                if digest_id not in self._digests:
                    digest = await session.get_one(Digest, digest_id)
                    kept = KeptCache(await digest_events(session, digest_id))
                    self._digests[digest_id] = _DigestState(digest.date, kept)
                state = self._digests[digest_id]
                if locale not in state.views:
                    state.views[locale] = await load_view(session, state.date, locale)

    def _render(self, item: Claimed) -> Group:
        view = filter_view(self._digests[item.digest_id].views[item.locale], item.layers, item.min_score)
        try:
            match item.channel:
                case ChannelName.EMAIL:
                    return EmailTemplate(self.renderer.email_parts(view), self.identity, self.clock())
                case ChannelName.TELEGRAM:
                    return tuple(self.renderer.telegram(view))
                case ChannelName.DISCORD:
                    return tuple(self.renderer.discord(view))
            raise ValueError(f"no renderer for channel {item.channel!r}")
        except Exception as exc:  # a rendering bug fails the group's deliveries, never the run
            log.error("rendering the %s %s digest for %d event(s) failed; its deliveries fail",
                      item.locale, item.channel, len(view.events), exc_info=True)
            return _Broken(exc)

    def compose(self, item: Claimed) -> Message:
        """The message for one reader (call ``prepare`` first)."""
        group = self._groups[self._key(item)]
        if isinstance(group, _Broken):
            raise ComposeError(f"rendering failed: {group.error!r}", logged=True) from group.error
        if isinstance(group, EmailTemplate):
            mid = item.message_id or self.message_id(item.digest_id, item.subscriber_id)
            links = personal_links(self.site_url, self.secret, item.subscriber_id, item.address, self.clock())
            data = group.fill(item.address, mid, links)
            return Message(item.delivery_id, item.subscriber_id, item.address, (data,), mid, item.parts_sent)
        return Message(item.delivery_id, item.subscriber_id, item.address, group, None, item.parts_sent,
                       item.thread_id)

    def message_id(self, digest_id: int, subscriber_id: int) -> str:
        """The stable Message-ID for a digest already loaded."""
        return message_id(self._digests[digest_id].date, subscriber_id, self.identity.domain)

    async def check_copy(self, digest_id: int, address: str, locale: str) -> Message:
        """The operator's unfiltered copy (links for nobody, a Message-ID of its own)."""
        await self._load({(digest_id, locale)})
        view = self._digests[digest_id].views[locale]
        mid = f"<digest-{view.date.isoformat()}-check-{secrets.token_hex(6)}@{self.identity.domain}>"
        data = single_copy(view, self.renderer, self.identity, site_url=self.site_url, secret=self.secret,
                           address=address, mid=mid, now=self.clock())
        return Message(0, 0, address, (data,), mid)


@dataclass
class Runner:
    """Everything a publish or a worker needs, built once at the edge."""

    sessions: SessionFactory
    channels: Channels
    composer: Composer
    clock: Clock
    options: PublishOptions = field(default_factory=PublishOptions)
    progress: Progress | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    sleep: Sleep = asyncio.sleep

    def __post_init__(self) -> None:
        self.writer = Writer(self.sessions)
        self.report = PublishReport(None)

    async def publish(self, date: dt.date, locale: str) -> PublishReport:
        """``digest publish --date D``: check copy, plan once, send; raises DeliveryError on FATAL."""
        async with self.sessions() as session:
            digest = await get_digest(session, date)
        if digest.partial:
            raise BuildError(f"the digest of {date} is partial (its window was open) and is never published; "
                             f"build it once the window closes: digest build --date {date}")
        report = self.report = PublishReport(date, self.options.dry_run)
        if self.options.to:
            await self._check_copy(digest.id, self.options.to, locale)
            report.check_copy = self.options.to
        if self.options.dry_run:
            return await self._dry_run(digest, report)
        async with self.sessions.begin() as session:
            plan = await plan_deliveries(session, digest, self.clock(),
                                         message_id=self.message_ids(digest.date))
            requeued = await requeue_failed(session, digest.id) if self.options.retry_failed else {}
            report.joined_after = await joined_after(session, digest.id)
        self._count_plan(report, plan.planned, plan.empty)
        self._count_requeued(report, requeued)
        if self.options.plan_only:
            return report
        await self._drain_and_count_held(report, digest.id)
        return report

    async def _drain_and_count_held(self, report: PublishReport, digest_id: int) -> None:
        """Drain, then count what another run still holds (also when the run stopped on a FATAL)."""
        try:
            await self.drain(report, digest_id)
        except DeliveryError:
            await self._count_held(report, digest_id)
            raise
        await self._count_held(report, digest_id)

    async def _steady(self, what: str, step: Callable[[], Awaitable[T]]) -> T:
        """A read that waits out a lost database connection for up to one lease (then StorageError)."""
        patience = self.options.send.lease.total_seconds()
        return await through_outage(step, lost=is_disconnect, patience=patience, sleep=self.sleep, what=what)

    async def _count_held(self, report: PublishReport, digest_id: int | None) -> None:
        """Rows under another run's unexpired lease (ours are all released by now)."""
        async def read() -> dict[str, Held]:
            async with self.sessions() as session:
                return await held_rows(session, self.clock(), digest_id)

        held = await self._steady("counting held rows", read)
        for name, found in held.items():
            tally = report.tally(name)
            tally.held, tally.held_until = found.rows, found.until

    @staticmethod
    def _count_requeued(report: PublishReport, requeued: dict[str, int]) -> None:
        for name, n in requeued.items():
            report.tally(name).requeued += n

    def message_ids(self, date: dt.date) -> Callable[[str, int], str | None]:
        """The Message-ID a planned row gets (email only), stable per (digest, subscriber)."""
        domain = self.composer.identity.domain
        return lambda channel, sid: message_id(date, sid, domain) if channel == ChannelName.EMAIL else None

    @staticmethod
    def _count_plan(report: PublishReport, planned: dict[str, int], empty: dict[str, int]) -> None:
        for name, n in planned.items():
            report.tally(name).planned += n
        for name, n in empty.items():
            report.tally(name).empty += n

    async def _check_copy(self, digest_id: int, address: str, locale: str) -> None:
        """Send the check copy with the senders' retry policy; DeliveryError unless it went."""
        match self.channels.get(ChannelName.EMAIL):
            case Unconfigured(reason):
                raise DeliveryError(f"email: {reason}")
            case channel:
                message = await self.composer.check_copy(digest_id, address, locale)
                send = functools.partial(channel.send, message)
                tries = await send_with_retry(send, self.options.send.retry, self.sleep)
        if tries.result.outcome is not Outcome.SENT:
            raise DeliveryError(f"the check copy to {address} was not sent, so nothing was: "
                                f"{tries.result.error}")

    async def _dry_run(self, digest: Any, report: PublishReport) -> PublishReport:
        """Render what a publish now would send (with ``retry_failed``, the bug-failed rows too)."""
        now = self.clock()
        async with self.sessions() as session:
            plan = await plan_deliveries(session, digest, now, message_id=self.message_ids(digest.date),
                                         dry_run=True)
            items = plan.audience if plan.first else await pending_rows(
                session, now=now, digest_id=digest.id, retry_failed=self.options.retry_failed)
            requeued = await failed_by_bug(session, digest.id) if self.options.retry_failed else {}
            report.joined_after = await joined_after(session, digest.id)
        self._count_plan(report, plan.planned, plan.empty)
        self._count_requeued(report, requeued)
        ready = [i for i in items if not self._unconfigured(report, i.channel, 1)]
        await self.composer.prepare(ready)
        for item in ready:
            tally = report.tally(item.channel)
            try:
                self.composer.compose(item)
            except Exception as exc:  # what a real publish would fail as our bug
                log.error("dry run: %s delivery to subscriber %s would fail (our bug or configuration): %s",
                          item.channel, item.subscriber_id, exc, exc_info=traceback_for(exc))
                tally.failed += 1
                tally.failed_bug += 1
            else:
                tally.rendered += 1
        await self._count_held(report, digest.id)
        return report

    def _unconfigured(self, report: PublishReport, name: str, rows: int) -> bool:
        """Count ``rows`` as skipped (with a note) when channel ``name`` is not configured."""
        match self.channels.get(name):
            case Unconfigured(reason):
                tally = report.tally(name)
                tally.skipped += rows
                if reason not in tally.notes:
                    tally.notes.append(reason)
                return True
        return False

    async def drain(self, report: PublishReport, digest_id: int | None = None, *,
                    count_unconfigured: bool = True) -> None:
        """Send what is claimable on every configured channel, channels side by side."""
        async def read() -> dict[str, int]:
            async with self.sessions() as session:
                return await pending_counts(session, digest_id)

        pending = await self._steady("counting pending rows", read)
        runs = []
        for name, rows in sorted(pending.items()):
            match self.channels.get(name):
                case Unconfigured():
                    if count_unconfigured:
                        self._unconfigured(report, name, rows)
                case channel:
                    runs.append(Dispatch(channel, name, self.composer.prepare, self.composer.compose,
                                         self.writer, self.clock, self.options.send, report.tally(name),
                                         self.stop, digest_id, self.progress, self.sleep))
        results = await asyncio.gather(*(run.run() for run in runs), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def work(self, *, once: bool = False, poll: float = 30.0) -> PublishReport:
        """``digest worker``: drain every published digest until stopped (or one sweep with ``once``).

        With ``retry_failed``, the bug-failed rows of every digest are put back first (once).
        """
        report = self.report = PublishReport(None)
        if self.options.retry_failed:
            async with self.sessions.begin() as session:
                self._count_requeued(report, await requeue_failed(session))
        async def sweep() -> list[tuple[int, dt.date]]:
            async with self.sessions() as session:
                pending = await pending_counts(session)
                names = [n for n in pending if self.channels.configured(n)]
                return await digests_with_work(session, names) if names else []

        while not self.stop.is_set():
            digests = await self._steady("looking for work", sweep)
            for digest_id, _ in digests:
                await self.drain(report, digest_id, count_unconfigured=False)
            if once:
                break
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), timeout=poll)
        await self._count_held(report, None)
        return report
