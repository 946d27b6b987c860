"""The push port: how the core hands a rendered message to a channel.

The core renders and splits every message to its platform's limits; a channel
only delivers. Channels are found by name through the package's entry points
(group ``compiler_digest.channels``), so the core never names an adapter:

    [project.entry-points."compiler_digest.channels"]
    email = "digest.bootstrap:email_channel"
    telegram = "bot.telegram_bot:create_channel"

An entry point is a factory ``create_channel(settings) -> PushChannel``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol

from digest.domain.errors import ConfigError

if TYPE_CHECKING:
    from digest.config import Settings

GROUP = "compiler_digest.channels"


@dataclass(frozen=True)
class Message:
    """One digest for one subscriber, as the channel sends it.

    ``parts`` are in order: Telegram HTML texts, Discord payload dicts, or one
    RFC 5322 message (bytes) for email. ``start_part`` is where a resumed send
    continues (the parts before it already went out).
    """

    delivery_id: int
    subscriber_id: int
    address: str
    parts: tuple[Any, ...]
    message_id: str | None = None
    start_part: int = 0
    thread_id: str | None = None  # the day's Discord thread a resumed send continues in


class Outcome(enum.Enum):
    """What became of one send."""

    SENT = "sent"
    TRANSIENT = "transient"  # try again later (429, 4xx SMTP, timeout, dropped connection)
    PERMANENT = "permanent"  # this recipient refuses for good: deactivate the subscriber
    FATAL = "fatal"  # the whole session was refused (auth, 401): stop the run, mark nobody
    BUG = "bug"  # our message was invalid (e.g. Telegram can't parse entities): fail loudly


@dataclass(frozen=True)
class SendResult:
    """The outcome of one send, and how many parts went out in total."""

    outcome: Outcome
    parts_sent: int
    error: str | None = None
    retry_after: float | None = None
    new_address: str | None = None  # e.g. a Telegram group migrated to a supergroup
    thread_id: str | None = None  # the Discord thread the parts went into (kept with the delivery)
    detail: str | None = None  # where it went: the SMTP server's answer, the outbox file (for a person)


class PushChannel(Protocol):
    """A way to push messages: a name and a send."""

    name: str

    async def send(self, message: Message) -> SendResult:
        """Send the parts from ``message.start_part`` on; never raise for one recipient."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


ChannelFactory = Callable[["Settings"], PushChannel]


def available_channels() -> list[str]:
    """Names of the installed channels."""
    return sorted(ep.name for ep in entry_points(group=GROUP))


def load_channel(name: str, settings: Settings) -> PushChannel:
    """Build the channel registered under ``name``."""
    found = [ep for ep in entry_points(group=GROUP) if ep.name == name]
    if not found:
        known = ", ".join(available_channels()) or "none"
        raise ConfigError(f"no channel named {name!r} is installed (installed: {known})")
    factory: ChannelFactory = found[0].load()
    return factory(settings)
