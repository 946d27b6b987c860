"""The subscribe throttle's buckets in the database: one limit for every web process, stale rows pruned."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
import pytest
from sqlalchemy import select

from digest.deliver.confirm_mail import one_shot
from digest.deliver.smtp import SmtpChannel, SmtpConfig
from digest.domain.layers import LAYER_IDS
from digest.domain.ratelimit import Rate
from digest.store.buckets import PRUNE_EVERY, SKEW, DbBuckets, family, idle_after
from digest.store.db import SessionFactory, open_database
from digest.store.models import RateBucket
from digest.subscribe.throttle import CLIENT_WINDOW, POSTS_PER_CLIENT, Limit, Throttle
from digest.web.app import create_app
from digest.web.subscribe import SubscriptionSetup
from tests.archive import SITE_URL, TZ, renderer
from tests.smtpserver import SMTPTestServer, smtp_server
from tests.webapp import IDENTITY, SECRET, Clock, token_in


@pytest.fixture
def smtp() -> Iterator[SMTPTestServer]:
    with smtp_server() as server:
        yield server


async def keys(sessions: SessionFactory) -> set[str]:
    async with sessions() as session:
        return set((await session.scalars(select(RateBucket.key))).all())


@asynccontextmanager
async def web_apps(url: str, smtp: SMTPTestServer, clock: Clock, count: int = 2,
                   ) -> AsyncIterator[list[httpx.AsyncClient]]:
    """``count`` web apps as separate processes would run them: each its own engine on one database."""
    config = SmtpConfig(host=smtp.host, port=smtp.port, tls="none", envelope_from="digest@example.org")
    async with AsyncExitStack() as stack:
        clients = []
        for _ in range(count):
            sessions = await stack.enter_async_context(open_database(url))
            setup = SubscriptionSetup(SECRET, IDENTITY, one_shot(lambda: SmtpChannel(config)),
                                      send_backoff=0.01)
            app = create_app(sessions, renderer(), site_url=SITE_URL, default_locale="zh", timezone=TZ,
                             clock=clock, subscriptions=setup)
            transport = httpx.ASGITransport(app, client=("198.51.100.7", 1234))
            clients.append(await stack.enter_async_context(
                httpx.AsyncClient(transport=transport, base_url="http://test")))
        yield clients


async def post(client: httpx.AsyncClient, address: str, token: str) -> int:
    data = {"address": address, "layers": list(LAYER_IDS), "min_score": "0", "locale": "en",
            "form_token": token}
    return (await client.post("/subscribe", data=data)).status_code


async def test_two_web_apps_together_refuse_at_the_limit_not_twice(db_url: str, smtp: SMTPTestServer) -> None:
    clock = Clock()
    async with web_apps(db_url, smtp, clock) as (one, two):
        token = token_in((await one.get("/subscribe")).text)
        posts = [post((one, two)[n % 2], f"reader{n}@example.org", token)
                 for n in range(3 * POSTS_PER_CLIENT)]
        assert set(await asyncio.gather(*posts)) == {200}  # the same page, throttled or not
        assert len(smtp.received) == POSTS_PER_CLIENT  # one client's 10 POSTs, whichever app took them
        clock.advance(seconds=CLIENT_WINDOW / POSTS_PER_CLIENT + 1)  # one token back, for either app
        assert [await post(two, f"late{n}@example.org", token) for n in range(2)] == [200, 200]
        assert len(smtp.received) == POSTS_PER_CLIENT + 1


@pytest.mark.postgres
async def test_many_takers_on_separate_engines_share_one_bucket(postgres_url: str) -> None:
    clock = Clock()
    limit = Limit(7, 60)
    async with open_database(postgres_url) as first, open_database(postgres_url) as second:
        throttles = [Throttle(per_client=limit).bound(DbBuckets(s, clock), SECRET) for s in (first, second)]
        for client in range(5):  # each a fresh key: the first takers race to insert its row
            hits = await asyncio.gather(*(throttles[n % 2].client(f"203.0.113.{client}") for n in range(40)))
            assert sum(hits) == 7, client  # not fewer (a lost insert race is no refusal), not more
        mails = await asyncio.gather(*(throttles[n % 2].address("Ann@Example.org ") for n in range(12)))
        assert sum(mails) == 3  # the default per-address limit, with the address normalised


async def test_a_refused_hit_is_not_counted_and_the_bucket_refills(sessions: SessionFactory) -> None:
    clock = Clock()
    throttle = Throttle(per_client=Limit(3, 30)).bound(DbBuckets(sessions, clock), SECRET)
    assert [await throttle.client("2001:db8::1") for _ in range(5)] == [True, True, True, False, False]
    assert await throttle.client("2001:db8::2") is False  # the same /64
    assert await throttle.client("192.0.2.1") is True  # another client
    clock.advance(seconds=9.9)
    assert await throttle.client("2001:db8::3") is False  # 0.99 of a token: not yet
    clock.advance(seconds=0.2)
    # the refused ones cost nothing:
    assert [await throttle.client("2001:db8::4") for _ in range(2)] == [True, False]
    clock.advance(seconds=3600)
    assert [await throttle.client("2001:db8::5") for _ in range(4)] == [True, True, True, False]  # full only
    assert await keys(sessions) == {"web:client:2001:db8::/64"}  # the other one, idle an hour, was pruned


async def test_addresses_are_keyed_by_a_hash_that_fits_the_column(sessions: SessionFactory) -> None:
    throttle = Throttle().bound(DbBuckets(sessions, Clock()), SECRET)
    long_one = "x" * 300 + "@example.org"
    assert await throttle.address(long_one) and await throttle.address("bob@example.org")
    assert await throttle.client("h" * 500)  # a proxy's odd client text: hashed too
    stored = await keys(sessions)
    assert len(stored) == 3 and all(len(k) <= 64 for k in stored)
    assert not any("example" in k or "hhh" in k for k in stored)  # no address is stored as written
    other = Throttle().bound(DbBuckets(sessions, Clock()), "another-secret")
    await other.address("bob@example.org")
    assert len(await keys(sessions)) == 4  # the hash is keyed with the site's secret


def test_families_and_refill_times() -> None:
    assert family("telegram:chat:-1001") == "telegram:chat:"
    assert family("web:client:2001:db8::/64") == "web:client:"
    assert family("telegram") is None and family("smtp") is None and family("a:b") is None
    assert family("a::c") is None  # no scope: not a family
    assert idle_after(Rate("x:y:z", 2.0, 4.0, ahead=0.5)) == pytest.approx((4 + 1) / 2)
    assert idle_after(Limit(3, 86400).rate("web:address:x")) == pytest.approx(86400)


async def test_takes_prune_their_familys_stale_rows_and_nothing_else(sessions: SessionFactory) -> None:
    clock = Clock()
    buckets = DbBuckets(sessions, clock)
    client = Limit(10, 600).rate  # full again 600 s after its last take
    chat = Rate("telegram:chat:1", 1 / 1.05)
    for rate in (client("web:client:old"), chat, Rate("telegram", 27.2)):
        assert (await buckets.take(rate)).taken
    clock.advance(seconds=600 + SKEW - 1)
    assert (await buckets.take(client("web:client:fresh"))).taken  # a prune: nothing stale yet
    clock.advance(seconds=2)  # "old" untouched for 600 + SKEW + 1 s; "fresh" for 2 s
    assert await buckets.prune(client("web:client:any")) == 1
    assert await keys(sessions) == {"web:client:fresh", "telegram:chat:1", "telegram"}
    # a pruned bucket is a full one: all ten tokens are there again
    assert [(await buckets.take(client("web:client:old"))).taken for _ in range(11)] == [True] * 10 + [False]
    # the takes prune by themselves, at most once every PRUNE_EVERY seconds per family
    later = DbBuckets(sessions, clock)
    clock.advance(seconds=3 * 600)
    assert (await later.take(chat)).taken  # prunes the stale chat first, then takes from a new row
    assert (await later.take(client("web:client:new"))).taken  # prunes "fresh" and "old"
    assert await keys(sessions) == {"web:client:new", "telegram:chat:1", "telegram"}
    clock.advance(seconds=601 + SKEW)
    assert (await later.take(client("web:client:newer"))).taken  # PRUNE_EVERY passed long ago: "new" goes
    assert "web:client:new" not in await keys(sessions)
    clock.advance(seconds=601 + SKEW)
    calls: list[str] = []
    real = later.prune

    async def counted(rate: Rate) -> int:
        calls.append(rate.key)
        return await real(rate)

    later.prune = counted  # type: ignore[method-assign]
    await later.take(client("web:client:a"))
    clock.advance(seconds=PRUNE_EVERY / 2)
    await later.take(client("web:client:b"))
    await later.take(Rate("telegram", 27.2))  # no family: never pruned
    clock.advance(seconds=PRUNE_EVERY / 2)
    await later.take(client("web:client:c"))
    assert calls == ["web:client:a", "web:client:c"]


async def test_a_clock_going_back_prunes_nothing_early(sessions: SessionFactory) -> None:
    clock = Clock()
    buckets = DbBuckets(sessions, clock)
    rate = Limit(2, 60).rate("web:client:x")
    assert (await buckets.take(rate)).taken
    clock.now -= dt.timedelta(hours=1)  # another process's clock, or a step back
    assert await buckets.prune(rate) == 0
    assert [(await buckets.take(rate)).taken for _ in range(2)] == [True, False]  # no tokens for going back
