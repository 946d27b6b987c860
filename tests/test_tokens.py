"""Signed link tokens: purpose, expiry, tampering, secret."""

from __future__ import annotations

import datetime as dt

import pytest

from digest.domain.errors import TokenError
from digest.subscribe.tokens import CONFIRM, PREFERENCES, UNSUBSCRIBE, make_token, read_token

SECRET = "test-secret"
T0 = dt.datetime(2025, 3, 1, 8, 0, tzinfo=dt.UTC)


def _reason(purpose: str, token: str, secret: str = SECRET, now: dt.datetime | None = None) -> str:
    with pytest.raises(TokenError) as info:
        read_token(secret, purpose, token, now=now)
    return info.value.reason


@pytest.mark.parametrize("purpose", [CONFIRM, UNSUBSCRIBE, PREFERENCES])
def test_round_trip_carries_id_and_address(purpose: str) -> None:
    token = make_token(SECRET, purpose, 42, "reader@example.com", now=T0)
    assert read_token(SECRET, purpose, token, now=T0 + dt.timedelta(hours=1)) == (42, "reader@example.com")
    assert token.isascii() and not set(token) & set("/+=?&# ")


def test_wrong_purpose_is_named() -> None:
    token = make_token(SECRET, UNSUBSCRIBE, 7, "a@example.com")
    assert _reason(CONFIRM, token) == "wrong purpose"
    assert _reason(PREFERENCES, token) == "wrong purpose"


def test_tampering_is_invalid() -> None:
    token = make_token(SECRET, PREFERENCES, 7, "a@example.com")
    payload, stamp, sig = token.split(".")
    other = make_token(SECRET, PREFERENCES, 8, "a@example.com").split(".")[0]
    assert _reason(PREFERENCES, f"{other}.{stamp}.{sig}") == "invalid"
    flipped = sig[:5] + ("A" if sig[5] != "A" else "B") + sig[6:]  # a middle char: every bit counts
    assert _reason(PREFERENCES, f"{payload}.{stamp}.{flipped}") == "invalid"
    assert _reason(PREFERENCES, "") == "invalid"
    assert _reason(PREFERENCES, "not-a-token") == "invalid"


def test_wrong_secret_is_invalid() -> None:
    token = make_token(SECRET, CONFIRM, 7, "a@example.com")
    assert _reason(CONFIRM, token, secret="another-secret") == "invalid"


def test_confirm_tokens_expire_after_three_days() -> None:
    token = make_token(SECRET, CONFIRM, 7, "a@example.com", now=T0)
    assert read_token(SECRET, CONFIRM, token, now=T0 + dt.timedelta(days=3)) == (7, "a@example.com")
    assert _reason(CONFIRM, token, now=T0 + dt.timedelta(days=3, seconds=1)) == "expired"
    short = dt.timedelta(minutes=5)
    with pytest.raises(TokenError, match="expired"):
        read_token(SECRET, CONFIRM, token, max_age=short, now=T0 + dt.timedelta(minutes=6))


def test_unsubscribe_and_preferences_tokens_do_not_expire() -> None:
    years_later = T0 + dt.timedelta(days=3650)
    for purpose in (UNSUBSCRIBE, PREFERENCES):
        token = make_token(SECRET, purpose, 7, "a@example.com", now=T0)
        assert read_token(SECRET, purpose, token, now=years_later) == (7, "a@example.com")


def test_unknown_purpose_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="purpose"):
        make_token(SECRET, "login", 1, "a@example.com")
