"""Helpers for the publishing tests: a built day, subscribers, a runner, a recording channel, a clock."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Sequence

from digest.build.pipeline import BuildOptions, build_digest
from digest.deliver.channels import Message, Outcome, PushChannel, SendResult
from digest.deliver.mailer import MailIdentity
from digest.deliver.publish import Channels, Composer, PublishOptions, Runner
from digest.deliver.sending import SendOptions
from digest.domain.errors import ConfigError
from digest.domain.layers import LAYER_IDS
from digest.domain.ratelimit import Sleep
from digest.domain.window import window_for
from digest.render.renderer import Renderer
from digest.store.db import SessionFactory
from digest.store.models import Subscriber
from tests.builders import add_compiler_papers

DAY = dt.date(2026, 9, 29)
WINDOW = window_for(DAY, "Asia/Shanghai")
NOW = WINDOW.end + dt.timedelta(minutes=5)
SECRET = "test-secret-key"
SITE = "https://digest.example.org"
FAST = SendOptions(backoff=0.01, lease=dt.timedelta(minutes=10), retry_later=dt.timedelta(0))


async def build_day(sessions: SessionFactory, day: dt.date = DAY) -> int:
    """Three compiler papers in the window of ``day``, built; returns the digest id."""
    window = window_for(day, "Asia/Shanghai")
    await add_compiler_papers(sessions, window.start, key=f"arxiv-{day}")
    report = await build_digest(sessions, day, BuildOptions(locales=("zh", "en")),
                                now=window.end + dt.timedelta(minutes=5))
    return report.digest_id


async def add_subscriber(sessions: SessionFactory, address: str, *, channel: str = "email",
                         layers: Sequence[str] = LAYER_IDS, min_score: float = 0.0, locale: str = "en",
                         status: str = "active") -> int:
    """A subscriber row; returns its id."""
    async with sessions.begin() as session:
        sub = Subscriber(channel=channel, address=address, locale=locale, layers=list(layers),
                         min_score=min_score, status=status, created_at=NOW, updated_at=NOW,
                         confirmed_at=NOW)
        session.add(sub)
        await session.flush()
        return sub.id


class RecordingChannel:
    """A fake push channel: records every send; ``script`` gives outcomes per address, in turn."""

    def __init__(self, name: str = "telegram", *, concurrency: int = 2, delay: float = 0.0,
                 script: dict[str, list[SendResult]] | None = None) -> None:
        self.name = name
        self.concurrency = concurrency
        self.delay = delay
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.sent: list[Message] = []
        self.calls: list[Message] = []
        self.closed = False

    async def send(self, message: Message) -> SendResult:
        """Record, wait ``delay``, answer the next scripted outcome (SENT when none is left)."""
        self.calls.append(message)
        if self.delay:
            await asyncio.sleep(self.delay)
        queue = self.script.get(message.address)
        result = queue.pop(0) if queue else SendResult(Outcome.SENT, len(message.parts))
        if result.outcome is Outcome.SENT:
            self.sent.append(message)
        return result

    async def aclose(self) -> None:
        self.closed = True


def make_runner(sessions: SessionFactory, channels: dict[str, PushChannel], *,
                options: PublishOptions | None = None, clock: Callable[[], dt.datetime] | None = None,
                mailto: str | None = None, renderer: Renderer | None = None,
                sleep: Sleep = asyncio.sleep) -> Runner:
    """A runner over ``channels`` (any other channel is "not configured")."""
    def factory(name: str) -> PushChannel:
        if name not in channels:
            raise ConfigError(f"no {name} channel in this test")
        return channels[name]

    identity = MailIdentity.from_settings("Compiler Digest <digest@example.org>", mailto)
    tick = clock or (lambda: dt.datetime.now(dt.UTC))
    composer = Composer(sessions, renderer or Renderer(site_url=SITE), identity, site_url=SITE, secret=SECRET,
                        clock=tick)
    return Runner(sessions, Channels(factory), composer, tick, options or PublishOptions(send=FAST),
                  sleep=sleep)


class StepClock:
    """Injected time that moves only when the test steps it; ``sleep`` waits until it has moved enough.

    Given to a runner as its clock and its sleep, it makes leases and
    heartbeats deterministic: nothing depends on how fast the machine is.
    ``naps`` counts the sleeps begun, so a test can wait for a sleeper to
    come back to sleep (its work after waking is then done).
    """

    def __init__(self, start: dt.datetime) -> None:
        self.now = start
        self.naps = 0
        self._changed = asyncio.Condition()

    def __call__(self) -> dt.datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        until = self.now + dt.timedelta(seconds=seconds)
        async with self._changed:
            self.naps += 1
            self._changed.notify_all()
            await self._changed.wait_for(lambda: self.now >= until)

    async def step(self, seconds: float) -> None:
        """Move on by ``seconds`` once someone sleeps; return when a sleeper has gone back to sleep."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.naps > 0)
            naps = self.naps
            self.now += dt.timedelta(seconds=seconds)
            self._changed.notify_all()
            await self._changed.wait_for(lambda: self.naps > naps)
