"""The service's Prometheus metrics: one registry per process (or per test), every name ``digest_*``.

The parts count where things happen with one-line calls on :func:`active`
(``digest.ingest.pipeline``: fetches; ``digest.deliver.sending``: deliveries,
send latency, rate-limit waits; ``digest.write.llm``: LLM calls and tokens;
``digest.daily``: digests built and the last successful run). The service
installs its own :class:`Metrics` with :func:`use`; a process that never does
counts into a private default, never prometheus-client's global registry, so
tests in one process do not collide. ``/metrics`` renders it (:meth:`Metrics.text`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from contextvars import ContextVar, Token
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

T = TypeVar("T")
CONTENT_TYPE = CONTENT_TYPE_LATEST
SEND_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """The digest_* metrics on a registry of their own."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.fetches = Counter("digest_fetches", "Feed fetches by source and status",
                               ["source", "status"], registry=registry)
        self.digests = Counter("digest_digests_built", "Digests built", registry=registry)
        self.deliveries = Counter("digest_deliveries", "Delivery outcomes by channel",
                                  ["channel", "outcome"], registry=registry)
        self.send_seconds = Histogram("digest_send_seconds", "Latency of one send, by channel",
                                      ["channel"], buckets=SEND_BUCKETS, registry=registry)
        self.llm_calls = Counter("digest_llm_calls", "LLM requests answered", registry=registry)
        self.llm_tokens = Counter("digest_llm_tokens", "LLM tokens spent", registry=registry)
        self.rate_limit_waits = Counter("digest_rate_limit_waits", "Sends told to wait (429, retry-after)",
                                        ["channel"], registry=registry)
        self.last_success = Gauge("digest_last_successful_run_timestamp_seconds",
                                  "When the last successful daily run finished (Unix time)",
                                  registry=registry)
        self.runs = Counter("digest_daily_runs", "Daily runs by trigger and outcome",
                            ["trigger", "outcome"], registry=registry)

    def fetched(self, source: str, status: str) -> None:
        self.fetches.labels(source=source, status=str(status)).inc()

    def delivered(self, channel: str, outcome: str) -> None:
        self.deliveries.labels(channel=channel, outcome=str(outcome)).inc()

    async def timed(self, channel: str, send: Awaitable[T]) -> T:
        """Await ``send``, observing how long it took under ``channel``."""
        started = time.perf_counter()
        try:
            return await send
        finally:
            self.send_seconds.labels(channel=channel).observe(time.perf_counter() - started)

    def waited(self, channel: str, retry_after: float | None) -> None:
        """Count a rate-limit wait when the channel asked for one."""
        if retry_after is not None:
            self.rate_limit_waits.labels(channel=channel).inc()

    def llm(self, tokens: int) -> None:
        self.llm_calls.inc()
        self.llm_tokens.inc(tokens)

    def ran(self, trigger: str, ok: bool, built: bool, finished: float) -> None:
        """One daily run: its outcome, a built digest, and the time of the last success."""
        self.runs.labels(trigger=trigger, outcome="ok" if ok else "failed").inc()
        if built:
            self.digests.inc()
        if ok:
            self.last_success.set(finished)

    def text(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


_DEFAULT = Metrics()
_ACTIVE: ContextVar[Metrics] = ContextVar("digest_metrics", default=_DEFAULT)


def active() -> Metrics:
    """The metrics of the running service (or the process's private default)."""
    return _ACTIVE.get()


def use(metrics: Metrics) -> Token[Metrics]:
    """Count into ``metrics`` from here on (this context and the tasks it starts)."""
    return _ACTIVE.set(metrics)
