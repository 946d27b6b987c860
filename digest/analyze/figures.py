"""Figures in text: the numbers a write-up states, checked against what its sources state.

DESIGN: "a number in a write-up (speedups, percentages, sizes) that no source of
the event contains makes that write-up fall back to extractive". The rule, exactly:

* Both sides are NFKC-normalised first (full-width digits, ``％``, ``²`` become
  ASCII); a full-width comma never joins two numbers.
* A figure is a run of ASCII digits with an optional thousands grouping
  (``3,225`` == ``3225``) and decimals, plus an optional unit right after it
  (one space allowed): ``x``/``×``/``倍``/``times`` make it a ratio, ``%``/
  ``percent`` a percentage; ``K M B G T`` (as a word: not ``MB``, ``GHz``),
  ``thousand/million/billion``, ``千 万 百万 千万 亿`` scale it (``7M`` ==
  ``700 万``). Any other unit is ignored. In a range (``1.96 至 2.86 倍``,
  ``10-20%``) the low end takes the high end's kind. A dotted run with two or
  more dots (``2.5.1``) is a version, compared as text.
* In a write-up, digits glued to a preceding letter, digit, ``_`` or ``.`` are
  part of a name (``H100``, ``SM107``, ``fp16``, ``v2``), not figures. In the
  sources every digit run counts, names included, so ``2.5`` is supported by a
  source's ``v2.5``.
* Exempt: plain integers 0-10 with no unit (counts, ordinals, list numbers:
  "3 个来源", "8-bit"). Years are NOT exempt: a year the sources never state is
  an invented fact; callers pass the digest's own dates in ``allowed``.
* A write-up figure is supported when some source figure has the same value
  and, if both carry a kind (ratio, percent), the same kind: ``30%`` is not
  supported by ``30x``; rounding (``2.5x`` for ``2.52x``) or arithmetic
  (``提升 50%`` for ``1.5x``) is not supported either.

Only Arabic digits are figures; Chinese numerals (三个, 两倍) are not checked.
The one figure extractor: the write-up check here, the extractive writer's key
figures and the classifier's figure evidence (``digest.analyze.taxonomy``) all
read :func:`extract_figures`. Pure: no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal, localcontext

_SCALES: dict[str, int] = {
    "k": 10**3, "thousand": 10**3, "m": 10**6, "million": 10**6,
    "b": 10**9, "g": 10**9, "billion": 10**9, "t": 10**12, "trillion": 10**12,
    "千": 10**3, "万": 10**4, "百万": 10**6, "千万": 10**7, "亿": 10**8,
}
_RATIO = {"x", "×", "倍", "times"}
_PERCENT = {"%", "percent"}

_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)*"
# a unit letter glued to more letters or digits is a name: ``8x7B`` (Mixtral), ``7Bn``
_WORD_UNIT = r"(?:x|X|times|percent|thousand|million|billion|trillion|[KkMBbGT])(?![A-Za-z0-9])"
_UNIT = rf"(?:\s?(?P<unit>{_WORD_UNIT}|%|×|倍|百万|千万|千|万|亿))?"
_STRICT = re.compile(rf"(?<![A-Za-z0-9_.])(?P<num>{_NUMBER}){_UNIT}")
_LENIENT = re.compile(rf"(?P<num>{_NUMBER}){_UNIT}")
_RANGE = re.compile(r"\s*(?:-|–|—|~|～|至|到|to)\s*")


@dataclass(frozen=True)
class Figure:
    """One number as written, its comparable value and its kind."""

    raw: str
    value: Decimal | str
    kind: str  # "ratio", "percent", "version" or "" (plain)
    scaled: bool = False
    number: str = ""  # the digits as written, without the unit
    unit: str = ""  # the unit written right after it ("" for a range's low end)
    end: int = field(default=0, compare=False)  # where it ends in ``normalise(text)``

    @property
    def compact(self) -> str:
        """``2.52x`` or ``89%`` (the digits as written) for a ratio or percentage, else ``raw``."""
        if self.kind == "ratio":
            return f"{self.number}x"
        return f"{self.number}%" if self.kind == "percent" else self.raw

    @property
    def exempt(self) -> bool:
        """Plain small integers (0-10, no unit) are counts or ordinals, not claims."""
        return (
            self.kind == ""
            and not self.scaled
            and isinstance(self.value, Decimal)
            and self.value == self.value.to_integral_value()
            and 0 <= self.value <= 10
        )


def normalise(text: str) -> str:
    """NFKC, with the full-width comma kept apart from thousands separators."""
    return unicodedata.normalize("NFKC", text.replace("\uff0c", "\u3001"))


def extract_figures(text: str, *, names_too: bool = False) -> list[Figure]:
    """Every figure in ``text``; with ``names_too`` also digits inside names (``H100``)."""
    pattern = _LENIENT if names_too else _STRICT
    text = normalise(text)
    matches = list(pattern.finditer(text))
    figures = [_figure(m) for m in matches]
    for i in range(len(figures) - 1):  # "1.96 至 2.86 倍": the low end is a ratio too
        low, high = figures[i], figures[i + 1]
        between = text[matches[i].end():matches[i + 1].start()]
        if low.kind == "" and not low.scaled and high.kind and _RANGE.fullmatch(between):
            figures[i] = replace(low, kind=high.kind)
    return figures


def _figure(match: re.Match[str]) -> Figure:
    number, unit = match.group("num"), match.group("unit") or ""
    digits = number.replace(",", "")
    if digits.count(".") >= 2:
        return Figure(number, digits, "version", number=number, end=match.end("num"))
    kind, scale = _unit_meaning(unit)
    raw = match.group(0).strip() if kind or scale != 1 else number
    # exact for any length: the default context's 28 digits would round a long number and
    # fail to write it without an exponent (a feed may write "1" and 28 zeros)
    with localcontext() as exact:
        exact.prec = len(digits) + len(str(scale))
        value = _canonical(Decimal(digits) * scale)
    return Figure(raw, value, kind, scaled=scale != 1, number=number, unit=unit, end=match.end())


def _canonical(value: Decimal) -> Decimal:
    """Trailing zeros dropped, never in exponent form: 1.10 -> 1.1, 7E+6 -> 7000000."""
    value = value.normalize()
    exponent = value.as_tuple().exponent
    return value.quantize(Decimal(1)) if isinstance(exponent, int) and exponent > 0 else value


def _unit_meaning(unit: str) -> tuple[str, int]:
    """(kind, scale) for the unit written after a number."""
    lowered = unit.lower()
    if lowered in _RATIO or unit in _RATIO:
        return "ratio", 1
    if lowered in _PERCENT:
        return "percent", 1
    return "", _SCALES.get(lowered, 1)


def _supports(source: Figure, claim: Figure) -> bool:
    if source.value != claim.value:
        return False
    return not (source.kind and claim.kind and source.kind != claim.kind)


def unsupported_figures(
    texts: Iterable[str], sources: Iterable[str], allowed: Iterable[str] = ()
) -> list[str]:
    """The figures of ``texts`` that neither ``sources`` nor ``allowed`` state (deduped)."""
    known = [f for s in [*sources, *allowed] for f in extract_figures(s, names_too=True)]
    missing: list[str] = []
    for text in texts:
        for claim in extract_figures(text):
            if claim.exempt or any(_supports(s, claim) for s in known):
                continue
            if claim.raw not in missing:
                missing.append(claim.raw)
    return missing


# --- results: a figure with what it measures and what it is compared with ------------------------
#
# The extractive writer states results, not bare numbers: "cold start from 23 minutes to
# 2.8 minutes", "1.8x faster than eager mode on Intel Arc B580", "1,450 TFLOPS on B200".
# Each part of a :class:`Result` is quoted from one sentence of a source, so every figure
# in it is one the source states. Model sizes ("70B"), counts and names ("Mixtral-8x7B")
# are not results.

_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_TIME = r"minutes?|mins?|seconds?|secs?|hours?|hrs?|days?|ms|milliseconds?|µs|us|microseconds?|ns"
_RATE = r"[TPG]FLOPS|tokens/s|tok/s|GB/s|TB/s|images/s|samples/s"
_MEASURE = rf"(?:{_TIME}|{_RATE}|GB|MB|GiB|MiB|KB)"
_QUAL = r"(?P<q>up to|as much as|on average|an average of|a mean of|nearly|about|over)\s+"
_BASE_WORDS = r"than|over|relative to|compared (?:with|to)|versus|vs\.?|against"
_STOP = (r"(?=\s+(?:on|for|in|at|while|and|across|with|when|whereas|but|using|over|than|relative|"
         r"compared|versus|vs)\b|\s*(?:,(?!\d)|[;:()])|\.(?:\s|$)|$)")
_PHRASE = r"(?:[^,;:()]|,(?=\d))+?"  # a thousands comma is no clause break
_METRIC = r"(?:(?!\b(?:and|from|while|which)\b)[^,;:()])+?"
_UP = r"rais|increas|improv|boost|rise|rose|grow|grew|climb|speed"

_FROM_TO = re.compile(
    rf"\bfrom\s+(?P<a>{_NUM})\s?(?P<ua>%|{_MEASURE})?\s+(?:down\s+|up\s+)?to\s+"
    rf"(?P<b>{_NUM})\s?(?P<ub>%|{_MEASURE})(?![\w/])")
_ARROW = re.compile(
    rf"(?<![\w.])(?P<a>{_NUM})\s?(?P<ua>%|{_MEASURE})?\s*(?:->|→|⟶|=>)\s*"
    rf"(?P<b>{_NUM})\s?(?P<ub>%|{_MEASURE})(?![\w/])")
_COMPARED = re.compile(
    rf"(?<![\w.])(?P<b>{_NUM})\s?(?P<ub>{_MEASURE})\s+(?:compared (?:with|to)|versus|vs\.?)\s+"
    rf"(?P<a>{_NUM})\s?(?P<ua>{_MEASURE})(?![\w/])")
_RATIO_CMP = re.compile(
    rf"(?:{_QUAL})?(?<![\w.-])(?P<n>{_NUM})\s?(?:x|×|times)\s+(?P<adj>faster|slower|fewer|less|more|"
    rf"higher|lower|smaller|larger|better|cheaper)(?:\s+(?P<noun>[a-z][\w-]*(?:\s[a-z][\w-]*)?))??"
    rf"(?:\s+on\s+(?P<w1>{_PHRASE}))?\s+(?:{_BASE_WORDS})\s+(?P<base>{_PHRASE}){_STOP}")
_BY = re.compile(
    rf"\b(?P<verb>(?:cut|reduc|lower|shrink|shrank|drop|fall|fell|decreas|shorten|{_UP})\w*(?: up)?)"
    rf"\s+(?P<metric>{_METRIC}\s+)?by\s+(?:{_QUAL})?(?P<n>{_NUM})\s?(?P<u>%|x|×|times)"
    rf"(?:\s?(?:to|-|–)\s?(?P<n2>{_NUM})\s?(?P=u))?(?![\w/])")
_WITHIN = re.compile(rf"\bwithin\s+(?P<n>{_NUM})\s?%\s+of\s+(?P<base>{_PHRASE}){_STOP}")
_TIMES_OF = re.compile(
    rf"(?<![\w.-])(?P<n>{_NUM})\s?(?:x|×)\s+the\s+(?P<metric>[a-z][\w-]*(?:\s[a-z][\w-]*)?)\s+of\s+"
    rf"(?P<base>{_PHRASE}){_STOP}")
_GAIN = re.compile(
    rf"(?:{_QUAL})?(?<![\w.-])(?P<n>{_NUM})\s?(?P<u>%|x|×)\s+(?P<noun>(?:(?:geomean|geometric-mean|"
    rf"mean|average|end-to-end|overall)\s+)?(?:[a-z][a-z-]*\s+)?(?:speedups?|speed-ups?|improvements?|"
    rf"reductions?|gains?|acceleration|higher throughput|lower latency))(?![\w-])")
# Chinese sources: "取得 1.96 至 2.86 倍加速", "提升 35%"
_GAIN_ZH = re.compile(
    rf"(?P<n>{_NUM})(?:\s*(?:至|到|~|-)\s*(?P<n2>{_NUM}))?\s*(?P<u>倍|%)\s*的?(?P<noun>加速|提升|性能提升|降低)")
_RATIO_BARE = re.compile(
    rf"(?:{_QUAL})?(?<![\w.-])(?P<n>{_NUM})\s?(?P<u>x|×|%)\s+(?P<adj>faster|slower|fewer|less|more|higher|"
    rf"lower|smaller|larger|cheaper)\b(?:\s+(?P<noun>[a-z][\w-]*))?")
_GAIN_OF = re.compile(
    rf"(?P<noun>(?:(?:geomean|geometric-mean|mean|average)\s+)?(?:speedups?|improvements?|gains?))\s+of\s+"
    rf"(?:{_QUAL})?(?P<n>{_NUM})\s?(?P<u>%|x|×)(?![\w/])")
_ABSOLUTE = re.compile(rf"(?<![\w.])(?P<n>{_NUM})\s?(?P<u>{_RATE})(?![\w/])")
_TAIL_MORE = re.compile(
    rf"^\s*(?:,\s*|\s+and\s+|,\s+and\s+)(?P<n>{_NUM})\s?(?P<u>%|x|×)(?![\w/])")
_WHERE = re.compile(rf"^\s*(?:end[ -]to[ -]end\s+)?(?P<prep>on|for)\s+(?!average\b)(?P<w>{_PHRASE}){_STOP}")
_BASELINE_AFTER = re.compile(rf"\b(?:{_BASE_WORDS})\s+(?!\d)(?P<base>{_PHRASE}){_STOP}")
_INTRANSITIVE = re.compile(
    r"\b(?:drops?|dropped|falls?|fell|goes|went|rises?|rose|grows?|grew|shrinks?|shrank|improves?|"
    r"improved|increases?|increased|decreases?|decreased|declines?|climbs?|is|are)\s*$")
_TRANSITIVE = re.compile(
    r"\b(?:cut(?:s|ting)?|reduc(?:es|e|ed|ing)|rais(?:es|e|ed|ing)|shorten(?:s|ed|ing)?|"
    r"lower(?:s|ed|ing)?|bring(?:s|ing)?|brought|improv(?:es|e|ed|ing)|increas(?:es|e|ed|ing)|"
    r"boost(?:s|ed|ing)?|speed(?:s|ing)? up|tak(?:es|e|ing)|took|shrink(?:s|ing)?)\s+(?P<obj>.+)$")
_CLAUSE_START = re.compile(r".*(?:[,;:](?=\s)|\(|\band\b|\bwhile\b|\bwhich\b|\bthat\b)\s*", re.S)
_PREP_CUT = re.compile(r"\s+(?:for|on|in|of|with|across|at|when|from|to|under|per run)\s+.*$")
_ARTICLE = re.compile(r"^(?:the|a|an|its|their|our|this|these|each|every)\s+", re.I)
_GUARDED = re.compile(r"\b(?:below|under|less than|more than|at most|at|in|by more than|than)\s*$", re.I)


@dataclass(frozen=True)
class Result:
    """One stated result: ``value`` (as written) and, where the sentence says them, the rest.

    ``kind`` is ``change`` (``before`` -> ``value``), ``compared`` (``value`` against a
    ``before`` of the baseline), ``ratio`` (``value`` + ``adjective``: "1.8x faster"),
    ``by`` (``metric`` went ``direction`` by ``value``), ``gain`` (a speedup or improvement
    ``value``), ``times_of`` (``value`` times the ``metric`` of ``baseline``), ``within``
    (within ``value`` of ``baseline``) or ``absolute`` (``value`` reached, e.g. TFLOPS).
    """

    kind: str
    value: str
    before: str = ""
    metric: str = ""
    baseline: str = ""
    where: str = ""
    adjective: str = ""
    qualifier: str = ""  # "up to", "on average", ...
    direction: str = ""  # "down" or "up" (change, by)
    noun: str = ""  # "speedup", "geomean improvement", ...
    start: int = field(default=0, compare=False)

    @property
    def has_baseline(self) -> bool:
        """A before value or a named baseline: the result says what it is better than."""
        return bool(self.before or self.baseline)


def results(text: str) -> list[Result]:
    """Every result stated in ``text``, sentence by sentence, in order (one per figure)."""
    found: list[Result] = []
    for sentence in re.split(r"(?<=[.!?;])\s+(?=[A-Z(])|\n+", normalise(text)):
        found += _sentence_results(sentence)
    return found


def _sentence_results(sentence: str) -> list[Result]:
    taken: list[tuple[int, int]] = []
    out: list[Result] = []

    def free(match: re.Match[str], group: str = "n") -> bool:
        a, b = match.span(group)
        return not any(a < y and x < b for x, y in taken) and not _guarded(sentence, match.start(group))

    def take(match: re.Match[str], result: Result) -> None:
        taken.append(match.span())
        out.append(result)

    for m in [*_FROM_TO.finditer(sentence), *_ARROW.finditer(sentence)]:
        unit_b = m.group("ub")
        unit_a = m.group("ua") or unit_b
        tail = _tail(sentence, m.end())
        take(m, Result("change", _with_unit(m.group("b"), unit_b), before=_with_unit(m.group("a"), unit_a),
                       metric=_metric_before(sentence[:m.start()]), where=tail[0], baseline=tail[1],
                       direction=_direction(m.group("a"), m.group("b")), start=m.start()))
    for m in _COMPARED.finditer(sentence):
        if free(m, "b"):
            tail = _tail(sentence, m.end())
            metric = _metric_before(re.sub(r"\s+in\s*$", "", sentence[:m.start()]))
            take(m, Result("compared", _with_unit(m.group("b"), m.group("ub")),
                           before=_with_unit(m.group("a"), m.group("ua")), metric=metric,
                           where=tail[0], start=m.start()))
    for m in _RATIO_CMP.finditer(sentence):
        if free(m):
            where = _clean(m.group("w1") or "") or _tail(sentence, m.end())[0]
            take(m, Result("ratio", f"{m.group('n')}x", adjective=m.group("adj"),
                           noun=_clean(m.group("noun") or ""), baseline=_clean(m.group("base")),
                           where=where, qualifier=_qualifier(m, sentence), start=m.start()))
    for m in _TIMES_OF.finditer(sentence):
        if free(m):
            take(m, Result("times_of", f"{m.group('n')}x", metric=_clean(m.group("metric")),
                           baseline=_clean(m.group("base")), start=m.start()))
    for m in _BY.finditer(sentence):
        if free(m):
            metric = _clean(m.group("metric") or "") or _metric_before(sentence[:m.start()], verbless=True)
            tail = _tail(sentence, m.end())
            verb = m.group("verb").lower()
            direction = "improve" if verb.startswith("improv") else (
                "up" if re.match(_UP, verb) else "down")
            value = _with_unit(m.group("n"), m.group("u"))
            if m.group("n2"):
                value = f"{value} to {_with_unit(m.group('n2'), m.group('u'))}"
            take(m, Result("by", value, metric=_short(re.sub(r"\s+up$", "", metric)),
                           direction=direction, where=tail[0], baseline=tail[1],
                           qualifier=_qualifier(m, sentence), start=m.start()))
    for m in _WITHIN.finditer(sentence):
        if free(m):
            take(m, Result("within", f"{m.group('n')}%", baseline=_clean(m.group("base")), start=m.start()))
    for pattern in (_GAIN, _GAIN_OF):
        for m in pattern.finditer(sentence):
            if free(m):
                tail = _tail(sentence, m.end())
                gain = Result("gain", _with_unit(m.group("n"), m.group("u")), noun=m.group("noun"),
                              where=tail[0], baseline=tail[1] or _baseline_anywhere(sentence, m.end()),
                              qualifier=_qualifier(m, sentence), start=m.start())
                take(m, gain)
                out += _more(sentence, m.end(), gain, taken)
    for m in _GAIN_ZH.finditer(sentence):
        if free(m):
            value = m.group("n") + (f"-{m.group('n2')}" if m.group("n2") else "")
            value = f"{value}x" if m.group("u") == "倍" else f"{value}%"
            noun = {"加速": "speedup", "降低": "reduction"}.get(m.group("noun"), "improvement")
            take(m, Result("gain", value, noun=noun, start=m.start()))
    for m in _RATIO_BARE.finditer(sentence):
        if free(m):
            noun = m.group("noun") or ""
            noun = "" if noun in ("than", "over", "on", "for", "in", "and", "while", "with") else noun
            take(m, Result("ratio", _with_unit(m.group("n"), m.group("u")), adjective=m.group("adj"),
                           noun=noun, where=_tail(sentence, m.end())[0],
                           qualifier=_qualifier(m, sentence), start=m.start()))
    for m in _ABSOLUTE.finditer(sentence):
        if free(m):
            take(m, Result("absolute", _with_unit(m.group("n"), m.group("u")),
                           where=_tail(sentence, m.end())[0], start=m.start()))
    return sorted(out, key=lambda r: r.start)


def _more(sentence: str, end: int, first: Result, taken: list[tuple[int, int]]) -> list[Result]:
    """The list that continues a gain: "6.2x speedup on A, 3.1x on B and 2.4x end to end on C"."""
    more: list[Result] = []
    where_end = _tail_end(sentence, end)
    while (m := _TAIL_MORE.match(sentence[where_end:])) is not None:
        start = where_end + m.start("n")
        taken.append((start, where_end + m.end()))
        where = _tail(sentence, where_end + m.end())[0]
        more.append(Result("gain", _with_unit(m.group("n"), m.group("u")), noun=first.noun,
                           where=where, baseline=first.baseline, start=start))
        where_end = _tail_end(sentence, where_end + m.end())
    return more


def _tail_end(sentence: str, end: int) -> int:
    m = _WHERE.match(sentence[end:])
    return end + m.end() if m else end


def _tail(sentence: str, end: int) -> tuple[str, str]:
    """(where, baseline): an "on|for X" right after ``end``, and a "than|over|relative to Y" after it."""
    rest = sentence[end:]
    where = ""
    m = _WHERE.match(rest)
    if m:
        where = _clean(m.group("w"))
        rest = rest[m.end():]
    while (extra := _WHERE.match(rest)) is not None and len(where.split()) < 6:  # "on X for Y"
        where = f"{where} {extra.group('prep')} {_clean(extra.group('w'))}".strip()
        rest = rest[extra.end():]
    b = _BASELINE_AFTER.match(rest.lstrip().lstrip(",").lstrip()) if rest.strip() else None
    if b is None and rest[:1] == " ":
        b = _BASELINE_AFTER.match(rest.strip())
    return where, _clean(b.group("base")) if b else ""


def _baseline_anywhere(sentence: str, end: int) -> str:
    m = _BASELINE_AFTER.search(sentence[end:])
    return _clean(m.group("base")) if m else ""


def _metric_before(prefix: str, *, verbless: bool = False) -> str:
    """What changed, from the words before the figure: "cold start drops" / "reduces autotuning time"."""
    clause = _CLAUSE_START.sub("", prefix).strip()
    m = _TRANSITIVE.search(clause)
    if m:
        return _short(m.group("obj"))
    m = _INTRANSITIVE.search(clause)
    if m:
        return _short(clause[:m.start()])
    return "" if not verbless else _short(clause)


def _short(phrase: str) -> str:
    """A metric phrase without its article and trailing prepositional context, at most 6 words."""
    phrase = _PREP_CUT.sub("", _clean(phrase))
    phrase = _ARTICLE.sub("", phrase).strip()
    words = phrase.split()
    return " ".join(words) if 0 < len(words) <= 6 else ""


def _clean(phrase: str) -> str:
    phrase = " ".join(phrase.split()).strip(" ,.;:")
    return _ARTICLE.sub("", phrase)


def _qualifier(match: re.Match[str], sentence: str) -> str:
    q = match.groupdict().get("q") or ""
    if not q and re.match(r"\s*on average\b", sentence[match.end():]):
        q = "on average"
    return {"an average of": "on average", "a mean of": "on average"}.get(q, q)


def _guarded(sentence: str, start: int) -> bool:
    """A bound or a condition, not a result: "below 2%", "in 9% of tasks", "at 10% density"."""
    return _GUARDED.search(sentence[:start]) is not None


def _with_unit(number: str, unit: str) -> str:
    if unit in ("x", "×", "times"):
        return f"{number}x"
    return f"{number}{unit}" if unit == "%" else f"{number} {unit}"


def _direction(before: str, after: str) -> str:
    a, b = Decimal(before.replace(",", "")), Decimal(after.replace(",", ""))
    return "down" if b < a else "up"
