"""The closed sets of names the core stores and reports: statuses, channels, modes.

``StrEnum`` members are ``str``: they compare equal to the stored text and
serialise as it, so the database, the JSON contracts and the CLI keep their
words while the code names each one once.
"""

from __future__ import annotations

from enum import StrEnum


class SubscriberStatus(StrEnum):
    """Where a subscriber stands (``digest subscribers list --json``: ``status``)."""

    PENDING = "pending"
    ACTIVE = "active"
    UNSUBSCRIBED = "unsubscribed"
    BOUNCED = "bounced"
    BLOCKED = "blocked"


class DeliveryStatus(StrEnum):
    """One delivery row's state in the outbox."""

    PLANNED = "planned"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"
    SKIPPED = "skipped"


class FailureKind(StrEnum):
    """Why a delivery failed: only ``BUG`` (ours, or our configuration) is retried by --retry-failed."""

    BUG = "bug"
    PERMANENT = "permanent"
    EXHAUSTED = "exhausted"


class FetchStatus(StrEnum):
    """The outcome of fetching one source (``digest fetch --json``: ``status``)."""

    OK = "ok"
    NOT_MODIFIED = "not_modified"
    NOT_DUE = "not_due"  # the feed's own max-age/ttl says not yet: no request was made
    ERROR = "error"


class ChannelName(StrEnum):
    """The push channels a subscriber can use."""

    EMAIL = "email"
    TELEGRAM = "telegram"
    DISCORD = "discord"


class WriteMode(StrEnum):
    """Who wrote a text, besides a model name: the extractive writer, or a day of both."""

    EXTRACTIVE = "extractive"
    MIXED = "mixed"
