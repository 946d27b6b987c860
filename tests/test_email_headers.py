"""Header injection: no text from a feed, a subscriber or the settings can add a header or a body line.

Every message is checked as it would be sent (bytes), parsed back with the
modern policy: exactly the expected headers, once each; one clean Subject;
one multipart/alternative of text/plain and text/html; List-Unsubscribe intact.
Addresses are ASCII only (IDNA domain, no SMTPUTF8): refused at subscribe,
never a surprise at send time.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator
from email import message_from_bytes, policy
from email.headerregistry import Address
from email.message import EmailMessage

import aiosmtplib
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from digest.bootstrap import preview_eml
from digest.build.pipeline import BuildOptions, build_digest
from digest.config import Settings, load_settings
from digest.deliver.channels import Message, Outcome
from digest.deliver.confirm_mail import ALREADY, CONFIRM, TEXTS, compose
from digest.deliver.headers import sendable_address
from digest.deliver.mailer import (
    EmailTemplate,
    MailIdentity,
    PersonalLinks,
    compose_message,
    message_id,
    personal_links,
)
from digest.deliver.smtp import SmtpChannel, SmtpConfig
from digest.domain.errors import ConfigError, SubscriptionError
from digest.domain.views import DigestView, EventView, SourceLink
from digest.domain.window import window_for
from digest.render.email import PREFERENCES_PLACEHOLDER as PREFS
from digest.render.email import SUBJECT_MAX, EmailParts
from digest.render.email import UNSUBSCRIBE_PLACEHOLDER as UNSUB
from digest.render.renderer import Renderer
from digest.render.safety import one_line
from digest.store.db import SessionFactory
from digest.store.models import Subscriber
from digest.store.queries import load_view
from digest.subscribe.validation import validate_address
from tests.builders import add_entry, add_source
from tests.publish_runner import SITE, add_subscriber, make_runner
from tests.smtpserver import SMTPTestServer, smtp_server
from tests.webapp import site

NEWSLETTER = ["From", "To", "Subject", "Date", "Message-ID", "List-Id", "List-Unsubscribe",
              "List-Unsubscribe-Post", "MIME-Version", "Content-Type"]
CONFIRMATION = ["From", "To", "Subject", "Date", "Message-ID", "Auto-Submitted", "MIME-Version",
                "Content-Type"]
DATE = dt.datetime(2026, 9, 29, 0, 5, tzinfo=dt.UTC)
DAY = dt.date(2026, 9, 29)
IDENTITY = MailIdentity.from_settings("Compiler Digest <digest@example.org>", "leave@example.org")
RENDERER = Renderer(site_url=SITE, timezone="Asia/Shanghai")
ODD_SITE = "https://digest.example.org/a&b"  # '&' must be escaped in the HTML: the compiled path declines it

PAYLOAD = b"Hi\r\nReply-To: a@evil.example\r\nContent-Type: text/html\r\n\r\n<h1>Phish</h1>"
HOSTILE_TITLE = f"=?utf-8?b?{base64.b64encode(PAYLOAD).decode()}?= MLIR Triton kernel codegen"
HOSTILE_ADDRESS = "=?utf-8?q?x=0d=0abcc=3a_v=40evil.example?=@example.org"


def _ew_b(text: str) -> str:
    return f"=?utf-8?b?{base64.b64encode(text.encode()).decode()}?="


EVIL = [
    "\r", "\n", "\r\n", "\r\n\r\n", "\x85", "\u2028", "\x00", "\t", " ", "Bcc: v@evil.example",
    HOSTILE_TITLE, _ew_b("x\r\nBcc: v@evil.example\r\n\r\nbody"), _ew_b("\r\n"),
    "=?utf-8?q?x=0d=0aBcc:_v@evil.example=0d=0a?=", "=?UTF-8?Q?=0D=0A?=", "=?", "?=", "=?utf-8?b?",
    "=?iso-8859-1?q?=e9?=", "编译器", "ü", "😀", "\u200b", "\u202e", '"', "\\", "<", ">", ",", ";", ":", "(",
    "x" * 300, "中" * 120, "=" * 80, "a" * 61, "Subject: x", "\r\nTo: v@evil.example",
]
hostile = st.lists(st.one_of(st.sampled_from(EVIL), st.text(max_size=40)), max_size=8).map("".join)


def parse(data: bytes) -> EmailMessage:
    msg = message_from_bytes(data, policy=policy.default)
    assert isinstance(msg, EmailMessage)
    return msg


def raw_field(data: bytes, name: bytes) -> list[bytes]:
    """The lines of one header field as written (its first line and continuations)."""
    lines = data.partition(b"\r\n\r\n")[0].split(b"\r\n")
    start = next(n for n, line in enumerate(lines) if line.startswith(name + b":"))
    end = next((n for n in range(start + 1, len(lines)) if lines[n][:1] not in (b" ", b"\t")), len(lines))
    return lines[start:end]


def assert_clean(data: bytes, expected: list[str], *, to: str, subject: str) -> EmailMessage:
    """The message as sent: the expected headers once each, one clean Subject, text + HTML parts."""
    bare = data.replace(b"\r\n", b"")
    assert data.isascii() and b"\n" not in bare and b"\r" not in bare
    assert all(len(line) <= 998 for line in data.split(b"\r\n"))
    assert all(len(line) <= 78 for line in raw_field(data, b"Subject"))
    msg = parse(data)
    assert sorted(msg.keys()) == sorted(expected)
    assert msg.defects == []
    assert str(msg["To"]) == to and msg["To"].addresses[0].addr_spec == to
    shown = str(msg["Subject"])
    assert "\r" not in shown and "\n" not in shown
    assert shown == one_line(subject, SUBJECT_MAX)
    assert msg.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in msg.iter_parts()] == ["text/plain", "text/html"]
    for part in msg.iter_parts():  # EmailMessage gives the HTML part a MIME-Version of its own
        assert not part.is_multipart() and len(set(part.keys())) == len(part.keys())
        assert set(part.keys()) <= {"Content-Type", "Content-Transfer-Encoding", "MIME-Version"}
    return msg


def assert_newsletter(data: bytes, identity: MailIdentity, *, to: str, mid: str, links: PersonalLinks,
                      subject: str) -> EmailMessage:
    msg = assert_clean(data, NEWSLETTER, to=to, subject=subject)
    mailto = identity.unsubscribe_mailto
    mailto = f", <mailto:{mailto}?subject=unsubscribe>" if mailto else ""
    assert msg["List-Unsubscribe"] == f"<{links.unsubscribe}>{mailto}"
    assert f"\r\nList-Unsubscribe: <{links.unsubscribe}>".encode() in data  # as it is: no encoded word
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert msg["List-Id"] == f"compiler-digest <{identity.list_id}>"
    assert msg["Message-ID"] == mid and msg["MIME-Version"] == "1.0"
    assert_from(msg, identity)
    text = msg.get_body(("plain",))
    assert text is not None and links.unsubscribe in str(text.get_content())
    return msg


def assert_from(msg: EmailMessage, identity: MailIdentity) -> None:
    [sender] = msg["From"].addresses
    assert isinstance(sender, Address)
    assert (sender.display_name, sender.addr_spec) == (identity.display_name, identity.envelope_from)


def event(n: int, title: str, summary: str, source: str) -> EventView:
    return EventView(id=100 + n, rank=n, title=title, url=f"https://example.org/e{n}", score=80.0 - n,
                     score_breakdown={"relevance": 40.0}, layers=("kernel_codegen",),
                     sources=(SourceLink(source, f"https://arxiv.org/abs/{n}"),), summary=summary,
                     why_it_matters=summary, watch=(title[:30],), written_by="extractive")


def view_of(title: str, overview: str, events: tuple[EventView, ...]) -> DigestView:
    return DigestView(date=DAY, locale="en", title=title, overview=overview, watchlist=(),
                      day_mode="extractive", window_start=DATE - dt.timedelta(days=1), window_end=DATE,
                      events=events, stats={"entries_by_source": {"arxiv": 1}, "entries": 1, "late": 0,
                                            "failed_sources": []})


@pytest.fixture(scope="module")
def preview_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return load_settings(secret_key="k" * 32, var_dir=tmp_path_factory.mktemp("var"),
                         mail_from="Compiler Digest <digest@example.org>", site_url=SITE)


@settings(max_examples=40, deadline=None)
@given(title=hostile, overview=hostile, texts=st.lists(st.tuples(hostile, hostile, hostile), min_size=0,
                                                        max_size=3))
def test_no_feed_text_reaches_a_header_as_anything_but_the_subject(
        preview_settings: Settings, title: str, overview: str, texts: list[tuple[str, str, str]]) -> None:
    events = tuple(event(n, t or "t", s, src or "src") for n, (t, s, src) in enumerate(texts, 1))
    view = view_of(title, overview, events)
    parts = RENDERER.email_parts(view)
    template = EmailTemplate(parts, IDENTITY, DATE)
    to, mid = "reader@example.com", message_id(DAY, 42, IDENTITY.domain)
    links = personal_links(SITE, "secret", 42, to)
    assert template.fast(to, mid, links)
    assert_newsletter(template.fill(to, mid, links), IDENTITY, to=to, mid=mid, links=links,
                      subject=parts.subject)
    assert_newsletter(compose_message(parts, IDENTITY, to=to, mid=mid, links=links, date=DATE), IDENTITY,
                      to=to, mid=mid, links=links, subject=parts.subject)
    odd = personal_links(ODD_SITE, "secret", 42, to)
    assert not template.fast(to, mid, odd)  # the slow path, through the same fill()
    assert_newsletter(template.fill(to, mid, odd), IDENTITY, to=to, mid=mid, links=odd, subject=parts.subject)
    eml = preview_eml(view, preview_settings, now=DATE).encode()
    identity = MailIdentity.from_settings(preview_settings.mail_from)
    assert_newsletter(eml, identity, to="reader@example.org", mid=message_id(DAY, 0, identity.domain),
                      links=personal_links(SITE, preview_settings.secret(), 0, "reader@example.org", DATE),
                      subject=parts.subject)


def parts_with(subject: str) -> EmailParts:
    return EmailParts(subject=subject, html=f'<p>x</p><a href="{UNSUB}">u</a> <a href="{PREFS}">p</a>',
                      text=f"x\n{UNSUB}\n{PREFS}\n", preheader="")


address_like = st.one_of(
    hostile,
    st.builds(lambda local, domain: f"{local}@{domain}", hostile, st.sampled_from(
        ["example.org", "exämple.org", "EXAMPLE.org", "example.org\r\nBcc: v@evil.example", "[127.0.0.1]"])),
    st.sampled_from([HOSTILE_ADDRESS, "ü@exämple.org", "u@exämple.org", "o'brien&co@example.org",
                     '"a b"@example.org', "a@example.org, b@example.org", "<a@example.org>", "a@b@c.org"]),
)


@settings(max_examples=120, deadline=None)
@given(address=address_like, subject=hostile, name=hostile)
def test_an_address_is_refused_at_subscribe_or_makes_a_clean_message(address: str, subject: str,
                                                                      name: str) -> None:
    parts = parts_with(subject)
    try:
        identity = MailIdentity.from_settings(f"{name} <digest@example.org>", "leave@example.org")
    except ConfigError:  # a display name that breaks the address out of <...>: refused at load time
        identity = IDENTITY
    try:
        to = validate_address("email", address)
    except SubscriptionError:
        return
    assert sendable_address(to)
    mid = message_id(DAY, 7, identity.domain)
    for site_url in (SITE, ODD_SITE):
        links = personal_links(site_url, "secret", 7, to)
        data = EmailTemplate(parts, identity, DATE).fill(to, mid, links)
        assert_newsletter(data, identity, to=to, mid=mid, links=links, subject=parts.subject)
    for kind in (CONFIRM, ALREADY):
        mail = compose(kind, identity, to=to, locale="en", link=f"{SITE}/confirm?t=1", site_url=SITE,
                       now=DATE, unsubscribe=f"{SITE}/unsubscribe?t=2" if kind == ALREADY else "",
                       mid=f"<{kind}-7-0123@{identity.domain}>")
        assert_from(assert_clean(mail, CONFIRMATION, to=to, subject=TEXTS["en"][kind]["subject"]), identity)


@settings(max_examples=60, deadline=None)
@given(address=address_like)
def test_the_composer_never_writes_an_unchecked_address(address: str) -> None:
    """Whatever reaches the composer (a stored row, the --to copy): a clean message or ValueError."""
    parts = parts_with("s")
    mid = message_id(DAY, 7, IDENTITY.domain)
    links = personal_links(SITE, "secret", 7, "x@example.org")
    try:
        data = EmailTemplate(parts, IDENTITY, DATE).fill(address, mid, links)
    except ValueError:
        assert not sendable_address(address)
        return
    assert_newsletter(data, IDENTITY, to=address, mid=mid, links=links, subject="s")


def test_encoded_word_display_name_and_subject_are_text_not_headers() -> None:
    identity = MailIdentity.from_settings(f"{_ew_b('x' + chr(13) + chr(10) + 'Bcc: v@evil.example')} "
                                          "<digest@example.org>")
    mail = compose(CONFIRM, identity, to="a@example.org", locale="zh", link=f"{SITE}/confirm?t=1",
                   site_url=SITE, now=DATE, mid="<confirm-1-0@example.org>")
    msg = assert_clean(mail, CONFIRMATION, to="a@example.org", subject="请确认订阅编译器技术日报")
    assert msg["From"].addresses[0].display_name.startswith("=?utf-8?b?")  # shown as the text it is


async def _hostile_day(sessions: SessionFactory) -> None:
    window = window_for(DAY, "Asia/Shanghai")
    source = await add_source(sessions, "arxiv-hostile", name="arXiv cs.PL", kind="arxiv", weight=0.7)
    await add_entry(sessions, source, HOSTILE_TITLE,
                    "An MLIR-based Triton kernel code generator lowers tensor programs to GPU kernels with "
                    "tiling and vectorization passes, 2x faster than the baseline compiler.",
                    window.start + dt.timedelta(hours=1), arxiv_id="2609.00001", arxiv_version=1,
                    announce_type="new", url="https://arxiv.org/abs/2609.00001")
    await build_digest(sessions, DAY, BuildOptions(locales=("zh", "en")),
                       now=window.end + dt.timedelta(minutes=5))


async def test_the_reported_hostile_title_stays_in_the_subject(sqlite_sessions: SessionFactory,
                                                              preview_settings: Settings) -> None:
    await _hostile_day(sqlite_sessions)
    async with sqlite_sessions() as session:
        view = await load_view(session, DAY, "en")
    assert HOSTILE_TITLE in view.title  # it reached the day title: the attack's precondition
    parts = RENDERER.email_parts(view)
    to, mid = "reader@example.com", message_id(DAY, 1, IDENTITY.domain)
    links = personal_links(SITE, "secret", 1, to)
    for data in (EmailTemplate(parts, IDENTITY, DATE).fill(to, mid, links),
                 compose_message(parts, IDENTITY, to=to, mid=mid, links=links, date=DATE)):
        msg = assert_newsletter(data, IDENTITY, to=to, mid=mid, links=links, subject=parts.subject)
        assert msg["Reply-To"] is None and HOSTILE_TITLE in str(msg["Subject"])
        assert b"Reply-To" not in data and b"<h1>Phish</h1>" not in data
    eml = preview_eml(view, preview_settings, now=DATE).encode()
    assert b"Reply-To" not in eml and parse(eml)["Reply-To"] is None
    with smtp_server() as server:  # and as a real publish sends it
        sid = await add_subscriber(sqlite_sessions, "victim@example.com")
        channel = SmtpChannel(SmtpConfig(host=server.host, port=server.port, tls="none", timeout=5,
                                         envelope_from="digest@example.org"))
        runner = make_runner(sqlite_sessions, {"email": channel}, mailto="leave@example.org")
        await runner.publish(DAY, "en")
        await runner.channels.aclose()
    [received] = server.received
    identity = MailIdentity.from_settings("Compiler Digest <digest@example.org>", "leave@example.org")
    unsubscribe = str(received.message["List-Unsubscribe"]).split(",")[0].strip(" <>")
    msg = assert_newsletter(received.data, identity, to="victim@example.com",
                            mid=message_id(DAY, sid, identity.domain),
                            links=PersonalLinks(unsubscribe, ""), subject=parts.subject)
    assert msg["Reply-To"] is None and HOSTILE_TITLE in str(msg["Subject"])


def test_validate_address_refuses_encoded_words_and_international_mailboxes() -> None:
    for bad in (HOSTILE_ADDRESS, "=?utf-8?b?eA==?=@example.org", "a=?b@example.org", "ü@exämple.org",
                "用户@例子.广告"):
        with pytest.raises(SubscriptionError) as refused:
            validate_address("email", bad)
        assert refused.value.field == "address" and "\n" not in str(refused.value)
    with pytest.raises(SubscriptionError, match="Internationalized characters before the @-sign"):
        validate_address("email", "ü@exämple.org")
    assert validate_address("email", "U@Exämple.ORG") == "u@xn--exmple-cua.org"  # IDNA: any server takes it
    assert validate_address("email", "a=b?c@example.org") == "a=b?c@example.org"  # '=' and '?' apart are fine


@pytest.fixture
def smtp() -> Iterator[SMTPTestServer]:
    with smtp_server() as server:
        yield server


async def test_subscribe_form_refuses_an_encoded_word_address(sessions: SessionFactory,
                                                               smtp: SMTPTestServer) -> None:
    async with site(sessions, smtp) as s:
        for bad in (HOSTILE_ADDRESS, "ü@exämple.org"):
            page = await s.subscribe(bad)
            assert page.status_code == 400 and "请输入有效的邮箱地址" in page.text, bad
            assert "Bcc" not in page.text.split("<form")[0]
        async with s.sessions() as session:
            assert await session.scalar(select(func.count()).select_from(Subscriber)) == 0
        assert s.smtp.received == []
        ok = await s.subscribe("reader@Exämple.org")
        assert ok.status_code == 200 and await s.row("reader@xn--exmple-cua.org") is not None
        [mail] = s.mails("reader@xn--exmple-cua.org")
        assert str(mail["To"]) == "reader@xn--exmple-cua.org"


async def test_smtp_never_sends_to_an_address_the_composer_would_refuse() -> None:
    with smtp_server() as server:
        client = aiosmtplib.SMTP(hostname=server.host, port=server.port, timeout=5, start_tls=False)
        await client.connect()
        assert not client.supports_extension("smtputf8")  # the test server, like many relays, has none
        await client.quit()
        channel = SmtpChannel(SmtpConfig(host=server.host, port=server.port, tls="none", timeout=5,
                                         envelope_from="digest@example.org"))
        connections = server.handler.connections
        try:
            data = b"Subject: x\r\n\r\nx\r\n"
            results = [await channel.send(Message(1, 1, address, (data,), "<m@example.org>"))
                       for address in ("ü@exämple.org", "u@exämple.org", HOSTILE_ADDRESS)]
            sent = await channel.send(Message(2, 2, "u@xn--exmple-cua.org", (data,), "<n@example.org>"))
        finally:
            await channel.aclose()
    assert [r.outcome for r in results] == [Outcome.PERMANENT] * 3
    assert all("unusable address" in (r.error or "") and "SMTPUTF8" in (r.error or "") for r in results)
    assert sent.outcome is Outcome.SENT and server.handler.connections == connections + 1
    assert [r.rcpt_tos for r in server.received] == [("u@xn--exmple-cua.org",)]
