"""The Discord push channel: REST only (httpx, no gateway), so ``digest publish`` needs no running bot.

    DiscordChannel.send(Message) ─► DiscordLimits (50 requests/s, route buckets, 5 per 5 s a channel)
        ─► POST channels/{id}/messages ─► the day's first part starts a thread named YYYY-MM-DD
           (a forum channel: a post; a DM: no thread) ─► later parts go into it

The thread's id comes back in ``SendResult.thread_id`` and is stored with the
delivery, so a resumed send continues in it. A subscriber's address is
the bare channel id or ``user:<id>`` (sent to that user's DM channel). Every
payload carries ``allowed_mentions: {"parse": []}``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from digest.deliver.channels import Message, Outcome, SendResult
from digest.domain.ratelimit import Clock, Limiter, Rate, SharedLimiter, Sleep, Window
from digest.domain.status import ChannelName

log = logging.getLogger(__name__)
NAME = ChannelName.DISCORD
NO_MENTIONS: dict[str, list[str]] = {"parse": []}
GONE = frozenset({10003, 50001, 50013, 50007})  # unknown channel, missing access/permissions, DMs closed
NOT_TEXT = 50008  # a forum channel takes posts, not messages
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

@dataclass(frozen=True)
class Limits:
    """Discord's limits: 50 requests/s overall, 5 messages per 5 s to one channel, with a margin."""

    overall: int = 50
    per_channel: int = 5
    channel_period: float = 5.0
    margin: float = 0.05

    def buckets(self, channel: str | None) -> tuple[Rate, ...]:
        """The same limits as token buckets every worker shares: overall first, then the channel's.

        A bucket lets ``capacity + rate * W`` through in any ``W`` seconds: each is
        sized to stay under its limit over the period with the margin (overall: 1 + 46.6 a second).
        """
        slack = 1 + self.margin
        overall = Rate("discord", self.overall / slack - 1)
        if channel is None:
            return (overall,)
        burst = 2
        return overall, Rate(f"discord:channel:{channel}",
                             (self.per_channel - burst) / (self.channel_period * slack), burst)


class DiscordLimits:
    """Waits for the global pace, the channel's window, learnt route buckets and any global 429."""

    def __init__(self, limits: Limits | None = None, *, clock: Clock = time.monotonic,
                 sleep: Sleep = asyncio.sleep) -> None:
        self.limits = limits or Limits()
        slack = 1 + self.limits.margin
        self.clock, self.sleep = clock, sleep
        self._overall = Limiter([Window(self.limits.overall, slack)], slack / self.limits.overall,
                                clock=clock, sleep=sleep)
        self._channels: dict[str, tuple[asyncio.Lock, Window]] = {}
        self._bucket_of: dict[str, str] = {}  # route -> X-RateLimit-Bucket
        self._buckets: dict[str, tuple[int, float]] = {}  # bucket -> (remaining, reset at)
        self.blocked_until = 0.0  # a global 429 holds every request until then
        self._shared: SharedLimiter | None = None

    def share(self, shared: SharedLimiter) -> None:
        """Keep the overall and per-channel limits in ``shared`` (every worker's buckets).

        Route buckets and a global 429 stay this process's: they are learnt from its own answers.
        """
        self._shared = shared

    async def acquire(self, route: str, channel: str | None) -> None:
        """Return when one request on ``route`` (a message to ``channel`` when given) may go now."""
        await self._overall.wait_for(lambda now: max(self.blocked_until, self._bucket_reset(route, now))
                                     - now)
        if self._shared is not None:
            await self._shared.acquire(*self.limits.buckets(channel))
            return
        if channel is None:
            await self._overall.acquire()
            return
        lock, window = self._channel(channel)
        async with lock:
            await self._overall.acquire(window)

    def _bucket_reset(self, route: str, now: float) -> float:
        remaining, reset = self._buckets.get(self._bucket_of.get(route, ""), (1, 0.0))
        return reset if remaining <= 0 and reset > now else 0.0

    def _channel(self, key: str) -> tuple[asyncio.Lock, Window]:
        if key not in self._channels:
            period = self.limits.channel_period * (1 + self.limits.margin)
            self._channels[key] = (asyncio.Lock(), Window(self.limits.per_channel, period))
        return self._channels[key]

    def learn(self, route: str, headers: httpx.Headers) -> None:
        """Remember the route's bucket and what is left of it (X-RateLimit-*)."""
        bucket = headers.get("x-ratelimit-bucket")
        if bucket is None or "x-ratelimit-remaining" not in headers:
            return
        self._bucket_of[route] = bucket
        after = float(headers.get("x-ratelimit-reset-after", "0"))
        self._buckets[bucket] = (int(headers["x-ratelimit-remaining"]), self.clock() + after)

    def hold_all(self, seconds: float) -> None:
        """A global 429: nothing goes for ``seconds``."""
        self.blocked_until = max(self.blocked_until, self.clock() + seconds)


@dataclass
class Refusal(Exception):
    """Discord said no: what it means for the delivery, its text, its JSON error code."""

    outcome: Outcome
    error: str
    code: int = 0
    retry_after: float | None = None


def verdict(status: int, code: int) -> Outcome:
    """What an HTTP status and Discord error code mean for one delivery."""
    if status == 401:
        return Outcome.FATAL
    if code in GONE:
        return Outcome.PERMANENT
    if status == 429 or status >= 500:
        return Outcome.TRANSIENT
    return Outcome.BUG


def thread_name(parts: Sequence[Any]) -> str:
    """The day's thread name: the digest's date, read from its first payload's header."""
    found = ISO_DATE.search(str(parts[0].get("content", ""))) if parts else None
    return found.group(0) if found else "digest"


@dataclass
class DiscordChannel:
    """Sends rendered Discord payloads to channels over REST (no gateway), a thread per day."""

    client: httpx.AsyncClient
    threads: bool = True
    limits: DiscordLimits = field(default_factory=DiscordLimits)
    max_retries: int = 3
    concurrency: int = 64  # sends in flight: the limits, not the latency, set the pace
    rate_limited: int = 0  # 429s received (the benchmark reports them)
    name: str = NAME
    _no_threads: set[str] = field(default_factory=set)
    _dms: dict[str, str] = field(default_factory=dict)  # user id -> DM channel id

    def share_limits(self, shared: SharedLimiter) -> None:
        """Keep Discord's limits with every worker (bootstrap hands ``shared`` over on PostgreSQL)."""
        self.limits.share(shared)

    async def send(self, message: Message) -> SendResult:
        """Send the parts from ``message.start_part`` on, into the day's thread once there is one."""
        sent, thread = message.start_part, message.thread_id
        title = thread_name(message.parts)
        try:
            channel = await self._channel_of(message.address)
            for payload in message.parts[message.start_part:]:
                part = {**payload, "allowed_mentions": NO_MENTIONS}
                thread = await self._deliver(channel, part, thread, title)
                sent += 1
        except Refusal as exc:
            log.warning("discord: delivery %s to %s: %s", message.delivery_id, message.address, exc.error)
            return SendResult(exc.outcome, sent, exc.error, exc.retry_after, thread_id=thread)
        return SendResult(Outcome.SENT, sent, thread_id=thread)

    async def _channel_of(self, address: str) -> str:
        """The channel id of an address: the bare id, or ``user:<id>`` (its DM channel, opened once)."""
        kind, _, number = address.rpartition(":")
        if kind != "user":
            return number
        if number not in self._dms:
            opened = await self._request("POST", "users/@me/channels", None, {"recipient_id": number})
            self._dms[number] = str(opened["id"])
            self._no_threads.add(self._dms[number])
        return self._dms[number]

    async def _deliver(self, channel: str, payload: dict[str, Any], thread: str | None,
                       title: str) -> str | None:
        """One part: into the thread, or to the channel (starting the thread), or as a forum post."""
        if thread is not None:
            await self._post(thread, payload)
            return thread
        try:
            posted = await self._post(channel, payload)
        except Refusal as exc:
            if exc.code != NOT_TEXT:
                raise
            post = await self._request("POST", f"channels/{channel}/threads", channel,
                                       {"name": title, "message": payload})
            return str(post["id"])
        if not self.threads or channel in self._no_threads:
            return None
        return await self._start_thread(channel, str(posted["id"]), title)

    async def _start_thread(self, channel: str, message_id: str, title: str) -> str | None:
        """A thread on the day's first message; a channel that takes none (a DM) is remembered."""
        try:
            made = await self._request("POST", f"channels/{channel}/messages/{message_id}/threads", None,
                                       {"name": title, "auto_archive_duration": 1440})
        except Refusal as exc:
            if exc.outcome is Outcome.FATAL:
                raise
            log.warning("discord: no thread in %s: %s", channel, exc.error)
            if exc.outcome is not Outcome.TRANSIENT:
                self._no_threads.add(channel)
            return None
        return str(made["id"])

    async def _post(self, channel: str, payload: dict[str, Any]) -> dict[str, Any]:
        return await self._request("POST", f"channels/{channel}/messages", channel, payload)

    async def _request(self, method: str, path: str, channel: str | None,
                       body: dict[str, Any]) -> dict[str, Any]:
        """One REST call within the limits; 429s are waited out ``max_retries`` times."""
        route = f"{method} {path}"
        for attempt in range(self.max_retries + 1):
            await self.limits.acquire(route, channel)
            try:
                response = await self.client.request(method, path, json=body)
            except httpx.HTTPError as exc:
                raise Refusal(Outcome.TRANSIENT, f"{type(exc).__name__}: {exc}") from None
            self.limits.learn(route, response.headers)
            if response.status_code != 429:
                return self._result(response)
            wait = self._too_many(response)
            if attempt == self.max_retries:
                raise Refusal(Outcome.TRANSIENT, "429 Too Many Requests", 429, wait)
            await self.limits.sleep(wait)
        raise AssertionError("unreachable")

    def _too_many(self, response: httpx.Response) -> float:
        self.rate_limited += 1
        data = _json(response)
        wait = float(data.get("retry_after", response.headers.get("retry-after", 1)))
        if data.get("global") or response.headers.get("x-ratelimit-global"):
            self.limits.hold_all(wait)
        return wait

    @staticmethod
    def _result(response: httpx.Response) -> dict[str, Any]:
        data = _json(response)
        if response.is_success:
            return data
        code = int(data.get("code", 0) or 0)
        error = f"{response.status_code} {data.get('message', response.reason_phrase)} (code {code})"
        raise Refusal(verdict(response.status_code, code), error, code)

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self.client.aclose()


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def make_client(token: str, base: str, *, timeout: float = 30.0) -> httpx.AsyncClient:
    """The REST client: the bot token, JSON, a pool as wide as the channel's sends in flight."""
    return httpx.AsyncClient(base_url=base + "/", timeout=timeout, limits=httpx.Limits(max_connections=64),
                             headers={"Authorization": f"Bot {token}", "User-Agent": "compiler-digest"})
