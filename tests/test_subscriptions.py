"""The subscription service on SQLite and PostgreSQL: rules, transitions, import/export, removal."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from digest.cli.subscribers import export_csv, import_csv
from digest.domain.errors import SubscriberNotFound, SubscriptionError, TokenError
from digest.domain.layers import LAYER_IDS
from digest.store.db import SessionFactory
from digest.store.models import Delivery, Digest, Subscriber
from digest.subscribe import subscriptions as subs
from digest.subscribe import validation
from digest.subscribe.tokens import PREFERENCES, UNSUBSCRIBE, make_token

NOW = dt.datetime(2025, 3, 1, 8, 0, tzinfo=dt.UTC)
LATER = NOW + dt.timedelta(hours=1)
OLD_PREFS: dict[str, Any] = {"layers": ["frontend"], "min_score": 10.0, "locale": "en"}
NEW_PREFS: dict[str, Any] = {"layers": ["runtime", "benchmark"], "min_score": 50.0, "locale": "zh"}

# Written out independently of subs.RULES: (stored status, confirmed) -> (status, prefs applied, confirm)
EXPECTED = {
    (None, False): ("pending", True, True),
    ("pending", False): ("pending", True, True),
    ("active", False): ("active", False, False),
    ("unsubscribed", False): ("pending", True, True),
    ("bounced", False): ("pending", True, True),
    ("blocked", False): ("pending", True, True),
    **{(status, True): ("active", True, False)
       for status in (None, "pending", "active", "unsubscribed", "bounced", "blocked")},
}


async def _make(session: AsyncSession, channel: str, address: str, status: str) -> subs.SubscriberView:
    """A subscriber in ``status``, reached through the service's own transitions."""
    view, _ = await subs.subscribe(session, channel, address, **OLD_PREFS,
                                   confirmed=status != "pending", now=NOW)
    if status == "unsubscribed":
        view = await subs.unsubscribe(session, view.id, NOW)
    elif status in ("bounced", "blocked"):
        view = await subs.mark(session, view.id, status, NOW)
    assert view.status == status
    return view


def _prefs(view: subs.SubscriberView) -> dict[str, object]:
    return {"layers": view.layers, "min_score": view.min_score, "locale": view.locale}


# -- pure validation ----------------------------------------------------------

@pytest.mark.parametrize(("channel", "given", "stored"), [
    ("email", " Reader.Name@EXAMPLE.Com ", "reader.name@example.com"),
    ("telegram", "-1001234567890", "-1001234567890"),
    ("telegram", "123456789", "123456789"),
    ("discord", "123456789012345678", "123456789012345678"),
    ("discord", "user:12345678901234567", "user:12345678901234567"),
    ("discord", "channel:12345678901234567890", "12345678901234567890"),
])
def test_addresses_are_normalised(channel: str, given: str, stored: str) -> None:
    assert validation.validate_address(channel, given) == stored


@pytest.mark.parametrize(("channel", "given"), [
    ("email", "no-at-sign"), ("email", "a@"), ("email", "a@b@example.com"), ("email", ""),
    ("telegram", "@somechannel"), ("telegram", "12.5"), ("telegram", "0"), ("telegram", ""),
    ("telegram", "9" * 5000),
    ("discord", "1234"), ("discord", "guild:123456789012345678"), ("discord", "99999999999999999999"),
    ("discord", "0123456789012345678"),
])
def test_bad_addresses_name_the_field(channel: str, given: str) -> None:
    with pytest.raises(SubscriptionError, match=r"^address: ") as info:
        validation.validate_address(channel, given)
    assert info.value.field == "address" and "\n" not in str(info.value)


def test_unknown_channel_is_refused() -> None:
    with pytest.raises(SubscriptionError, match=r"^channel: unknown channel 'sms'"):
        validation.validate_address("sms", "+123")


def test_layers_never_empty_and_default_to_all_nine_explicitly() -> None:
    assert validation.validate_layers(None) == list(LAYER_IDS)
    assert validation.validate_layers(["benchmark", "frontend", "benchmark"]) == ["frontend", "benchmark"]
    assert validation.validate_layers("runtime,graph_ir") == ["graph_ir", "runtime"]
    nothings: tuple[list[str] | str, ...] = ([], "", " , ")
    for nothing in nothings:
        with pytest.raises(SubscriptionError, match=r"^layers: no layers given"):
            validation.validate_layers(nothing)
    with pytest.raises(SubscriptionError, match=r"^layers: unknown layer"):
        validation.validate_layers(["frontend", "quantum"])


@pytest.mark.parametrize("bad", [-1, 100.5, float("nan"), float("inf"), True])
def test_min_score_is_0_to_100(bad: float) -> None:
    with pytest.raises(SubscriptionError, match=r"^min_score: "):
        validation.validate_min_score(bad)
    assert validation.validate_min_score(0) == 0.0 and validation.validate_min_score(100) == 100.0


def test_locale_is_zh_or_en() -> None:
    assert validation.validate_locale("en") == "en"
    with pytest.raises(SubscriptionError, match=r"^locale: unknown locale 'fr'"):
        validation.validate_locale("fr")


# -- the service on both databases ---------------------------------------------

async def test_every_rule_of_the_table(sessions: SessionFactory) -> None:
    assert subs.RULES == EXPECTED
    async with sessions() as session, session.begin():
        for (stored, confirmed), (status, applied, needs) in EXPECTED.items():
            address = f"{stored or 'new'}-{confirmed}@example.com".lower()
            if stored is not None:
                await _make(session, "email", address, stored)
            view, needs_confirmation = await subs.subscribe(
                session, "email", address, **NEW_PREFS, confirmed=confirmed, now=LATER)
            case = (stored, confirmed)
            assert (view.status, needs_confirmation) == (status, needs), case
            assert _prefs(view) == (NEW_PREFS if applied else OLD_PREFS), case
            assert (view.confirmed_at is not None) == (status == "active"), case


async def test_chat_subscribe_from_the_chat_reactivates(sessions: SessionFactory) -> None:
    async with sessions() as session, session.begin():
        for chat_id, status in (("-1001", "unsubscribed"), ("-1002", "bounced"), ("3", "blocked")):
            chat = await _make(session, "telegram", chat_id, status)
            view, needs = await subs.subscribe(session, "telegram", chat.address, confirmed=True, now=LATER)
            assert (view.id, view.status, needs) == (chat.id, "active", False)
            assert _prefs(view) == OLD_PREFS, "no prefs given: the stored ones stay"
            assert view.confirmed_at == LATER
        with pytest.raises(SubscriptionError, match=r"^channel: only an email subscription"):
            await subs.subscribe(session, "discord", "123456789012345678", confirmed=False, now=NOW)


async def test_new_and_existing_addresses_get_the_same_outward_answer(sessions: SessionFactory) -> None:
    """No error, and the same values a web page would show, whatever the stored row."""
    request: dict[str, Any] = {"layers": ["tensor_ir"], "min_score": 30.0, "locale": "en"}
    async with sessions() as session, session.begin():
        for stored in ("pending", "active", "unsubscribed", "bounced", "blocked"):
            await _make(session, "email", f"{stored}@example.com", stored)
        for local in (None, "pending", "active", "unsubscribed", "bounced", "blocked"):
            given = f"{local or 'new'}@EXAMPLE.com"
            view, _ = await subs.subscribe(session, "email", given, **request, confirmed=False, now=LATER)
            assert (view.channel, view.address) == ("email", given.lower())
        first, needs_first = await subs.subscribe(session, "email", "twice@example.com", confirmed=False,
                                                  now=NOW)
        again, needs_again = await subs.subscribe(session, "email", "Twice@example.com", confirmed=False,
                                                  now=LATER)
        assert (first.id, first.address, needs_first) == (again.id, again.address, needs_again)


async def test_defaults_are_stored_explicitly(sessions: SessionFactory) -> None:
    async with sessions() as session, session.begin():
        view, needs = await subs.subscribe(session, "email", "all@example.com", confirmed=False, now=NOW)
        stored = await session.scalar(select(Subscriber.layers).where(Subscriber.id == view.id))
        assert stored == list(LAYER_IDS) and view.layers == list(LAYER_IDS)
        assert (view.status, needs, view.min_score, view.locale) == ("pending", True, 0.0, "zh")
        with pytest.raises(SubscriptionError, match=r"^layers: "):
            await subs.set_preferences(session, view.id, [], None, None, LATER)
        with pytest.raises(SubscriptionError, match=r"^layers: "):
            await subs.subscribe(session, "email", "none@example.com", layers=[], confirmed=True, now=NOW)
        changed = await subs.set_preferences(session, view.id, ["benchmark", "frontend"], 20, "en", LATER)
        assert (changed.layers, changed.min_score, changed.locale) == (["frontend", "benchmark"], 20.0, "en")
        assert changed.status == "pending" and changed.updated_at == LATER


async def test_confirm_unsubscribe_mark_and_change_address(sessions: SessionFactory) -> None:
    async with sessions() as session, session.begin():
        pending, _ = await subs.subscribe(session, "email", "c@example.com", confirmed=False, now=NOW)
        active = await subs.confirm(session, pending.id, LATER)
        assert (active.status, active.confirmed_at) == ("active", LATER)
        twice = await subs.confirm(session, pending.id, LATER + dt.timedelta(minutes=1))
        assert twice.confirmed_at == LATER, "confirming again changes nothing"
        bounced = await subs.mark(session, active.id, "bounced")
        assert bounced.status == "bounced"
        with pytest.raises(SubscriptionError, match="is bounced; only a pending"):
            await subs.confirm(session, active.id, LATER)
        gone = await subs.unsubscribe(session, active.id, LATER)
        assert gone.status == "unsubscribed" and (await subs.unsubscribe(session, gone.id, LATER)) == gone
        assert (await subs.mark(session, gone.id, "blocked", LATER)).status == "unsubscribed"
        with pytest.raises(ValueError, match="bounced or blocked"):
            await subs.mark(session, gone.id, "active", LATER)
        group = await _make(session, "telegram", "-4001234", "active")
        moved = await subs.change_address(session, group.id, "-1004001234", LATER)
        assert (moved.id, moved.address, moved.status) == (group.id, "-1004001234", "active")
        assert await subs.find_by_address(session, "telegram", "-4001234") is None
        other = await _make(session, "telegram", "-777", "active")
        kept = await subs.change_address(session, other.id, "-1004001234")
        assert (kept.id, kept.status) == (group.id, "active")
        assert (await subs.get(session, other.id)).status == "blocked", "its chat is gone"
        with pytest.raises(SubscriberNotFound):
            await subs.confirm(session, 99999, LATER)


async def test_lists_and_planning(sessions: SessionFactory) -> None:
    async with sessions() as session, session.begin():
        for i, status in enumerate(("pending", "active", "unsubscribed", "bounced", "active")):
            await _make(session, "email", f"l{i}@example.com", status)
        await _make(session, "discord", "user:12345678901234567", "active")
        planned = await subs.active_subscribers_for_planning(session)
        assert [(v.channel, v.address) for v in planned] == [
            ("email", "l1@example.com"), ("email", "l4@example.com"), ("discord", "user:12345678901234567")]
        assert len(await subs.list_subscribers(session)) == 6
        assert len(await subs.list_subscribers(session, channel="email", status="active")) == 2
        found = await subs.find_by_address(session, "email", "L1@EXAMPLE.com")
        assert found is not None and found == await subs.get(session, found.id) == planned[0]


async def test_remove_deletes_the_subscriber_and_its_deliveries(sessions: SessionFactory) -> None:
    async with sessions() as session, session.begin():
        keep = await _make(session, "email", "keep@example.com", "active")
        drop = await _make(session, "email", "drop@example.com", "active")
        digest = Digest(date=dt.date(2025, 3, 1), window_start=NOW, window_end=NOW, built_at=NOW)
        session.add(digest)
        await session.flush()
        session.add_all([Delivery(digest_id=digest.id, subscriber_id=s.id, planned_at=NOW,
                                  message_id=f"<{s.address}>") for s in (keep, drop)])
    async with sessions() as session, session.begin():
        assert (await subs.remove(session, drop.id)).address == "drop@example.com"
    async with sessions() as session:
        rows = (await session.execute(select(Delivery.subscriber_id))).scalars().all()
        assert rows == [keep.id]
        assert await session.scalar(select(func.count()).select_from(Subscriber)) == 1
        with pytest.raises(SubscriberNotFound):
            await subs.get(session, drop.id)


async def test_tokens_are_bound_to_the_subscriber_and_its_address(sessions: SessionFactory) -> None:
    secret = "s3cret"
    async with sessions() as session, session.begin():
        view = await _make(session, "email", "t@example.com", "active")
        token = make_token(secret, UNSUBSCRIBE, view.id, view.address)
        assert await subs.subscriber_for_token(session, secret, UNSUBSCRIBE, token) == view
        with pytest.raises(TokenError, match="wrong purpose"):
            await subs.subscriber_for_token(session, secret, PREFERENCES, token)
        reused = make_token(secret, UNSUBSCRIBE, view.id, "someone-else@example.com")
        with pytest.raises(TokenError, match="invalid"):
            await subs.subscriber_for_token(session, secret, UNSUBSCRIBE, reused)
        await subs.remove(session, view.id)
        with pytest.raises(TokenError, match="invalid"):
            await subs.subscriber_for_token(session, secret, UNSUBSCRIBE, token)


# -- import and export ---------------------------------------------------------

IMPORT = """channel,address,layers,min_score,locale
email,new@example.com,,,
email,gone@example.com,,,
email,bounce@example.com,,,
telegram,-1001234567890,runtime frontend,20,en
telegram,555,,,
email,not-an-address,,,
discord,123,,,
email,x@example.com,frontend bogus,,
email,y@example.com,,200,
email,active@example.com,kernel_codegen,5,en
email,waiting@example.com,,,
sms,+1555,,,
email,WAITING@example.com,,,
"""


async def test_import_rules_and_report(sessions: SessionFactory) -> None:
    async with sessions() as session, session.begin():
        for address, status in (("gone", "unsubscribed"), ("bounce", "bounced"), ("active", "active"),
                                ("waiting", "pending")):
            await _make(session, "email", f"{address}@example.com", status)
        await _make(session, "telegram", "555", "blocked")
        report = await import_csv(session, IMPORT, confirmed=False, now=LATER)
        by = {(v.channel, v.address): v for v in await subs.list_subscribers(session)}
    assert (report.added, report.updated, report.unchanged) == (2, 2, 1)
    assert [line for line, _ in report.skipped] == [3, 4, 6]
    assert "unsubscribed; an import never re-activates it" in report.skipped[0][1]
    assert [line for line, _ in report.errors] == [7, 8, 9, 10, 13]
    assert report.errors[0][1].startswith("address: ") and report.errors[2][1].startswith("layers: ")
    assert report.errors[3][1].startswith("min_score: ") and report.errors[4][1].startswith("channel: ")
    assert by["email", "new@example.com"].status == "pending"
    assert report.to_confirm == [by["email", "new@example.com"].id]
    chat = by["telegram", "-1001234567890"]
    assert (chat.status, chat.layers, chat.min_score, chat.locale) == (
        "active", ["frontend", "runtime"], 20.0, "en")
    assert [by["email", a].status for a in ("gone@example.com", "bounce@example.com")] == [
        "unsubscribed", "bounced"]
    assert by["telegram", "555"].status == "blocked"
    assert _prefs(by["email", "active@example.com"]) == {"layers": ["kernel_codegen"], "min_score": 5.0,
                                                        "locale": "en"}
    assert by["email", "waiting@example.com"].status == "pending"
    assert _prefs(by["email", "waiting@example.com"]) == {"layers": list(LAYER_IDS), "min_score": 0.0,
                                                         "locale": "zh"}


async def test_confirmed_import_activates_email(sessions: SessionFactory) -> None:
    text = "channel,address\nemail,fresh@example.com\nemail,waiting@example.com\n"
    async with sessions() as session, session.begin():
        await _make(session, "email", "waiting@example.com", "pending")
        report = await import_csv(session, text, confirmed=True, now=LATER)
        statuses = {v.address: v.status for v in await subs.list_subscribers(session)}
    assert (report.added, report.updated, report.to_confirm) == (1, 1, [])
    assert statuses == {"waiting@example.com": "active", "fresh@example.com": "active"}


async def test_export_import_round_trip_keeps_suppressions(sessions: SessionFactory) -> None:
    async with sessions() as session, session.begin():
        for channel, address, status in (
                ("email", "a@example.com", "active"), ("email", "p@example.com", "pending"),
                ("telegram", "-1001234567890", "active"), ("discord", "user:12345678901234567", "active"),
                ("email", "u@example.com", "unsubscribed"), ("telegram", "42", "blocked"),
                ("email", "b@example.com", "bounced")):
            made = await _make(session, channel, address, status)
            if address == "a@example.com":
                await subs.set_preferences(session, made.id, None, 12.5, None, NOW)
        exported = export_csv(await subs.list_subscribers(session))
        for view in await subs.list_subscribers(session):
            await subs.remove(session, view.id)
        report = await import_csv(session, exported, confirmed=True, now=LATER)
        assert export_csv(await subs.list_subscribers(session)) == exported
    assert (report.added, len(report.skipped), report.errors) == (4, 3, [])
    assert exported.splitlines()[0] == "channel,address,layers,min_score,locale,status"
    assert "email,a@example.com,frontend,12.5,en,active" in exported.splitlines()


async def test_confirmation_mails_are_paced_and_a_failure_does_not_stop_the_rest() -> None:
    """The operator's confirmation mails go out at CONFIRM_RATE (an injected clock and sleep)."""
    from digest.deliver.channels import Message, Outcome, SendResult
    from digest.deliver.mailer import MailIdentity
    from digest.domain.ratelimit import per_second
    from digest.subscribe.confirm import CONFIRM_RATE, ConfirmSetup, send_confirmations

    now = [100.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    sent: list[tuple[str, float]] = []

    async def send(message: Message) -> SendResult:
        sent.append((message.address, now[0]))
        return SendResult(Outcome.PERMANENT if message.address == "b@example.org" else Outcome.SENT, 1)

    at = dt.datetime(2026, 9, 29, tzinfo=dt.UTC)
    views = [subs.SubscriberView(n, "email", f"{c}@example.org", "pending", list(LAYER_IDS), 0.0, "zh",
                                 at, at, None) for n, c in enumerate("abc", 1)]
    setup = ConfirmSetup(MailIdentity.from_settings("Digest <d@example.org>", None), "k" * 32,
                         "https://digest.example", "/confirm", lambda: at)
    report = await send_confirmations(views, setup, send, per_second(CONFIRM_RATE, clock=lambda: now[0],
                                                                     sleep=sleep))
    assert (report.sent, report.failed) == (2, 1)
    assert [a for a, _ in sent] == ["a@example.org", "b@example.org", "c@example.org"]
    gaps = [later - earlier for (_, earlier), (_, later) in itertools.pairwise(sent)]
    assert gaps == [pytest.approx(1 / CONFIRM_RATE)] * 2 and len(slept) == 2
