"""The one retry policy (digest.domain.retry): what every retried thing waits between tries."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from digest.domain.retry import RetryPolicy

policies = st.builds(RetryPolicy, attempts=st.integers(1, 10), backoff=st.floats(0.001, 10),
                     cap=st.floats(0.001, 100), max_retry_after=st.floats(0.001, 1000) | st.just(math.inf))


@given(policies, st.integers(0, 30))
def test_the_backoff_doubles_up_to_its_cap(policy: RetryPolicy, n: int) -> None:
    assert policy.delay(n) == min(policy.backoff * 2.0 ** n, policy.cap)
    assert policy.delay(n) <= policy.delay(n + 1) <= policy.cap


@given(policies, st.integers(0, 30), st.floats(-10, 1e6))
def test_the_servers_ask_replaces_the_backoff_within_its_cap(
        policy: RetryPolicy, n: int, asked: float) -> None:
    waited = policy.delay(n, asked)
    assert 0.0 <= waited <= policy.max_retry_after
    assert waited == max(0.0, min(asked, policy.max_retry_after))


def test_defaults_keep_a_long_flood_wait_and_a_short_ask() -> None:
    assert RetryPolicy().delay(0, 300.0) == 300.0, "a chat platform's flood wait is honoured in full"
    assert RetryPolicy(backoff=5.0).delay(0, 0.2) == 0.2, "a server that asks for less is believed"
