"""Collection windows: the digest for date D covers [D-1 08:00, D 08:00) local time.

Pure functions; ``now`` and the time zone are passed in.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from zoneinfo import ZoneInfo

CUTOFF = dt.time(8, 0)


@dataclass(frozen=True)
class Window:
    """A half-open UTC interval [start, end) and the digest date it belongs to."""

    date: dt.date
    start: dt.datetime
    end: dt.datetime

    def contains(self, instant: dt.datetime) -> bool:
        """True when ``instant`` falls inside the window."""
        return self.start <= instant < self.end

    def local(self, tz: str) -> tuple[dt.datetime, dt.datetime]:
        """Start and end in the configured time zone (for display)."""
        zone = ZoneInfo(tz)
        return self.start.astimezone(zone), self.end.astimezone(zone)


def window_for(date: dt.date, tz: str) -> Window:
    """The window of the digest for ``date``."""
    zone = ZoneInfo(tz)
    end_local = dt.datetime.combine(date, CUTOFF, tzinfo=zone)
    start_local = dt.datetime.combine(date - dt.timedelta(days=1), CUTOFF, tzinfo=zone)
    return Window(date, start_local.astimezone(dt.UTC), end_local.astimezone(dt.UTC))


def date_of(instant: dt.datetime, tz: str) -> dt.date:
    """The digest date whose window contains ``instant``."""
    local = instant.astimezone(ZoneInfo(tz))
    return local.date() + dt.timedelta(days=1) if local.time() >= CUTOFF else local.date()


def latest_closed(now: dt.datetime, tz: str) -> dt.date:
    """The date of the latest window that has fully ended at ``now``."""
    local = now.astimezone(ZoneInfo(tz))
    return local.date() if local.time() >= CUTOFF else local.date() - dt.timedelta(days=1)
