"""The extractive day text: a day's title, overview and watch list composed from its events only.

It lives in the domain, not in ``digest.write``, because a filtered view
(``digest.domain.views.filter_view``) recomposes it for the events a reader
chose, and the extractive writer uses the same composition. Deterministic,
standard library only; connective text in zh or en.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Sequence

from digest.domain.layers import BY_ID, LAYER_IDS
from digest.domain.status import WriteMode
from digest.domain.writeups import DayWriteup, EventWriteup

WATCHLIST_MAX = 8
WATCH_NAMES = 4
DAY_TITLE_CHARS = 160
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")


def extractive_day(events: Sequence[EventWriteup], locale: str, date: dt.date, *,
                   briefs: Sequence[str] = ()) -> DayWriteup:
    """The day's title, overview and watch list, composed from the given events only.

    ``briefs`` names the roundups shown as briefs: the overview says they are
    there, and they never make the title.
    """
    return DayWriteup(
        title=_day_title(events, locale, date),
        overview=_overview(events, locale, date) + _briefs_line(briefs, locale),
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


def clip_line(text: str, limit: int) -> str:
    """``text`` on one line within ``limit`` characters, cut at a space (never mid-word) with "…".

    Text without spaces (Chinese) is cut at a character.
    """
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    head = flat[: limit - 1]
    if flat[limit - 1] != " " and " " in head:
        head = head[: head.rfind(" ")]
    return head.rstrip(" ,;:，、；") + "…"


def and_list(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(items) <= 1:
        return items[0] if items else ""
    return f"{', '.join(items[:-1])} and {items[-1]}"


def watchlist(events: Sequence[EventWriteup], most: int = WATCHLIST_MAX,
              names: int = WATCH_NAMES) -> tuple[str, ...]:
    """The events' watch items, deduplicated (case-insensitive) and capped.

    Each event's first item is its name: the top ``names`` events' names come
    first, then the other items (claims to verify, releases to expect) in rank
    order, then the remaining names.
    """
    firsts = [e.watch[0] for e in events if e.watch]
    ordered = [*firsts[:names], *(w for e in events for w in e.watch[1:]), *firsts[names:]]
    seen: dict[str, str] = {}
    for item in (w.strip() for w in ordered):
        if item and item.casefold() not in seen:
            seen[item.casefold()] = item
    return tuple(seen.values())[:most]


_GENERIC_HEAD = re.compile(r"^(?:GSoC|GSOC|LLVMCGO\d*|RFC|Release|Announcing|Introducing|Tutorial|"
                           r"Case study|Guest post|Part \d+)\b(?:\s+\d{4})?$", re.I)
_PREPOSITION = re.compile(r"\s+(?:for|with|in|on|across|via|using|through|to|from|at|over|after|of)\s+")
_RELEASE_WORDS = re.compile(r"\s+(?:release(?: candidate \d+)?|is released|is out)$", re.I)
_ROUNDUP = re.compile(r"^(?P<name>.+?\b(?:Weekly|Newsletter))\s*[-–—:]?\s*(?P<no>#\d+)?", re.I)
NAME_WORDS = 4


def short_name(title: str) -> str:
    """A short name for an item, from its title: "PIMLower", "Precompile", "Triton 3.6.0".

    A name before a colon when it is one (a few words, no slogan), else the words
    after it up to the first preposition; a release drops "release"; a newsletter
    keeps its number ("LLVM Weekly #623").
    """
    title = " ".join(title.split())
    roundup = _ROUNDUP.match(title)
    if roundup:
        return f"{roundup.group('name')} {roundup.group('no') or ''}".strip()
    head, sep, tail = [p.strip() for p in [*re.split(r"(:|：)\s*", title, maxsplit=1), "", ""]][:3]
    if sep and tail:
        named = _PREPOSITION.split(head, maxsplit=1)[0]
        if not _GENERIC_HEAD.match(head) and "," not in head and len(named.split()) <= NAME_WORDS - 1:
            return named
        return _leading(tail, NAME_WORDS)
    return _leading(_RELEASE_WORDS.sub("", title), NAME_WORDS + 2)


def _leading(text: str, most: int) -> str:
    """The words before the first preposition, at most ``most`` of them (two more after a gerund)."""
    words = _PREPOSITION.split(text, maxsplit=1)[0].split()
    most += 2 if words and words[0].endswith("ing") else 0  # "Making the SLP Vectorizer's ..."
    return " ".join(words[:most]).rstrip(",;")


def _day_title(events: Sequence[EventWriteup], locale: str, date: dt.date) -> str:
    """The seeds' kind of title: the day's one to three most important items by short name."""
    if not events:
        if locale == "zh":
            return f"编译器技术日报 {format_date(date, locale)}：本期无新事件"
        return f"Compiler digest, {format_date(date, locale)}: no new events"
    glue = "；" if locale == "zh" else "; "
    names = list(dict.fromkeys(short_name(e.title) or cut(e.title, 40) for e in events))
    title = names[0]
    for name in names[1:3]:
        if len(title) + len(glue) + len(name) > DAY_TITLE_CHARS:
            break
        title += glue + name
    return cut(title, DAY_TITLE_CHARS)


_KIND_ZH = {"paper": "{n} 篇论文", "blog": "{n} 篇博客", "release": "{n} 个版本发布", "roundup": "{n} 期周报"}
_KIND_EN = {"paper": ("paper", "papers"), "blog": ("blog post", "blog posts"),
            "release": ("release", "releases"), "roundup": ("newsletter", "newsletters")}
_SHARED = re.compile(
    r"\b(?:torch\.compile|TorchInductor|Triton|MLIR|LLVM|CUTLASS|CuTe DSL|vLLM|TVM|XLA|StableHLO|JAX|"
    r"CUDA Graphs?|TensorRT-LLM|H100|H200|B200|GB300|A100|MI300X|MI350|TPU|Blackwell|Hopper|AArch64|"
    r"x86(?:-64)?|RISC-V|FPGA|PIM)\b")


def _overview(events: Sequence[EventWriteup], locale: str, date: dt.date) -> str:
    """What the day shows: what kinds of items, which layers moved, what the events share."""
    day = format_date(date, locale)
    if not events:
        if locale == "zh":
            return f"{day}的采集窗口内没有达到收录标准的事件。"
        return f"No event in the window ending {day} met the bar for the digest."
    counts = Counter(lid for e in events for lid in e.layers)
    order = sorted(counts, key=lambda lid: (-counts[lid], LAYER_IDS.index(lid)))
    moved = [lid for lid in order if lid in BY_ID][:3]
    kinds = Counter(e.kind for e in events if e.kind)
    shared = _shared_terms(events)
    multi = sum(len(e.layers) >= 3 for e in events)
    if locale == "zh":
        what = "、".join(_KIND_ZH[k].format(n=n) for k, n in kinds.most_common() if k in _KIND_ZH)
        text = f"{day}共 {len(events)} 个事件" + (f"（{what}）" if what else "") + "。"
        if moved:
            text += "变化集中在" + "、".join(f"{BY_ID[lid].zh}（{counts[lid]} 个）" for lid in moved)
            text += f"，其中 {multi} 个事件横跨三层以上。" if multi else "。"
        if shared:
            text += "多个事件共同涉及 " + "、".join(f"{term}（{n} 个）" for term, n in shared) + "。"
        return text
    what = and_list([f"{n} {_KIND_EN[k][n != 1]}" for k, n in kinds.most_common() if k in _KIND_EN])
    noun = "event" if len(events) == 1 else "events"
    text = f"{day}: {len(events)} {noun}" + (f" ({what})" if what else "") + "."
    if moved:
        text += " Most movement in " + and_list([f"{BY_ID[lid].en} ({counts[lid]})" for lid in moved])
        text += f"; {multi} span three layers or more." if multi else "."
    if shared:
        text += " Shared across events: " + ", ".join(f"{term} ({n})" for term, n in shared) + "."
    return text


def _briefs_line(names: Sequence[str], locale: str) -> str:
    """"另有简讯：LLVM Weekly #623 的要点。" / " In brief: items from LLVM Weekly #623."."""
    shown = list(dict.fromkeys(n for n in names if n))
    if not shown:
        return ""
    if locale == "zh":
        return f"另有简讯：{'、'.join(shown)} 的要点。"
    return f" In brief: items from {and_list(shown)}."


def _shared_terms(events: Sequence[EventWriteup], most: int = 4) -> list[tuple[str, int]]:
    """Projects and targets named by at least two events, most shared first."""
    seen: Counter[str] = Counter()
    for e in events:
        seen.update({m.group(0).rstrip("s") if m.group(0).startswith("CUDA") else m.group(0)
                     for m in _SHARED.finditer(f"{e.title} {e.summary}")})
    return sorted(((t, n) for t, n in seen.items() if n >= 2), key=lambda tn: (-tn[1], tn[0]))[:most]
