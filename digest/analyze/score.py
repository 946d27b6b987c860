"""Score an event 0–100 with a breakdown whose points sum exactly to the score.

Components (points up to the weight of each):

- authority      the best source's authority weight (0..1)
- relevance      the classifier's relevance strength (0..1)
- breadth        how many compiler-stack layers the event touches, with diminishing
                 returns (each further layer pays half the one before: a mis-tag
                 costs little)
- quantitative   speed-ups, percentages, measured times, rates and sizes ("38
                 minutes", "1,450 TFLOPS", "12 GB") and roofline/throughput/latency
- novelty        firsts, new things and impact: a breaking change, a migration, a
                 major release, a new default (taxonomy [novelty]; not hardware names)
- corroboration  how many distinct publishers report it (arXiv cross-lists count once)
- prerelease     negative: pre-releases and nightlies lose a share of their points

Points are computed in tenths (integers), so the breakdown sums exactly to the
score; the rounding residue goes to the components rounding moved furthest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from digest.analyze.classify import Classification, is_prerelease
from digest.domain.errors import ConfigError
from digest.domain.items import Item

COMPONENTS = (
    "authority", "relevance", "breadth", "quantitative", "novelty", "corroboration", "prerelease",
)
_QUANT_WORDS = ("roofline", "throughput", "latency")


@dataclass(frozen=True)
class ScoreWeights:
    """Maximum points per component (the six sum to 100) and the scoring scales."""

    authority: float = 20.0
    relevance: float = 20.0
    breadth: float = 20.0
    quantitative: float = 15.0
    novelty: float = 10.0
    corroboration: float = 15.0
    full_breadth_layers: int = 6
    full_quantitative_signals: int = 4
    full_novelty: float = 2.0
    full_corroboration_sources: int = 3
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


def _quantitative_signals(classification: Classification) -> int:
    evidence = classification.evidence
    figures = len(evidence.get("figures", [])) + len(evidence.get("measures", []))
    words = {w for lid in ("benchmark", "runtime") for w in classification.evidence.get(lid, [])}
    named = sum(w in words for w in _QUANT_WORDS if w == "roofline" or figures)
    return figures + named


def _raw_points(
    items: Sequence[Item], classification: Classification, w: ScoreWeights
) -> dict[str, float]:
    novelty = classification.totals.get("novelty", 0.0)
    return {
        "authority": w.authority * _fraction(max(i.source_weight for i in items), 1.0),
        "relevance": w.relevance * _fraction(classification.relevance, 1.0),
        "breadth": w.breadth * _breadth(len(classification.layers), w.full_breadth_layers),
        "quantitative": w.quantitative * _fraction(
            _quantitative_signals(classification), w.full_quantitative_signals),
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
