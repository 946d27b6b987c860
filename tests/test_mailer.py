"""The email channel: composing (fast path = EmailMessage path), line limits, injection, delivery."""

from __future__ import annotations

import asyncio
import datetime as dt
import random
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path

import pytest

from digest.deliver.channels import Message, Outcome
from digest.deliver.mailer import (
    EmailTemplate,
    FileOutbox,
    MailIdentity,
    PersonalLinks,
    compose_message,
    message_id,
    outbox_name,
    personal_links,
)
from digest.deliver.smtp import SmtpChannel, SmtpConfig
from digest.domain.errors import ConfigError
from digest.render.email import PREFERENCES_PLACEHOLDER as PREFS
from digest.render.email import UNSUBSCRIBE_PLACEHOLDER as UNSUB
from digest.render.email import EmailParts
from tests.smtpserver import Faults, smtp_server

IDENTITY = MailIdentity.from_settings("Compiler Digest <digest@example.org>", "leave@example.org")
DATE = dt.datetime(2026, 9, 29, 0, 5, tzinfo=dt.UTC)
LINKS = personal_links("https://digest.example.org", "secret", 42, "reader@example.com")
MID = message_id(dt.date(2026, 9, 29), 42, IDENTITY.domain)


def _parts(subject: str = "编译器日报: MLIR & Triton", body: str = "Hello") -> EmailParts:
    html = f'<p>{body}</p><a href="{UNSUB}">unsubscribe</a> <a href="{PREFS}">preferences</a>'
    text = f"{body}\n\nUnsubscribe:\n{UNSUB}\nPreferences:\n{PREFS}\n"
    return EmailParts(subject=subject, html=html, text=text, preheader="pre")


def _parse(data: bytes) -> EmailMessage:
    msg = message_from_bytes(data, policy=policy.default)
    assert isinstance(msg, EmailMessage)
    return msg


def _bodies(msg: EmailMessage) -> tuple[str, str]:
    text, html = msg.get_body(("plain",)), msg.get_body(("html",))
    assert text is not None and html is not None
    return str(text.get_content()), str(html.get_content())


HEADERS = ("From", "To", "Subject", "Message-ID", "List-Id", "List-Unsubscribe", "List-Unsubscribe-Post",
           "Date", "MIME-Version")


def _same(fast: bytes, slow: bytes) -> None:
    a, b = _parse(fast), _parse(slow)
    for name in HEADERS:
        assert str(a[name]) == str(b[name]), name
    assert _bodies(a) == _bodies(b)
    assert a.get_content_type() == "multipart/alternative"
    for part in a.iter_parts():
        assert part["Content-Transfer-Encoding"] == "quoted-printable"
        assert part.get_content_charset() == "utf-8"


def test_compiled_template_gives_the_message_emailmessage_builds() -> None:
    parts = _parts()
    fast = EmailTemplate(parts, IDENTITY, DATE).fill("reader@example.com", MID, LINKS)
    _same(fast, compose_message(parts, IDENTITY, to="reader@example.com", mid=MID, links=LINKS, date=DATE))
    msg = _parse(fast)
    text, html = _bodies(msg)
    assert LINKS.unsubscribe in text and LINKS.preferences in text
    assert f'href="{LINKS.unsubscribe}"' in html and UNSUB not in html
    assert msg["Subject"] == "编译器日报: MLIR & Triton"
    assert msg["Message-ID"] == "<digest-2026-09-29-sub-42@example.org>"
    assert msg["List-Unsubscribe"] == f"<{LINKS.unsubscribe}>, <mailto:leave@example.org?subject=unsubscribe>"
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert msg["From"] == "Compiler Digest <digest@example.org>" and msg["To"] == "reader@example.com"
    assert msg["List-Id"] == "compiler-digest <compiler-digest.example.org>"


def test_no_mailto_unless_configured() -> None:
    bare = MailIdentity.from_settings("digest@example.org")
    msg = _parse(EmailTemplate(_parts(), bare, DATE).fill("reader@example.com", MID, LINKS))
    assert msg["List-Unsubscribe"] == f"<{LINKS.unsubscribe}>"


def _nasty_text(rng: random.Random) -> str:
    pieces = ["x" * 10_000, "=" * 3000, "中文" * 2000, ".\n", "..\n", " trailing  \n", "\t\ttab\n",
              "a=b=c", "\r\n", "\r", "<b>&amp;</b>", "From here\n", UNSUB, PREFS, "😀" * 500, "\n" * 3,
              "=\n", " " * 200]
    return "".join(rng.choice(pieces) for _ in range(rng.randint(1, 40)))


def test_no_line_of_any_message_exceeds_the_limits() -> None:
    rng = random.Random(5)
    for n in range(30):
        parts = EmailParts(subject=_nasty_text(rng)[:300] or "s", html=_nasty_text(rng),
                           text=_nasty_text(rng), preheader="")
        token = "t" * rng.choice([10, 200, 800])
        links = PersonalLinks(f"https://d.example.org/unsubscribe?token={token}",
                              f"https://d.example.org/preferences?token={token}=")
        fast = EmailTemplate(parts, IDENTITY, DATE).fill(f"r{n}@example.com", MID, links)
        slow = compose_message(parts, IDENTITY, to=f"r{n}@example.com", mid=MID, links=links, date=DATE)
        for data in (fast, slow):
            assert all(len(line) <= 998 for line in data.split(b"\r\n"))
            assert b"\n" not in data.replace(b"\r\n", b"")
        _same(fast, slow)
        _, _, body = fast.partition(b"\r\n\r\n")
        assert all(len(line) <= 76 for line in body.split(b"\r\n") if not line.startswith(b"--"))
        assert _bodies(_parse(fast))[0].count(links.unsubscribe) == parts.text.count(UNSUB)


def test_header_injection_is_impossible() -> None:
    evil = _parts(subject="Digest\r\nBcc: victim@example.com\nX-Evil: 1")
    msg = _parse(EmailTemplate(evil, IDENTITY, DATE).fill("reader@example.com", MID, LINKS))
    assert msg["Bcc"] is None and msg["X-Evil"] is None
    assert msg["Subject"] == "Digest Bcc: victim@example.com X-Evil: 1"
    template = EmailTemplate(_parts(), IDENTITY, DATE)
    with pytest.raises(ValueError):
        template.fill("reader@example.com\r\nBcc: victim@example.com", MID, LINKS)
    with pytest.raises(ValueError):
        template.fill("reader@example.com", MID, PersonalLinks(LINKS.unsubscribe + "\r\nBcc: v@x.org",
                                                                LINKS.preferences))


def test_odd_values_take_the_emailmessage_path() -> None:
    parts = _parts()
    odd = PersonalLinks("https://d.example.org/u?a=1&token=x'y", "https://d.example.org/p?token=z")
    data = EmailTemplate(parts, IDENTITY, DATE).fill("o'brien+tag@example.com", MID, odd)
    _same(data, compose_message(parts, IDENTITY, to="o'brien+tag@example.com", mid=MID, links=odd, date=DATE))
    assert "a=1&amp;token=x&#x27;y" in _bodies(_parse(data))[1]


def test_identity_refuses_unusable_settings() -> None:
    with pytest.raises(ConfigError, match="DIGEST_MAIL_FROM"):
        MailIdentity.from_settings("not an address")
    with pytest.raises(ConfigError, match="DIGEST_UNSUBSCRIBE_MAILTO"):
        MailIdentity.from_settings("digest@example.org", "bad\r\naddress")
    mailto = MailIdentity.from_settings("d@example.org", "mailto:u@example.org").unsubscribe_mailto
    assert mailto == "u@example.org"


def _message(data: bytes, address: str = "reader@example.com", mid: str = MID) -> Message:
    return Message(1, 42, address, (data,), mid)


async def test_file_outbox_writes_atomically_and_a_resend_overwrites(tmp_path: Path) -> None:
    outbox = FileOutbox(tmp_path / "outbox")
    data = EmailTemplate(_parts(), IDENTITY, DATE).fill("reader@example.com", MID, LINKS)
    assert (await outbox.send(_message(data))).outcome is Outcome.SENT
    assert (await outbox.send(_message(data + b""))).outcome is Outcome.SENT
    files = list((tmp_path / "outbox").iterdir())
    assert [f.name for f in files] == [outbox_name(MID)] == ["digest-2026-09-29-sub-42@example.org.eml"]
    assert files[0].read_bytes() == data
    blocked = FileOutbox(files[0])  # a file where the directory should be
    result = await blocked.send(_message(data))
    assert result.outcome is Outcome.FATAL and "mail outbox" in (result.error or "")


def _smtp(port: int, **kwargs: object) -> SmtpChannel:
    config = SmtpConfig(host="127.0.0.1", port=port, tls="none", timeout=5,
                        envelope_from="digest@example.org", **kwargs)  # type: ignore[arg-type]
    return SmtpChannel(config)


def _data(address: str) -> bytes:
    return EmailTemplate(_parts(), IDENTITY, DATE).fill(address, MID, LINKS)


async def test_smtp_verdicts_per_recipient() -> None:
    faults = Faults(refuse={"gone@example.com"}, defer_first={"busy@example.com"},
                    drop_first={"flaky@example.com"})
    with smtp_server(faults) as server:
        channel = _smtp(server.port, concurrency=2)
        try:
            ok = await channel.send(_message(_data("ok@example.com"), "ok@example.com"))
            gone = await channel.send(_message(_data("gone@example.com"), "gone@example.com"))
            busy = [await channel.send(_message(_data("busy@example.com"), "busy@example.com"))
                    for _ in range(2)]
            flaky = [await channel.send(_message(_data("flaky@example.com"), "flaky@example.com"))
                     for _ in range(2)]
            long_line = await channel.send(_message(b"Subject: x\r\n\r\n" + b"y" * 1200 + b"\r\n"))
        finally:
            await channel.aclose()
        received = server.by_recipient()
    assert (ok.outcome, ok.parts_sent) == (Outcome.SENT, 1)
    assert gone.outcome is Outcome.PERMANENT and "550" in (gone.error or "")
    assert [r.outcome for r in busy] == [Outcome.TRANSIENT, Outcome.SENT] and "451" in (busy[0].error or "")
    assert [r.outcome for r in flaky] == [Outcome.TRANSIENT, Outcome.SENT]
    assert long_line.outcome is Outcome.BUG and "500" in (long_line.error or "")
    assert {k: len(v) for k, v in received.items()} == {
        "ok@example.com": 1, "busy@example.com": 1, "flaky@example.com": 1}
    assert received["ok@example.com"][0].message_id == MID


async def test_smtp_connections_are_reused_and_bounded() -> None:
    with smtp_server() as server:
        channel = _smtp(server.port, concurrency=3)
        try:
            results = await asyncio.gather(*(
                channel.send(_message(_data(f"r{i}@example.com"), f"r{i}@example.com")) for i in range(30)))
        finally:
            await channel.aclose()
        assert {r.outcome for r in results} == {Outcome.SENT}
        assert len(server.received) == 30 and server.handler.connections <= 3


class FakeClock:
    """Time that moves only when someone sleeps: the rate is checked without waiting for it."""

    def __init__(self) -> None:
        self.now = 0.0

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


async def test_smtp_rate_limit_spaces_the_sends() -> None:
    clock = FakeClock()
    with smtp_server() as server:
        config = SmtpConfig(host="127.0.0.1", port=server.port, tls="none", timeout=5, concurrency=4,
                            rate=40.0, envelope_from="digest@example.org")
        channel = SmtpChannel(config, clock=clock.time, sleep=clock.sleep)
        try:
            results = await asyncio.gather(*(channel.send(_message(_data("r@example.com"), "r@example.com"))
                                             for _ in range(12)))
        finally:
            await channel.aclose()
    assert {r.outcome for r in results} == {Outcome.SENT}
    assert clock.now == pytest.approx(11 / 40)  # 12 starts, one every 25 ms of the injected clock


async def test_smtp_authentication() -> None:
    with smtp_server(Faults(password="right")) as server:
        wrong = _smtp(server.port, user="digest", password="wrong")
        right = _smtp(server.port, user="digest", password="right")
        try:
            refused = await wrong.send(_message(_data("r@example.com"), "r@example.com"))
            accepted = await right.send(_message(_data("r@example.com"), "r@example.com"))
        finally:
            await wrong.aclose()
            await right.aclose()
    assert refused.outcome is Outcome.FATAL and "535" in (refused.error or "")
    assert accepted.outcome is Outcome.SENT


async def test_an_unreachable_server_is_transient_then_fatal() -> None:
    with smtp_server() as server:
        port = server.port
    channel = _smtp(port)
    results = [await channel.send(_message(_data("r@example.com"), "r@example.com")) for _ in range(5)]
    assert [r.outcome for r in results] == [Outcome.TRANSIENT] * 4 + [Outcome.FATAL]
    assert "cannot open a session" in (results[-1].error or "")
