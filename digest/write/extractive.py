"""The extractive writer: deterministic write-ups from the sources' own text.

Pure (no I/O). The extractive writer never states what the sources do not:
the summary quotes the lead sentence and the sentences that carry results,
and the composed sentences (zh or en) only name what the item is, the
project, and the results the sources state, each with its baseline
(``digest.analyze.figures.results``), every number copied as written. The
write-up values live in ``digest.domain.writeups`` and the day's text in
``digest.domain.daytext`` (a filtered view recomposes it too).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from digest.analyze.figures import Result, extract_figures, results
from digest.analyze.releases import ReleaseNotes, release_notes
from digest.domain.arxiv import ARXIV_PREFIX_RE
from digest.domain.daytext import and_list, clip_line, cut, short_name
from digest.domain.items import Item
from digest.domain.layers import BY_ID, LAYER_IDS
from digest.domain.locales import CJK
from digest.domain.status import WriteMode
from digest.domain.writeups import (
    BLOG,
    PAPER,
    RELEASE,
    ROUNDUP,
    Brief,
    BriefItem,
    EventInput,
    EventWriteup,
    SourceText,
)

SUMMARY_CHARS = 600
EXCERPT_CHARS = 1200  # the body excerpt handed to the writers beside the summary
PRIMARY_ENOUGH = 160
WATCH_PER_EVENT = 3
RESULTS_SHOWN = 3


# --- sentences and boilerplate ---------------------------------------------------------------------

_SPLIT = re.compile(r"(?<=[。！？])(?![”’」』）)])|(?<=[。！？][”’」』）)])|(?<=[.!?])\s+(?=\S)")
_GLUED = re.compile(r"(?<=[a-z]{2}[.!?])(?=[A-Z][a-z])")  # "capabilities.The": a lost space
_ABBREV = re.compile(
    r"(?:\b(?:e\.g|i\.e|et al|vs|cf|Fig|Figs|Eq|Sec|No|approx|Inc|Ltd|Jr|Dr|Mr|Ms)|\b[A-Z])\.$"
)
_BYLINE = re.compile(r"^(?:[Pp]osted\s+)?[Bb]y\s+[A-Z][\w’'.-]*(?:\s+(?:[A-Z][\w’'.-]*|and|&))*")
_FOOTER = re.compile(r"\bappeared first on\b|^(?:\[…\]\s*)?(?:read more|continue reading)\b|"
                     r"^full changelog\b|^\[(?:…|\.\.\.)\]$", re.I)
_HEADING = re.compile(
    r"^(?i:(?:introduction|overview|background|motivation|summary|tl;?dr|results|conclusions?|"
    r"abstract|key takeaways|what'?s new(?: in [\w.]+)?|highlights|changes|fixes|bug fixes|"
    r"breaking changes|deprecations|new features|features|improvements|future work|challenges|"
    r"acknowledge?ments|news)[:\s]+)+(?=[A-Z]|\S*[._(]\S)")
# A few words without punctuation, then a capitalised function word: a heading (or byline)
# flattened into the sentence it heads ("The problem The SLP vectorizer ...").
_FLAT_HEADING = re.compile(
    r"^(?:[\w’'#.+-]+\s+){0,4}?[\w’'#.+-]+\s+(?=(?:The|A|An|This|These|Those|We|Our|In|On|For|It|"
    r"Its|Each|All|When|With|To|After|Before|Today|Here|Many|Most|Some|One|Two|Three)\s)")
_CHATTER = re.compile(
    r"^(?:hello|hi|hey|greetings)\b|^welcome to\b|\bI['’]m [A-Z][\w-]+,? (?:an?|the)\b|\bmy name is\b|"
    r"\b(?:flew|flight|travell?ed|trip to)\b|\bfeel free to\b|\breach out\b|"
    r"\bcomments? (?:are|aren['’]t|is|isn['’]t) (?:not )?enabled\b|\bI would like to thank\b|"
    r"\bspecial thanks\b|\bthanks to (?:everyone|all|my)\b|\bin this (?:blog|post|article)\b",
    re.I)
_BASELINE = re.compile(r"\b(?:over|than|compared|versus|vs\.?|from|baseline|relative to)\b", re.I)
_ENDS = (".", "!", "?", "。", "！", "？", "”", "’", ")", "」", "…", ":")


def clean_text(text: str) -> str:
    """Stored text (already plain: ingestion converted any markup) with the arXiv header removed.

    Nothing is unescaped or stripped again: ``std::vector<int>`` and ``&lt;`` are text here.
    """
    return ARXIV_PREFIX_RE.sub("", " ".join(text.split()), count=1)


def sentences(text: str) -> list[str]:
    """Split prose into sentences (English ``.!?`` and Chinese ``。！？``), abbreviations kept."""
    merged: list[str] = []
    for piece in (p.strip() for p in _SPLIT.split(_GLUED.sub(" ", text))):
        if not piece:
            continue
        if merged and _ABBREV.search(merged[-1]):
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    return merged


def prose(text: str) -> list[str]:
    """The sentences worth quoting: no bylines, footers, flattened headings or personal chatter."""
    kept = [p for p in (_unheaded(s) for s in sentences(text)) if p and not _boilerplate(p)]
    plain = [p for p in kept if not _CHATTER.search(p)]
    return plain or kept


def lead(text: str, limit: int = SUMMARY_CHARS, most: int = 3) -> str:
    """The lead sentence plus the sentences that carry results, in their order, within ``limit``.

    Bylines, "appeared first on" footers, heading words flattened into a
    sentence and personal chatter are dropped first; a sentence that only
    repeats figures already chosen is skipped. Whole sentences only: a first
    sentence longer than ``limit`` is the one thing ever shortened.
    """
    parts = prose(text)
    if not parts:
        return ""
    if len(parts[0]) > limit:
        return cut(parts[0], limit)
    ranked = sorted(range(1, len(parts)), key=lambda i: (-_result_weight(parts[i]), i))
    chosen = [0]
    for index in ranked:
        if len(chosen) >= most:
            break
        if _repeats(parts[index], [parts[i] for i in chosen]):
            continue
        if len(_join([parts[i] for i in sorted([*chosen, index])])) <= limit:
            chosen.append(index)
    return _join([parts[i] for i in sorted(chosen)])


def _boilerplate(sentence: str) -> bool:
    """A byline, a feed footer or a heading left alone (no sentence end, a few words)."""
    if _FOOTER.search(sentence):
        return True
    if _BYLINE.match(sentence) and len(sentence.split()) <= 14:
        return True
    return not sentence.endswith(_ENDS) and len(sentence.split()) <= 6


_BYLINE_PREFIX = re.compile(r"^(?:[Pp]osted\s+)?[Bb]y\s+[A-Z][\w’'.-]+\s+[A-Z][\w’'.-]+\s+(?=[A-Z])")


def _unheaded(sentence: str) -> str:
    """The sentence without a heading or byline flattened into its start."""
    sentence = _BYLINE_PREFIX.sub("", _HEADING.sub("", sentence, count=1), count=1)
    flat = _FLAT_HEADING.match(sentence)
    if flat and not re.search(r"[,;:()]", flat.group(0)) and not _starts_clause(flat.group(0)):
        sentence = sentence[flat.end():]
    return sentence


def _starts_clause(prefix: str) -> bool:
    """Prose that may be followed by a capitalised word: "Compared to", "According to"."""
    return re.search(r"\b(?:to|of|by|than|and|or|with|from|the|a|an)\s*$", prefix, re.I) is not None


def _figures_of(sentence: str) -> set[str]:
    return {str(f.value) for f in extract_figures(sentence) if not f.exempt}


def _repeats(sentence: str, chosen: Sequence[str]) -> bool:
    """The sentence states no figure that the chosen ones do not already state."""
    mine = _figures_of(sentence)
    return bool(mine) and mine <= set().union(*(_figures_of(c) for c in chosen))


def _result_weight(sentence: str) -> int:
    """2 for a figure against a named baseline, 1 for a figure alone, 0 for no figure."""
    found = results(sentence)
    if any(r.has_baseline for r in found):
        return 2
    if found or any(f.kind in ("ratio", "percent") for f in extract_figures(sentence)):
        return 2 if _BASELINE.search(sentence) else 1
    return 0


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


# --- results in words -------------------------------------------------------------------------------

def event_results(event: EventInput) -> list[Result]:
    """The results the event's sources state, those with a baseline first, one per value."""
    found: dict[str, Result] = {}
    for source in event.sources:
        for sentence in prose(clean_text(source.summary)):
            for result in results(sentence):
                key = f"{result.before}>{result.value}"
                if key not in found or (result.has_baseline and not found[key].has_baseline):
                    found[key] = result
    ordered = list(found.values())
    return sorted(ordered, key=lambda r: (not r.has_baseline, ordered.index(r)))


def key_figures(text: str, locale: str, most: int = 3) -> list[str]:
    """The results stated in ``text`` with their baselines, in words (never versions or sizes)."""
    found = sorted(results(text), key=lambda r: not r.has_baseline)
    return list(dict.fromkeys(result_text(r, locale) for r in found))[:most]


_UNIT_ZH = {"minute": "分钟", "min": "分钟", "second": "秒", "sec": "秒", "hour": "小时", "hr": "小时",
            "day": "天", "ms": "毫秒", "millisecond": "毫秒", "µs": "微秒", "us": "微秒",
            "microsecond": "微秒", "ns": "纳秒"}
_METRIC_ZH = {"cold start": "冷启动", "cold-start time": "冷启动时间", "autotuning time": "自动调优时间",
              "tuning time": "调优时间", "compile time": "编译时间", "compilation time": "编译时间",
              "engine start-up": "引擎启动时间", "start-up time": "启动时间", "throughput": "吞吐",
              "throughput per user": "单用户吞吐", "latency": "延迟", "end-to-end latency": "端到端延迟",
              "memory": "内存", "code size": "代码体积", "performance": "性能", "MFU": "MFU",
              "energy efficiency": "能效", "pipeline bubbles": "流水线气泡",
              "exposed communication time": "暴露的通信时间", "mean absolute error": "平均绝对误差",
              "mean squared error": "均方误差", "median commit latency": "提交延迟中位数",
              "memory held by captured graphs": "captured graph 占用的内存",
              "Tuning every kernel": "调优全部内核的时间"}
_ADJ_ZH = {"faster": "快", "slower": "慢", "fewer": "少", "less": "少", "more": "多", "higher": "高",
           "lower": "低", "smaller": "小", "larger": "大", "better": "好", "cheaper": "便宜"}
_QUAL_ZH = {"up to": "最高", "as much as": "最高", "on average": "平均", "nearly": "接近", "about": "约",
            "over": "超过"}
_NOUN_ZH = [("geomean", "几何平均"), ("geometric-mean", "几何平均"), ("mean", "平均"), ("average", "平均"),
            ("end-to-end", "端到端"), ("overall", "整体")]


def result_text(r: Result, locale: str) -> str:
    """One result in ``locale``: every figure as the source wrote it, with its baseline."""
    return _result_zh(r) if locale == "zh" else _result_en(r)


def _zh_value(value: str) -> str:
    """``1.8x`` -> ``1.8 倍``; ``23 minutes`` -> ``23 分钟``; percentages and TFLOPS as written."""
    if value.endswith("x") and value[:-1].replace(",", "").replace(".", "").isdigit():
        return f"{value[:-1]} 倍"
    if re.fullmatch(r"[\d.,]+-[\d.,]+x", value):  # a range: "1.96-2.86x"
        low, high = value[:-1].split("-")
        return f"{low} 至 {high} 倍"
    number, _, unit = value.partition(" ")
    base = unit.lower().rstrip("s") if unit.lower() not in ("ms", "us", "ns", "µs") else unit.lower()
    return f"{number} {_UNIT_ZH[base]}" if base in _UNIT_ZH else value


def _zh_metric(metric: str) -> str:
    zh = _METRIC_ZH.get(metric, metric)
    return f"{zh} " if zh and zh[-1].isascii() else zh


def _pad(text: str) -> str:
    """A space between a Latin word and the Chinese around it (the seeds' typography)."""
    text = re.sub(r"(?<=[\u4e00-\u9fff])(?=[A-Za-z0-9])", " ", text)
    text = re.sub(r"(?<=[A-Za-z0-9%)])(?=[\u4e00-\u9fff])", " ", text)
    return re.sub(r"(?<=\S) {2,}", " ", text)


def _result_zh(r: Result) -> str:
    q = _QUAL_ZH.get(r.qualifier, "")
    on = f"在 {r.where} 上" if r.where else ""
    vs = f"（对比 {r.baseline}）" if r.baseline else ""
    value = _zh_value(r.value)
    if r.kind == "change":
        verb = "降到" if r.direction == "down" else "提高到"
        where = f"（{r.where}）" if r.where else ""
        text = f"{_zh_metric(r.metric)}从{_zh_value(r.before)}{verb}{value}{where}{vs}"
    elif r.kind == "compared":
        where = f"（{r.where}）" if r.where else ""
        text = f"{_zh_metric(r.metric)}{value}，对比 {_zh_value(r.before)}{where}"
    elif r.kind == "ratio":
        noun = f"{_zh_metric(r.noun)}" if r.noun else ""
        than = f"比 {r.baseline} " if r.baseline else ""
        text = f"{on}{noun}{q}{than}{_ADJ_ZH.get(r.adjective, r.adjective)}{value}"
    elif r.kind == "by":
        verb = {"down": "降低", "up": "提高", "improve": "改善"}[r.direction or "up"]
        text = f"{on}{_zh_metric(r.metric)}{q}{verb}{value.replace(' to ', ' 至 ')}{vs}"
    elif r.kind == "times_of":
        text = f"{_zh_metric(r.metric)}达到 {r.baseline} 的{value}"
    elif r.kind == "within":
        text = f"与 {r.baseline} 的差距在{value}以内"
    elif r.kind == "gain":
        lowered = r.noun.lower()
        mod = next((zh for en, zh in _NOUN_ZH if lowered.startswith(en)), "")
        verb = "加速" if "speed" in lowered else ("降低" if "reduction" in lowered or "lower" in lowered
                                                 else "提升")
        text = f"{on}{mod}{q}{verb}{value}{vs}"
    else:  # absolute
        text = f"{on}达到{value}"
    return _pad(text).strip()


def _result_en(r: Result) -> str:
    q = f"{r.qualifier} " if r.qualifier and r.qualifier != "on average" else ""
    avg = " on average" if r.qualifier == "on average" else ""
    on = f" on {r.where}" if r.where else ""
    vs = f" over {r.baseline}" if r.baseline else ""
    metric = f"{r.metric} " if r.metric else ""
    if r.kind == "change":
        return f"{metric}from {r.before} to {r.value}{f' ({r.where})' if r.where else ''}{vs}"
    if r.kind == "compared":
        return f"{metric}{r.value} vs {r.before}{f' ({r.where})' if r.where else ''}"
    if r.kind == "ratio":
        noun = f" {r.noun}" if r.noun else ""
        than = f" than {r.baseline}" if r.baseline else ""
        return f"{q}{r.value} {r.adjective}{noun}{than}{on}{avg}"
    if r.kind == "by":
        verb = {"down": "down", "up": "up", "improve": "improved"}[r.direction or "up"]
        return f"{metric}{verb} {q}{r.value}{avg}{on}{vs}"
    if r.kind == "times_of":
        return f"{r.value} the {r.metric} of {r.baseline}"
    if r.kind == "within":
        return f"within {r.value} of {r.baseline}"
    if r.kind == "gain":
        return f"{q}{r.value} {r.noun}{avg}{on}{vs}"
    return f"{r.value}{on}"


# --- names -------------------------------------------------------------------------------------------

_TERM = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_.][A-Za-z0-9]+)*")
_DOTTED = re.compile(r"[a-z0-9]{2,}\.[a-z_][a-z0-9_]+")  # torch.compile, tl.dot
_GENERIC = {"AI", "ML", "LLM", "LLMS", "GPU", "GPUS", "CPU", "API", "IR", "PR", "RFC", "NEW", "NP",
            "SIMD", "DSL", "HPC", "GSOC"}
_PRESENTED = re.compile(
    r"\b(?:[Ww]e (?:present|introduce|propose|build|release|describe)|[Oo]ur (?:tool|system|compiler|"
    r"framework|approach),|[Tt]oday we are (?:sharing|announcing|releasing)|introduc(?:es|ing))\s+"
    r"(?P<name>[A-Z][\w.-]*[A-Za-z0-9])\b")
_EXPECT = re.compile(
    r"\b(?:release candidates? (?:are|is) expected|expected (?:in|by|later|next|soon)|will be released|"
    r"(?:available|ships?) as an? (?:prototype|preview|beta)|in the nightly builds?|\(beta\)|"
    r"\(experimental\)|(?:is|are) planned|coming soon)", re.I)


def key_terms(title: str, extra: str = "", most: int = WATCH_PER_EVENT) -> list[str]:
    """Names worth watching: the title's short name, then project names (CamelCase, acronyms)."""
    found: list[str] = []
    name = short_name(title)
    if name and len(name) <= 40 and name != title.strip():
        found.append(name)
    for term in _TERM.findall(f"{title} {extra}"):
        if _distinctive(term) and not any(term.casefold() in f.casefold() for f in found):
            found.append(term)
    return found[:most]


def _distinctive(term: str) -> bool:
    """A project or product name: ``SASS``, ``PyTorch``, ``F2Asm``, ``TensorRT-LLM``, ``torch.compile``.

    Not hyphenated words ("Transfer-Learned", "NP-hard", "GSPMD-style") nor two sentences
    glued at a lost space ("capabilities.The").
    """
    if len(term) < 2 or term.upper() in _GENERIC or re.search(r"[a-z]\.[A-Z]", term):
        return False
    if "." in term:
        return bool(_DOTTED.fullmatch(term))
    parts = re.split(r"[-_]", term)
    if len(parts) > 1:
        return all(_name_part(p) for p in parts) and any(_camel_or_acronym(p) for p in parts)
    return _camel_or_acronym(term) or (any(c.isdigit() for c in term) and any(c.isupper() for c in term))


def _name_part(part: str) -> bool:
    """One part of a hyphenated name: ``TensorRT``, ``LLM``, ``R1``, ``3`` (not ``style``, ``Learned``)."""
    return (part.isupper() and len(part) >= 2) or _camel_or_acronym(part) or any(c.isdigit() for c in part)


def _camel_or_acronym(term: str) -> bool:
    upper = sum(c.isupper() for c in term)
    if term.isupper() and term.isalpha():
        return len(term) >= 3 and term not in _GENERIC  # SASS, MLIR; not RL, IR
    return (upper >= 2 and not term.isupper()) or (upper >= 1 and not term[0].isupper())


def project_name(event: EventInput) -> str:
    """The name of the work: the one the text presents ("We present Prism"), else the title's."""
    primary = event.sources[0] if event.sources else None
    title = primary.title if primary else event.title
    kind = primary.item_kind if primary else BLOG
    if kind in (RELEASE, ROUNDUP):
        return short_name(title)
    head = short_name(title)
    if head and len(head.split()) <= 2:
        return head
    for source in event.sources:
        m = _PRESENTED.search(clean_text(source.summary))
        if m and len(m.group("name")) >= 3:
            return m.group("name")
    return head


# --- the write-up -------------------------------------------------------------------------------------

def extractive_event(event: EventInput, locale: str) -> EventWriteup:
    """An event write-up: a composed sentence in ``locale``, then the sources' own lead and results."""
    primary = event.sources[0] if event.sources else None
    # An entry's title is already plain text: ``<T>`` in it is text, not a tag to drop.
    title = " ".join(primary.title.split()) if primary and primary.title.strip() else event.title
    quoted = lead(best_summary(event))
    found = event_results(event)
    notes = notes_of(event)
    composed = _composed(event, found, locale) + (release_line(notes, locale) if notes else "")
    rest = (f"原文摘录：{quoted}" if locale == "zh" else f"From the source: {quoted}") if quoted else (
        _no_summary(locale))
    summary = f"{composed}{rest}" if locale == "zh" else f"{composed} {rest}"
    return EventWriteup(
        title=title,
        summary=summary,
        why_it_matters=_why(event, found, locale, notes),
        watch=_watch(event, title, found, locale, notes),
        layers=tuple(lid for lid in LAYER_IDS if lid in event.layers),
        mode=WriteMode.EXTRACTIVE,
        kind=primary.item_kind if primary else "",
    )


def notes_of(event: EventInput) -> ReleaseNotes | None:
    """What the primary source's release notes change, when the event is a release."""
    primary = event.sources[0] if event.sources else None
    if primary is None or primary.item_kind != RELEASE:
        return None
    return release_notes(primary.title, primary.summary, primary.url)


RELEASE_ITEMS_SHOWN = 2


def release_line(notes: ReleaseNotes, locale: str) -> str:
    """"版本 v3.4.0：破坏性变更 2 项（…）；弃用 1 项（…）。" or the same in English; "" with nothing to say.

    With no breaking change, deprecation or removal listed, it says so: that too is
    news for whoever upgrades.
    """
    lists = [(notes.breaking, "破坏性变更", ("breaking change", "breaking changes")),
             (notes.deprecated, "弃用", ("deprecation", "deprecations")),
             (notes.removed, "移除", ("removal", "removals"))]
    if locale == "zh":
        parts = [f"{zh} {len(items)} 项（{_shown(items, locale)}）" for items, zh, _ in lists if items]
        head = f"版本 {notes.version}：" if notes.version else "版本说明列出"
        if not parts:
            return f"{head}版本说明中未见破坏性变更或弃用。" if notes.version else ""
        return _pad(head + "；".join(parts) + "。")
    parts = [f"{len(items)} {en[len(items) != 1]} ({_shown(items, locale)})" for items, _, en in lists
             if items]
    head = f"Version {notes.version}: " if notes.version else "The release notes list "
    if not parts:
        return f" {head}the release notes list no breaking change or deprecation." if notes.version else ""
    return f" {head}{'; '.join(parts)}."


def _shown(items: Sequence[str], locale: str) -> str:
    shown = list(items[:RELEASE_ITEMS_SHOWN])
    more = len(items) - len(shown)
    if locale == "zh":
        return "；".join(shown) + (" 等" if more else "")
    return "; ".join(shown) + (f"; and {more} more" if more else "")


def _no_summary(locale: str) -> str:
    return "来源未提供摘要。" if locale == "zh" else "The source gives no summary."


_PUBLISHER_ZH = {"PyTorch": "PyTorch 官方博客", "NVIDIA": "NVIDIA 技术博客", "LLVM Blog": "LLVM 官方博客"}


def _kinds(event: EventInput) -> list[tuple[str, str]]:
    """(kind, publisher) of each distinct publisher, primary first."""
    seen: dict[str, str] = {}
    for source in event.sources:
        kind = source.item_kind
        name = "arXiv" if kind == PAPER else source.name.strip()
        seen.setdefault(name, kind)
    return [(kind, name) for name, kind in seen.items()]


def _who_zh(kind: str, name: str) -> str:
    if kind == PAPER:
        return "arXiv 论文"
    if kind == RELEASE:
        return f"{name} 版本发布"
    if kind == ROUNDUP:
        return name
    if name in _PUBLISHER_ZH:
        return _PUBLISHER_ZH[name]
    bare = re.sub(r"(?i)\s*blog$", "", name) or name
    return f"{bare} 博客"


def _who_en(kind: str, name: str) -> str:
    if kind == PAPER:
        return "an arXiv paper"
    if kind == RELEASE:
        return f"the {name} release notes"
    if kind == ROUNDUP:
        return name
    return f"the {name}" if name.lower().endswith("blog") else f"the {name} blog"


def _composed(event: EventInput, found: Sequence[Result], locale: str) -> str:
    """One or two sentences from facts: what the item is, the project, and its results."""
    kinds = _kinds(event) or [(BLOG, event.title)]
    kind, _name = kinds[0]
    project = project_name(event) or short_name(event.title)
    shown = [result_text(r, locale) for r in found[:RESULTS_SHOWN]]
    if locale == "zh":
        if kind == RELEASE:
            head = f"{project} 正式发布"
        elif kind == ROUNDUP:
            head = f"{project} 汇总了近期社区动态"
        else:
            who = "与".join(dict.fromkeys(_who_zh(k, n) for k, n in kinds[:2]))
            head = f"{who}介绍 {project}"
        tail = f"：{'；'.join(shown)}" if shown else ""
        return _pad(f"{head}{tail}。")
    if kind == RELEASE:
        head = f"{project} is released"
    elif kind == ROUNDUP:
        head = f"{project} rounds up recent community news"
    else:
        who = and_list(list(dict.fromkeys(_who_en(k, n) for k, n in kinds[:2])))
        verb = "present" if len(kinds) > 1 else "presents"
        head = f"{who[0].upper()}{who[1:]} {verb} {project}"
    return f"{head}: {'; '.join(shown)}." if shown else f"{head}."


_ROLE_ZH = {
    "runtime": "运行时一侧的开销（启动、图捕获、内存）在推理服务里常与内核本身同样关键",
    "distributed": "分布式场景下，编译与通信的开销会随 rank 数放大",
    "frontend": "前端决定程序与模型如何被解析、捕获成 IR，这里的开销和稳定性用户直接感知",
    "graph_ir": "图级 IR 上的变换决定融合与调度的边界",
    "tensor_ir": "张量级 IR 是循环变换与 lowering 所在，这里的变化会传到基于它构建的编译器",
    "kernel_codegen": "生成内核的质量直接决定算子在目标硬件上的效率",
    "hardware_backend": "新硬件能否被编译栈用起来取决于后端支持",
    "optimization": "优化与自动调优决定同一份代码能跑多快，搜索成本本身也计入编译时间",
    "benchmark": "评测决定了各方拿什么做比较",
}
_ROLE_EN = {
    "runtime": "runtime overheads (start-up, graph capture, memory) often matter as much as the kernels "
               "in serving",
    "distributed": "in distributed jobs compile and communication costs grow with the number of ranks",
    "frontend": "the front end decides how programs and models are parsed and captured into IR, and "
                "users feel its cost and stability directly",
    "graph_ir": "graph-level rewrites set the boundaries for fusion and scheduling",
    "tensor_ir": "the tensor IR is where loops are transformed and lowered, so changes reach the compilers "
                 "built on it",
    "kernel_codegen": "the quality of generated kernels decides how fast operators run on the target",
    "hardware_backend": "whether new hardware is usable from the compiler stack depends on back-end support",
    "optimization": "optimisation and autotuning decide how fast the same code runs, and search time "
                    "counts as compile time",
    "benchmark": "evaluations decide what everyone compares against",
}
_ROLE_ORDER = ("kernel_codegen", "tensor_ir", "graph_ir", "runtime", "distributed", "frontend",
               "optimization", "hardware_backend", "benchmark")
_ROLE_WORDS = {
    "runtime": r"CUDA graphs?|serving|start-up|startup|runtime|launch overhead|memory pool",
    "distributed": r"ranks?|SPMD|collectives?|shard\w*|distributed|all-reduce|pipeline-parallel",
    "frontend": r"Dynamo|tracing|graph capture|front end|frontend|torch\.compile",
    "graph_ir": r"fusion|StableHLO|FX graph|Relax|graph-level",
    "tensor_ir": r"MLIR|affine|linalg|loop nests?|lowering|polyhedral|sparse_tensor|bufferi[sz]\w*|TensorIR",
    "kernel_codegen": r"kernels?|codegen|code generation|PTX|SASS|GEMMs?|vectori[sz]\w*|Triton",
    "hardware_backend": r"PIM|FPGA|TPU|back end|backend|H100|B200|Blackwell|AArch64|RISC-V",
    "optimization": r"autotun\w*|cost models?|search|PGO|profile-guided|schedul\w*",
    "benchmark": r"benchmark\w*|evaluation",
}


def _role(event: EventInput) -> str:
    """The layer this event is most about: its layer whose words its title (x3) and summary use most."""
    primary = event.sources[0] if event.sources else None
    title = primary.title if primary else event.title
    summary = clean_text(primary.summary) if primary else ""

    def hits(lid: str) -> int:
        words = re.compile(rf"\b(?:{_ROLE_WORDS[lid]})\b", re.I)
        return 3 * len(words.findall(title)) + len(words.findall(summary))

    layers = [lid for lid in _ROLE_ORDER if lid in event.layers]
    return max(layers, key=lambda lid: (hits(lid), -layers.index(lid))) if layers else ""


def _why(event: EventInput, found: Sequence[Result], locale: str,
         notes: ReleaseNotes | None = None) -> str:
    """Why it matters, from facts: the layer's stake, how the figures stand, who reports it."""
    kinds = _kinds(event)
    kind = kinds[0][0] if kinds else BLOG
    role = "" if kind == ROUNDUP else _role(event)
    baselines = list(dict.fromkeys(r.baseline for r in found if r.baseline))[:2]
    before_after = any(r.before for r in found)
    if locale == "zh":
        text = f"{_ROLE_ZH[role]}。" if role else ("" if kind == ROUNDUP else "这一条尚未归入具体层级。")
        if kind == RELEASE and notes is not None and notes.breaking:
            text += f"这是正式版本，其中 {len(notes.breaking)} 项破坏性变更需要下游先迁移再升级。"
        elif kind == RELEASE:
            text += "这是正式版本，下游可以据此升级；版本说明中的变更与修复值得逐条核对。"
        elif kind == ROUNDUP:
            text += "周报只给出线索，细节需看各条链接的原始讨论。"
        elif baselines:
            text += f"数字为来源自报，对比对象是 {'、'.join(baselines)}，复现前应核对原文配置。"
        elif before_after:
            text += "数字为来源自报的前后对比，复现前应核对原文配置。"
        elif found:
            text += "来源给出了数字，但没有说明对比基线，解读需谨慎。"
        else:
            text += "来源没有给出量化结果。"
        if len(kinds) > 1:
            text += f"{'与'.join(_who_zh(k, n) for k, n in kinds[:2])}同时报道了这项工作。"
        return _pad(text)
    text = f"{_ROLE_EN[role][0].upper()}{_ROLE_EN[role][1:]}." if role else (
        "" if kind == ROUNDUP else "Not yet assigned to a layer.")
    if kind == RELEASE and notes is not None and notes.breaking:
        n = len(notes.breaking)
        text += (f" This is a release, and its {n} breaking change{'s' if n != 1 else ''} need downstream "
                 "migration before upgrading.")
    elif kind == RELEASE:
        text += " This is a release downstream projects can move to; check its changes and fixes."
    elif kind == ROUNDUP:
        text += " A newsletter gives leads; the details are in the linked discussions."
    elif baselines:
        text += (f" The figures are the sources' own, measured against {and_list(baselines)}; "
                 "check the original setup before relying on them.")
    elif before_after:
        text += " The figures are the sources' own before-and-after numbers; check the original setup."
    elif found:
        text += " The sources give figures but no baseline; read them with care."
    else:
        text += " The sources give no quantitative result."
    if len(kinds) > 1:
        text += f" Reported by {and_list([_who_en(k, n) for k, n in kinds[:2]])} alike."
    return text.strip()


def _watch(event: EventInput, title: str, found: Sequence[Result], locale: str,
           notes: ReleaseNotes | None = None) -> tuple[str, ...]:
    """Project names, the main claim to verify, a release's breaking changes, and a release to expect."""
    name = project_name(event) or short_name(title)
    items = [name] if name else []
    if notes is not None and notes.breaking:
        n = len(notes.breaking)
        items.append(_pad(f"升级前核对：{name} 的 {n} 项破坏性变更") if locale == "zh"
                     else f"Before upgrading: {n} breaking change{'s' if n != 1 else ''} in {name}")
    claim = next((r for r in found if r.has_baseline), None)
    if claim is not None:
        said = result_text(claim, locale)
        items.append(_pad(f"待验证：{name} {said}") if locale == "zh" else f"To verify: {name} {said}")
    expected = next((s for src in event.sources for s in prose(clean_text(src.summary))
                     if _EXPECT.search(s)), None)
    if expected is not None:
        items.append(_expected(expected, name, locale))
    items += [t for t in key_terms(title) if t.casefold() not in name.casefold()][:1]
    return tuple(dict.fromkeys(items))[: WATCH_PER_EVENT + 1]


_VERSIONED = re.compile(r"\b[A-Z][\w-]*\s\d+(?:\.(?:\d+|x))+\b")
_STAGE = re.compile(r"\b(prototype|preview|beta|experimental|nightly)\b", re.I)


def _expected(sentence: str, name: str, locale: str) -> str:
    """A release to expect, from a sentence that announces one ("release candidates are expected")."""
    version = _VERSIONED.search(sentence)
    if version and re.search(r"release candidate", sentence, re.I):
        what = version.group(0)
        return f"后续：{what} 的 release candidate" if locale == "zh" else f"Next: {what} release candidates"
    stage = _STAGE.search(sentence)
    word = stage.group(1).lower() if stage else "preview"
    return _pad(f"后续：{name} 从 {word} 转为正式功能") if locale == "zh" else f"Next: {name} beyond {word}"


# --- roundups as briefs --------------------------------------------------------------------------

BRIEF_ITEMS = 8  # bullets of one 简讯 / Briefs entry, all roundups together
BRIEF_CHARS = 160  # one line each
BRIEF_MIN_WORDS = 4
_REF = r"(?:[0-9a-f]{7,40}|#\d{1,7}|\[(?:link|commit|PR|pdf|video|slides)\])"
_TRAILING_REFS = re.compile(rf"(?:[\s,;]*(?:\(\s*{_REF}(?:\s*[,;]\s*{_REF})*\s*\)|{_REF}))+[.;,]?$", re.I)
_ONLY_REFS = re.compile(rf"^(?:{_REF}[\s,;.()]*)+$", re.I)
_NEWSLETTER = re.compile(r"\b(?:weekly|newsletter)\b", re.I)
_SHA = re.compile(r"(?<![0-9a-z])[0-9a-f]{7,40}(?![0-9a-z])")
_NUMBER_REF = re.compile(r"#(\d{1,7})\b")
_SLUG_WORD = re.compile(r"[a-z][a-z0-9]{2,}")
_SLUG_STOP = frozenset(str.split(
    "the and for with from into onto this that are was were has have been its http https www com org "
    "html htm php blob tree main master issue issues pull pulls commit commits discourse llvm github"))


def brief_of(event_id: int, items: Sequence[Item], layers: Sequence[str], score: float,
             most: int = BRIEF_ITEMS) -> Brief:
    """A roundup event as a brief: its primary entry's name and link, and up to ``most`` item lines.

    The lines are the roundup's own list items (its body's paragraphs when the feed kept
    them, else its summary's sentences), without the greeting, headings and commit
    references, each one line of at most ``BRIEF_CHARS`` characters cut at a word.
    A line gets a link only when one of the entry's links plainly belongs to it.
    """
    primary = items[0]
    links = [u for i in items for u in i.links if u != primary.url]
    lines = roundup_items(primary.summary, primary.body, links, most)
    title = " ".join(primary.title.split())
    named = _NEWSLETTER.search(title) and short_name(title)  # "LLVM Weekly #623"
    return Brief(event_id=event_id, title=title, name=named or cut(title, 60),
                 url=primary.url, source=primary.source_name, layers=tuple(layers), score=score,
                 items=lines)


def roundup_items(summary: str, body: str, links: Sequence[str],
                  most: int = BRIEF_ITEMS) -> tuple[BriefItem, ...]:
    """The items of a roundup's text, in its order, as one-line :class:`BriefItem`\\ s."""
    blocks = [p for p in body.split("\n\n") if p.strip()] if "\n\n" in body else []
    pieces = [s for block in blocks for s in _first_sentence(block)] if blocks else sentences(
        clean_text(summary))
    found: list[tuple[str, str]] = []  # (line, the text its link is looked for in)
    for piece in pieces:
        piece = " ".join(piece.split())
        if _ONLY_REFS.match(piece):  # "8d5e4f2." after its item: the item's reference
            if found:
                found[-1] = (found[-1][0], f"{found[-1][1]} {piece}")
            continue
        text = _unheaded(piece)
        line = _without_refs(text)
        if (len(line.split()) < BRIEF_MIN_WORDS and not CJK.search(line)) or _boilerplate(line) \
                or _CHATTER.search(line):
            continue
        found.append((line, text))
    seen: set[str] = set()
    kept: list[BriefItem] = []
    for line, where in found:
        if line.casefold() in seen:
            continue
        seen.add(line.casefold())
        kept.append(BriefItem(clip_line(line, BRIEF_CHARS), _item_link(where, links)))
    return tuple(kept[:most])



def _without_refs(text: str) -> str:
    """``text`` without trailing commit hashes and ``(#123)`` references; its full stop kept."""
    found = _TRAILING_REFS.search(text)
    if found is None or found.start() == 0:
        return text.strip()
    stop = found.group(0)[-1] if found.group(0)[-1] in ".;," else ""
    return text[: found.start()].rstrip() + ("." if stop else "")


def _first_sentence(block: str) -> list[str]:
    """A list item's subject: its first sentence (with any reference that follows it)."""
    parts = sentences(clean_text(block))
    if not parts:
        return []
    head = [parts[0]]
    head += [p for p in parts[1:2] if _ONLY_REFS.match(p)]
    return head


def _item_link(text: str, links: Sequence[str]) -> str | None:
    """The link that plainly belongs to an item: its commit's hash, its ``#123``, or its words."""
    shas = {m.group(0) for m in _SHA.finditer(text)}
    numbers = set(_NUMBER_REF.findall(text))
    for url in links:
        path = url.split("://", 1)[-1].split("/", 1)[-1].lower()
        if any(f"/commit/{sha}" in f"/{path}" or f"/commits/{sha}" in f"/{path}" for sha in shas):
            return url
        tail = path.rstrip("/").rsplit("/", 2)
        if numbers and len(tail) >= 2 and tail[-2] in ("pull", "issues") and tail[-1] in numbers:
            return url
    words = {w for w in _SLUG_WORD.findall(text.lower()) if w not in _SLUG_STOP}
    best: tuple[int, str] | None = None
    for url in links:
        slug = {w for w in _SLUG_WORD.findall(url.split("://", 1)[-1].split("/", 1)[-1].lower())
                if w not in _SLUG_STOP}
        shared = len(slug & words)
        if shared >= 3 and 2 * shared >= len(slug) and (best is None or shared > best[0]):
            best = (shared, url)
    return best[1] if best else None


def bounded_briefs(briefs: Sequence[Brief], total: int = BRIEF_ITEMS) -> tuple[Brief, ...]:
    """The briefs with at most ``total`` items together, shared out in turn (best roundup first)."""
    quota = [0] * len(briefs)
    left = total
    while left > 0 and any(q < len(b.items) for q, b in zip(quota, briefs, strict=True)):
        for n, brief in enumerate(briefs):
            if left > 0 and quota[n] < len(brief.items):
                quota[n] += 1
                left -= 1
    return tuple(replace(b, items=b.items[:q]) for b, q in zip(briefs, quota, strict=True) if q)
