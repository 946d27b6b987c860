"""Validating what a subscriber gives: channel, address, layers, minimum score, locale. Pure.

Addresses: email normalised by email-validator (no DNS), then lowercased, ASCII
only (an internationalised domain IDNA-encoded, a non-ASCII mailbox name or an
``=?`` refused: see ``_email``);
telegram an integer chat id (negative for groups); discord a channel id, stored bare
(``channel:<id>`` is accepted), or ``user:<id>`` for a DM; ids of 17 to 20 digits.
Every refusal is a :class:`~digest.domain.errors.SubscriptionError` naming its field.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from digest.deliver.headers import sendable_address
from digest.domain.errors import SubscriptionError
from digest.domain.layers import LAYER_IDS, parse_layers
from digest.domain.locales import LOCALES
from digest.domain.status import ChannelName

_TELEGRAM = re.compile(r"-?[0-9]{1,16}")  # |id| < 2**53: 16 digits at most
_DISCORD = re.compile(r"(?:(channel|user):)?([1-9][0-9]{16,19})")
ALL_LAYERS = "all"  # the word for every layer, wherever layers are asked for


@dataclass(frozen=True, slots=True)
class Preferences:
    """Validated preferences; ``None`` means "keep" (or the default for a new subscriber)."""

    layers: list[str] | None = None
    min_score: float | None = None
    locale: str | None = None



def validate_channel(channel: str) -> ChannelName:
    """The channel, or SubscriptionError naming the field."""
    if channel not in tuple(ChannelName):
        raise SubscriptionError(f"unknown channel {channel!r}; valid: {', '.join(ChannelName)}",
                                field="channel")
    return ChannelName(channel)


def validate_address(channel: str, address: str) -> str:
    """The normalised address for ``channel``, or SubscriptionError naming the field."""
    text = address.strip()
    match validate_channel(channel):
        case ChannelName.EMAIL:
            return _email(text)
        case ChannelName.TELEGRAM:
            return _telegram(text)
        case ChannelName.DISCORD:
            return _discord(text)


def _email(text: str) -> str:
    """An address the mailer can write into a header and any SMTP server can take, or SubscriptionError.

    ASCII only: an internationalised domain is stored IDNA-encoded (``xn--``); a mailbox name
    with non-ASCII characters is refused (it needs SMTPUTF8 on every hop, which the mailer does
    not use). An ``=?`` (the start of an RFC 2047 encoded word, which a mail reader may decode
    into a new header line) is refused too.
    """
    # email-validator compiles its grammar on import (tens of ms): loaded here, not for `digest --help`.
    from email_validator import EmailNotValidError, validate_email

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
            f"not a Discord id (a channel id, or user:<id> for a DM; 17 to 20 digits): {text!r}",
            field="address")
    return f"user:{match[2]}" if match[1] == "user" else match[2]  # a channel is stored as its bare id


def validate_layers(layers: str | Iterable[str] | None) -> list[str]:
    """Layer ids ordered as ``LAYER_IDS``; ``None`` is all nine; empty is refused.

    The word ``all`` among them is every layer (as in the chat commands: the union). An
    unknown id is named with the closest real one ("did you mean kernel_codegen?").
    """
    if layers is None:
        return list(LAYER_IDS)
    words = (layers if isinstance(layers, str) else " ".join(layers)).replace(",", " ").split()
    named = [word for word in words if word.lower() != ALL_LAYERS]
    every = len(named) < len(words)
    if every and not named:
        return list(LAYER_IDS)
    try:
        chosen = parse_layers(" ".join(named))
    except ValueError as exc:
        hint = _closest_layers(named) if named else " (choose at least one)"
        raise SubscriptionError(f"{exc}{hint}", field="layers") from None
    return list(LAYER_IDS) if every else chosen


def _closest_layers(words: list[str]) -> str:
    """``; did you mean kernel_codegen?`` for the unknown ``words`` near a layer id, else nothing."""
    hints = [close for word in words if word not in LAYER_IDS
             for close in difflib.get_close_matches(word.lower(), LAYER_IDS, n=1)]
    return f"; did you mean {', '.join(dict.fromkeys(hints))}?" if hints else ""


def validate_min_score(value: object) -> float:
    """A minimum score in 0..100: the one rule of the CLI, the web form, the chat commands and CSV import."""
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
    """Stored layers in ``LAYER_IDS`` order (unknown ids dropped; a stored value that is no list: none)."""
    readable = isinstance(layers, list | tuple | set | frozenset)
    wanted = {x for x in layers if isinstance(x, str)} if readable else set()
    return [lid for lid in LAYER_IDS if lid in wanted]
