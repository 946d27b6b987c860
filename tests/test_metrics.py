"""The digest_* metrics: a registry per process (or test), counted where things happen, served as text."""

from __future__ import annotations

import asyncio
import contextvars

import httpx

from digest import metrics
from digest.metrics import Metrics
from digest.store.db import SessionFactory
from tests.archive import SITE_URL, TZ, renderer
from tests.test_service import _metric


def test_each_metrics_has_its_own_registry_and_every_name_starts_with_digest() -> None:
    one, two = Metrics(), Metrics()
    one.fetched("llvm-blog", "ok")
    one.delivered("email", "sent")
    one.llm(120)
    one.waited("telegram", 3.0)
    one.waited("telegram", None)
    one.ran("schedule", ok=True, built=True, finished=1_800_000_000.0)
    text = one.text().decode()
    assert _metric(text, "digest_fetches_total", source="llvm-blog", status="ok") == 1
    assert _metric(text, "digest_deliveries_total", channel="email", outcome="sent") == 1
    assert (_metric(text, "digest_llm_calls_total"), _metric(text, "digest_llm_tokens_total")) == (1, 120)
    assert _metric(text, "digest_rate_limit_waits_total", channel="telegram") == 1
    assert _metric(text, "digest_digests_built_total") == 1
    assert _metric(text, "digest_last_successful_run_timestamp_seconds") == 1_800_000_000
    assert _metric(two.text().decode(), "digest_fetches_total", source="llvm-blog", status="ok") == 0
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert names and all(name.startswith("digest_") for name in names)


def test_a_failed_run_leaves_the_last_success_alone() -> None:
    counts = Metrics()
    counts.ran("run", ok=True, built=False, finished=100.0)
    counts.ran("run", ok=False, built=False, finished=200.0)
    text = counts.text().decode()
    assert _metric(text, "digest_last_successful_run_timestamp_seconds") == 100
    assert _metric(text, "digest_daily_runs_total", trigger="run", outcome="failed") == 1


async def test_a_timed_send_is_observed_under_its_channel() -> None:
    counts = Metrics()
    assert await counts.timed("email", asyncio.sleep(0, "done")) == "done"
    assert _metric(counts.text().decode(), "digest_send_seconds_count", channel="email") == 1


def test_use_installs_the_metrics_for_this_context_only() -> None:
    mine = Metrics()

    def inside() -> Metrics:
        metrics.use(mine)
        return metrics.active()

    assert contextvars.copy_context().run(inside) is mine
    assert metrics.active() is not mine


async def test_the_metrics_route_serves_the_apps_metrics(sessions: SessionFactory) -> None:
    from digest.web.app import create_app

    counts = Metrics()
    counts.fetched("gh-llvm", "error")
    app = create_app(sessions, renderer(), site_url=SITE_URL, default_locale="en", timezone=TZ,
                     metrics=counts)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=SITE_URL) as client:
        answer = await client.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    assert _metric(answer.text, "digest_fetches_total", source="gh-llvm", status="error") == 1
