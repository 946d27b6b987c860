"""Signed tokens for the confirm, unsubscribe and preferences links.

A token is an itsdangerous ``URLSafeTimedSerializer`` value (HMAC-SHA1 over a
derived key, URL-safe base64) signed with ``DIGEST_SECRET_KEY``, with one salt
per purpose so a token made for one purpose never passes as another. It
carries the subscriber id and the address, so a token outlives neither a
removed subscriber nor a changed address (check both with
``subscriptions.subscriber_for_token``). The payload is signed, not encrypted:
the address is readable by whoever holds the link, i.e. its own mailbox.

Confirm tokens expire (3 days by default); unsubscribe and preferences tokens
do not, because they sit in old emails.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from typing import Any

from itsdangerous import BadData, TimestampSigner, URLSafeTimedSerializer

from digest.domain.errors import TokenError

CONFIRM = "confirm"
UNSUBSCRIBE = "unsubscribe"
PREFERENCES = "preferences"
PURPOSES = (CONFIRM, UNSUBSCRIBE, PREFERENCES)
CONFIRM_MAX_AGE = dt.timedelta(days=3)
DEFAULT_MAX_AGE: dict[str, dt.timedelta | None] = {
    CONFIRM: CONFIRM_MAX_AGE, UNSUBSCRIBE: None, PREFERENCES: None,
}


class _ClockSigner(TimestampSigner):
    """A timestamp signer whose clock can be set (``at``, epoch seconds), for tests."""

    def __init__(self, *args: Any, at: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._at = at

    def get_timestamp(self) -> int:
        return int(time.time()) if self._at is None else self._at


@functools.lru_cache(maxsize=64)
def _serializer(secret: str, purpose: str, at: int | None = None) -> URLSafeTimedSerializer:
    if purpose not in PURPOSES:
        raise ValueError(f"unknown token purpose {purpose!r}; valid: {', '.join(PURPOSES)}")
    return URLSafeTimedSerializer(secret, salt=f"compiler-digest/{purpose}",
                                  signer=_ClockSigner, signer_kwargs={"at": at})


def make_token(secret: str, purpose: str, subscriber_id: int, address: str, *,
               now: dt.datetime | None = None) -> str:
    """A signed token for ``purpose`` carrying the subscriber id and its address."""
    at = None if now is None else int(now.timestamp())
    return str(_serializer(secret, purpose, at).dumps([subscriber_id, address]))


def read_token(secret: str, purpose: str, token: str, *, max_age: dt.timedelta | None = None,
               now: dt.datetime | None = None) -> tuple[int, str]:
    """(subscriber id, address) from a token; raise TokenError with the reason it is unusable.

    ``max_age`` defaults to the purpose's (3 days for confirm, none otherwise).
    """
    try:
        payload, signed_at = _serializer(secret, purpose).loads(token, return_timestamp=True)
    except BadData:
        raise TokenError(_why_bad(secret, purpose, token)) from None
    limit = max_age if max_age is not None else DEFAULT_MAX_AGE[purpose]
    current = now if now is not None else dt.datetime.now(dt.UTC)
    if limit is not None and current - signed_at > limit:
        raise TokenError("expired")
    return _claims(payload)


def _why_bad(secret: str, purpose: str, token: str) -> str:
    """"wrong purpose" when the token verifies under another purpose, else "invalid"."""
    for other in PURPOSES:
        if other == purpose:
            continue
        try:
            _serializer(secret, other).loads(token)
        except BadData:
            continue
        return "wrong purpose"
    return "invalid"


def _claims(payload: Any) -> tuple[int, str]:
    """Check the payload's shape: a signed token of ours always has it, so this guards old formats."""
    if (isinstance(payload, list) and len(payload) == 2 and type(payload[0]) is int
            and isinstance(payload[1], str)):
        return payload[0], payload[1]
    raise TokenError("invalid")
