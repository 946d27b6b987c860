"""The extractive day text: a day's title, overview and watch list composed from its events only.

It lives in the domain, not in ``digest.write``, because a filtered view
(``digest.domain.views.filter_view``) recomposes it for the events a reader
chose, and the extractive writer uses the same composition. Deterministic,
standard library only; connective text in zh or en.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence

from digest.domain.layers import BY_ID, LAYER_IDS
from digest.domain.status import WriteMode
from digest.domain.writeups import DayWriteup, EventWriteup

WATCHLIST_MAX = 8
DAY_TITLE_CHARS = 160
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")


def extractive_day(events: Sequence[EventWriteup], locale: str, date: dt.date) -> DayWriteup:
    """The day's title, overview and watch list, composed from the given events only."""
    return DayWriteup(
        title=_day_title(events, locale, date),
        overview=_overview(events, locale, date),
        watchlist=watchlist(events),
        mode=WriteMode.EXTRACTIVE,
    )


def format_date(date: dt.date, locale: str) -> str:
    """``2026 年 9 月 17 日`` or ``September 17, 2026``."""
    if locale == "zh":
        return f"{date.year} 年 {date.month} 月 {date.day} 日"
    return f"{_MONTHS[date.month - 1]} {date.day}, {date.year}"


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, at a word boundary when there is one."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip(" ,;:，、；") + "…"


def and_list(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def watchlist(events: Sequence[EventWriteup], most: int = WATCHLIST_MAX) -> tuple[str, ...]:
    """The events' watch items in rank order, deduplicated (case-insensitive), capped."""
    seen: dict[str, str] = {}
    for item in (w.strip() for e in events for w in e.watch):
        if item and item.casefold() not in seen:
            seen[item.casefold()] = item
    return tuple(seen.values())[:most]


def _day_title(events: Sequence[EventWriteup], locale: str, date: dt.date) -> str:
    if not events:
        if locale == "zh":
            return f"编译器技术日报 {format_date(date, locale)}：本期无新事件"
        return f"Compiler digest, {format_date(date, locale)}: no new events"
    glue = "；" if locale == "zh" else "; "
    title = cut(events[0].title, DAY_TITLE_CHARS)
    for event in events[1:3]:
        if len(title) + len(glue) + len(event.title) > DAY_TITLE_CHARS:
            break
        title += glue + event.title
    return title


def _overview(events: Sequence[EventWriteup], locale: str, date: dt.date) -> str:
    day = format_date(date, locale)
    if not events:
        if locale == "zh":
            return f"{day}的采集窗口内没有达到收录标准的事件。"
        return f"No event in the window ending {day} met the bar for the digest."
    counts = Counter(lid for e in events for lid in e.layers)
    order = sorted(counts, key=lambda lid: (-counts[lid], LAYER_IDS.index(lid)))
    labels = [BY_ID[lid].label(locale) for lid in order if lid in BY_ID]
    tops = [e.title for e in events[:3]]
    if locale == "zh":
        where = f"，涉及{'、'.join(labels)}" if labels else ""
        return (f"{day}的日报收录 {len(events)} 个事件{where}。评分最高的是：{'；'.join(tops)}。"
                "各条摘要摘自来源原文，性能数字以原始来源的配置为准。")
    where = f" across {and_list(labels)}" if labels else ""
    noun = "event" if len(events) == 1 else "events"
    return (f"The digest for {day} covers {len(events)} {noun}{where}. "
            f"Highest scored: {'; '.join(tops)}. The summaries quote the sources; "
            "check performance figures against their original setup.")
