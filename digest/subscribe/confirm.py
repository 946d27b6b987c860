"""Confirmation mails for pending email subscribers the operator added (import, ``confirm-resend``).

The same mail the web subscribe form sends (:func:`digest.deliver.confirm_mail.confirm_message`,
a signed confirm link to the site), on the newsletters' email channel, at an
even pace (:func:`digest.domain.ratelimit.per_second`) so that a large import
does not arrive at a provider as a burst.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from digest.deliver.channels import Outcome
from digest.deliver.confirm_mail import SendMail, confirm_message
from digest.deliver.mailer import MailIdentity
from digest.domain.ratelimit import Limiter
from digest.subscribe.subscriptions import SubscriberView
from digest.subscribe.tokens import CONFIRM, make_token

CONFIRM_RATE = 5.0  # confirmation mails per second at most


@dataclass(frozen=True)
class ConfirmSetup:
    """Who signs and sends the mails, and where the confirm page is."""

    identity: MailIdentity
    secret: str
    site_url: str
    confirm_path: str
    clock: Callable[[], dt.datetime]


@dataclass
class ResendReport:
    """How many confirmation mails went out, and how many did not."""

    sent: int = 0
    failed: int = 0

    def summary(self) -> str:
        """One line of counts."""
        return f"confirmation mail: {self.sent} sent, {self.failed} failed"


def confirm_url(setup: ConfirmSetup, view: SubscriberView, now: dt.datetime) -> str:
    """The signed link of the confirm page, in the subscriber's language."""
    token = make_token(setup.secret, CONFIRM, view.id, view.address, now=now)
    return f"{setup.site_url}{setup.confirm_path}?" + urlencode({"token": token, "lang": view.locale})


async def send_confirmations(views: Sequence[SubscriberView], setup: ConfirmSetup, send: SendMail,
                             limiter: Limiter) -> ResendReport:
    """One confirmation mail to each of ``views``, paced by ``limiter``; a failure never stops the rest."""
    report = ResendReport()
    for view in views:
        await limiter.acquire()
        now = setup.clock()
        message = confirm_message(setup.identity, view.id, view.address, view.locale,
                                  confirm_url=confirm_url(setup, view, now), site_url=setup.site_url, now=now)
        try:
            sent = (await send(message)).outcome is Outcome.SENT
        except OSError:
            sent = False
        report.sent += sent
        report.failed += not sent
    return report
