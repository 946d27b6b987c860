"""Mail headers written by us, never by the email package; the one address check of the mail path.

The email package's folder decodes an RFC 2047 encoded word found in a value
and, on some 3.11/3.12 patch releases, writes the decoded CR LF out raw, so a
feed title ``=?utf-8?b?...?=`` could add headers and a body. So free text (the
Subject, the From display name) is written as plain ASCII words only when it
is printable ASCII holding no ``=?``, else as encoded words made by
:func:`encoded_words`; every other value (addresses, the Message-ID, links)
must pass a strict ASCII check that also refuses ``=?`` (:func:`sendable_address`,
:func:`checked`), else composing raises ValueError. Only the MIME structure
(MIME-Version, Content-Type, the parts) comes from ``email.message.EmailMessage``
(:func:`mime_alternative`), which puts no text of ours in a header. Addresses
are ASCII only: the subscribe form IDNA-encodes a domain and refuses a
non-ASCII mailbox name (no SMTPUTF8), and the SMTP channel sends to nothing else.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from collections.abc import Sequence
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime

from digest.render.email import SUBJECT_MAX
from digest.render.safety import one_line

NO_EW = r"(?!.*=\?)"  # no "=?" anywhere: nothing a decoder could take for an RFC 2047 encoded word
ADDRESS = re.compile(NO_EW + r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}"
                     r"@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
MESSAGE_ID = re.compile(r"<[A-Za-z0-9._-]{1,100}@[A-Za-z0-9.-]{1,253}>")
_PLAIN_TEXT = re.compile(NO_EW + r"[ -~]*")  # a Subject written as it is
_PLAIN_PHRASE = re.compile(NO_EW + r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~ -]*")  # a display name of atoms
_FOLD_AT = 78  # RFC 5322's recommended line length
_PLAIN_WORD_MAX = 60  # a longer word is encoded (folded) rather than left on an overlong line
_EW_OCTETS = 39  # 52 base64 characters: an encoded word of 64, "Subject: " + one is 73
_EW_OCTETS_MAX = 45  # 60 base64 characters: the longest encoded word RFC 2047 allows (72 of 75)
DISPLAY_NAME_MAX = 100


def sendable_address(address: str) -> bool:
    """True for an ASCII addr-spec the mailer writes into a header as it is (no quoting, no ``=?``)."""
    return ADDRESS.fullmatch(address) is not None


def checked(pattern: re.Pattern[str], value: str, what: str) -> str:
    """``value`` when it fully matches ``pattern``; ValueError (nothing is composed) otherwise."""
    if not pattern.fullmatch(value):
        raise ValueError(f"not a usable {what} for a mail header: {value[:80]!r}")
    return value


def display_name(name: str) -> str:
    """The From display name on one line; one that must be encoded fits one encoded word.

    In an address, decoders differ on the space between two encoded words (RFC 2047 drops it,
    Python's parser keeps it), so an encoded display name is cut to one word: all see the same.
    """
    text = one_line(name, DISPLAY_NAME_MAX)
    if _plain_words(text, _PLAIN_PHRASE) is not None or len(text.encode()) <= _EW_OCTETS_MAX:
        return text
    while len(text.encode()) > _EW_OCTETS_MAX - len("…".encode()):
        text = text[:-1]
    return text.rstrip() + "…"


def from_words(name: str, address: str) -> list[str]:
    """The From header's words: the display name (plain atoms or encoded words), then the address."""
    address = checked(ADDRESS, address, "sender address")
    if not name:
        return [address]
    words = _plain_words(name, _PLAIN_PHRASE)
    if words is None:
        words = encoded_words(name, _EW_OCTETS_MAX)
    return [*words, f"<{address}>"]


def encoded_words(text: str, octets: int = _EW_OCTETS) -> list[str]:
    """``text`` as RFC 2047 encoded words (UTF-8, base64), each of whole characters and ``octets`` at most."""
    data, words = text.encode("utf-8"), []
    while data:
        cut = min(len(data), octets)
        while cut < len(data) and data[cut] & 0xC0 == 0x80:  # never cut inside a character
            cut -= 1
        words.append(f"=?utf-8?b?{base64.b64encode(data[:cut]).decode('ascii')}?=")
        data = data[cut:]
    return words


def _plain_words(text: str, plain: re.Pattern[str]) -> list[str] | None:
    """The words of one line of text when it can be written as it is (``plain``, no overlong word)."""
    words = text.split()
    if plain.fullmatch(text) and all(len(word) <= _PLAIN_WORD_MAX for word in words):
        return words
    return None


def _field(name: str, words: Sequence[str]) -> str:
    """``Name: word word ...``, folded (CRLF SP) before a word that would take a line past 78."""
    lines = [f"{name}:"]
    for n, word in enumerate(words):
        if n and len(lines[-1]) + 1 + len(word) > _FOLD_AT:
            lines.append("")
        lines[-1] += " " + word
    return "\r\n".join(lines) + "\r\n"


def header_block(sender: Sequence[str], *, to: str, subject: str, date: dt.datetime, mid: str,
                 extra: Sequence[tuple[str, str]] = ()) -> bytes:
    """From (``sender``: :func:`from_words`), To, Subject, Date, Message-ID, then ``extra``, as bytes.

    ``extra`` holds our own ASCII values. The subject is flattened to one clean line first
    (:func:`~digest.render.safety.one_line`): even decoded, it holds no CR or LF. Any other
    value is checked; ValueError when one is unusable.
    """
    text = one_line(subject, SUBJECT_MAX)
    head = (_field("From", sender)
            + f"To: {checked(ADDRESS, to, 'address')}\r\n"
            + _field("Subject", _plain_words(text, _PLAIN_TEXT) or encoded_words(text))
            + f"Date: {format_datetime(date.astimezone(dt.UTC))}\r\n"
            + f"Message-ID: {checked(MESSAGE_ID, mid, 'Message-ID')}\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in extra))
    return head.encode("ascii")


def mime_alternative(text: str, html: str) -> bytes:
    """MIME-Version, Content-Type and the text and HTML parts (quoted-printable), from EmailMessage."""
    msg = EmailMessage(policy=policy.SMTP)
    msg.set_content(text, charset="utf-8", cte="quoted-printable")
    msg.add_alternative(html, subtype="html", charset="utf-8", cte="quoted-printable")
    return msg.as_bytes()
