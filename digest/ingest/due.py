"""When a source is due again: the feed's own hints, bounded by a floor and a ceiling.

Pure: header values and parsed-feed mappings in, intervals and times out. A
feed says how long to leave it alone in three ways, all honoured:

- HTTP ``Cache-Control: max-age=N`` (seconds; ``no-cache``/``no-store`` mean no hint),
- RSS ``<ttl>`` (minutes),
- ``sy:updatePeriod`` / ``sy:updateFrequency`` (RSS 1.0 syndication module:
  the period divided by the frequency, which defaults to 1).

With several hints the longest wins (each one says "not before"); the result
is clamped to ``[floor, ceiling]`` so a feed can neither make us hammer it nor
forget it. No hint at all: the source is due on every run.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from typing import Any

_MAX_AGE_RE = re.compile(r"(?:^|[,\s])max-age\s*=\s*\"?(\d{1,10})\"?", re.I)
_NO_CACHE_RE = re.compile(r"(?:^|[,\s])(?:no-cache|no-store)\b", re.I)
_PERIODS = {
    "hourly": dt.timedelta(hours=1),
    "daily": dt.timedelta(days=1),
    "weekly": dt.timedelta(weeks=1),
    "monthly": dt.timedelta(days=30),
    "yearly": dt.timedelta(days=365),
}


def max_age(cache_control: str | None) -> dt.timedelta | None:
    """The ``max-age`` of a Cache-Control header, or None (absent, ``no-cache``, ``no-store``)."""
    if not cache_control or _NO_CACHE_RE.search(cache_control):
        return None
    match = _MAX_AGE_RE.search(cache_control)
    return dt.timedelta(seconds=int(match.group(1))) if match else None


def feed_interval(feed: object) -> dt.timedelta | None:
    """The longest of the document's ``<ttl>`` and ``sy:updatePeriod``/``updateFrequency``."""
    if not isinstance(feed, Mapping):
        return None
    return longest([_ttl(feed), _syndication(feed)])


def _ttl(feed: Mapping[str, Any]) -> dt.timedelta | None:
    minutes = _positive_int(feed.get("ttl"))
    return dt.timedelta(minutes=minutes) if minutes else None


def _syndication(feed: Mapping[str, Any]) -> dt.timedelta | None:
    period = _PERIODS.get(str(feed.get("sy_updateperiod") or "").strip().lower())
    if period is None:
        return None
    raw = feed.get("sy_updatefrequency")
    frequency = _positive_int(raw) if raw not in (None, "") else 1
    return period / frequency if frequency else None


def _positive_int(value: object) -> int | None:
    text = str(value).strip() if isinstance(value, str | int) else ""
    return int(text) if text.isdigit() and 0 < int(text) < 10**7 else None


def longest(hints: Iterable[dt.timedelta | None]) -> dt.timedelta | None:
    """The longest of the hints given, or None when there is none."""
    found = [hint for hint in hints if hint is not None]
    return max(found) if found else None


def next_fetch_at(now: dt.datetime, interval: dt.timedelta | None, floor: dt.timedelta,
                  ceiling: dt.timedelta) -> dt.datetime | None:
    """When to fetch again: ``now`` plus the interval clamped to [floor, ceiling]; None without one."""
    if interval is None:
        return None
    return now + min(max(interval, floor), ceiling)


def is_due(now: dt.datetime, next_at: dt.datetime | None) -> bool:
    """Whether a source whose next fetch is at ``next_at`` may be fetched at ``now``."""
    return next_at is None or now >= next_at


def previous_interval(fetched_at: dt.datetime | None,
                      next_at: dt.datetime | None) -> dt.timedelta | None:
    """The interval the last fetch set (kept when an unchanged feed brings no new hint)."""
    if fetched_at is None or next_at is None:
        return None
    return next_at - fetched_at
