"""The subscription forms, pure: signed form tokens, the Origin check, and reading posted fields.

A form token is ``<issued epoch seconds>.<HMAC-SHA256>`` over the form's name
(``subscribe``, or ``preferences:<subscriber id>``) under a key derived from
``DIGEST_SECRET_KEY`` with a salt of its own, so it never passes as a link
token. It expires after ``FORM_MAX_AGE``. The site sets no cookie, so no
request carries ambient authority: the token proves the form was served by
us recently, and the Origin check refuses a form posted from another site
(a browser sends ``Origin: null`` under our ``no-referrer`` policy, which
says nothing and is let through).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urlsplit

from digest.domain.errors import SubscriptionError
from digest.domain.layers import LAYER_IDS
from digest.domain.locales import DEFAULT_LOCALE, LOCALES
from digest.domain.status import ChannelName
from digest.subscribe.validation import (
    validate_address,
    validate_layers,
    validate_locale,
    validate_min_score,
)

FORM_MAX_AGE = dt.timedelta(hours=12)
FORM_CLOCK_SKEW = dt.timedelta(minutes=5)
MAX_FORM_BYTES = 16 * 1024
MAX_FIELDS = 40
MAX_ADDRESS = 320
Fields = Mapping[str, list[str]]
T = TypeVar("T")


def _key(secret: str) -> bytes:
    return hmac.new(secret.encode(), b"compiler-digest/form", hashlib.sha256).digest()


def _sign(secret: str, form: str, issued: int) -> str:
    mac = hmac.new(_key(secret), f"{form}\n{issued}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def form_token(secret: str, form: str, now: dt.datetime) -> str:
    """A token for one form, good for ``FORM_MAX_AGE``."""
    issued = int(now.timestamp())
    return f"{issued}.{_sign(secret, form, issued)}"


def form_token_ok(secret: str, form: str, token: str, now: dt.datetime) -> bool:
    """True when ``token`` was made for ``form`` with this secret and has not expired."""
    issued_text, _, mac = token.partition(".")
    if not (issued_text.isascii() and issued_text.isdigit()) or len(issued_text) > 12:  # "²".isdigit()
        return False
    issued = int(issued_text)
    age = now.timestamp() - issued  # seconds: a far-future epoch never becomes a datetime
    fresh = -FORM_CLOCK_SKEW.total_seconds() <= age <= FORM_MAX_AGE.total_seconds()
    return fresh and hmac.compare_digest(mac.encode(), _sign(secret, form, issued).encode())


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL (lowercased), or "" when it has none."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.netloc:
        return ""
    return f"{parts.scheme}://{parts.netloc}".lower()


def same_origin(origin: str | None, referer: str | None, allowed: Iterable[str]) -> bool:
    """False only when the request names another origin (Origin, else Referer); absent or null passes."""
    ours = {o.lower() for o in allowed}
    if origin and origin.strip().lower() != "null":
        return origin.strip().lower() in ours
    if referer:
        return origin_of(referer) in ours
    return True


@dataclass
class FormState:
    """What a form shows: the values as posted (or stored) and an error code per field."""

    address: str = ""
    layers: tuple[str, ...] = LAYER_IDS
    min_score: str = "0"
    locale: str = DEFAULT_LOCALE
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Prefs:
    """Validated preferences from a form."""

    layers: list[str]
    min_score: float
    locale: str


def _one(fields: Fields, name: str) -> str:
    values = fields.get(name) or [""]
    return values[0]


def state_from(fields: Fields, default_locale: str) -> FormState:
    """The posted values, unvalidated (to show the form again as it was sent)."""
    locale = _one(fields, "locale") or default_locale
    return FormState(address=_one(fields, "address").strip()[:MAX_ADDRESS],
                     layers=tuple(lid for lid in LAYER_IDS if lid in set(fields.get("layers", []))),
                     min_score=_one(fields, "min_score").strip()[:20] or "0",
                     locale=locale if locale in LOCALES else default_locale)


def _checked(state: FormState, name: str, check: Callable[[], T]) -> T | None:
    """``check()``, or None with ``err_<name>`` recorded when it raises."""
    try:
        return check()
    except (ValueError, SubscriptionError):
        state.errors[name] = f"err_{name}"
        return None


def read_prefs(fields: Fields, state: FormState) -> Prefs | None:
    """Validated preferences, or None with the errors put into ``state.errors``."""
    layers = _checked(state, "layers", lambda: validate_layers(fields.get("layers", [])))
    score = _checked(state, "min_score", lambda: validate_min_score(float(state.min_score)))
    locale = _checked(state, "locale", lambda: validate_locale(_one(fields, "locale")))
    if layers is None or score is None or locale is None:
        return None
    return Prefs(layers, score, locale)


def _address(raw: str) -> str:
    if len(raw) > MAX_ADDRESS:
        raise ValueError("too long")
    return validate_address(ChannelName.EMAIL, raw)


def read_address(fields: Fields, state: FormState) -> str | None:
    """The normalised email address, or None with the error put into ``state.errors``."""
    return _checked(state, "address", lambda: _address(_one(fields, "address")))
