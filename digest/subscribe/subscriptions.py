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

Addresses and preferences are validated by :mod:`digest.subscribe.validation`
(re-exported here: the service's whole surface is this module).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from digest.domain.errors import SubscriberNotFound, SubscriptionError, TokenError
from digest.domain.layers import LAYER_IDS
from digest.domain.locales import DEFAULT_LOCALE
from digest.domain.status import ChannelName, SubscriberStatus
from digest.store.models import Subscriber, utcnow
from digest.subscribe.tokens import read_token
from digest.subscribe.validation import (
    Preferences,
    ordered_layers,
    preferences,
    validate_address,
    validate_channel,
)

SUPPRESSED = (SubscriberStatus.UNSUBSCRIBED, SubscriberStatus.BOUNCED, SubscriberStatus.BLOCKED)

# (stored status or None, confirmed) -> (new status, apply prefs, needs confirmation)
RULES: dict[tuple[str | None, bool], tuple[SubscriberStatus, bool, bool]] = {
    (None, False): (SubscriberStatus.PENDING, True, True),
    (SubscriberStatus.PENDING, False): (SubscriberStatus.PENDING, True, True),
    (SubscriberStatus.ACTIVE, False): (SubscriberStatus.ACTIVE, False, False),
    **{(status, False): (SubscriberStatus.PENDING, True, True) for status in SUPPRESSED},
    **{(status, True): (SubscriberStatus.ACTIVE, True, False) for status in (None, *SubscriberStatus)},
}


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


def _set_status(sub: Subscriber, status: SubscriberStatus, now: dt.datetime) -> None:
    if status == SubscriberStatus.ACTIVE and sub.status != SubscriberStatus.ACTIVE:
        sub.confirmed_at = now
    elif status == SubscriberStatus.PENDING:
        sub.confirmed_at = None
    sub.status = status
    sub.updated_at = now


def new_subscriber(channel: str, address: str, prefs: Preferences, now: dt.datetime) -> Subscriber:
    """An unsaved row with defaults for the preferences not given (status pending)."""
    return Subscriber(channel=channel, address=address, status=SubscriberStatus.PENDING, confirmed_at=None,
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
    if not confirmed and channel != ChannelName.EMAIL:
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
    if sub.status not in (SubscriberStatus.PENDING, SubscriberStatus.ACTIVE):
        raise SubscriptionError(f"subscriber {subscriber_id} is {sub.status}; only a pending "
                                "subscription can be confirmed", subscriber_id=subscriber_id)
    if sub.status == SubscriberStatus.PENDING:
        _set_status(sub, SubscriberStatus.ACTIVE, now)
        await session.flush()
    return _view(sub)


async def unsubscribe(session: AsyncSession, subscriber_id: int, now: dt.datetime) -> SubscriberView:
    """Any status → unsubscribed (idempotent)."""
    sub = await _load(session, subscriber_id)
    if sub.status != SubscriberStatus.UNSUBSCRIBED:
        _set_status(sub, SubscriberStatus.UNSUBSCRIBED, now)
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


async def mark(session: AsyncSession, subscriber_id: int, status: SubscriberStatus,
               now: dt.datetime | None = None) -> SubscriberView:
    """The outbox's verdict: bounced or blocked (an unsubscribed subscriber stays unsubscribed)."""
    if status not in (SubscriberStatus.BOUNCED, SubscriberStatus.BLOCKED):
        raise ValueError(f"mark() takes bounced or blocked, not {status!r}")
    sub = await _load(session, subscriber_id)
    if sub.status not in (SubscriberStatus.UNSUBSCRIBED, status):
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
        _set_status(sub, SubscriberStatus.BLOCKED, now or utcnow())
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
        if status not in tuple(SubscriberStatus):
            raise SubscriptionError(f"unknown status {status!r}; valid: {', '.join(SubscriberStatus)}",
                                    field="status")
        query = query.where(Subscriber.status == status)
    return [_view(row) for row in (await session.execute(query)).all()]


async def active_subscribers_for_planning(session: AsyncSession) -> list[SubscriberView]:
    """Every active subscriber (what the outbox plans deliveries for)."""
    return await list_subscribers(session, status=SubscriberStatus.ACTIVE)


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
        suppressed = SubscriberStatus(file_status)
        return await _import_suppressed(session, sub, channel, address, prefs, suppressed, now)
    if sub is not None and sub.status in SUPPRESSED:
        return ImportOutcome("skipped", _view(sub), f"{sub.status}; an import never re-activates it")
    vouched = confirmed and file_status != SubscriberStatus.PENDING
    status = SubscriberStatus.ACTIVE if vouched or channel != ChannelName.EMAIL else SubscriberStatus.PENDING
    if sub is None:
        sub = new_subscriber(channel, address, prefs, now)
        session.add(sub)
        kind = "added"
    else:
        before = (ordered_layers(sub.layers), sub.min_score, sub.locale)
        _apply(sub, prefs)
        status = SubscriberStatus.ACTIVE if sub.status == SubscriberStatus.ACTIVE else status
        changed = before != (sub.layers, sub.min_score, sub.locale) or sub.status != status
        kind = "updated" if changed else "unchanged"
    if sub.status != status:
        _set_status(sub, status, now)
    elif kind == "updated":
        sub.updated_at = now
    await session.flush()
    return ImportOutcome(kind, _view(sub))


async def _import_suppressed(session: AsyncSession, sub: Subscriber | None, channel: str, address: str,
                             prefs: Preferences, status: SubscriberStatus, now: dt.datetime) -> ImportOutcome:
    if sub is not None:
        return ImportOutcome("skipped", _view(sub), f"{status} in the file; left {sub.status}")
    sub = new_subscriber(channel, address, prefs, now)
    _set_status(sub, status, now)
    session.add(sub)
    await session.flush()
    return ImportOutcome("skipped", _view(sub), f"{status} in the file; recorded as {status}")
