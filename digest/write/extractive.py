"""The write-up types and the extractive writer: deterministic, from the sources' own text.

Pure (no I/O). The extractive writer never states what the sources do not:
summaries are the sources' first sentences, the connective sentences only
name the layers, the sources and the figures the sources give. Connective
text is in the reader's locale (zh or en); text quoted from a source stays
as written. ``digest.write`` re-exports everything here.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from digest.domain.layers import BY_ID, LAYER_IDS
from digest.write.figures import Figure, extract_figures

SUMMARY_CHARS = 600
PRIMARY_ENOUGH = 160
WATCH_PER_EVENT = 3
WATCHLIST_MAX = 8
DAY_TITLE_CHARS = 160
EXTRACTIVE = "extractive"


@dataclass(frozen=True)
class SourceText:
    """One source of an event, as the writer sees it."""

    name: str
    url: str | None
    title: str
    summary: str


@dataclass(frozen=True)
class EventInput:
    """An event to write up: its rule layers, score and sources (primary first)."""

    event_id: int
    title: str
    layers: tuple[str, ...]
    score: float
    sources: tuple[SourceText, ...]


@dataclass(frozen=True)
class EventWriteup:
    """An event's write-up in one locale; ``mode`` is the model name or ``extractive``."""

    title: str
    summary: str
    why_it_matters: str
    watch: tuple[str, ...]
    layers: tuple[str, ...]
    mode: str


@dataclass(frozen=True)
class DayWriteup:
    """The day's title, overview and watch list in one locale."""

    title: str
    overview: str
    watchlist: tuple[str, ...]
    mode: str


_ARXIV_HEAD = re.compile(r"^arXiv:\S+\s+Announce Type:\s*\S+\s+Abstract:\s*", re.IGNORECASE)
_SPLIT = re.compile(r"(?<=[。！？])(?![”’」』）)])|(?<=[。！？][”’」』）)])|(?<=[.!?])\s+(?=\S)")
_ABBREV = re.compile(
    r"(?:\b(?:e\.g|i\.e|et al|vs|cf|Fig|Figs|Eq|Sec|No|approx|Inc|Ltd|Jr|Dr|Mr|Ms)|\b[A-Z])\.$"
)
_TERM = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_.][A-Za-z0-9]+)*")
_DOTTED = re.compile(r"[A-Za-z0-9]{2,}\.[A-Za-z0-9]{2,}")
_GENERIC = {"AI", "ML", "LLM", "LLMS", "GPU", "GPUS", "CPU", "API", "IR", "PR", "RFC", "NEW"}
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")


def clean_text(text: str) -> str:
    """Stored text (already plain: ingestion converted any markup) with the arXiv header removed.

    Nothing is unescaped or stripped again: ``std::vector<int>`` and ``&lt;`` are text here.
    """
    return _ARXIV_HEAD.sub("", " ".join(text.split()))


def sentences(text: str) -> list[str]:
    """Split prose into sentences (English ``.!?`` and Chinese ``。！？``), abbreviations kept."""
    merged: list[str] = []
    for piece in (p.strip() for p in _SPLIT.split(text)):
        if not piece:
            continue
        if merged and _ABBREV.search(merged[-1]):
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    return merged


def lead(text: str, limit: int = SUMMARY_CHARS, most: int = 3) -> str:
    """The first sentences of ``text`` (up to ``most``) that fit in ``limit`` characters."""
    parts = sentences(text)
    if not parts:
        return ""
    chosen = [_cut(parts[0], limit)]
    for part in parts[1:most]:
        if len(_join([*chosen, part])) > limit:
            break
        chosen.append(part)
    return _join(chosen)


def _join(parts: Sequence[str]) -> str:
    out = ""
    for part in parts:
        glue = "" if not out or out.endswith(("。", "！", "？", "”", "」")) else " "
        out += glue + part
    return out


def _cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, at a word boundary when there is one."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip(" ,;:，、；") + "…"


def best_summary(event: EventInput) -> str:
    """The primary source's summary when substantial, else the longest (first on ties)."""
    cleaned = [_own_summary(s) for s in event.sources]
    if not cleaned:
        return ""
    if len(cleaned[0]) >= PRIMARY_ENOUGH:
        return cleaned[0]
    return max(cleaned, key=len)


def _own_summary(source: SourceText) -> str:
    """A source's summary, empty when it only repeats the title."""
    summary = clean_text(source.summary)
    return "" if summary.casefold() == clean_text(source.title).casefold() else summary


def layer_labels(layers: Iterable[str], locale: str) -> list[str]:
    """Display labels of known layer ids, in taxonomy order."""
    wanted = set(layers)
    return [BY_ID[lid].label(locale) for lid in LAYER_IDS if lid in wanted]


def source_names(event: EventInput) -> list[str]:
    """Distinct source names, primary first."""
    return list(dict.fromkeys(s.name.strip() for s in event.sources if s.name.strip()))


def key_figures(text: str, locale: str, most: int = 3) -> list[str]:
    """The first few speedups, percentages and scaled sizes stated in ``text`` (not versions)."""
    claims = [f for f in extract_figures(text) if f.kind in ("ratio", "percent") or f.scaled]
    shown = [_show(f, locale) for f in claims]
    return list(dict.fromkeys(shown))[:most]


def _show(figure: Figure, locale: str) -> str:
    """Locale-neutral ``2.52x`` and ``89%``; sizes as written (digits for en if in Chinese)."""
    if figure.kind == "ratio":
        return f"{figure.number}x"
    if figure.kind == "percent":
        return f"{figure.number}%"
    if locale == "zh" or figure.raw.isascii() or not isinstance(figure.value, Decimal):
        return figure.raw
    return f"{figure.value:,f}"


def key_terms(title: str, extra: str = "", most: int = WATCH_PER_EVENT) -> list[str]:
    """Names worth watching: the title's project name, then acronyms and CamelCase terms."""
    found: list[str] = []
    head = re.split(r"[:：]", title, maxsplit=1)[0].strip()
    if head != title.strip() and 0 < len(head) <= 40 and len(head.split()) <= 4:
        found.append(head)
    for term in _TERM.findall(f"{title} {extra}"):
        if _distinctive(term) and not any(term.casefold() in f.casefold() for f in found):
            found.append(term)
    return found[:most]


def _distinctive(term: str) -> bool:
    """Acronyms (``SASS``), CamelCase (``PyTorch``), or names with digits/dots (``F2Asm``)."""
    if len(term) < 2 or term.upper() in _GENERIC:
        return False
    upper = sum(c.isupper() for c in term)
    if term.isupper() and term.isalpha():
        return len(term) >= 3  # SASS, MLIR; not RL, IR
    return upper >= 2 or (upper >= 1 and not term[0].isupper()) or (
        any(c.isdigit() for c in term) and any(c.isalpha() for c in term) and upper >= 1
    ) or bool(_DOTTED.search(term))


def extractive_event(event: EventInput, locale: str) -> EventWriteup:
    """An event write-up quoted from its sources, with localised connective text."""
    primary = event.sources[0] if event.sources else None
    # An entry's title is already plain text: ``<T>`` in it is text, not a tag to drop.
    title = " ".join(primary.title.split()) if primary and primary.title.strip() else event.title
    quoted = lead(best_summary(event))
    terms = key_terms(title)
    return EventWriteup(
        title=title,
        summary=quoted or _no_summary(locale),
        why_it_matters=_why(event, quoted, locale),
        watch=tuple(terms if len(terms) >= 2 else key_terms(title, quoted)),
        layers=tuple(lid for lid in LAYER_IDS if lid in event.layers),
        mode=EXTRACTIVE,
    )


def _no_summary(locale: str) -> str:
    return "来源未提供摘要。" if locale == "zh" else "The source gives no summary."


def _why(event: EventInput, summary: str, locale: str) -> str:
    """What we can honestly say: layers, sources and the figures the sources state."""
    labels = layer_labels(event.layers, locale)
    write = _why_zh if locale == "zh" else _why_en
    return write(labels, source_names(event), key_figures(summary, locale))


def _why_zh(labels: list[str], names: list[str], figures: list[str]) -> str:
    text = f"该工作涉及{'、'.join(labels)}" if labels else "该工作尚未归入具体层级"
    text += f"；{len(names)} 个来源报道（{'、'.join(names)}）。" if names else "。"
    if figures:
        text += f"来源给出的关键数字：{'、'.join(figures)}，结论以原文配置为准。"
    return text + "本条为抽取式摘要，摘自来源原文，未经模型分析。"


def _why_en(labels: list[str], names: list[str], figures: list[str]) -> str:
    text = f"Touches {_and(labels)}" if labels else "Not yet assigned to a layer"
    if names:
        noun = "source" if len(names) == 1 else "sources"
        text += f"; reported by {len(names)} {noun} ({', '.join(names)})."
    else:
        text += "."
    if figures:
        text += f" Figures stated by the sources: {', '.join(figures)}; check the original setup."
    return text + " Extractive write-up: quoted from the sources, not analysed by a model."


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def extractive_day(events: Sequence[EventWriteup], locale: str, date: dt.date) -> DayWriteup:
    """The day's title, overview and watch list, composed from the given events only."""
    return DayWriteup(
        title=_day_title(events, locale, date),
        overview=_overview(events, locale, date),
        watchlist=watchlist(events),
        mode=EXTRACTIVE,
    )


def format_date(date: dt.date, locale: str) -> str:
    """``2026 年 9 月 17 日`` or ``September 17, 2026``."""
    if locale == "zh":
        return f"{date.year} 年 {date.month} 月 {date.day} 日"
    return f"{_MONTHS[date.month - 1]} {date.day}, {date.year}"


def _day_title(events: Sequence[EventWriteup], locale: str, date: dt.date) -> str:
    if not events:
        if locale == "zh":
            return f"编译器技术日报 {format_date(date, locale)}：本期无新事件"
        return f"Compiler digest, {format_date(date, locale)}: no new events"
    glue = "；" if locale == "zh" else "; "
    title = _cut(events[0].title, DAY_TITLE_CHARS)
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
    where = f" across {_and(labels)}" if labels else ""
    noun = "event" if len(events) == 1 else "events"
    return (f"The digest for {day} covers {len(events)} {noun}{where}. "
            f"Highest scored: {'; '.join(tops)}. The summaries quote the sources; "
            "check performance figures against their original setup.")


def watchlist(events: Sequence[EventWriteup], most: int = WATCHLIST_MAX) -> tuple[str, ...]:
    """The events' watch items in rank order, deduplicated (case-insensitive), capped."""
    seen: dict[str, str] = {}
    for item in (w.strip() for e in events for w in e.watch):
        if item and item.casefold() not in seen:
            seen[item.casefold()] = item
    return tuple(seen.values())[:most]
