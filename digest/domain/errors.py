"""The one exception tree of the core.

    DigestError
     ├── ConfigError          bad setting or source file (names the variable or line)
     ├── UsageError           bad command-line input (exit code 2)
     ├── StorageError         database unreachable or migration failed
     ├── SourceError          one source failed (carries the source key and URL)
     │    ├── FetchError      network, HTTP status, size cap, timeout
     │    └── NotAFeedError   the body is not a feed (HTML page, empty body)
     ├── BuildError           a digest could not be built or is missing
     ├── SubscriptionError    bad subscription input (names the field) or impossible transition
     │    └── SubscriberNotFound
     └── TokenError           signed link expired, invalid or for another purpose

Every error carries what failed so a one-line message is enough for a user.
"""

from __future__ import annotations


class DigestError(Exception):
    """Base of every error raised by the core."""


class ConfigError(DigestError):
    """A setting or a source file is invalid."""


class UsageError(DigestError):
    """The command line asked for something impossible (exit code 2)."""


class StorageError(DigestError):
    """The database could not be reached or migrated."""


class SourceError(DigestError):
    """One source failed; the others go on."""

    def __init__(self, key: str, url: str, reason: str) -> None:
        super().__init__(f"{key}: {reason} ({url})")
        self.key = key
        self.url = url
        self.reason = reason


class FetchError(SourceError):
    """The source could not be fetched (network, status, size cap, timeout)."""

    def __init__(self, key: str, url: str, reason: str, http_status: int | None = None) -> None:
        super().__init__(key, url, reason)
        self.http_status = http_status


class NotAFeedError(SourceError):
    """The body was fetched but is not a feed."""


class BuildError(DigestError):
    """A digest could not be built, or was asked for but never built."""


class SubscriptionError(DigestError):
    """A subscription request is invalid (names the field) or impossible in its state."""

    def __init__(self, detail: str, *, field: str | None = None,
                 subscriber_id: int | None = None) -> None:
        super().__init__(f"{field}: {detail}" if field else detail)
        self.detail = detail
        self.field = field
        self.subscriber_id = subscriber_id


class SubscriberNotFound(SubscriptionError):
    """No subscriber has this id or address."""


class TokenError(DigestError):
    """A signed link token is unusable; ``reason`` is "expired", "invalid" or "wrong purpose"."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"token {reason}")
        self.reason = reason
