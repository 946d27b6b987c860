"""The one clock: the system's, or a pinned start that runs on (``DIGEST_NOW``, for tests and replays).

A pinned clock starts at the given instant and advances with the monotonic
clock, so leases, heartbeats and schedules still move while it is pinned.
Standard library only.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

Clock = Callable[[], dt.datetime]


def system_now() -> dt.datetime:
    """The wall clock, UTC-aware."""
    return dt.datetime.now(dt.UTC)


def make_clock(start: dt.datetime | None) -> Clock:
    """The system clock, or one that starts at ``start`` (aware) and runs on from there."""
    if start is None:
        return system_now
    origin, began = start.astimezone(dt.UTC), time.monotonic()

    def pinned() -> dt.datetime:
        return origin + dt.timedelta(seconds=time.monotonic() - began)

    return pinned
