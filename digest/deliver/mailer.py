"""The email channel: compose the newsletter (MIME) and deliver it to a file outbox or by SMTP.

Composing is compiled once per filter group (:class:`EmailTemplate`): the
group's message is built once with random per-template markers where the
personal values go (To, Message-ID, List-Unsubscribe) and its bodies are
encoded quoted-printable once, cut at the link placeholders. Per subscriber
only short values are encoded and joined: no body line exceeds 76 octets
(RFC 2045) nor any line 998, and a recipient costs microseconds instead of
the milliseconds a full build takes.

Headers are written by :mod:`digest.deliver.headers` (never by the email
package), and every address, Message-ID and link must pass its strict checks.
A link the compiled path cannot take (an odd site URL) takes the slow path:
the whole message built afresh (:func:`compose_message`). One unfiltered or
filtered copy for nobody in particular (the operator's check copy, the
preview) is :func:`single_copy`.

Delivery: :class:`FileOutbox` writes one ``.eml`` per message, atomically and
named by the Message-ID (a re-send overwrites); ``digest.deliver.smtp`` sends by SMTP.
"""

from __future__ import annotations

import binascii
import datetime as dt
import os
import re
import secrets
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.utils import parseaddr
from pathlib import Path
from typing import TYPE_CHECKING

from digest.deliver.channels import Message, Outcome, SendResult
from digest.deliver.headers import (
    ADDRESS,
    MESSAGE_ID,
    NO_EW,
    checked,
    display_name,
    from_words,
    header_block,
    mime_alternative,
    sendable_address,
)
from digest.domain.errors import ConfigError
from digest.domain.status import ChannelName
from digest.render.email import PREFERENCES_PLACEHOLDER, UNSUBSCRIBE_PLACEHOLDER, EmailParts, personalise
from digest.subscribe.tokens import PREFERENCES, UNSUBSCRIBE, make_token

if TYPE_CHECKING:
    from digest.domain.views import DigestView
    from digest.render.renderer import Renderer

UNSUBSCRIBE_PATH = "/unsubscribe"
PREFERENCES_PATH = "/preferences"
_SAFE_URL = re.compile(NO_EW + r"https?://[A-Za-z0-9._~:/?#\[\]@!$()*+,;=%-]{1,880}")  # raw in QP and HTML
_HEADER_URL = re.compile(NO_EW + r"https?://[!#-;=?-~]{1,880}")  # printable ASCII but space " < >
_PLACEHOLDERS = re.compile(f"({re.escape(UNSUBSCRIBE_PLACEHOLDER)}|{re.escape(PREFERENCES_PLACEHOLDER)})")
_FILE_UNSAFE = re.compile(r"[^A-Za-z0-9._@-]")


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
        return cls(mail_from, addr, domain, f"compiler-digest.{domain}", mailto, display_name(name))

    def from_words(self) -> list[str]:
        """The From header's words: the display name (plain atoms or encoded words), then the address."""
        return from_words(self.display_name, self.envelope_from)


@dataclass(frozen=True)
class PersonalLinks:
    """One reader's unsubscribe and preferences URLs."""

    unsubscribe: str
    preferences: str


def message_id(date: dt.date, subscriber_id: int, domain: str) -> str:
    """The stable Message-ID of one digest to one subscriber (the same on a re-send)."""
    return f"<digest-{date.isoformat()}-sub-{subscriber_id}@{domain}>"


def personal_links(site_url: str, secret: str, subscriber_id: int, address: str,
                   now: dt.datetime | None = None) -> PersonalLinks:
    """Signed unsubscribe and preferences URLs on ``site_url``, signed at ``now`` (the injected clock)."""
    site = site_url.rstrip("/")
    unsubscribe = make_token(secret, UNSUBSCRIBE, subscriber_id, address, now=now)
    preferences = make_token(secret, PREFERENCES, subscriber_id, address, now=now)
    return PersonalLinks(f"{site}{UNSUBSCRIBE_PATH}?token={unsubscribe}",
                         f"{site}{PREFERENCES_PATH}?token={preferences}")


def _headers(parts: EmailParts, identity: MailIdentity, *, to: str, mid: str, unsubscribe: str,
             date: dt.datetime) -> bytes:
    """Every header of a newsletter but the MIME ones (:func:`header_block` and the List-* ones)."""
    links = [f"<{checked(_HEADER_URL, unsubscribe, 'unsubscribe link')}>"]
    if identity.unsubscribe_mailto:
        mailto = checked(ADDRESS, identity.unsubscribe_mailto, "mailto")
        links.append(f"<mailto:{mailto}?subject=unsubscribe>")
    extra = [("List-Id", f"compiler-digest <{identity.list_id}>"),
             ("List-Unsubscribe", ",\r\n ".join(links)),  # one link a line: a long URL is never folded
             ("List-Unsubscribe-Post", "List-Unsubscribe=One-Click")]
    return header_block(identity.from_words(), to=to, subject=parts.subject, date=date, mid=mid,
                        extra=extra)


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
        return bool(ADDRESS.fullmatch(address) and MESSAGE_ID.fullmatch(mid)
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


def single_copy(view: DigestView, renderer: Renderer, identity: MailIdentity, *, site_url: str, secret: str,
                address: str, mid: str, now: dt.datetime) -> bytes:
    """The whole message of ``view`` (filtered or not) for ``address``, its links for nobody (id 0).

    The one way to build a copy outside a subscriber's delivery: the operator's check copy and
    the preview (``digest preview --eml``) are both this.
    """
    template = EmailTemplate(renderer.email_parts(view), identity, now)
    return template.fill(address, mid, personal_links(site_url, secret, 0, address, now))


def outbox_name(mid: str) -> str:
    """The file name of a message in the outbox: its Message-ID, sanitised."""
    return _FILE_UNSAFE.sub("_", mid.strip("<>"))[:200] + ".eml"


class FileOutbox:
    """The email channel without SMTP: one .eml per message, written atomically."""

    name: str = ChannelName.EMAIL
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
        return SendResult(Outcome.SENT, len(message.parts), detail=str(path))

    async def aclose(self) -> None:
        """Nothing to release."""
