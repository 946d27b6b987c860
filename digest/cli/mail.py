"""``digest mail test --to ADDRESS``: one small message through the configured mail transport.

The same channel the newsletters use (``bootstrap.email_channel``): SMTP when
``DIGEST_SMTP_HOST`` is set (connection, TLS, authentication, the envelope and
the recipient all checked by the server), else the file outbox. It prints
where the message went: the SMTP server, or the path of the ``.eml``. A bad
address is a usage error (exit 2); a refusal or an unreachable server is one
line with the server's reason (exit 1).
"""

from __future__ import annotations

import argparse
import datetime as dt
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

from digest import bootstrap
from digest.domain.errors import DigestError, UsageError
from digest.domain.status import ChannelName

if TYPE_CHECKING:
    from digest.config import Settings

SUBJECT = "compiler-digest: test message"


def add_commands(sub: Any) -> None:
    """Register ``mail test``."""
    mail = sub.add_parser("mail", help="check the mail settings")
    mail_sub = mail.add_subparsers(dest="mail_command", required=True, metavar="ACTION")
    test = mail_sub.add_parser("test", help="send one test message through the configured SMTP server "
                                            "or file outbox, and say where it went")
    test.add_argument("--to", metavar="ADDRESS", required=True, help="the address to send it to")
    test.set_defaults(handler=mail_test)


def validated_address(address: str, option: str = "--to") -> str:
    """The address as stored and sent (an international domain in its xn-- form), or a usage error."""
    from digest.domain.errors import SubscriptionError
    from digest.subscribe.validation import validate_address

    try:
        return validate_address(ChannelName.EMAIL, address)
    except SubscriptionError as exc:
        raise UsageError(f"{option}: {exc.detail}") from None


def destination(settings: Settings) -> str:
    """Where mail goes with these settings: ``smtp HOST:PORT``, or the outbox folder."""
    if settings.smtp_host:
        return f"smtp {settings.smtp_host}:{settings.smtp_port}"
    return f"the file outbox {settings.mail_outbox}"


def outbox_path(settings: Settings, message_id: str) -> Path:
    """The ``.eml`` the file outbox writes for ``message_id``."""
    from digest.deliver.mailer import outbox_name

    return settings.mail_outbox / outbox_name(message_id)


def _message(settings: Settings, to: str) -> tuple[str, bytes]:
    """(Message-ID, the RFC 5322 bytes) of the test message."""
    from digest.deliver.headers import header_block, mime_alternative

    identity = bootstrap.mail_identity(settings)
    now = bootstrap.clock(settings)()
    mid = f"<mail-test-{secrets.token_hex(8)}@{identity.domain}>"
    when = f"{now.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC"
    text = (f"This is a test message from compiler-digest (digest mail test), sent {when} "
            f"through {destination(settings)}.\n\nIf it arrived, the mail settings work. Nothing else "
            f"was sent, and no subscriber was touched.\n\n{settings.site_url}\n")
    html = ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>compiler-digest test"
            "</title></head><body><p>This is a test message from compiler-digest (digest mail test).</p>"
            "<p>If it arrived, the mail settings work. Nothing else was sent.</p></body></html>\n")
    try:
        head = header_block(identity.from_words(), to=to, subject=SUBJECT, date=now, mid=mid,
                            extra=[("Auto-Submitted", "auto-generated")])
    except ValueError as exc:
        raise UsageError(f"--to: {exc}") from None
    return mid, head + mime_alternative(text, html)


async def mail_test(settings: Settings, args: argparse.Namespace) -> int:
    """``digest mail test --to ADDRESS``: send, then print where the message went."""
    from digest.deliver.channels import Message, Outcome

    to = validated_address(args.to)
    mid, data = _message(settings, to)
    channel = bootstrap.email_channel(settings)
    try:
        result = await channel.send(Message(0, 0, to, (data,), mid))
    finally:
        await channel.aclose()
    if result.outcome is not Outcome.SENT:
        raise DigestError(f"the test message to {to} was not sent: {result.error or result.outcome.value}")
    if settings.smtp_host:
        answer = result.detail or destination(settings)
        print(f"sent to {to} via {answer} (Message-ID {mid})")
    else:
        path = result.detail or outbox_path(settings, mid)
        print(f"written to {path} (no DIGEST_SMTP_HOST: the file outbox)")
    return 0
