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
from decimal import Decimal

_SCALES: dict[str, int] = {
    "k": 10**3, "thousand": 10**3, "m": 10**6, "million": 10**6,
    "b": 10**9, "g": 10**9, "billion": 10**9, "t": 10**12, "trillion": 10**12,
    "千": 10**3, "万": 10**4, "百万": 10**6, "千万": 10**7, "亿": 10**8,
}
_RATIO = {"x", "×", "倍", "times"}
_PERCENT = {"%", "percent"}

_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)*"
_WORD_UNIT = r"(?:x|X|times|percent|thousand|million|billion|trillion|[KkMBbGT])(?![A-Za-z])"
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
