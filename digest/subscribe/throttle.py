"""In-memory sliding-window limits, so the subscribe form cannot flood a mailbox.

Pure: no I/O, the clock is injected (seconds, any origin); the windows are the
core's one limiter shape (:class:`digest.domain.ratelimit.Window`), which here
refuses a hit instead of waiting for room. Two windows guard
the form (:class:`Throttle`): per address (how many mails one mailbox may be
sent) and per client (how many POSTs one IP, or one IPv6 /64, may make). A
refused hit is not counted, so a client that stops is let in again once its
counted hits leave the window.

The counts live in one process: behind N processes a limit becomes N times
as loose. Memory is bounded: past ``max_keys`` the least recently seen key
is forgotten (its count starts again).
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from dataclasses import dataclass

from digest.domain.ratelimit import Clock, Window

MAILS_PER_ADDRESS = 3  # confirmation (or notice) mails to one address ...
ADDRESS_WINDOW = 24 * 3600.0  # ... per day
POSTS_PER_CLIENT = 10  # subscribe POSTs from one client ...
CLIENT_WINDOW = 600.0  # ... per 10 minutes
MAX_KEYS = 50_000


class SlidingWindow:
    """At most ``limit`` counted hits per key in any ``window`` seconds: one limiter :class:`Window` a key."""

    def __init__(self, limit: int, window: float, *, clock: Clock = time.time,
                 max_keys: int = MAX_KEYS) -> None:
        if limit < 1 or window <= 0 or max_keys < 1:
            raise ValueError("limit and max_keys must be at least 1, window positive")
        self.limit, self.window, self.clock, self.max_keys = limit, window, clock, max_keys
        self._keys: OrderedDict[str, Window] = OrderedDict()

    def hit(self, key: str) -> bool:
        """Count one hit for ``key`` and return True, or return False (uncounted) when over the limit."""
        hits = self._keys.pop(key, None) or Window(self.limit, self.window)
        self._keys[key] = hits  # (re-)inserted last: the most recently seen key
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)
        return hits.admit(self.clock())

    def used(self, key: str) -> int:
        """How many counted hits ``key`` has inside the window now."""
        hits = self._keys.get(key)
        return 0 if hits is None else hits.used(self.clock())

    def __len__(self) -> int:
        return len(self._keys)


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


@dataclass
class Throttle:
    """The subscribe form's two limits."""

    per_address: SlidingWindow
    per_client: SlidingWindow

    @classmethod
    def default(cls, clock: Clock = time.time) -> Throttle:
        """3 mails per address per day; 10 POSTs per client per 10 minutes."""
        return cls(SlidingWindow(MAILS_PER_ADDRESS, ADDRESS_WINDOW, clock=clock),
                   SlidingWindow(POSTS_PER_CLIENT, CLIENT_WINDOW, clock=clock))

    def client(self, host: str | None) -> bool:
        """Count one POST from ``host``; False when it is over its limit."""
        return self.per_client.hit(client_key(host))

    def address(self, address: str) -> bool:
        """Count one mail to ``address`` (normalised); False when it is over its limit."""
        return self.per_address.hit(address.lower())
