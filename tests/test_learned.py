"""The learned relevance decision: its features, its trainer, the shipped model and the switch."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
from labelled import Example, load

from digest.analyze.classify import (
    Classification,
    classify,
    classify_items,
    decide,
    is_borderline,
    is_community,
    layers_of,
    news_margin,
    relevance_distance,
)
from digest.analyze.learned import FEATURES, features, load_model, model_from, probability
from digest.analyze.taxonomy import Taxonomy, default_taxonomy_path, load_taxonomy
from digest.domain.errors import ConfigError
from digest.domain.items import Item
from digest.domain.layers import LAYER_IDS
from tests.bench_modules import bench_module

ROOT = Path(__file__).resolve().parent.parent
MODEL = "relevance_model.json"


@pytest.fixture(scope="module")
def trainer() -> ModuleType:
    return bench_module("train_relevance")


def test_features_of_a_hand_made_classification() -> None:
    totals = {"core": 5.0, "prior": 3.0, "prior_decides": 1.0, "negative": 2.0,
              "layer_evidence": 1.5, "subject": 4.0, "community": 0.0, "roundup": 0.0,
              "novelty": 0.5, "kernel_codegen": 3.0, "kernel_codegen.specific": 2.0,
              "kind.blog": 1.0}
    verdict = Classification(True, 0.5, ("kernel_codegen",),
                             {"figures": ["2.5x", "30%"], "measures": ["38 minutes"]}, totals)
    values = dict(zip(FEATURES, features(verdict.totals, verdict.evidence, -0.5), strict=True))
    assert len(values) == len(FEATURES) == 9 + len(LAYER_IDS) + 3 + 1
    assert values["news"] == 0.0 and values["distance"] == -0.5 / 3, "the rules' verdict, clipped"
    assert values["core"] == 3.5 / 6.5, "the text's own evidence (prior apart) as a share"
    assert values["negative"] == 2.0 / 6.5
    assert values["prior_decides"] == 1.0, "the part of the prior that may decide"
    assert values["subject"] == 1 - math.exp(-4 / 3) and values["novelty"] == 1 - math.exp(-0.5 / 3)
    assert values["kernel_codegen.specific"] == 1 - math.exp(-2 / 3)
    assert "kernel_codegen" not in values, "a layer's whole-text total grows with length"
    assert values["kind.blog"] == 1.0 and values["kind.arxiv"] == values["kind.release"] == 0.0
    assert values["figures"] == 2 / 3
    assert values["runtime.specific"] == values["roundup"] == 0.0, "a missing total is no evidence"
    assert features(totals, verdict.evidence, 0.0)[FEATURES.index("news")] == 1.0


def test_the_features_do_not_grow_with_the_evidence() -> None:
    """However long a text (however much evidence), every feature stays bounded."""
    for scale in (1.0, 10.0, 1000.0):
        totals = {"core": 5.0 * scale, "negative": 2.0 * scale, "layer_evidence": 3.0,
                  "subject": 4.0 * scale, "novelty": scale, "kernel_codegen.specific": scale}
        values = features(totals, {"figures": ["1x"] * int(scale)}, 3.0 * scale)
        assert all(-1.0 <= v <= 1.0 for v in values)
    share = FEATURES.index("core")
    assert features({"core": 4.0, "negative": 1.0}, {}, 0.0)[share] < features(
        {"core": 40.0, "negative": 10.0}, {}, 0.0)[share] < 1.0, "a share, towards 1"


def test_the_classifier_records_each_entry_kind(taxonomy: Taxonomy) -> None:
    paper = Item(1, "arxiv-cs.pl", "arXiv", 0.6, "arxiv", "An MLIR compiler", "A compiler.", None)
    release = replace(paper, entry_id=2, kind="github-releases", source_key="gh-llvm")
    assert classify(paper, taxonomy).totals["kind.arxiv"] == 1.0
    both = classify(paper, taxonomy).totals.keys() & {"kind.blog", "kind.release"}
    assert not both
    event = classify_items([paper, release], taxonomy).totals
    assert event["kind.arxiv"] == event["kind.release"] == 1.0 and "kind.blog" not in event


def _fixture() -> list[Example]:
    """A small labelled fixture: compiler work, and ML or systems work that is not."""
    relevant = ["An MLIR dialect for sparse tensors", "Triton kernels for attention on H100",
                "LLVM loop vectorizer cost model", "TVM autotuning with a learned cost model",
                "torch.compile graph breaks in Dynamo", "A polyhedral compiler for tensor programs",
                "XLA sharding propagation for SPMD", "Clang diagnostics for C++20 modules",
                "CUTLASS 4.0 adds a Python DSL for kernels", "Halide schedules for image pipelines"]
    other = ["A faster optimizer for LLM fine-tuning", "Reward models for RLHF",
             "Medical image segmentation with transformers", "A survey of diffusion models",
             "Office hours and the community calendar", "Our board of directors for 2025",
             "Speech recognition on edge devices", "A dataset of chest X-rays",
             "Federated learning under privacy budgets", "A new GPU cluster for our lab"]
    return [Example(t, f"{t}. We describe the work.", "arxiv", i < len(relevant),
                    frozenset({"optimization"}) if i < len(relevant) else frozenset(), "dev",
                    "arxiv-cs.pl", f"fixture-{i}")
            for i, t in enumerate([*relevant, *other])]


def test_the_trainer_is_deterministic(trainer: ModuleType, taxonomy: Taxonomy) -> None:
    examples = _fixture()

    def once() -> dict[str, object]:
        rows = trainer.rows_of(examples, taxonomy)
        doc: dict[str, object] = trainer.train(examples, rows,
                                               trainer.copies_of(examples, taxonomy), "fixture")
        return doc

    first, again = once(), once()
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    assert first["training_size"] == 20 and first["features"] == list(FEATURES)
    assert first["lambda"] in trainer.LAMBDAS and first["threshold"] in trainer.THRESHOLDS
    model = model_from(first)
    rows = trainer.rows_of(examples, taxonomy)
    fitted = [model.probability(row.x) >= model.threshold for row in rows]
    assert sum(f == row.y for f, row in zip(fitted, rows, strict=True)) >= 18, "it learns the fixture"


def test_the_trainer_adds_shorter_copies_with_the_same_label(trainer: ModuleType,
                                                             taxonomy: Taxonomy) -> None:
    long, short = (Example("An MLIR dialect", "MLIR sparse tensor compiler. " * n, "arxiv", True,
                           frozenset({"tensor_ir"}), "dev", "arxiv-cs.pl", f"x{n}")
                   for n in (90, 10))
    assert len(long.summary) > max(trainer.AUGMENT_CUTS) > len(short.summary)
    copies = trainer.copies_of([long, short], taxonomy)
    assert len(copies[0]) == len(trainer.AUGMENT_CUTS) and copies[1] == []
    assert all(row.y for row in copies[0]), "a shorter copy of the same post is the same news"
    assert trainer.cut(long, 100).summary == long.summary[:100]
    probes = trainer.probes_of([long, short], taxonomy, (500,))
    assert list(probes[500]) == [0], "the length check cuts the entries longer than the cut"


def test_the_fit_finds_the_direction_and_is_regularised(trainer: ModuleType) -> None:
    xs, ys = [[0.0], [1.0], [2.0], [3.0]], [False, False, True, True]
    weak, strong = trainer.fit(xs, ys, 0.01), trainer.fit(xs, ys, 1.0)
    assert weak["weights"][0] > strong["weights"][0] > 0
    assert trainer.fit(xs, ys, 0.01) == weak, "the same numbers bit for bit"
    probs = trainer.probabilities(weak, xs)
    assert probs[0] < 0.5 < probs[3]


def test_the_shipped_model_loads_and_matches_the_features() -> None:
    model = load_model(MODEL)
    assert model.features == FEATURES
    assert len(model.means) == len(model.scales) == len(model.weights) == len(FEATURES)
    assert 0 < model.threshold < 1 and 0 < model.band < 0.5
    assert load_model(MODEL) is model, "read once"
    data = json.loads((ROOT / "digest" / "data" / MODEL).read_text(encoding="utf-8"))
    assert data["training_set"] == "dev+outside-tune" and data["training_size"] == 468
    assert data["augment_cuts"] == [1000, 2000] and data["training_copies"] > 0
    assert all(c["learned_lost"] <= c["rules_lost"] for c in data["cv"]["length"]), (
        "cut shorter, the model keeps its verdict at least as often as the rules")
    assert "final" not in json.dumps(data), "never trained or measured on a final half"
    cv = data["cv"]
    assert cv["learned"]["relevance_f1"] > cv["rules"]["relevance_f1"]
    assert list(data) == sorted(data), "sorted keys: the file is reproducible"


def test_a_model_that_does_not_fit_is_a_config_error(tmp_path: Path) -> None:
    good = json.loads((ROOT / "digest" / "data" / MODEL).read_text(encoding="utf-8"))
    with pytest.raises(ConfigError, match="features are not this version's"):
        model_from({**good, "features": good["features"][:-1]})
    with pytest.raises(ConfigError, match="must match the features"):
        model_from({**good, "weights": good["weights"][:-1]})
    with pytest.raises(ConfigError, match="missing or malformed"):
        model_from({k: v for k, v in good.items() if k != "bias"})
    with pytest.raises(ConfigError, match="must be a file name"):
        load_model("../relevance_model.json")
    with pytest.raises(ConfigError, match="cannot read"):
        load_model("no_such_model.json")
    text = default_taxonomy_path().read_text(encoding="utf-8")
    assert 'model = ""' in text
    switched_on = tmp_path / "on.toml"
    switched_on.write_text(text.replace('model = ""', f'model = "{MODEL}"'), encoding="utf-8")
    assert load_taxonomy(switched_on).model is load_model(MODEL), "the file turns it on"
    broken = tmp_path / "taxonomy.toml"
    broken.write_text(text.replace('model = ""', "model = 3"), encoding="utf-8")
    with pytest.raises(ConfigError, match="model must be a file name"):
        load_taxonomy(broken)


def test_with_the_switch_off_the_verdicts_are_the_rules(taxonomy: Taxonomy) -> None:
    assert taxonomy.model is None, "shipped off (see taxonomy.toml: it lost on sources left out)"
    for example in load()[::3]:
        verdict = classify(example.item(), taxonomy)
        rules = decide(verdict.totals, taxonomy, relevance_distance(verdict.totals, taxonomy) >= 0)
        assert (verdict.relevant, verdict.relevance, verdict.layers) == rules
        assert news_margin(verdict.totals, verdict.evidence, taxonomy) == relevance_distance(
            verdict.totals, taxonomy)


def test_with_the_switch_on_the_model_decides_and_the_rules_keep_the_layers(
        taxonomy: Taxonomy) -> None:
    learned = replace(taxonomy, model=load_model(MODEL))
    assert learned.model is not None
    differ = 0
    for example in load()[::2]:
        verdict = classify(example.item(), learned)
        distance = relevance_distance(verdict.totals, learned)
        p = probability(verdict.totals, verdict.evidence, distance, learned.model)
        news = p >= learned.model.threshold and not is_community(verdict.totals, learned)
        assert (verdict.relevant, verdict.layers) == decide(verdict.totals, learned, news)[::2]
        assert verdict.layers in ((), layers_of(verdict.totals, learned)), "the rules' layers"
        differ += verdict.relevant != classify(example.item(), taxonomy).relevant
    assert differ == 0 or differ < len(load()) // 4


def test_with_the_model_borderline_means_near_its_threshold(taxonomy: Taxonomy) -> None:
    learned = replace(taxonomy, model=load_model(MODEL))
    assert learned.model is not None
    seen = {True: 0, False: 0}
    for example in load():
        verdict = classify(example.item(), learned)
        margin = news_margin(verdict.totals, verdict.evidence, learned)
        eligible = bool(layers_of(verdict.totals, learned)) and not is_community(
            verdict.totals, learned)
        borderline = is_borderline(verdict, learned)
        assert borderline is (eligible and abs(margin) < learned.model.band)
        seen[borderline] += 1
        assert not is_borderline(verdict, replace(learned, triage_band=0.0)), "0 turns triage off"
    assert seen[True] and seen[False], "some close calls, most not"
