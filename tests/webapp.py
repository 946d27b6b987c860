"""The web app with its subscription pages, mailing to a real SMTP server: shared by the web tests.

A helper module, not a test module: test modules import from here, never from each other.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import httpx
from sqlalchemy import select

from digest.deliver.confirm_mail import one_shot
from digest.deliver.mailer import MailIdentity
from digest.deliver.smtp import SmtpChannel, SmtpConfig
from digest.domain.layers import LAYER_IDS
from digest.store.db import SessionFactory
from digest.store.models import Subscriber
from digest.web.app import create_app
from digest.web.subscribe import SubscriptionSetup
from tests.archive import SITE_URL, TZ, renderer
from tests.smtpserver import SMTPTestServer

SECRET = "subscribe-test-secret"
IDENTITY = MailIdentity.from_settings("编译器日报 <digest@example.org>")
START = dt.datetime(2026, 9, 29, 1, 0, tzinfo=dt.UTC)


class Clock:
    """A clock the test moves by hand (the app's and the throttle's)."""

    def __init__(self, now: dt.datetime = START) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += dt.timedelta(**delta)


@dataclass
class Site:
    """A running app: its client, the SMTP server its mail goes to, the clock, the database."""

    client: httpx.AsyncClient
    smtp: SMTPTestServer
    clock: Clock
    sessions: SessionFactory
    app: Any

    def mails(self, to: str) -> list[EmailMessage]:
        """Every message the SMTP server accepted for ``to``."""
        return [r.message for r in self.smtp.received if to in r.rcpt_tos]

    async def form_token(self, path: str = "/subscribe") -> str:
        page = await self.client.get(path)
        assert page.status_code == 200
        return token_in(page.text)

    async def subscribe(self, address: str, *, layers: tuple[str, ...] = LAYER_IDS, min_score: str = "0",
                        locale: str = "zh", token: str | None = None, client: httpx.AsyncClient | None = None,
                        **headers: str) -> httpx.Response:
        data = {"address": address, "layers": list(layers), "min_score": min_score, "locale": locale,
                "form_token": token or await self.form_token()}
        return await (client or self.client).post("/subscribe", data=data, headers=headers)

    async def row(self, address: str) -> Subscriber | None:
        async with self.sessions() as session:
            return (await session.execute(select(Subscriber).where(Subscriber.address == address))
                    ).scalar_one_or_none()


@asynccontextmanager
async def site(sessions: SessionFactory, smtp: SMTPTestServer, client: tuple[str, int] = ("127.0.0.1", 1234),
               clock: Clock | None = None, trusted_proxies: tuple[str, ...] = ()) -> AsyncIterator[Site]:
    """The real app with the subscription pages, mailing through SMTP to ``smtp``."""
    clock = clock or Clock()
    config = SmtpConfig(host=smtp.host, port=smtp.port, tls="none", envelope_from="digest@example.org")
    setup = SubscriptionSetup(SECRET, IDENTITY, one_shot(lambda: SmtpChannel(config)),
                              send_backoff=0.01)
    app = create_app(sessions, renderer(), site_url=SITE_URL, default_locale="zh", timezone=TZ, clock=clock,
                     subscriptions=setup, trusted_proxies=trusted_proxies)
    transport = httpx.ASGITransport(app, client=client)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield Site(c, smtp, clock, sessions, app)


def token_in(html: str) -> str:
    """The form token of a page's form."""
    found = re.search(r'name="form_token" value="([^"]+)"', html)
    assert found, "the form has no form token"
    return found[1]
