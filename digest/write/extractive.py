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
EXCERPT_CHARS = 1200  # the body excerpt handed to the writers beside the summary
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
    """The lead sentence plus the sentences that carry results, in their order, within ``limit``.

    Bylines, "appeared first on" footers and heading words flattened into a
    sentence are dropped first. Whole sentences only: a first sentence longer
    than ``limit`` is the one thing ever shortened.
    """
    parts = [p for p in (_unheaded(s) for s in sentences(text)) if p and not _boilerplate(p)]
    if not parts:
        return ""
    if len(parts[0]) > limit:
        return cut(parts[0], limit)
    ranked = sorted(range(1, len(parts)), key=lambda i: (-_result_weight(parts[i]), i))
    chosen = [0]
    for index in ranked:
        if len(chosen) >= most:
            break
        if len(_join([parts[i] for i in sorted([*chosen, index])])) <= limit:
            chosen.append(index)
    return _join([parts[i] for i in sorted(chosen)])


_BYLINE = re.compile(r"^(?:posted\s+)?by\s+[A-Z][\w’'.-]*(?:\s+[A-Z][\w’'.-]*)+", re.I)
_FOOTER = re.compile(r"\bappeared first on\b|^(?:read more|continue reading)\b", re.I)
_HEADING = re.compile(
    r"^(?i:(?:introduction|overview|background|motivation|summary|tl;?dr|results|conclusions?|"
    r"abstract|key takeaways|what'?s new|highlights)[:\s]+)+(?=[A-Z])")
_BASELINE = re.compile(r"\b(?:over|than|compared|versus|vs\.?|from|baseline|relative to)\b", re.I)


def _boilerplate(sentence: str) -> bool:
    """A byline, a feed footer or a heading left alone (no sentence end, a few words)."""
    if _FOOTER.search(sentence):
        return True
    if _BYLINE.match(sentence) and len(sentence.split()) <= 14:
        return True
    return not sentence.endswith(_ENDS) and len(sentence.split()) <= 6


_ENDS = (".", "!", "?", "。", "！", "？", "”", "’", ")", "」", "…", ":")


def _unheaded(sentence: str) -> str:
    """The sentence without a heading word flattened into its start ("Introduction In this post")."""
    return _HEADING.sub("", sentence, count=1)


def _result_weight(sentence: str) -> int:
    """2 for a figure against a named baseline, 1 for a figure alone, 0 for no figure."""
    if not any(f.kind in ("ratio", "percent") or f.scaled for f in extract_figures(sentence)):
        return 0
    return 2 if _BASELINE.search(sentence) else 1


def body_excerpt(body: str, limit: int = EXCERPT_CHARS) -> str:
    """The body's most informative paragraphs (results first, then the opening), in order.

    A small, bounded hand-over for the writers: whole sentences of the
    paragraphs that state figures, then the first paragraphs, until ``limit``.
    """
    paragraphs = [lead(p, limit, most=6) for p in body.split("\n\n")]
    kept = [(i, p) for i, p in enumerate(paragraphs) if p and len(p) <= limit]
    ranked = sorted(kept, key=lambda pair: (-_result_weight(pair[1]), pair[0]))
    chosen: list[tuple[int, str]] = []
    for pair in ranked:
        if sum(len(p) + 1 for _, p in [*chosen, pair]) <= limit:
            chosen.append(pair)
    return " ".join(p for _, p in sorted(chosen))


def with_excerpt(summary: str, body: str, limit: int = EXCERPT_CHARS) -> str:
    """A source's summary followed by its body's excerpt (what the body adds), for the writers."""
    excerpt = body_excerpt(body, limit)
    if not excerpt or " ".join(excerpt.split()) in " ".join(summary.split()):
        return summary
    return f"{summary} {excerpt}".strip()


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
