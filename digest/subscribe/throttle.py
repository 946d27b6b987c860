"""Limits on the subscribe form, so it cannot flood a mailbox: the core's token buckets, refused not waited.

Two limits guard the form (:class:`Throttle`): per address (how many mails one
mailbox may be sent) and per client (how many POSTs one IP, or one IPv6 /64,
may make). Each is a token bucket (:class:`digest.domain.ratelimit.Rate`) of
``count`` tokens refilled at ``count / window`` per second, taken with
``ahead=0``: a hit that finds no whole token is refused and not counted, so a
client that stops is let in again as its bucket refills. A burst gets at most
``count`` through, and a client that keeps trying ``count`` per ``window`` on
average: a sliding window's rate, though one window can hold the burst and a
window's refill, up to ``2 * count``, where a sliding log would hold ``count``.
The senders' limiter has that shape, so the web throttle uses it rather than
adding a second kind (a sliding log in the database would need a row per hit).

The buckets live in the database (:class:`digest.store.buckets.DbBuckets`,
table ``rate_bucket``) on PostgreSQL and SQLite alike: behind a load balancer
every web process sees the same counts, a restart does not reset them, and the
memory of one process is not the bound (stale rows are pruned by the takes).
An address is keyed by its keyed hash, never stored as written.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass, replace

from digest.domain.ratelimit import Buckets, Rate

MAILS_PER_ADDRESS = 3  # confirmation (or notice) mails to one address ...
ADDRESS_WINDOW = 24 * 3600.0  # ... per day
POSTS_PER_CLIENT = 10  # subscribe POSTs from one client ...
CLIENT_WINDOW = 600.0  # ... per 10 minutes
ADDRESS_KEY = "web:address:"
CLIENT_KEY = "web:client:"
MAX_CLIENT_KEY = 64  # characters of a client's key kept as written; longer text is hashed


@dataclass(frozen=True)
class Limit:
    """``count`` hits per ``window`` seconds, as a bucket of ``count`` tokens refilled over the window."""

    count: int
    window: float

    def __post_init__(self) -> None:
        if self.count < 1 or not self.window > 0:
            raise ValueError("a limit needs a count of at least 1 and a positive window")

    def rate(self, key: str) -> Rate:
        """The bucket of ``key``: refuses instead of booking a token ahead."""
        return Rate(key, self.count / self.window, float(self.count), ahead=0.0)


def client_key(host: str | None) -> str:
    """The key of a client: its IPv4 address, its IPv6 /64 (one host often has many), or the raw text."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


@dataclass(frozen=True)
class Throttle:
    """The subscribe form's two limits over ``buckets`` (None: unbound; the web app binds its database's)."""

    per_address: Limit = Limit(MAILS_PER_ADDRESS, ADDRESS_WINDOW)
    per_client: Limit = Limit(POSTS_PER_CLIENT, CLIENT_WINDOW)
    buckets: Buckets | None = None
    secret: str = ""  # keys the address hash

    def bound(self, buckets: Buckets, secret: str) -> Throttle:
        """These limits over ``buckets``, hashing addresses with ``secret`` (kept when already bound)."""
        return self if self.buckets is not None else replace(self, buckets=buckets, secret=secret)

    async def client(self, host: str | None) -> bool:
        """Count one POST from ``host``; False (uncounted) when it is over its limit."""
        key = client_key(host)
        if len(key) > MAX_CLIENT_KEY:
            key = hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:32]
        return await self._hit(self.per_client.rate(CLIENT_KEY + key))

    async def address(self, address: str) -> bool:
        """Count one mail to ``address`` (normalised); False (uncounted) when it is over its limit."""
        digest = hmac.new(self.secret.encode(), address.strip().lower().encode("utf-8", "replace"),
                          hashlib.sha256).hexdigest()[:32]
        return await self._hit(self.per_address.rate(ADDRESS_KEY + digest))

    async def _hit(self, rate: Rate) -> bool:
        if self.buckets is None:
            raise RuntimeError("the throttle has no buckets: bind it with Throttle.bound first")
        return (await self.buckets.take(rate)).taken
