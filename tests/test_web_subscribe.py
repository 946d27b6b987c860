"""The email subscription pages over real SQLite and PostgreSQL, mail to a real aiosmtpd server."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from sqlalchemy import func, select

from digest.deliver.confirm_mail import compose
from digest.deliver.mailer import personal_links
from digest.domain.layers import LAYER_IDS
from digest.store.db import SessionFactory
from digest.store.models import Subscriber
from digest.subscribe import subscriptions
from digest.subscribe.throttle import Limit, client_key
from digest.subscribe.tokens import CONFIRM, PREFERENCES, UNSUBSCRIBE, make_token
from digest.web.app import SECURITY_HEADERS
from digest.web.forms import form_token, form_token_ok, same_origin
from tests.archive import SITE_URL
from tests.smtpserver import Received, SMTPTestServer, smtp_server
from tests.webapp import IDENTITY, SECRET, START, Site, site, token_in

Snapshot = tuple[str, list[str], dt.datetime] | None

FORM_FIELDS = ("address", "layers", "min_score", "locale", "form_token")


@pytest.fixture
def smtp() -> Iterator[SMTPTestServer]:
    with smtp_server() as server:
        yield server


def text_of(msg: EmailMessage) -> str:
    part = msg.get_body(("plain",))
    assert part is not None
    return str(part.get_content())


def link_in(msg: EmailMessage, path: str) -> str:
    """The first link to ``path`` in the text part, relative to the site."""
    found = re.search(re.escape(SITE_URL + path) + r"\?\S+", text_of(msg))
    assert found, f"no {path} link in the mail"
    return found[0].removeprefix(SITE_URL)


async def status_of(s: Site, address: str) -> str | None:
    row = await s.row(address)
    return None if row is None else row.status


async def test_subscribe_mails_a_link_that_confirms(sessions: SessionFactory, smtp: SMTPTestServer) -> None:
    async with site(sessions, smtp) as s:
        form = await s.client.get("/subscribe")
        assert form.status_code == 200 and form.text.count('type="checkbox"') == 9
        assert form.text.count(" checked") == 9 + 1 and 'name="min_score"' in form.text  # + the zh radio
        assert 'value="0"' in form.text and "<script" not in form.text
        page = await s.subscribe("  Ann@Example.ORG ", layers=("tensor_ir", "runtime"), min_score="40.5",
                                 locale="en")
        assert page.status_code == 200 and "请查收邮件" in page.text and "ann@example.org" in page.text
        row = await s.row("ann@example.org")
        assert row is not None and row.status == "pending"
        assert (row.layers, row.min_score, row.locale) == (["tensor_ir", "runtime"], 40.5, "en")
        [mail] = s.mails("ann@example.org")
        assert mail["Subject"] == "Confirm your Compiler Digest subscription"
        assert mail["From"] == IDENTITY.mail_from and mail["To"] == "ann@example.org"
        assert re.fullmatch(r"<confirm-\d+-[0-9a-f]{20}@example\.org>", mail["Message-ID"])
        assert mail.get_content_type() == "multipart/alternative" and mail.get_body(("html",)) is not None
        assert all(len(line) <= 78 for line in s.smtp.received[0].data.split(b"\r\n"))
        link = link_in(mail, "/confirm")
        shown = await s.client.get(link)
        assert shown.status_code == 200 and "Confirm subscription" in shown.text  # lang=en rides the link
        assert await status_of(s, "ann@example.org") == "pending"  # a GET (a mail scanner) changes nothing
        done = await s.client.post(link)
        assert done.status_code == 200 and "You are subscribed" in done.text
        assert await status_of(s, "ann@example.org") == "active"
        prefs = re.search(r'href="(/preferences\?[^"]+)"', done.text)
        assert prefs and (await s.client.get(prefs[1].replace("&amp;", "&"))).status_code == 200
        assert (await s.client.post(link)).status_code == 200  # confirming twice is harmless
        assert (await s.client.get(link)).status_code == 200


async def test_every_state_gets_the_same_page_and_the_throttle_sends_nothing_more(
    sessions: SessionFactory, smtp: SMTPTestServer
) -> None:
    async with site(sessions, smtp) as s:
        token = await s.form_token()
        pages = [await s.subscribe("bob@example.org", token=token)]  # new
        pages.append(await s.subscribe("bob@example.org", token=token))  # pending
        await s.client.post(link_in(s.mails("bob@example.org")[-1], "/confirm"))
        assert await status_of(s, "bob@example.org") == "active"
        pages.append(await s.subscribe("bob@example.org", token=token, layers=("runtime",)))  # active
        pages.append(await s.subscribe("bob@example.org", token=token))  # 4th mail today: throttled
        assert {p.status_code for p in pages} == {200} and len({p.text for p in pages}) == 1
        assert len({tuple(sorted(p.headers.items())) for p in pages}) == 1
        mails = s.mails("bob@example.org")
        assert [m["Subject"] for m in mails] == ["请确认订阅编译器技术日报"] * 2 + ["你已订阅编译器技术日报"]
        notice = mails[-1]
        assert link_in(notice, "/preferences") and link_in(notice, "/unsubscribe")
        row = await s.row("bob@example.org")
        assert row is not None and row.layers == list(LAYER_IDS)  # the form never changes an active row
        s.clock.advance(hours=24, seconds=1)
        await s.client.post(link_in(notice, "/unsubscribe"), data={"List-Unsubscribe": "One-Click"})
        again = await s.subscribe("bob@example.org", token=await s.form_token())
        assert again.text == pages[0].text and await status_of(s, "bob@example.org") == "pending"
        assert len(s.mails("bob@example.org")) == 4


def client_at(app: Any, host: str) -> httpx.AsyncClient:
    """Another client of the same app, from ``host``."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app, client=(host, 4321)), base_url="http://test")


async def test_one_client_is_throttled_and_others_are_not(
    sessions: SessionFactory, smtp: SMTPTestServer
) -> None:
    async with site(sessions, smtp) as s:
        token = await s.form_token()
        pages = [await s.subscribe(f"reader{n}@example.org", token=token) for n in range(11)]
        assert {p.status_code for p in pages} == {200}
        assert len({p.text.replace(f"reader{n}@", "X@") for n, p in enumerate(pages)}) == 1
        assert len(s.smtp.received) == 10 and await s.row("reader10@example.org") is None
        for n in range(11):  # one IPv6 /64 is one client
            async with client_at(s.app, f"2001:db8::{n + 1:x}") as v6:
                assert (await s.subscribe(f"v6-{n}@example.org", token=token, client=v6)).status_code == 200
        async with client_at(s.app, "2001:db8:0:1::1") as elsewhere:
            await s.subscribe("v6-next@example.org", token=token, client=elsewhere)
        assert len(s.smtp.received) == 21 and await s.row("v6-10@example.org") is None
        s.clock.advance(minutes=10, seconds=1)
        await s.subscribe("reader11@example.org", token=token)
        assert len(s.smtp.received) == 22 and s.mails("reader11@example.org")


async def test_bad_input_is_refused_with_a_clear_message(
    sessions: SessionFactory, smtp: SMTPTestServer
) -> None:
    async with site(sessions, smtp) as s:
        no_layers = await s.subscribe("cat@example.org", layers=())
        assert no_layers.status_code == 400 and "请至少选择一个层级" in no_layers.text
        assert 'value="cat@example.org"' in no_layers.text and " checked>" not in no_layers.text.split(
            'name="layers"')[1][:40]
        en = await s.subscribe("not-an-email", locale="en", **{"accept-language": "en"})
        assert en.status_code == 400 and "Enter a valid email address." in en.text
        for bad in ("a@b.c\r\nBcc: x@y.z", "a@example.org\nBcc: x@y.z", "a@example.org\r\n\r\nbody",
                    "a@example.org, b@example.org", "<a@example.org>", "x" * 400 + "@example.org"):
            refused = await s.subscribe(bad)
            assert refused.status_code == 400 and "请输入有效的邮箱地址" in refused.text, bad
            assert "Bcc:" not in refused.text.split("<form")[0]
        for score in ("abc", "101", "-1", "nan", "inf"):
            assert "最低评分须是" in (await s.subscribe("cat@example.org", min_score=score)).text
        assert (await s.subscribe("cat@example.org", locale="fr")).status_code == 400
        stale = await s.subscribe("cat@example.org", token="1.forged")
        assert stale.status_code == 400 and "表单已过期" in stale.text and token_in(stale.text) != "1.forged"
        old = await s.form_token()
        s.clock.advance(hours=13)
        assert "表单已过期" in (await s.subscribe("cat@example.org", token=old)).text
        foreign = await s.subscribe("cat@example.org", origin="https://evil.example")
        assert foreign.status_code == 403
        referred = await s.subscribe("cat@example.org", referer="https://evil.example/form")
        assert referred.status_code == 403
        assert s.smtp.received == []
        async with s.sessions() as session:
            assert await session.scalar(select(func.count()).select_from(Subscriber)) == 0
        for origin in ("null", SITE_URL, "http://test"):  # ours, or said nothing (no-referrer)
            assert (await s.subscribe(f"ok-{len(origin)}@example.org", origin=origin)).status_code == 200
        big = await s.client.post("/subscribe", content=b"address=" + b"a" * 20_000,
                                  headers={"content-type": "application/x-www-form-urlencoded"})
        assert big.status_code == 413


def test_mails_are_localised_and_refuse_header_injection() -> None:
    link = SITE_URL + "/confirm?t=1&lang=zh"
    data = compose("confirm", IDENTITY, to="a@example.org", locale="zh", link=link, site_url=SITE_URL,
                   now=START, mid="<m@example.org>")
    assert b"\nSubject: =?utf-8?" in data and all(len(line) <= 78 for line in data.split(b"\r\n"))
    mail = Received("digest@example.org", ("a@example.org",), data).message
    assert mail["Subject"] == "请确认订阅编译器技术日报" and mail["Date"]
    assert mail["Message-ID"] == "<m@example.org>" and link in text_of(mail)
    html = mail.get_body(("html",))
    assert html is not None and 'href="https://digest.example/confirm?t=1&amp;lang=zh"' in html.get_content()
    with pytest.raises(ValueError):
        compose("confirm", IDENTITY, to="a@b.c\r\nBcc: x@y.z", locale="zh", link=SITE_URL + "/confirm?x",
                site_url=SITE_URL, now=START, mid="<m@example.org>")


def test_client_keys_and_limits() -> None:
    assert client_key("203.0.113.7") == "203.0.113.7" and client_key("::ffff:203.0.113.7") == "203.0.113.7"
    assert client_key("2001:db8::1") == client_key("2001:db8::ffff") == "2001:db8::/64"
    assert client_key(None) == "unknown" and client_key("testclient") == "testclient"
    rate = Limit(3, 10).rate("web:client:x")
    assert (rate.capacity, rate.per_second, rate.floor) == (3, 0.3, 0)  # refuses, never books ahead
    for count, window in ((0, 10), (3, 0), (3, -1)):
        with pytest.raises(ValueError):
            Limit(count, window)


def test_form_tokens_and_origins() -> None:
    token = form_token(SECRET, "subscribe", START)
    assert form_token_ok(SECRET, "subscribe", token, START + dt.timedelta(hours=11))
    assert not form_token_ok(SECRET, "subscribe", token, START + dt.timedelta(hours=12, seconds=1))
    assert not form_token_ok(SECRET, "preferences:1", token, START)
    assert not form_token_ok("other", "subscribe", token, START)
    later = form_token(SECRET, "subscribe", START + dt.timedelta(hours=1))
    assert not form_token_ok(SECRET, "subscribe", later, START)  # from the future
    for junk in ("", ".", "abc.def", "9" * 20 + ".x", token + "x", token.replace(".", ""), "².x",
                 "１" + token, "9" * 12 + "." + token.partition(".")[2]):  # non-ASCII digits; year 33658
        assert not form_token_ok(SECRET, "subscribe", junk, START)
    ours = {"https://digest.example"}
    assert same_origin(None, None, ours) and same_origin("null", None, ours)
    assert same_origin("https://digest.example", None, ours)
    assert same_origin(None, "https://digest.example/x", ours)
    assert not same_origin("https://evil.example", None, ours)
    assert not same_origin(None, "https://evil.example/subscribe", ours)
    assert not same_origin("https://digest.example.evil.example", "https://digest.example/", ours)


async def _active(sessions: SessionFactory, address: str) -> int:
    async with sessions.begin() as session:
        view, _ = await subscriptions.subscribe(session, "email", address, confirmed=True, now=START)
    return view.id


async def test_unsubscribe_get_never_unsubscribes_and_one_click_post_does(
    sessions: SessionFactory, smtp: SMTPTestServer
) -> None:
    ids = [await _active(sessions, f"u{n}@example.org") for n in range(3)]
    links = [personal_links(SITE_URL, SECRET, sid, f"u{n}@example.org") for n, sid in enumerate(ids)]
    async with site(sessions, smtp) as s:
        url = links[0].unsubscribe.removeprefix(SITE_URL)
        for _ in range(3):
            shown = await s.client.get(url)
            assert shown.status_code == 200 and "<button" in shown.text and "u0@example.org" in shown.text
        assert (await s.client.head(url)).status_code == 200
        assert await status_of(s, "u0@example.org") == "active"
        one_click = await s.client.post(url, content=b"List-Unsubscribe=One-Click",
                                        headers={"content-type": "application/x-www-form-urlencoded"})
        assert one_click.status_code == 200 and await status_of(s, "u0@example.org") == "unsubscribed"
        assert "set-cookie" not in one_click.headers
        multipart = await s.client.post(links[1].unsubscribe.removeprefix(SITE_URL),
                                        files={"List-Unsubscribe": (None, "One-Click")})
        assert multipart.status_code == 200 and await status_of(s, "u1@example.org") == "unsubscribed"
        assert (await s.client.post(url)).status_code == 200  # again: still 200, still unsubscribed
        button = await s.client.post(links[2].unsubscribe.removeprefix(SITE_URL) + "&lang=en")
        assert "Unsubscribed" in button.text and await status_of(s, "u2@example.org") == "unsubscribed"
        assert s.smtp.received == []


@pytest.mark.parametrize("path", ["/unsubscribe", "/preferences", "/confirm"])
async def test_bad_tokens_get_a_400_page(sessions: SessionFactory, smtp: SMTPTestServer, path: str) -> None:
    sid = await _active(sessions, "t@example.org")
    purpose = {"/unsubscribe": UNSUBSCRIBE, "/preferences": PREFERENCES, "/confirm": CONFIRM}[path]
    good = make_token(SECRET, purpose, sid, "t@example.org", now=START)
    bad = [good[:-2] + ("AA" if not good.endswith("AA") else "BB"), "", "x" * 5000,
           make_token("another-secret", purpose, sid, "t@example.org", now=START),
           make_token(SECRET, PREFERENCES if purpose != PREFERENCES else UNSUBSCRIBE, sid, "t@example.org"),
           make_token(SECRET, purpose, sid, "someone-else@example.org"),
           make_token(SECRET, purpose, 999, "x@y.z")]
    async with site(sessions, smtp) as s:
        for token in bad:
            for method in ("GET", "POST"):
                page = await s.client.request(method, path, params={"token": token})
                assert page.status_code == 400 and "链接无效" in page.text, (method, token[:20])
                assert page.headers["content-security-policy"] == SECURITY_HEADERS["content-security-policy"]
        assert (await s.client.get(path)).status_code == 400  # no token at all
        assert await status_of(s, "t@example.org") == "active"


async def test_confirm_links_expire_and_never_revive_an_unsubscribed_address(
    sessions: SessionFactory, smtp: SMTPTestServer
) -> None:
    async with site(sessions, smtp) as s:
        await s.subscribe("late@example.org")
        link = link_in(s.mails("late@example.org")[0], "/confirm")
        s.clock.advance(days=3, seconds=1)
        for method in ("GET", "POST"):
            expired = await s.client.request(method, link)
            assert expired.status_code == 400 and "链接已过期" in expired.text
            assert 'href="/subscribe' in expired.text
        assert await status_of(s, "late@example.org") == "pending"
        s.clock.advance(days=1)
        await s.subscribe("late@example.org")
        fresh = link_in(s.mails("late@example.org")[-1], "/confirm")
        row = await s.row("late@example.org")
        assert row is not None
        async with sessions.begin() as session:
            await subscriptions.unsubscribe(session, row.id, s.clock())
        assert (await s.client.post(fresh)).status_code == 400
        assert await status_of(s, "late@example.org") == "unsubscribed"


async def test_preferences_change_layers_score_and_locale(
    sessions: SessionFactory, smtp: SMTPTestServer
) -> None:
    sid = await _active(sessions, "p@example.org")
    other = await _active(sessions, "q@example.org")
    url = personal_links(SITE_URL, SECRET, sid, "p@example.org").preferences.removeprefix(SITE_URL)
    async with site(sessions, smtp) as s:
        page = await s.client.get(url)
        assert page.status_code == 200 and page.text.count(" checked>") == 9 + 1  # + the zh radio
        assert "p@example.org" in page.text and "q@example.org" not in page.text
        data: dict[str, Any] = {"layers": ["graph_ir", "distributed"], "min_score": "55", "locale": "en",
                                "form_token": token_in(page.text)}
        saved = await s.client.post(url, data=data)
        assert saved.status_code == 200 and 'id="saved"' in saved.text
        row = await s.row("p@example.org")
        assert row is not None and (row.layers, row.min_score, row.locale, row.status) == (
            ["graph_ir", "distributed"], 55.0, "en", "active")
        assert saved.text.count(" checked>") == 2 + 1
        empty = await s.client.post(url, data=data | {"layers": []})
        assert empty.status_code == 400 and "请至少选择一个层级" in empty.text
        other_form = (await s.client.get(personal_links(SITE_URL, SECRET, other, "q@example.org")
                                         .preferences.removeprefix(SITE_URL))).text
        stolen = await s.client.post(url, data=data | {"min_score": "1", "form_token": token_in(other_form)})
        assert stolen.status_code == 400 and "表单已过期" in stolen.text
        foreign = await s.client.post(url, data=data, headers={"origin": "https://evil.example"})
        assert foreign.status_code == 403
        row = await s.row("p@example.org")
        assert row is not None and (row.layers, row.min_score) == (["graph_ir", "distributed"], 55.0)


async def test_pages_keep_security_headers_language_and_the_token_in_links(
    sessions: SessionFactory, smtp: SMTPTestServer
) -> None:
    sid = await _active(sessions, "h@example.org")
    links = personal_links(SITE_URL, SECRET, sid, "h@example.org")
    token = links.unsubscribe.partition("token=")[2]
    async with site(sessions, smtp) as s:
        paths = ["/subscribe", "/subscribe?lang=en", links.unsubscribe.removeprefix(SITE_URL),
                 links.preferences.removeprefix(SITE_URL)]
        for path in paths:
            page = await s.client.get(path, headers={"accept-language": "en-US,en;q=0.9"})
            assert page.status_code == 200 and page.headers["content-language"] == "en"
            assert all(page.headers[k] == v for k, v in SECURITY_HEADERS.items())
            assert page.headers["cache-control"] == "no-store" and "<script" not in page.text
        unsub = await s.client.get(f"/unsubscribe?token={token}&lang=en")
        assert f'action="/unsubscribe?token={token}&amp;lang=en"' in unsub.text
        assert f'href="/unsubscribe?token={token}&amp;lang=zh"' in unsub.text
        index = await s.client.get("/")
        assert 'href="/subscribe"' in index.text and "邮件订阅" in index.text
        assert 'href="/subscribe?lang=en"' in (await s.client.get("/?lang=en")).text


async def snapshot(s: Site, address: str) -> Snapshot:
    """What the database holds for ``address``: (status, layers, updated_at), or None."""
    row = await s.row(address)
    return None if row is None else (row.status, list(row.layers), row.updated_at)


@dataclass
class Observed:
    """A POST answered by the ASGI app itself, and what had happened by the time its response was sent."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    mails_at_response: int
    row_at_response: Snapshot


async def post_directly(s: Site, address: str, token: str, layers: tuple[str, ...] = LAYER_IDS) -> Observed:
    """POST the form straight to the app (no transport between): the last body message is the response."""
    body = urlencode({"address": address, "layers": list(layers), "min_score": "0", "locale": "zh",
                      "form_token": token}, doseq=True).encode()
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/subscribe", "raw_path": b"/subscribe", "query_string": b"", "root_path": "",
        "headers": [(b"host", b"test"), (b"content-type", b"application/x-www-form-urlencoded"),
                    (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1234), "server": ("test", 80),
    }
    sent: list[dict[str, Any]] = []
    seen: list[tuple[int, Snapshot]] = []
    requests = iter([{"type": "http.request", "body": body, "more_body": False}])

    async def receive() -> dict[str, Any]:
        return next(requests, {"type": "http.disconnect"})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            seen.append((len(s.smtp.received), await snapshot(s, address)))  # the reader has the page now

    await s.app(scope, receive, send)
    start = sent[0]
    assert start["type"] == "http.response.start" and len(seen) == 1
    return Observed(start["status"], list(start["headers"]),
                    b"".join(m.get("body", b"") for m in sent[1:]), *seen[0])


async def test_known_and_unknown_addresses_do_the_same_work_before_the_response(
    sessions: SessionFactory, smtp: SMTPTestServer
) -> None:
    async with site(sessions, smtp) as s:
        token = await s.form_token()
        await s.subscribe("pend@example.org", token=token)  # known: pending
        await s.subscribe("live@example.org", token=token)
        await s.client.post(link_in(s.mails("live@example.org")[0], "/confirm"))  # known: active
        s.clock.advance(minutes=5)
        before = {a: await snapshot(s, a) for a in ("pend@example.org", "live@example.org")}
        mails = len(s.smtp.received)
        new = await post_directly(s, "anew@example.org", token)
        assert (new.mails_at_response, new.row_at_response) == (mails, None)  # not written, not mailed yet
        assert len(s.mails("anew@example.org")) == 1 and await status_of(s, "anew@example.org") == "pending"
        for address in ("pend@example.org", "live@example.org"):
            known = await post_directly(s, address, token, layers=("runtime",))
            mails += 1
            assert (known.mails_at_response, known.row_at_response) == (mails, before[address]), address
            assert (known.status, known.headers) == (new.status, new.headers), address
            assert known.body == new.body.replace(b"anew@example.org", address.encode()), address
        assert len(s.smtp.received) == mails + 1
        assert [m["Subject"] for m in s.mails("pend@example.org")] == ["请确认订阅编译器技术日报"] * 2
        assert [m["Subject"] for m in s.mails("live@example.org")][-1] == "你已订阅编译器技术日报"
        pending = await snapshot(s, "pend@example.org")
        assert pending is not None and pending[1] == ["runtime"]  # the write happened, after the page


async def test_forwarded_for_is_believed_only_from_a_trusted_proxy(
    sessions: SessionFactory, smtp: SMTPTestServer
) -> None:
    async with site(sessions, smtp) as s:  # no trusted proxy: the peer is the client, whatever it says
        token = await s.form_token()
        for n in range(11):
            await s.subscribe(f"spoof{n}@example.org", token=token, **{"x-forwarded-for": f"198.51.100.{n}"})
        assert len(s.smtp.received) == 10 and await s.row("spoof10@example.org") is None
    async with site(sessions, smtp, trusted_proxies=("127.0.0.1", "10.0.0.1/8")) as s:
        token = await s.form_token()
        for n in range(11):  # each forwarded client has its own budget (the proxy chain is trusted too)
            chain = f"203.0.113.{n}, 10.9.9.9"
            await s.subscribe(f"fwd{n}@example.org", token=token, **{"x-forwarded-for": chain})
        assert len(s.smtp.received) == 21 and await s.row("fwd10@example.org") is not None
        for n in range(11):  # the right-most untrusted address counts: a made-up left part changes nothing
            forged = f"192.0.2.{n}, 203.0.113.200"
            await s.subscribe(f"left{n}@example.org", token=token, **{"x-forwarded-for": forged})
        assert len(s.smtp.received) == 31 and await s.row("left10@example.org") is None
    async with site(sessions, smtp, client=("192.0.2.50", 4321), trusted_proxies=("127.0.0.1",)) as s:
        token = await s.form_token()  # an untrusted peer's header is ignored even when proxies are trusted
        for n in range(11):
            await s.subscribe(f"far{n}@example.org", token=token, **{"x-forwarded-for": f"198.51.100.{n}"})
        assert len(s.smtp.received) == 41 and await s.row("far10@example.org") is None
