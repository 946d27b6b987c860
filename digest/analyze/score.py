"""Score an event 0–100 with a breakdown whose points sum exactly to the score.

Components (points up to the weight of each):

- authority      the best source's authority weight (0..1)
- relevance      the classifier's relevance strength (0..1)
- breadth        how many compiler-stack layers the event touches, with steeply
                 diminishing returns (a second layer pays half the first, a third a
                 quarter, full at three): a mis-tag costs little
- quantitative   the results the sources state (``figures.results``): one with a
                 baseline (before -> after, "than X", "within 3% of X") counts 1, one
                 without, or against a weak baseline (eager mode, CPU-only), counts 1/2,
                 and those together at most half the points; each figure counts once
- novelty        impact and firsts: the taxonomy's [novelty] phrases (a breaking
                 change, a migration, a new default, "the first ...") plus a feature
                 release (a GitHub release or a titled "Name X.Y" announcement whose
                 version is X.Y or X.Y.0); a bug-fix release (X.Y.Z, Z > 0) adds nothing
- corroboration  how many distinct publishers report it (arXiv cross-lists count once)
- prerelease     negative: pre-releases and nightlies lose a share of their points

The weights follow what a compiler engineer reads first (tests/test_expert_order.py
checks the order of the sample and real days against an expert's ranking): what
downstream users must act on, and results measured against a named baseline, before
breadth of tagging.

Points are computed in tenths (integers), so the breakdown sums exactly to the
score; the rounding residue goes to the components rounding moved furthest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from digest.analyze.classify import Classification, is_prerelease
from digest.analyze.figures import Result, results
from digest.domain.errors import ConfigError
from digest.domain.items import Item

COMPONENTS = (
    "authority", "relevance", "breadth", "quantitative", "novelty", "corroboration", "prerelease",
)
# Baselines any compiler beats: a result against them says little about the compiler.
_WEAK_BASELINE = re.compile(
    r"\b(?:eager|cpu[- ]only|naive|unoptimi[sz]ed|no optimi[sz]ations?|interpret(?:er|ed))\b|-O0\b",
    re.IGNORECASE)
# "Helion 0.3: ...", "CUTLASS 4.3: ...", "Triton 3.6.0 release", "LLVM 21.1.8": a name, then
# its version, then the end, a colon, a comma or "release"
_TITLE_VERSION = re.compile(
    r"(?:^|\s)[A-Z][\w+#-]*\s+v?(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?"
    r"(?=\s*(?:$|[:,;(]|[-–—]\s|release\b))")
_TAG_VERSION = re.compile(r"(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?(?!.*\d+\.\d+)")


@dataclass(frozen=True)
class ScoreWeights:
    """Maximum points per component (the six sum to 100) and the scoring scales."""

    authority: float = 15.0
    relevance: float = 20.0
    breadth: float = 5.0
    quantitative: float = 15.0
    novelty: float = 25.0
    corroboration: float = 20.0
    full_breadth_layers: int = 3
    full_quantitative_signals: int = 2
    full_novelty: float = 2.0
    full_corroboration_sources: int = 3
    release_novelty: float = 1.5
    prerelease_penalty: float = 0.6

    def __post_init__(self) -> None:
        if self.total > 100.0 + 1e-9:
            raise ConfigError(f"score weights sum to {self.total:g}; at most 100 allowed")

    @classmethod
    def from_mapping(cls, values: Mapping[str, float]) -> ScoreWeights:
        """Weights from settings (e.g. ``{"novelty": 5}``); raise ConfigError on a bad name."""
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"unknown score weight(s): {', '.join(unknown)}")
        bad = [k for k, v in values.items() if isinstance(v, bool) or not isinstance(v, int | float)
               or v < 0]
        if bad:
            raise ConfigError(f"score weight(s) must be non-negative numbers: {', '.join(bad)}")
        ints = {"full_breadth_layers", "full_quantitative_signals", "full_corroboration_sources"}
        kwargs: dict[str, Any] = {k: int(v) if k in ints else float(v) for k, v in values.items()}
        return cls(**kwargs)

    @property
    def total(self) -> float:
        """The most points an event can get."""
        return (self.authority + self.relevance + self.breadth + self.quantitative
                + self.novelty + self.corroboration)


@dataclass(frozen=True)
class ScoreResult:
    """The score (one decimal) and its breakdown per component (one decimal each)."""

    score: float
    breakdown: dict[str, float]


def publishers(items: Sequence[Item]) -> set[str]:
    """Distinct publishers: every arXiv listing is one publisher, other sources by key."""
    return {"arxiv" if item.kind == "arxiv" else item.source_key for item in items}


def _fraction(value: float, full: float) -> float:
    return 0.0 if full <= 0 else max(0.0, min(1.0, value / full))


def _breadth(layers: int, full: int) -> float:
    """The share of breadth points: 1/2 for one layer, then 1/4, 1/8... normalised at ``full``."""
    if full <= 0:
        return 0.0
    return _fraction(1.0 - 0.5 ** layers, 1.0 - 0.5 ** full)


def stated_results(items: Sequence[Item]) -> dict[str, float]:
    """Each distinct result value the items state, at the weight of its best statement.

    A blog's excerpt repeats its body and an abstract may state a figure twice ("1.35x
    faster", "1.35x over CUTLASS 4.2"): a figure counts once, with its baseline if any
    statement gives one.
    """
    found: dict[str, float] = {}
    for text in dict.fromkeys(item.text for item in items):
        for result in results(text):
            found[result.value] = max(found.get(result.value, 0.0), result_weight(result))
    return found


def result_weight(result: Result) -> float:
    """1 for a result with a real baseline, 1/2 without one or against a weak one."""
    if result.before or (result.baseline and not _WEAK_BASELINE.search(result.baseline)):
        return 1.0
    return 0.5


def quantitative_credit(weights: Sequence[float], full: int) -> float:
    """Results with a baseline count in full; the others together at most half of ``full``."""
    strong = sum(w for w in weights if w >= 1.0)
    return strong + min(sum(w for w in weights if w < 1.0), full / 2)


def release_version(item: Item) -> tuple[int, int, int] | None:
    """The version a release or a release announcement names: (major, minor, patch)."""
    match = None
    if item.kind == "github-releases" and item.tag:
        match = _TAG_VERSION.search(item.tag)
    if match is None:
        match = _TITLE_VERSION.search(item.title)
    if match is None:
        return None
    return int(match["major"]), int(match["minor"]), int(match["patch"] or 0)


def is_feature_release(item: Item) -> bool:
    """A stable X.Y (or X.Y.0) release: new features, unlike a bug-fix X.Y.Z or a pre-release."""
    version = release_version(item)
    return version is not None and version[2] == 0 and not is_prerelease(item)


def _raw_points(
    items: Sequence[Item], classification: Classification, w: ScoreWeights
) -> dict[str, float]:
    novelty = classification.totals.get("novelty", 0.0)
    if any(is_feature_release(i) for i in items):
        novelty += w.release_novelty
    quantitative = quantitative_credit(list(stated_results(items).values()),
                                       w.full_quantitative_signals)
    return {
        "authority": w.authority * _fraction(max(i.source_weight for i in items), 1.0),
        "relevance": w.relevance * _fraction(classification.relevance, 1.0),
        "breadth": w.breadth * _breadth(len(classification.layers), w.full_breadth_layers),
        "quantitative": w.quantitative * _fraction(quantitative, w.full_quantitative_signals),
        "novelty": w.novelty * _fraction(novelty, w.full_novelty),
        "corroboration": w.corroboration * _fraction(
            len(publishers(items)), w.full_corroboration_sources),
    }


def _tenths(points: Mapping[str, float]) -> dict[str, int]:
    """Round each component to tenths so that they sum to the rounded total.

    The residue goes, a tenth at a time, to the components that rounding moved
    furthest from their exact value (largest remainder; the larger component
    on a tie), so no component ever passes its maximum.
    """
    exact = {name: value * 10 for name, value in points.items()}
    tenths = {name: round(value) for name, value in exact.items()}
    residue = round(sum(exact.values())) - sum(tenths.values())
    step = 1 if residue > 0 else -1
    for _ in range(abs(residue)):
        name = max(tenths, key=lambda n: (step * (exact[n] - tenths[n]), abs(tenths[n]), n))
        tenths[name] += step
    return tenths


def score(
    items: Sequence[Item],
    classification: Classification,
    weights: ScoreWeights = ScoreWeights(),
) -> ScoreResult:
    """Score an event's items 0..100 (one decimal) with a breakdown summing exactly to it."""
    if not items:
        raise ValueError("score needs at least one item")
    points = _raw_points(items, classification, weights)
    penalised = all(is_prerelease(i) for i in items)
    share = _fraction(weights.prerelease_penalty, 1.0) if penalised else 0.0
    points["prerelease"] = -sum(points.values()) * share
    tenths = _tenths(points)
    breakdown = {name: tenths[name] / 10 for name in COMPONENTS}
    return ScoreResult(sum(tenths.values()) / 10, breakdown)
