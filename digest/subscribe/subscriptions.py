"""Subscriptions: one service for the web form, the chat commands and the CLI.

Plain async functions over an ``AsyncSession``; they flush but never commit
(the caller owns the transaction) and return :class:`SubscriberView` values.

``subscribe(..., confirmed=False)`` is an unauthenticated web request (email
only, double opt-in); ``confirmed=True`` is a chat subscribing itself or the
operator (CLI), who vouch for the address. What ``subscribe`` does to an
address already stored (``RULES``; "prefs" = layers, min_score, locale):

| stored status | web (confirmed=False)         | chat / CLI (confirmed=True) |
|---------------|-------------------------------|-----------------------------|
| (none)        | new, pending; send confirm    | new, active                 |
| pending       | pending, prefs; send confirm  | active, prefs               |
| active        | unchanged; nothing to confirm | active, prefs               |
| unsubscribed  | pending, prefs; send confirm  | active, prefs               |
| bounced       | pending, prefs; send confirm  | active, prefs               |
| blocked       | pending, prefs; send confirm  | active, prefs               |

The web caller answers the same page whatever the row ("check your
mailbox"): it never shows stored values nor branches on
``needs_confirmation`` in what it displays (for an active row it may mail a
notice with the preferences link instead of a confirm link, so that one
mail goes out either way). An active subscriber's prefs change only through
a signed preferences link (``set_preferences``).
A prefs argument left ``None`` keeps the stored value (a new row gets the
default: all nine layers, stored explicitly; min_score 0; locale zh).

Other transitions: ``confirm`` pending→active (active stays, others refuse);
``unsubscribe`` any→unsubscribed; ``mark`` any→bounced|blocked
(an unsubscribed row stays unsubscribed); an import never re-activates an
unsubscribed, bounced or blocked address (``import_subscriber``).

Addresses: email normalised by email-validator (no DNS), then lowercased, ASCII
only (an internationalised domain IDNA-encoded, a non-ASCII mailbox name or an
``=?`` refused: see ``_email``);
telegram an integer chat id (negative for groups); discord ``channel:<id>``
or ``user:<id>`` (a bare snowflake means a channel), id of 17 to 20 digits.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from digest.domain.errors import SubscriberNotFound, SubscriptionError, TokenError
from digest.domain.layers import LAYER_IDS, parse_layers
from digest.store.models import Subscriber, utcnow

CHANNELS = ("email", "telegram", "discord")
PENDING, ACTIVE, UNSUBSCRIBED, BOUNCED, BLOCKED = STATUSES = (
    "pending", "active", "unsubscribed", "bounced", "blocked")
SUPPRESSED = (UNSUBSCRIBED, BOUNCED, BLOCKED)
LOCALES = ("zh", "en")
DEFAULT_LOCALE = "zh"

# (stored status or None, confirmed) -> (new status, apply prefs, needs confirmation)
RULES: dict[tuple[str | None, bool], tuple[str, bool, bool]] = {
    (None, False): (PENDING, True, True),
    (PENDING, False): (PENDING, True, True),
    (ACTIVE, False): (ACTIVE, False, False),
    **{(status, False): (PENDING, True, True) for status in SUPPRESSED},
    **{(status, True): (ACTIVE, True, False) for status in (None, *STATUSES)},
}

_TELEGRAM = re.compile(r"-?[0-9]{1,16}")  # |id| < 2**53: 16 digits at most
_DISCORD = re.compile(r"(?:(channel|user):)?([1-9][0-9]{16,19})")


@dataclass(frozen=True, slots=True)
class SubscriberView:
    """A subscriber as callers see it; ``layers`` ordered as ``LAYER_IDS``."""

    id: int
    channel: str
    address: str
    status: str
    layers: list[str]
    min_score: float
    locale: str
    created_at: dt.datetime
    updated_at: dt.datetime
    confirmed_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class Preferences:
    """Validated preferences; ``None`` means "keep" (or the default for a new subscriber)."""

    layers: list[str] | None = None
    min_score: float | None = None
    locale: str | None = None


# -- validation (pure) --------------------------------------------------------

def validate_channel(channel: str) -> str:
    """The channel, or SubscriptionError naming the field."""
    if channel not in CHANNELS:
        raise SubscriptionError(f"unknown channel {channel!r}; valid: {', '.join(CHANNELS)}",
                                field="channel")
    return channel


def validate_address(channel: str, address: str) -> str:
    """The normalised address for ``channel``, or SubscriptionError naming the field."""
    text = address.strip()
    if validate_channel(channel) == "email":
        return _email(text)
    if channel == "telegram":
        return _telegram(text)
    return _discord(text)


def _email(text: str) -> str:
    """An address the mailer can write into a header and any SMTP server can take, or SubscriptionError.

    ASCII only: an internationalised domain is stored IDNA-encoded (``xn--``); a mailbox name
    with non-ASCII characters is refused (it needs SMTPUTF8 on every hop, which the mailer does
    not use). An ``=?`` (the start of an RFC 2047 encoded word, which a mail reader may decode
    into a new header line) is refused too.
    """
    from email_validator import EmailNotValidError, validate_email

    from digest.deliver.mailer import sendable_address

    try:
        found = validate_email(text, check_deliverability=False, allow_smtputf8=False)
    except EmailNotValidError as exc:
        raise SubscriptionError(f"not a valid email address ({exc})", field="address") from None
    # Lowercased whole: one mailbox is one subscriber, so "Ann@x" cannot dodge an unsubscribe of "ann@x".
    address = (found.ascii_email or "").lower()
    if not sendable_address(address):
        raise SubscriptionError("not a valid email address (it holds '=?', which mail readers may decode "
                                "as an encoded word)", field="address")
    return address


def _telegram(text: str) -> str:
    if not _TELEGRAM.fullmatch(text) or int(text) == 0 or abs(int(text)) >= 2**53:
        raise SubscriptionError(f"not a Telegram chat id (an integer, e.g. -1001234567890): {text!r}",
                                field="address")
    return str(int(text))


def _discord(text: str) -> str:
    match = _DISCORD.fullmatch(text)
    if not match or int(match[2]) >= 2**64:
        raise SubscriptionError(
            f"not a Discord id (channel:<id> or user:<id>, 17 to 20 digits): {text!r}", field="address")
    return f"{match[1] or 'channel'}:{match[2]}"


def validate_layers(layers: str | Iterable[str] | None) -> list[str]:
    """Layer ids ordered as ``LAYER_IDS``; ``None`` is all nine; empty is refused."""
    if layers is None:
        return list(LAYER_IDS)
    text = layers if isinstance(layers, str) else " ".join(layers)
    try:
        return parse_layers(text)
    except ValueError as exc:
        raise SubscriptionError(f"{exc} (choose at least one)", field="layers") from None


def validate_min_score(value: float) -> float:
    """A minimum score in 0..100."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not 0 <= value <= 100:
        raise SubscriptionError(f"must be a number from 0 to 100, not {value!r}", field="min_score")
    return float(value)


def validate_locale(locale: str) -> str:
    """A locale the digest is written in."""
    if locale not in LOCALES:
        raise SubscriptionError(f"unknown locale {locale!r}; valid: {', '.join(LOCALES)}",
                                field="locale")
    return locale


def preferences(layers: str | Iterable[str] | None = None, min_score: float | None = None,
                locale: str | None = None) -> Preferences:
    """Validate whichever preferences are given."""
    return Preferences(
        layers=None if layers is None else validate_layers(layers),
        min_score=None if min_score is None else validate_min_score(min_score),
        locale=None if locale is None else validate_locale(locale),
    )


def ordered_layers(layers: Iterable[str]) -> list[str]:
    """Stored layers in ``LAYER_IDS`` order (unknown ids dropped)."""
    wanted = set(layers)
    return [lid for lid in LAYER_IDS if lid in wanted]


# -- rows and views -----------------------------------------------------------

_COLUMNS = (Subscriber.id, Subscriber.channel, Subscriber.address, Subscriber.status,
            Subscriber.layers, Subscriber.min_score, Subscriber.locale, Subscriber.created_at,
            Subscriber.updated_at, Subscriber.confirmed_at)


def _view(row: Any) -> SubscriberView:
    """A view of an ORM subscriber or a row of ``_COLUMNS`` (same attribute names)."""
    return SubscriberView(row.id, row.channel, row.address, row.status, ordered_layers(row.layers),
                          row.min_score, row.locale, row.created_at, row.updated_at, row.confirmed_at)


async def _load(session: AsyncSession, subscriber_id: int) -> Subscriber:
    sub = await session.get(Subscriber, subscriber_id)
    if sub is None:
        raise SubscriberNotFound(f"no subscriber {subscriber_id}", subscriber_id=subscriber_id)
    return sub


async def _by_address(session: AsyncSession, channel: str, address: str) -> Subscriber | None:
    query = select(Subscriber).where(Subscriber.channel == channel, Subscriber.address == address)
    return (await session.execute(query)).scalar_one_or_none()


def _apply(sub: Subscriber, prefs: Preferences) -> None:
    if prefs.layers is not None:
        sub.layers = prefs.layers
    if prefs.min_score is not None:
        sub.min_score = prefs.min_score
    if prefs.locale is not None:
        sub.locale = prefs.locale


def _set_status(sub: Subscriber, status: str, now: dt.datetime) -> None:
    if status == ACTIVE and sub.status != ACTIVE:
        sub.confirmed_at = now
    elif status == PENDING:
        sub.confirmed_at = None
    sub.status = status
    sub.updated_at = now


def new_subscriber(channel: str, address: str, prefs: Preferences, now: dt.datetime) -> Subscriber:
    """An unsaved row with defaults for the preferences not given (status pending)."""
    return Subscriber(channel=channel, address=address, status=PENDING, confirmed_at=None,
                      layers=prefs.layers or list(LAYER_IDS),
                      min_score=prefs.min_score if prefs.min_score is not None else 0.0,
                      locale=prefs.locale or DEFAULT_LOCALE, created_at=now, updated_at=now)


# -- the service --------------------------------------------------------------

async def subscribe(session: AsyncSession, channel: str, address: str, *,
                    layers: str | Iterable[str] | None = None, min_score: float | None = None,
                    locale: str | None = None, confirmed: bool,
                    now: dt.datetime) -> tuple[SubscriberView, bool]:
    """Subscribe by the rules of the module table; return (view, needs_confirmation)."""
    address = validate_address(channel, address)
    prefs = preferences(layers, min_score, locale)
    if not confirmed and channel != "email":
        raise SubscriptionError("only an email subscription can wait for confirmation", field="channel")
    sub = await _by_address(session, channel, address)
    status, apply_prefs, needs_confirmation = RULES[(sub.status if sub else None, confirmed)]
    if sub is None:
        sub = new_subscriber(channel, address, prefs, now)
        session.add(sub)
    elif apply_prefs:
        _apply(sub, prefs)
        sub.updated_at = now
    if sub.status != status:
        _set_status(sub, status, now)
    await session.flush()
    return _view(sub), needs_confirmation


async def confirm(session: AsyncSession, subscriber_id: int, now: dt.datetime) -> SubscriberView:
    """pending → active (an active subscriber stays so); refuse any other status."""
    sub = await _load(session, subscriber_id)
    if sub.status not in (PENDING, ACTIVE):
        raise SubscriptionError(f"subscriber {subscriber_id} is {sub.status}; only a pending "
                                "subscription can be confirmed", subscriber_id=subscriber_id)
    if sub.status == PENDING:
        _set_status(sub, ACTIVE, now)
        await session.flush()
    return _view(sub)


async def unsubscribe(session: AsyncSession, subscriber_id: int, now: dt.datetime) -> SubscriberView:
    """Any status → unsubscribed (idempotent)."""
    sub = await _load(session, subscriber_id)
    if sub.status != UNSUBSCRIBED:
        _set_status(sub, UNSUBSCRIBED, now)
        await session.flush()
    return _view(sub)


async def set_preferences(session: AsyncSession, subscriber_id: int,
                          layers: str | Iterable[str] | None, min_score: float | None,
                          locale: str | None, now: dt.datetime) -> SubscriberView:
    """Change the preferences given (``None`` keeps one); the status is untouched."""
    prefs = preferences(layers, min_score, locale)
    sub = await _load(session, subscriber_id)
    _apply(sub, prefs)
    sub.updated_at = now
    await session.flush()
    return _view(sub)


async def mark(session: AsyncSession, subscriber_id: int, status: str,
               now: dt.datetime | None = None) -> SubscriberView:
    """The outbox's verdict: bounced or blocked (an unsubscribed subscriber stays unsubscribed)."""
    if status not in (BOUNCED, BLOCKED):
        raise ValueError(f"mark() takes bounced or blocked, not {status!r}")
    sub = await _load(session, subscriber_id)
    if sub.status not in (UNSUBSCRIBED, status):
        _set_status(sub, status, now or utcnow())
        await session.flush()
    return _view(sub)


async def change_address(session: AsyncSession, subscriber_id: int, new_address: str,
                         now: dt.datetime | None = None) -> SubscriberView:
    """Move a subscriber to a new address (a Telegram group that became a supergroup).

    When the new address already has its own subscriber, that one is kept as it
    is, the old one is marked blocked (its chat is gone) and the kept one returned.
    """
    sub = await _load(session, subscriber_id)
    address = validate_address(sub.channel, new_address)
    taken = await _by_address(session, sub.channel, address)
    if taken is not None and taken.id != sub.id:
        _set_status(sub, BLOCKED, now or utcnow())
        await session.flush()
        return _view(taken)
    sub.address = address
    sub.updated_at = now or utcnow()
    await session.flush()
    return _view(sub)


async def remove(session: AsyncSession, subscriber_id: int) -> SubscriberView:
    """Delete a subscriber and its personal data; its deliveries go with it (ON DELETE CASCADE)."""
    sub = await _load(session, subscriber_id)
    view = _view(sub)
    await session.delete(sub)
    await session.flush()
    return view


async def get(session: AsyncSession, subscriber_id: int) -> SubscriberView:
    """One subscriber by id, or SubscriberNotFound."""
    return _view(await _load(session, subscriber_id))


async def find_by_address(session: AsyncSession, channel: str, address: str) -> SubscriberView | None:
    """The subscriber at this (normalised) address, if any."""
    sub = await _by_address(session, channel, validate_address(channel, address))
    return None if sub is None else _view(sub)


async def subscriber_for_token(session: AsyncSession, secret: str, purpose: str, token: str, *,
                               now: dt.datetime | None = None) -> SubscriberView:
    """The subscriber a link token names, if it still exists at the address the token was made for."""
    from digest.subscribe.tokens import read_token

    subscriber_id, address = read_token(secret, purpose, token, now=now)
    sub = await session.get(Subscriber, subscriber_id)
    if sub is None or sub.address != address:
        raise TokenError("invalid")
    return _view(sub)


async def list_subscribers(session: AsyncSession, channel: str | None = None,
                           status: str | None = None) -> list[SubscriberView]:
    """Subscribers by id, optionally of one channel and/or status."""
    query = select(*_COLUMNS).order_by(Subscriber.id)
    if channel is not None:
        query = query.where(Subscriber.channel == validate_channel(channel))
    if status is not None:
        if status not in STATUSES:
            raise SubscriptionError(f"unknown status {status!r}; valid: {', '.join(STATUSES)}",
                                    field="status")
        query = query.where(Subscriber.status == status)
    return [_view(row) for row in (await session.execute(query)).all()]


async def active_subscribers_for_planning(session: AsyncSession) -> list[SubscriberView]:
    """Every active subscriber (what the outbox plans deliveries for)."""
    return await list_subscribers(session, status=ACTIVE)


# -- import (the file format lives in cmd_subscribers) ----------------------------

@dataclass(frozen=True, slots=True)
class ImportOutcome:
    """What importing one address did: ``kind`` is added, updated, unchanged or skipped."""

    kind: str
    view: SubscriberView
    reason: str = ""


async def import_subscriber(session: AsyncSession, channel: str, address: str, prefs: Preferences, *,
                            confirmed: bool, now: dt.datetime,
                            file_status: str | None = None) -> ImportOutcome:
    """Import one address (operator's file): never re-activates a suppressed one.

    New email addresses are pending unless ``confirmed`` (a ``file_status`` of
    pending keeps them pending); chat addresses are active. A ``file_status`` of
    unsubscribed/bounced/blocked records a new address with that status (the
    suppression travels with an export) and leaves a stored one as it is.
    """
    address = validate_address(channel, address)
    sub = await _by_address(session, channel, address)
    if file_status in SUPPRESSED:
        return await _import_suppressed(session, sub, channel, address, prefs, file_status or "", now)
    if sub is not None and sub.status in SUPPRESSED:
        return ImportOutcome("skipped", _view(sub), f"{sub.status}; an import never re-activates it")
    vouched = confirmed and file_status != PENDING
    status = ACTIVE if vouched or channel != "email" else PENDING
    if sub is None:
        sub = new_subscriber(channel, address, prefs, now)
        session.add(sub)
        kind = "added"
    else:
        before = (ordered_layers(sub.layers), sub.min_score, sub.locale)
        _apply(sub, prefs)
        status = ACTIVE if sub.status == ACTIVE else status
        changed = before != (sub.layers, sub.min_score, sub.locale) or sub.status != status
        kind = "updated" if changed else "unchanged"
    if sub.status != status:
        _set_status(sub, status, now)
    elif kind == "updated":
        sub.updated_at = now
    await session.flush()
    return ImportOutcome(kind, _view(sub))


async def _import_suppressed(session: AsyncSession, sub: Subscriber | None, channel: str, address: str,
                             prefs: Preferences, status: str, now: dt.datetime) -> ImportOutcome:
    if sub is not None:
        return ImportOutcome("skipped", _view(sub), f"{status} in the file; left {sub.status}")
    sub = new_subscriber(channel, address, prefs, now)
    _set_status(sub, status, now)
    session.add(sub)
    await session.flush()
    return ImportOutcome("skipped", _view(sub), f"{status} in the file; recorded as {status}")
