"""The extractive writer: deterministic write-ups from the sources' own text.

Pure (no I/O). The extractive writer never states what the sources do not:
summaries are the sources' first sentences, the connective sentences only
name the layers, the sources and the figures the sources give. Connective
text is in the reader's locale (zh or en); text quoted from a source stays
as written. The write-up values live in ``digest.domain.writeups`` and the
day's text in ``digest.domain.daytext`` (a filtered view recomposes it too).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from decimal import Decimal

from digest.analyze.figures import Figure, extract_figures
from digest.domain.arxiv import ARXIV_PREFIX_RE
from digest.domain.daytext import and_list, cut
from digest.domain.layers import BY_ID, LAYER_IDS
from digest.domain.status import WriteMode
from digest.domain.writeups import EventInput, EventWriteup, SourceText

SUMMARY_CHARS = 600
PRIMARY_ENOUGH = 160
WATCH_PER_EVENT = 3


_SPLIT = re.compile(r"(?<=[。！？])(?![”’」』）)])|(?<=[。！？][”’」』）)])|(?<=[.!?])\s+(?=\S)")
_ABBREV = re.compile(
    r"(?:\b(?:e\.g|i\.e|et al|vs|cf|Fig|Figs|Eq|Sec|No|approx|Inc|Ltd|Jr|Dr|Mr|Ms)|\b[A-Z])\.$"
)
_TERM = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_.][A-Za-z0-9]+)*")
_DOTTED = re.compile(r"[A-Za-z0-9]{2,}\.[A-Za-z0-9]{2,}")
_GENERIC = {"AI", "ML", "LLM", "LLMS", "GPU", "GPUS", "CPU", "API", "IR", "PR", "RFC", "NEW"}


def clean_text(text: str) -> str:
    """Stored text (already plain: ingestion converted any markup) with the arXiv header removed.

    Nothing is unescaped or stripped again: ``std::vector<int>`` and ``&lt;`` are text here.
    """
    return ARXIV_PREFIX_RE.sub("", " ".join(text.split()), count=1)


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
    chosen = [cut(parts[0], limit)]
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
    if figure.kind in ("ratio", "percent"):
        return figure.compact
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
        mode=WriteMode.EXTRACTIVE,
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
    text = f"Touches {and_list(labels)}" if labels else "Not yet assigned to a layer"
    if names:
        noun = "source" if len(names) == 1 else "sources"
        text += f"; reported by {len(names)} {noun} ({', '.join(names)})."
    else:
        text += "."
    if figures:
        text += f" Figures stated by the sources: {', '.join(figures)}; check the original setup."
    return text + " Extractive write-up: quoted from the sources, not analysed by a model."
