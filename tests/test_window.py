"""Collection windows: [D-1 08:00, D 08:00) in the configured zone."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from digest.domain.window import date_of, latest_closed, window_for

SH = ZoneInfo("Asia/Shanghai")


def test_window_bounds_in_shanghai() -> None:
    w = window_for(dt.date(2026, 9, 29), "Asia/Shanghai")
    assert w.start == dt.datetime(2026, 9, 28, 0, 0, tzinfo=dt.UTC)
    assert w.end == dt.datetime(2026, 9, 29, 0, 0, tzinfo=dt.UTC)
    start, end = w.local("Asia/Shanghai")
    assert start.isoformat() == "2026-09-28T08:00:00+08:00"
    assert end.isoformat() == "2026-09-29T08:00:00+08:00"


@pytest.mark.parametrize(
    ("local", "expected"),
    [
        (dt.datetime(2026, 9, 28, 8, 0), dt.date(2026, 9, 29)),
        (dt.datetime(2026, 9, 28, 7, 59, 59), dt.date(2026, 9, 28)),
        (dt.datetime(2026, 9, 28, 23, 0), dt.date(2026, 9, 29)),
        (dt.datetime(2026, 9, 29, 0, 30), dt.date(2026, 9, 29)),
    ],
)
def test_instant_belongs_to_exactly_one_window(local: dt.datetime, expected: dt.date) -> None:
    instant = local.replace(tzinfo=SH)
    assert date_of(instant, "Asia/Shanghai") == expected
    assert window_for(expected, "Asia/Shanghai").contains(instant)
    assert not window_for(expected - dt.timedelta(days=1), "Asia/Shanghai").contains(instant)


def test_latest_closed_window() -> None:
    before = dt.datetime(2026, 9, 29, 7, 59, tzinfo=SH)
    after = dt.datetime(2026, 9, 29, 8, 0, tzinfo=SH)
    assert latest_closed(before, "Asia/Shanghai") == dt.date(2026, 9, 28)
    assert latest_closed(after, "Asia/Shanghai") == dt.date(2026, 9, 29)
    assert window_for(latest_closed(after, "Asia/Shanghai"), "Asia/Shanghai").end <= after


def test_dst_zone_keeps_local_eight_oclock() -> None:
    w = window_for(dt.date(2026, 3, 29), "Europe/Berlin")  # DST began 2026-03-29 02:00
    start, end = w.local("Europe/Berlin")
    assert (start.hour, end.hour) == (8, 8)
    assert w.end - w.start == dt.timedelta(hours=23)
