"""The email channel: compose the newsletter (MIME) and deliver it to a file outbox or by SMTP.

Composing is compiled once per filter group (:class:`EmailTemplate`): the
group's message is built once with random per-template markers where the
personal values go (To, Message-ID, List-Unsubscribe) and its bodies are
encoded quoted-printable once, cut at the link placeholders. Per subscriber
only short values are encoded and joined: no body line exceeds 76 octets
(RFC 2045) nor any line 998, and a recipient costs microseconds instead of
the milliseconds a full build takes.

Headers are written here (:func:`header_block`), never by the email package:
its folder decodes an RFC 2047 encoded word found in a value and, on some
3.11/3.12 patch releases, writes the decoded CR LF out raw, so a feed title
``=?utf-8?b?...?=`` could add headers and a body. Free text (the Subject, the
From display name) is written as plain ASCII words only when it is printable
ASCII holding no ``=?``, else as encoded words made by :func:`encoded_words`;
every other value (addresses, the Message-ID, links) must pass a strict ASCII
check that also refuses ``=?`` (:func:`sendable_address`, ``_SAFE_*``), else
composing raises ValueError. Only the MIME structure (MIME-Version,
Content-Type, the parts) comes from ``email.message.EmailMessage``, which puts
no text of ours in a header. Addresses are ASCII only: the subscribe form
IDNA-encodes a domain and refuses a non-ASCII mailbox name (no SMTPUTF8).
A link the compiled path cannot take (an odd site URL) takes the slow path:
the whole message built afresh (:func:`compose_message`).

Delivery: :class:`FileOutbox` writes one ``.eml`` per message, atomically and
named by the Message-ID (a re-send overwrites); ``digest.smtp`` sends by SMTP.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr
from pathlib import Path
from typing import TYPE_CHECKING

from digest.deliver.channels import Message, Outcome, PushChannel, SendResult
from digest.domain.errors import ConfigError
from digest.render.email import (
    PREFERENCES_PLACEHOLDER,
    SUBJECT_MAX,
    UNSUBSCRIBE_PLACEHOLDER,
    EmailParts,
    personalise,
)
from digest.render.safety import one_line

if TYPE_CHECKING:
    from digest.config import Settings
    from digest.domain.views import DigestView

UNSUBSCRIBE_PATH = "/unsubscribe"
PREFERENCES_PATH = "/preferences"
_NO_EW = r"(?!.*=\?)"  # no "=?" anywhere: nothing a decoder could take for an RFC 2047 encoded word
_ADDRESS = re.compile(_NO_EW + r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}"
                      r"@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
_SAFE_URL = re.compile(_NO_EW + r"https?://[A-Za-z0-9._~:/?#\[\]@!$()*+,;=%-]{1,880}")  # raw in QP and HTML
_HEADER_URL = re.compile(_NO_EW + r"https?://[!#-;=?-~]{1,880}")  # printable ASCII but space " < >
_MESSAGE_ID = re.compile(r"<[A-Za-z0-9._-]{1,100}@[A-Za-z0-9.-]{1,253}>")
_PLAIN_TEXT = re.compile(_NO_EW + r"[ -~]*")  # a Subject written as it is
_PLAIN_PHRASE = re.compile(_NO_EW + r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~ -]*")  # a display name of atoms
_FOLD_AT = 78  # RFC 5322's recommended line length
_PLAIN_WORD_MAX = 60  # a longer word is encoded (folded) rather than left on an overlong line
_EW_OCTETS = 39  # 52 base64 characters: an encoded word of 64, "Subject: " + one is 73
_EW_OCTETS_MAX = 45  # 60 base64 characters: the longest encoded word RFC 2047 allows (72 of 75)
DISPLAY_NAME_MAX = 100
_PLACEHOLDERS = re.compile(f"({re.escape(UNSUBSCRIBE_PLACEHOLDER)}|{re.escape(PREFERENCES_PLACEHOLDER)})")
_FILE_UNSAFE = re.compile(r"[^A-Za-z0-9._@-]")


def sendable_address(address: str) -> bool:
    """True for an ASCII addr-spec the mailer writes into a header as it is (no quoting, no ``=?``)."""
    return _ADDRESS.fullmatch(address) is not None


def _checked(pattern: re.Pattern[str], value: str, what: str) -> str:
    """``value`` when it fully matches ``pattern``; ValueError (nothing is composed) otherwise."""
    if not pattern.fullmatch(value):
        raise ValueError(f"not a usable {what} for a mail header: {value[:80]!r}")
    return value


@dataclass(frozen=True)
class MailIdentity:
    """Who sends: the From header, the envelope sender, its domain, the list id, the mailto."""

    mail_from: str
    envelope_from: str
    domain: str
    list_id: str
    unsubscribe_mailto: str | None = None
    display_name: str = ""

    @classmethod
    def from_settings(cls, mail_from: str, unsubscribe_mailto: str | None = None) -> MailIdentity:
        """Parse DIGEST_MAIL_FROM once; ConfigError when it holds no usable address."""
        name, addr = parseaddr(mail_from)
        domain = addr.rpartition("@")[2].lower()
        if not sendable_address(addr) or not domain:
            raise ConfigError(f"DIGEST_MAIL_FROM: not a usable address: {mail_from!r}")
        mailto = (unsubscribe_mailto or "").removeprefix("mailto:").strip() or None
        if mailto is not None and not sendable_address(mailto):
            raise ConfigError(f"DIGEST_UNSUBSCRIBE_MAILTO: not a usable address: {unsubscribe_mailto!r}")
        return cls(mail_from, addr, domain, f"compiler-digest.{domain}", mailto, _display_name(name))

    def from_words(self) -> list[str]:
        """The From header's words: the display name (plain atoms or encoded words), then the address."""
        address = _checked(_ADDRESS, self.envelope_from, "sender address")
        if not self.display_name:
            return [address]
        words = _plain_words(self.display_name, _PLAIN_PHRASE)
        if words is None:
            words = encoded_words(self.display_name, _EW_OCTETS_MAX)
        return [*words, f"<{address}>"]


def _display_name(name: str) -> str:
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


def header_block(identity: MailIdentity, *, to: str, subject: str, date: dt.datetime, mid: str,
                 extra: Sequence[tuple[str, str]] = ()) -> bytes:
    """From, To, Subject, Date and Message-ID, then ``extra`` (our own ASCII values), as bytes.

    The subject is flattened to one clean line first (:func:`~digest.safety.one_line`): even
    decoded, it holds no CR or LF. Any other value is checked; ValueError when one is unusable.
    """
    text = one_line(subject, SUBJECT_MAX)
    head = (_field("From", identity.from_words())
            + f"To: {_checked(_ADDRESS, to, 'address')}\r\n"
            + _field("Subject", _plain_words(text, _PLAIN_TEXT) or encoded_words(text))
            + f"Date: {format_datetime(date.astimezone(dt.UTC))}\r\n"
            + f"Message-ID: {_checked(_MESSAGE_ID, mid, 'Message-ID')}\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in extra))
    return head.encode("ascii")


def mime_alternative(text: str, html: str) -> bytes:
    """MIME-Version, Content-Type and the text and HTML parts (quoted-printable), from EmailMessage."""
    msg = EmailMessage(policy=policy.SMTP)
    msg.set_content(text, charset="utf-8", cte="quoted-printable")
    msg.add_alternative(html, subtype="html", charset="utf-8", cte="quoted-printable")
    return msg.as_bytes()


@dataclass(frozen=True)
class PersonalLinks:
    """One reader's unsubscribe and preferences URLs."""

    unsubscribe: str
    preferences: str


def message_id(date: dt.date, subscriber_id: int, domain: str) -> str:
    """The stable Message-ID of one digest to one subscriber (the same on a re-send)."""
    return f"<digest-{date.isoformat()}-sub-{subscriber_id}@{domain}>"


def personal_links(site_url: str, secret: str, subscriber_id: int, address: str) -> PersonalLinks:
    """Signed unsubscribe and preferences URLs on ``site_url``."""
    from digest.subscribe.tokens import PREFERENCES, UNSUBSCRIBE, make_token

    site = site_url.rstrip("/")
    return PersonalLinks(
        f"{site}{UNSUBSCRIBE_PATH}?token={make_token(secret, UNSUBSCRIBE, subscriber_id, address)}",
        f"{site}{PREFERENCES_PATH}?token={make_token(secret, PREFERENCES, subscriber_id, address)}",
    )


def _headers(parts: EmailParts, identity: MailIdentity, *, to: str, mid: str, unsubscribe: str,
             date: dt.datetime) -> bytes:
    """Every header of a newsletter but the MIME ones (:func:`header_block` and the List-* ones)."""
    links = [f"<{_checked(_HEADER_URL, unsubscribe, 'unsubscribe link')}>"]
    if identity.unsubscribe_mailto:
        mailto = _checked(_ADDRESS, identity.unsubscribe_mailto, "mailto")
        links.append(f"<mailto:{mailto}?subject=unsubscribe>")
    extra = [("List-Id", f"compiler-digest <{identity.list_id}>"),
             ("List-Unsubscribe", ",\r\n ".join(links)),  # one link a line: a long URL is never folded
             ("List-Unsubscribe-Post", "List-Unsubscribe=One-Click")]
    return header_block(identity, to=to, subject=parts.subject, date=date, mid=mid, extra=extra)


def compose_message(parts: EmailParts, identity: MailIdentity, *, to: str, mid: str,
                    links: PersonalLinks, date: dt.datetime) -> bytes:
    """The whole message built afresh (the slow path, and the reference for the fast one)."""
    mine = personalise(parts, links.unsubscribe, links.preferences)
    head = _headers(parts, identity, to=to, mid=mid, unsubscribe=links.unsubscribe, date=date)
    return head + mime_alternative(mine.text, mine.html)


def _qp(text: str) -> bytes:
    """Quoted-printable (C implementation), CRLF line ends, lines of at most 76 octets."""
    return _fold(binascii.b2a_qp(text.encode("utf-8"), istext=True).replace(b"\n", b"\r\n"))


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


_QP_LINE = 76


def _cut(line: bytes) -> bytes:
    """One encoded line in lines of at most 76 octets, joined by soft breaks."""
    out = []
    while len(line) > _QP_LINE:
        cut = _QP_LINE - 1
        escape = line.rfind(b"=", cut - 2, cut)  # never cut inside an =XX escape
        cut = escape if escape >= 0 else cut
        out.append(line[:cut] + b"=")
        line = line[cut:]
    return b"\r\n".join([*out, line])


def _fold(encoded: bytes) -> bytes:
    """Quoted-printable with no line over 76 octets (b2a_qp lets a trailing ``=20`` reach 77)."""
    lines = encoded.split(b"\r\n")
    if max(len(line) for line in lines) <= _QP_LINE:
        return encoded
    return b"\r\n".join(_cut(line) for line in lines)


def _then_soft_break(encoded: bytes) -> bytes:
    """``encoded`` ending in a soft line break (what comes next starts on a line of its own)."""
    return _fold(encoded + b"=") + b"\r\n"


def _body_pieces(text: str) -> list[bytes | str]:
    """A body encoded once: encoded bytes, with the placeholders left as slots between them.

    Each encoded run ends with a soft line break before a slot, and each slot's
    value is encoded on lines of its own, so joining them is valid quoted-printable.
    """
    pieces: list[bytes | str] = []
    chunks = _PLACEHOLDERS.split(_normalise(text))
    for i, chunk in enumerate(chunks):
        if i % 2:
            pieces.append(chunk)
            continue
        encoded = _qp(chunk)
        last = i == len(chunks) - 1
        if last and not encoded.endswith(b"\r\n"):
            encoded += b"\r\n"
        pieces.append(encoded if last else _then_soft_break(encoded))
    return pieces


class EmailTemplate:
    """One filter group's message, compiled: fixed bytes and personal slots."""

    def __init__(self, parts: EmailParts, identity: MailIdentity, date: dt.datetime) -> None:
        self.parts = parts
        self.identity = identity
        self.date = date
        self._pieces = self._compile()

    def _skeleton(self, slots: dict[str, str]) -> bytes:
        """The group's message with markers for the personal values and bodies."""
        head = _headers(self.parts, self.identity, to=slots["to"], mid=slots["mid"],
                        unsubscribe=slots["unsub"], date=self.date)
        msg = EmailMessage(policy=policy.SMTP)
        msg.set_content(slots["text"].strip(), charset="utf-8", cte="7bit")
        msg.add_alternative(slots["html"].strip(), subtype="html", charset="utf-8", cte="7bit")
        for part in msg.iter_parts():
            part.replace_header("Content-Transfer-Encoding", "quoted-printable")
        return head + msg.as_bytes()

    def _compile(self) -> list[bytes | str]:
        """Cut the skeleton at its markers; the bodies go in encoded, cut at their placeholders."""
        mark = secrets.token_hex(8)  # per template: no content can know it
        slots = {"to": f"to-{mark}@marker.invalid", "mid": f"<mid-{mark}@marker.invalid>",
                 "unsub": f"https://marker.invalid/{mark}/u", "text": f"TEXT{mark}\r\n",
                 "html": f"HTML{mark}\r\n"}
        by_marker = {value.encode(): name for name, value in slots.items()}
        pattern = b"(" + b"|".join(re.escape(m) for m in by_marker) + b")"
        chunks = re.split(pattern, self._skeleton(slots))
        if sorted(by_marker[c] for c in chunks[1::2]) != sorted(slots):
            raise RuntimeError("email template: a marker is missing or repeated")
        bodies = {"text": _body_pieces(self.parts.text), "html": _body_pieces(self.parts.html)}
        pieces: list[bytes | str] = []
        for i, chunk in enumerate(chunks):
            if i % 2 == 0:
                pieces.append(chunk)
            else:
                name = by_marker[chunk]
                pieces.extend(bodies.get(name, [name]))
        return pieces

    @staticmethod
    def fast(address: str, mid: str, links: PersonalLinks) -> bool:
        """True when every personal value passes the strict check the compiled path relies on."""
        return bool(_ADDRESS.fullmatch(address) and _MESSAGE_ID.fullmatch(mid)
                    and _SAFE_URL.fullmatch(links.unsubscribe) and _SAFE_URL.fullmatch(links.preferences))

    def fill(self, address: str, mid: str, links: PersonalLinks) -> bytes:
        """The message for one reader; the slow path when a value fails the strict check."""
        if not self.fast(address, mid, links):
            return compose_message(self.parts, self.identity, to=address, mid=mid, links=links,
                                   date=self.date)
        unsub_qp, prefs_qp = _qp(links.unsubscribe), _qp(links.preferences)
        values = {"to": address.encode(), "mid": mid.encode(), "unsub": links.unsubscribe.encode(),
                  UNSUBSCRIBE_PLACEHOLDER: _then_soft_break(unsub_qp),
                  PREFERENCES_PLACEHOLDER: _then_soft_break(prefs_qp)}
        return b"".join(p if isinstance(p, bytes) else values[p] for p in self._pieces)


def preview_eml(view: DigestView, settings: Settings, address: str = "reader@example.org",
                now: dt.datetime | None = None) -> str:
    """The whole message (.eml) a reader with this view's filter would get (links for nobody: id 0)."""
    from digest.render.renderer import Renderer

    identity = MailIdentity.from_settings(settings.mail_from, settings.unsubscribe_mailto)
    parts = Renderer(site_url=settings.site_url, timezone=settings.timezone).email_parts(view)
    template = EmailTemplate(parts, identity, now or dt.datetime.now(dt.UTC))
    links = personal_links(settings.site_url, settings.secret(), 0, address)
    data = template.fill(address, message_id(view.date, 0, identity.domain), links)
    return data.decode("ascii", errors="replace")


def outbox_name(mid: str) -> str:
    """The file name of a message in the outbox: its Message-ID, sanitised."""
    return _FILE_UNSAFE.sub("_", mid.strip("<>"))[:200] + ".eml"


class FileOutbox:
    """The email channel without SMTP: one .eml per message, written atomically."""

    name = "email"
    concurrency = 8  # writes are quick; more workers only make bigger group commits

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def send(self, message: Message) -> SendResult:
        """Write the message; a re-send (same Message-ID) replaces the file."""
        mid = message.message_id or f"<delivery-{message.delivery_id}@outbox>"
        path = self.directory / outbox_name(mid)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(message.parts[0])
            os.replace(tmp, path)
        except OSError as exc:
            return SendResult(Outcome.FATAL, message.start_part,
                              f"cannot write to the mail outbox {self.directory}: {exc.strerror or exc}")
        return SendResult(Outcome.SENT, len(message.parts))

    async def aclose(self) -> None:
        """Nothing to release."""


def create_channel(settings: Settings) -> PushChannel:
    """The email channel: SMTP when DIGEST_SMTP_HOST is set, else the file outbox."""
    if not settings.smtp_host:
        return FileOutbox(settings.mail_outbox)
    from digest.deliver.smtp import SmtpChannel, SmtpConfig

    identity = MailIdentity.from_settings(settings.mail_from, settings.unsubscribe_mailto)
    return SmtpChannel(SmtpConfig.from_settings(settings, identity.envelope_from))
