"""The subscription pages: subscribe (double opt-in), confirm, unsubscribe (RFC 8058) and preferences.

Routes (zh and en, negotiated as on every page; plain HTML forms, no script)::

    GET  /subscribe            the form: address, the nine layers (all ticked), minimum score, language
    POST /subscribe            validate, throttle, subscribe (pending), mail the confirm link;
                               one "check your inbox" page whatever the address's state
    GET  /confirm?token=       a one-button page: GET changes nothing (mail scanners fetch links)
    POST /confirm?token=       pending -> active; the page links to the preferences
    GET  /unsubscribe?token=   a one-button page: GET never unsubscribes
    POST /unsubscribe?token=   unsubscribes at once, whatever the body: our button, or a mail
                               provider's RFC 8058 ``List-Unsubscribe=One-Click`` (no cookie, no form token)
    GET  /preferences?token=   the subscriber's layers, minimum score and language as a form
    POST /preferences?token=   save (never empty layers) and show a saved notice

The link's token is the only key to a subscriber; a bad or expired one gets a
400 page. Nothing shown depends on whether an address is subscribed: an
active address is mailed a notice (preferences and unsubscribe links) where a
new or pending one is mailed a confirm link, and the page is the same. A POST
over a throttle limit (:mod:`digest.subscribe.throttle`, whose buckets live in
the database, so every web process behind a load balancer keeps one limit) gets
that same page but writes and sends nothing. The write and the mail both happen after the
response (one background task, the same code path for every address up to
the response), so neither the page nor its timing tells whether the address
was known or whether a mail went; uvicorn lets a running background task
finish before it shuts down. Forms
carry a signed form token and are refused from another Origin
(:mod:`digest.web.forms`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from digest.deliver.channels import Message, Outcome
from digest.deliver.confirm_mail import SendMail, confirm_message, notice_message
from digest.deliver.mailer import PREFERENCES_PATH, UNSUBSCRIBE_PATH, MailIdentity
from digest.deliver.retry import send_with_retry
from digest.domain.errors import SubscriberNotFound, SubscriptionError, TokenError
from digest.domain.layers import BY_ID, LAYERS
from digest.domain.retry import RetryPolicy
from digest.domain.status import ChannelName, SubscriberStatus
from digest.render.i18n import labels, subscribe_labels
from digest.render.renderer import Renderer
from digest.store.buckets import DbBuckets
from digest.store.db import SessionFactory
from digest.subscribe import subscriptions
from digest.subscribe.subscriptions import SubscriberView
from digest.subscribe.throttle import Throttle
from digest.subscribe.tokens import CONFIRM, PREFERENCES, UNSUBSCRIBE, make_token
from digest.web.forms import (
    MAX_FIELDS,
    MAX_FORM_BYTES,
    Fields,
    FormState,
    Prefs,
    form_token,
    form_token_ok,
    origin_of,
    read_address,
    read_prefs,
    same_origin,
    state_from,
)
from digest.web.locale import content_language, negotiate
from digest.web.pages import WEB_LABELS, WebLinks, lang_switch

log = logging.getLogger(__name__)
Clock = Callable[[], dt.datetime]
Change = Callable[[AsyncSession, SubscriberView], Awaitable[SubscriberView]]
CONFIRM_PATH = "/confirm"
SUBSCRIBE_PATH = "/subscribe"
MAX_TOKEN = 1000
SUBSCRIBE_FORM = "subscribe"
CONFIRMABLE = (SubscriberStatus.PENDING, SubscriberStatus.ACTIVE)  # a confirm link still shows its page


@dataclass
class SubscriptionSetup:
    """What the subscription pages need beyond the database: the key, the sender, the limits."""

    secret: str
    identity: MailIdentity
    send_mail: SendMail
    throttle: Throttle = field(default_factory=Throttle)  # unbound: the pages bind it to their database
    send_attempts: int = 3
    send_backoff: float = 1.0


@dataclass(frozen=True)
class SubscribeLinks(WebLinks):
    """The web app's links, plus the subscribe form (the page footer shows it when present)."""

    def subscribe(self) -> str:
        """``/subscribe``."""
        return f"{self.base}{SUBSCRIBE_PATH}" + self._q()


@dataclass(frozen=True)
class _Visit:
    """Who is asking: locale, an explicit ``?lang=`` (kept in links), the page's own URL."""

    locale: str
    lang: str | None
    links: SubscribeLinks
    langs: tuple[tuple[str, str, str | None], ...]
    here: str


def _prefs_state(view: SubscriberView) -> FormState:
    return FormState(address=view.address, layers=tuple(view.layers), min_score=f"{view.min_score:g}",
                     locale=view.locale)


async def read_fields(request: Request) -> Fields:
    """The urlencoded form of a POST (16 KiB at most); any other body reads as no fields."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(413, "form too large")
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return {}
    try:
        return parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except (UnicodeDecodeError, ValueError):
        raise HTTPException(400, "malformed form") from None


class SubscriptionPages:
    """The subscription routes; holds its dependencies, no globals."""

    def __init__(self, sessions: SessionFactory, renderer: Renderer, setup: SubscriptionSetup, *,
                 site_url: str, default_locale: str, clock: Clock) -> None:
        self.sessions, self.renderer, self.setup = sessions, renderer, setup
        self.site_url = site_url.rstrip("/")
        self.default_locale = default_locale
        self.clock = clock
        self.throttle = setup.throttle.bound(DbBuckets(sessions, clock), setup.secret)

    def routes(self) -> list[Route]:
        """The four pages, GET and POST each."""
        both = ["GET", "POST"]
        return [Route(SUBSCRIBE_PATH, self.subscribe, methods=both),
                Route(CONFIRM_PATH, self.confirm, methods=both),
                Route(UNSUBSCRIBE_PATH, self.unsubscribe, methods=both),
                Route(PREFERENCES_PATH, self.preferences, methods=both)]

    # -- helpers -----------------------------------------------------------------

    def visit(self, request: Request) -> _Visit:
        """The reader's locale; language links and form actions keep the token and an explicit lang."""
        locale, explicit = negotiate(request.query_params.get("lang"),
                                     request.headers.get("accept-language"), self.default_locale)
        lang = locale if explicit else None
        token = {"token": request.query_params["token"]} if "token" in request.query_params else {}

        def href(code: str) -> str:
            return request.url.path + "?" + urlencode(token | {"lang": code})

        query = urlencode(token | ({"lang": lang} if lang else {}))
        here = request.url.path + (f"?{query}" if query else "")
        return _Visit(locale, lang, SubscribeLinks(lang=lang), lang_switch(locale, href), here)

    def page(self, visit: _Visit, name: str, status: int = 200, *, background: BackgroundTask | None = None,
             **context: Any) -> Response:
        """Render ``name`` for this visit; never cached, never indexed."""
        locale = visit.locale
        t = labels(locale) | WEB_LABELS.get(locale, WEB_LABELS["en"]) | subscribe_labels(locale)
        body = self.renderer.env.get_template(name).render({
            "locale": visit.locale, "t": t, "links": visit.links, "langs": visit.langs, "here": visit.here,
            "all_layers": LAYERS, "layer_label": lambda lid: BY_ID[lid].label(visit.locale),
        } | context)
        return HTMLResponse(body, status, background=background, headers={
            "content-language": content_language(visit.locale), "vary": "Accept-Language",
            "cache-control": "no-store", "x-robots-tag": "noindex, nofollow",
        })

    def notice(self, visit: _Visit, kind: str, status: int = 200, **context: Any) -> Response:
        """A result page (check inbox, bad link, refused form)."""
        return self.page(visit, "notice.html.j2", status, kind=kind, **context)

    def bad_link(self, visit: _Visit, error: TokenError) -> Response:
        """400: an expired confirm link, or any unusable one."""
        return self.notice(visit, "expired" if error.reason == "expired" else "invalid", 400)

    def link(self, path: str, purpose: str, view: SubscriberView, lang: str | None, base: str = "") -> str:
        """A signed link for ``view`` (root-relative, or absolute with ``base``)."""
        token = make_token(self.setup.secret, purpose, view.id, view.address, now=self.clock())
        return f"{base}{path}?" + urlencode({"token": token} | ({"lang": lang} if lang else {}))

    def allowed(self, request: Request) -> bool:
        """False when the POST names another site as its Origin (or Referer)."""
        ours = {origin_of(self.site_url), origin_of(str(request.base_url))}
        return same_origin(request.headers.get("origin"), request.headers.get("referer"), ours)

    async def by_token(self, request: Request, purpose: str, change: Change | None = None,
                       ) -> SubscriberView | TokenError:
        """The subscriber the link's token names (after ``change``, in one transaction), or why not."""
        token = request.query_params.get("token", "")[:MAX_TOKEN]
        async with self.sessions.begin() as session:
            try:
                view = await subscriptions.subscriber_for_token(session, self.setup.secret, purpose, token,
                                                                now=self.clock())
                return await change(session, view) if change else view
            except TokenError as exc:
                return exc
            except SubscriptionError:  # e.g. confirming an address that unsubscribed since
                return TokenError("used")

    # -- /subscribe --------------------------------------------------------------

    async def subscribe(self, request: Request) -> Response:
        """``/subscribe``: the form (GET) or a submission (POST)."""
        visit = self.visit(request)
        if request.method != "POST":  # GET or HEAD: never changes anything
            return self.subscribe_form(visit, FormState(locale=visit.locale))
        if not self.allowed(request):
            return self.notice(visit, "forbidden", 403)
        fields = await read_fields(request)
        state = state_from(fields, visit.locale)
        client_ok = await self.throttle.client(request.client.host if request.client else None)
        if not form_token_ok(self.setup.secret, SUBSCRIBE_FORM, (fields.get("form_token") or [""])[0],
                             self.clock()):
            state.errors["form"] = "err_form"
        address, prefs = read_address(fields, state), read_prefs(fields, state)
        if state.errors or address is None or prefs is None:
            return self.subscribe_form(visit, state, 400)
        after = BackgroundTask(self.enrol_and_mail, address, prefs, within_limit=client_ok)
        return self.notice(visit, "check", address=address, background=after)

    def subscribe_form(self, visit: _Visit, state: FormState, status: int = 200) -> Response:
        """The subscribe form, with ``state``'s values and errors and a fresh form token."""
        token = form_token(self.setup.secret, SUBSCRIBE_FORM, self.clock())
        return self.page(visit, "subscribe.html.j2", status, form=state, form_token=token)

    async def enrol_and_mail(self, address: str, prefs: Prefs, *, within_limit: bool) -> None:
        """After the response, for every valid POST alike: subscribe (pending) and mail, within the limits.

        Nothing that depends on the address's state runs before the response, so neither the
        page nor its timing says whether the address was known.
        """
        if not within_limit:
            return
        try:
            if not await self.throttle.address(address):
                return
            message = await self.enrol(address, prefs.layers, prefs.min_score, prefs.locale)
        except Exception:  # the page is already sent: say it in the log, never to the reader
            log.exception("subscribe: could not record a subscription")
            return
        await self.deliver(message)

    async def enrol(self, address: str, layers: list[str], min_score: float, locale: str) -> Message:
        """Subscribe (pending) and compose the mail: a confirm link, or a notice for an active address."""
        now = self.clock()
        for attempt in (1, 2):  # two first POSTs for one new address race on its unique row
            try:
                async with self.sessions.begin() as session:
                    view, needs_confirmation = await subscriptions.subscribe(
                        session, ChannelName.EMAIL, address, layers=layers, min_score=min_score,
                        locale=locale, confirmed=False, now=now)
                break
            except IntegrityError:
                if attempt == 2:
                    raise
        base, identity = self.site_url, self.setup.identity
        if needs_confirmation:
            url = self.link(CONFIRM_PATH, CONFIRM, view, view.locale, base)
            return confirm_message(identity, view.id, view.address, view.locale, confirm_url=url,
                                   site_url=base, now=now)
        return notice_message(identity, view.id, view.address, view.locale, site_url=base, now=now,
                              preferences_url=self.link(PREFERENCES_PATH, PREFERENCES, view, None, base),
                              unsubscribe_url=self.link(UNSUBSCRIBE_PATH, UNSUBSCRIBE, view, None, base))

    async def deliver(self, message: Message) -> None:
        """Send one mail under the senders' retry policy; the outcome is only logged."""
        policy = RetryPolicy(attempts=self.setup.send_attempts, backoff=self.setup.send_backoff)
        try:
            result = (await send_with_retry(lambda: self.setup.send_mail(message), policy,
                                            asyncio.sleep)).result
        except Exception:
            log.exception("subscribe: mail to subscriber %s failed", message.subscriber_id)
            return
        if result.outcome is Outcome.SENT:
            log.info("subscribe: mailed subscriber %s (%s)", message.subscriber_id, message.message_id)
        else:
            log.warning("subscribe: mail to subscriber %s not sent (%s): %s", message.subscriber_id,
                        result.outcome.value, result.error)

    # -- /confirm, /unsubscribe ----------------------------------------------------

    async def confirm(self, request: Request) -> Response:
        """``/confirm?token=``: a button (GET); pending -> active (POST)."""
        visit = self.visit(request)
        if request.method != "POST":  # GET or HEAD: never changes anything
            found = await self.by_token(request, CONFIRM)
            if isinstance(found, TokenError) or found.status not in CONFIRMABLE:
                return self.bad_link(visit, found if isinstance(found, TokenError) else TokenError("used"))
            if found.status == SubscriberStatus.PENDING:
                return self.page(visit, "confirm.html.j2", done=False, address=found.address)
        else:
            found = await self.by_token(request, CONFIRM,
                                        lambda s, v: subscriptions.confirm(s, v.id, self.clock()))
            if isinstance(found, TokenError):
                return self.bad_link(visit, found)
        return self.page(visit, "confirm.html.j2", done=True, address=found.address,
                         preferences=self.link(PREFERENCES_PATH, PREFERENCES, found, visit.lang))

    async def unsubscribe(self, request: Request) -> Response:
        """``/unsubscribe?token=``: a button (GET); unsubscribe at once (any POST, RFC 8058 one-click too)."""
        visit = self.visit(request)
        if request.method != "POST":  # GET or HEAD: never changes anything
            found = await self.by_token(request, UNSUBSCRIBE)
        else:
            found = await self.by_token(request, UNSUBSCRIBE,
                                        lambda s, v: subscriptions.unsubscribe(s, v.id, self.clock()))
        if isinstance(found, TokenError):
            return self.bad_link(visit, found)
        done = found.status == SubscriberStatus.UNSUBSCRIBED
        return self.page(visit, "unsubscribe.html.j2", done=done, address=found.address)

    # -- /preferences --------------------------------------------------------------

    async def preferences(self, request: Request) -> Response:
        """``/preferences?token=``: the form (GET); save it (POST)."""
        visit = self.visit(request)
        if request.method == "POST" and not self.allowed(request):
            return self.notice(visit, "forbidden", 403)
        found = await self.by_token(request, PREFERENCES)
        if isinstance(found, TokenError):
            return self.bad_link(visit, found)
        if request.method != "POST":  # GET or HEAD: never changes anything
            return self.preferences_form(visit, found, _prefs_state(found))
        fields = await read_fields(request)
        state = state_from(fields, found.locale)
        state.address = found.address
        if not form_token_ok(self.setup.secret, f"preferences:{found.id}",
                             (fields.get("form_token") or [""])[0], self.clock()):
            state.errors["form"] = "err_form"
        prefs = read_prefs(fields, state)
        if prefs is None or state.errors:
            return self.preferences_form(visit, found, state, 400)
        try:
            async with self.sessions.begin() as session:
                saved = await subscriptions.set_preferences(session, found.id, prefs.layers, prefs.min_score,
                                                            prefs.locale, self.clock())
        except SubscriberNotFound:
            return self.bad_link(visit, TokenError("invalid"))
        return self.preferences_form(visit, saved, _prefs_state(saved), saved=True)

    def preferences_form(self, visit: _Visit, view: SubscriberView, state: FormState, status: int = 200,
                         *, saved: bool = False) -> Response:
        """The preferences form of ``view`` with ``state``'s values, and its unsubscribe link."""
        token = form_token(self.setup.secret, f"preferences:{view.id}", self.clock())
        unsubscribe = self.link(UNSUBSCRIBE_PATH, UNSUBSCRIBE, view, visit.lang)
        return self.page(visit, "preferences.html.j2", status, form=state, form_token=token, saved=saved,
                         status_of=view.status, unsubscribe=unsubscribe)
