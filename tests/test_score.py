"""Scoring: 0..100 with one decimal, a breakdown that sums exactly, sensible monotonicity."""

from __future__ import annotations

import random
from dataclasses import replace
from itertools import pairwise

import pytest

from digest.analyze.classify import Classification, classify
from digest.analyze.score import (
    COMPONENTS,
    ScoreWeights,
    is_feature_release,
    publishers,
    release_version,
    score,
    stated_results,
)
from digest.analyze.taxonomy import load_taxonomy
from digest.domain.errors import ConfigError
from digest.domain.items import Item
from digest.domain.layers import LAYER_IDS


def item(entry_id: int = 1, *, key: str = "arxiv-cs.pl", kind: str = "arxiv",
         weight: float = 0.7, title: str = "t", text: str = "s", **extra: object) -> Item:
    return Item(entry_id, key, key, weight, kind, title, text, None, **extra)  # type: ignore[arg-type]


def verdict(layers: int = 3, relevance: float = 0.8, figures: int = 0,
            novelty: float = 0.0, words: tuple[str, ...] = ()) -> Classification:
    evidence = {"figures": [f"{n + 1}.5x" for n in range(figures)], "benchmark": list(words)}
    return Classification(True, relevance, LAYER_IDS[:layers], evidence, {"novelty": novelty})


def tenths(value: float) -> int:
    return round(value * 10)


def assert_well_formed(points: float, breakdown: dict[str, float]) -> None:
    assert tuple(breakdown) == COMPONENTS
    assert 0 <= points <= 100
    assert abs(tenths(points) - points * 10) < 1e-6
    assert all(abs(v * 10 - tenths(v)) < 1e-6 for v in breakdown.values())
    assert sum(tenths(v) for v in breakdown.values()) == tenths(points)
    assert round(sum(breakdown.values()), 1) == points


def test_breakdown_sums_exactly_to_the_score_for_many_inputs() -> None:
    rng = random.Random(3)
    for _ in range(500):
        items = [item(i, key=rng.choice(["a", "b", "c", "d"]), kind=rng.choice(["arxiv", "rss"]),
                      weight=rng.random(), prerelease=rng.random() < 0.2) for i in range(1, 4)]
        result = score(items, verdict(rng.randint(0, 9), rng.random(), rng.randint(0, 6),
                                      rng.random() * 3))
        assert_well_formed(result.score, result.breakdown)


def test_rounding_residue_goes_where_rounding_cut_most() -> None:
    weights = ScoreWeights(authority=33.33, relevance=33.33, breadth=33.33, quantitative=0,
                           novelty=0, corroboration=0)
    result = score([item(weight=0.55)], verdict(layers=6, relevance=0.55), weights)
    assert_well_formed(result.score, result.breakdown)
    # 18.33 + 18.33 + 33.33 = 69.99: the rounded parts give 69.9; authority and relevance
    # lost 0.03 each, breadth nothing: the tenth goes to one of the tied two (by name: relevance)
    assert result.score == 70.0
    assert result.breakdown["relevance"] == 18.4 and result.breakdown["breadth"] == 33.3


def test_a_full_component_never_passes_its_maximum() -> None:
    rng = random.Random(5)
    for _ in range(300):
        result = score([item(weight=rng.random())], verdict(rng.randint(0, 9), rng.random(),
                                                            rng.randint(0, 6), 3.0))
        weights = ScoreWeights()
        for name in ("authority", "relevance", "breadth", "quantitative", "novelty"):
            assert result.breakdown[name] <= getattr(weights, name)


def test_score_is_deterministic() -> None:
    items = [item(1), item(2, key="nvidia", kind="rss", weight=0.8)]
    assert score(items, verdict()) == score(list(items), verdict())


def test_components_grow_with_their_evidence() -> None:
    base = score([item()], verdict(layers=2, figures=0))
    assert score([item(weight=0.9)], verdict(layers=2)).breakdown["authority"] > (
        base.breakdown["authority"])
    assert score([item()], verdict(layers=6)).breakdown["breadth"] > base.breakdown["breadth"]
    measured = item(text="Compile time drops from 38 minutes to 6 minutes.")
    assert score([measured], verdict(layers=2)).breakdown["quantitative"] > 0
    assert base.breakdown["quantitative"] == 0.0
    assert score([item()], verdict(layers=2, novelty=2)).breakdown["novelty"] == 25.0
    many = [item(1), item(2, key="nvidia", kind="rss"), item(3, key="pytorch", kind="rss")]
    assert score(many, verdict(layers=2)).breakdown["corroboration"] == 20.0


def test_arxiv_cross_lists_are_one_publisher() -> None:
    assert publishers([item(1, key="arxiv-cs.pl"), item(2, key="arxiv-cs.ar")]) == {"arxiv"}
    one = score([item(1, key="arxiv-cs.pl")], verdict())
    two = score([item(1, key="arxiv-cs.pl"), item(2, key="arxiv-cs.ar")], verdict())
    assert one == two


def test_prereleases_score_low_and_still_sum() -> None:
    release = item(kind="github-releases", key="gh-triton", weight=0.8, repo="o/r", tag="v3.0.0")
    nightly = replace(release, tag="nightly-20260901")
    full = score([release], verdict())
    low = score([nightly], verdict())
    assert low.breakdown["prerelease"] < 0
    assert full.breakdown["prerelease"] == 0
    assert low.score < full.score * 0.5
    assert_well_formed(low.score, low.breakdown)
    stable_joined = score([nightly, release], verdict())
    assert stable_joined.breakdown["prerelease"] == 0


def test_weights_default_to_100_and_can_be_overridden() -> None:
    assert ScoreWeights().total == 100
    custom = ScoreWeights.from_mapping({"novelty": 5, "corroboration": 20,
                                        "full_breadth_layers": 4})
    assert custom.novelty == 5.0 and custom.full_breadth_layers == 4
    assert score([item()], verdict(layers=4), custom).breakdown["breadth"] == 5.0
    assert score([item()], verdict(layers=3), custom).breakdown["breadth"] < 5.0
    with pytest.raises(ConfigError, match="unknown score weight"):
        ScoreWeights.from_mapping({"popularity": 3})
    with pytest.raises(ConfigError, match="non-negative"):
        ScoreWeights.from_mapping({"novelty": -1})
    with pytest.raises(ConfigError, match="at most 100"):
        ScoreWeights.from_mapping({"novelty": 50})


def test_real_classification_scores_relevant_news_higher() -> None:
    taxonomy = load_taxonomy()
    strong = Item(1, "arxiv-cs.pl", "arXiv", 0.7, "arxiv", "A Triton compiler for Blackwell",
                  "We present the first MLIR-based Triton backend for Blackwell SM100, generating "
                  "PTX; it reaches 1.5x, 2.1x and 3.0x speedups on GEMM, attention and MoE.", None)
    weak = replace(strong, title="An LLVM pass", summary="A small pass in LLVM.")
    assert score([strong], classify(strong, taxonomy)).score > (
        score([weak], classify(weak, taxonomy)).score)
    with pytest.raises(ValueError):
        score([], classify(strong, taxonomy))


# --- breadth with diminishing returns, measured quantities, novelty without footers


def test_breadth_has_diminishing_returns_so_a_mis_tag_costs_little() -> None:
    weights = ScoreWeights()
    points = [score([item()], verdict(layers=n)).breakdown["breadth"] for n in range(7)]
    gains = [b - a for a, b in pairwise(points)]
    full = weights.full_breadth_layers
    assert points[0] == 0.0 and points[full:] == [weights.breadth] * (7 - full)
    assert all(later < earlier for earlier, later in pairwise(gains[:full]))
    assert gains[1] <= gains[0] / 2 + 0.1, "a second (perhaps wrong) layer pays half the first"
    assert max(gains[1:]) <= 1.5, "a mis-tag moves an event by little"


def _classified(text: str) -> Classification:
    return classify(Item(1, "blog", "blog", 0.5, "rss", "Faster builds", text, None), TAXONOMY)


TAXONOMY = load_taxonomy()


def test_minutes_and_tflops_are_quantitative() -> None:
    text = ("Our compiler cut compile time from 38 minutes to 6 minutes. The generated GEMM kernels "
            "reach 1,450 TFLOPS, within 3% of the hand-tuned C++ kernel.")
    result = score([item(text=text)], _classified(text))
    assert result.breakdown["quantitative"] == ScoreWeights().quantitative
    assert_well_formed(result.score, result.breakdown)


def _quantitative(text: str) -> float:
    return score([item(text=text)], verdict()).breakdown["quantitative"]


def test_a_result_with_a_baseline_counts_more_than_a_bare_or_weak_one() -> None:
    baseline = _quantitative("Kernels run 1.8x faster than cuBLAS on H100.")
    bare = _quantitative("Kernels run 1.8x faster on H100.")
    weak = _quantitative("Kernels run 1.8x faster than eager mode on H100.")
    assert baseline > bare == weak > 0


def test_results_without_a_baseline_earn_at_most_half_however_many() -> None:
    many = _quantitative("It is 6.2x faster on GEMV, 3.1x faster on attention and 2.4x faster "
                         "on decoding relative to CPU-only execution, and 1.9x faster on scans.")
    assert many == ScoreWeights().quantitative / 2
    assert _quantitative("Cold start drops from 23 minutes to 2.8 minutes. Start-up goes from "
                         "96 seconds to 21 seconds.") == ScoreWeights().quantitative


def test_a_figure_stated_twice_counts_once() -> None:
    excerpt = "CUTLASS 4.3 makes MoE layers up to 1.35x faster."
    body = "MoE layers are up to 1.35x faster on B200 than CUTLASS 4.2."
    twice = item(kind="rss", key="nvidia-blog", text=excerpt, body=body)
    assert stated_results([twice]) == {"1.35x": 1.0}
    assert stated_results([twice, twice]) == {"1.35x": 1.0}


@pytest.mark.parametrize(("title", "tag", "version", "feature"), [
    ("Triton 3.6.0 release", "v3.6.0", (3, 6, 0), True),
    ("LLVM 21.1.8", "llvmorg-21.1.8", (21, 1, 8), False),
    ("Triton 3.6.0 release candidate 1", "v3.6.0-rc1", (3, 6, 0), False),
    ("Helion 0.3: CuTe DSL and Pallas Back Ends", None, (0, 3, 0), True),
    ("CUTLASS 4.3: Grouped GEMM Autotuning", None, (4, 3, 0), True),
    ("A GEMM that JIT-compiles in 1.2 seconds", None, None, False),
    ("Mixtral 8x7B runs 1.8x faster", None, None, False),
])
def test_a_feature_release_is_impact_and_a_bug_fix_release_is_not(
        title: str, tag: str | None, version: tuple[int, int, int] | None, feature: bool) -> None:
    kind = "github-releases" if tag else "rss"
    release = item(kind=kind, key="gh-x", title=title, tag=tag)
    assert release_version(release) == version
    assert is_feature_release(release) is feature
    novelty = score([release], verdict()).breakdown["novelty"]
    assert (novelty > 0) is feature


@pytest.mark.parametrize("text", [
    "We ported our compiler to MLIR. The post Porting to MLIR appeared first on PyTorch.",
    "Our compiler now generates code for H100, B200, GB300, MI355X and Blackwell GPUs.",
])
def test_footers_and_hardware_names_are_no_novelty(text: str) -> None:
    verdict_ = _classified(text)
    assert verdict_.totals["novelty"] == 0.0
    assert score([item()], verdict_).breakdown["novelty"] == 0.0


def test_a_first_is_still_novel() -> None:
    assert _classified("The first open-source compiler for photonic chips.").totals["novelty"] > 0


def test_impact_signals_count_as_novelty() -> None:
    """A breaking change every downstream compiler must migrate to is worth reading first."""
    breaking = _classified("MLIR's bufferization API has a breaking change: downstream compilers "
                           "must migrate to the new interface; the old one is deprecated.")
    plain = _classified("MLIR's bufferization interface got a small cleanup.")
    assert breaking.totals["novelty"] > plain.totals["novelty"] == 0.0
    assert score([item()], breaking).breakdown["novelty"] > score([item()], plain).breakdown["novelty"]
