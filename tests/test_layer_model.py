"""The learned layer choice: the shipped model, its inputs, and what it may and may not change."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from labelled import count, load, predict

from digest.analyze.classify import (
    Classification,
    classified_text,
    classify,
    classify_items,
    layer_inputs,
    layers_of,
    relevance_distance,
    rules_layers,
    with_verdict,
)
from digest.analyze.layer_model import TEXT_CHARS, LayerModel, load_layer_model, model_from, words
from digest.analyze.taxonomy import Taxonomy, default_taxonomy_path, load_taxonomy
from digest.domain.errors import ConfigError
from digest.domain.items import Item
from digest.domain.layers import LAYER_IDS
from tests.bench_modules import bench_module
from tests.items import blog_item

ROOT = Path(__file__).resolve().parent.parent
MODEL = "layer_model.json"


@pytest.fixture(scope="module")
def rules(taxonomy: Taxonomy) -> Taxonomy:
    return replace(taxonomy, layer_model=None)


def test_the_shipped_taxonomy_chooses_layers_with_the_shipped_model(taxonomy: Taxonomy) -> None:
    model = load_layer_model(MODEL)
    assert taxonomy.layer_model is model, "read once, named by the taxonomy"
    assert 0 < model.threshold < 1
    assert set(model.weights) == set(model.biases) == set(LAYER_IDS)
    data = json.loads((ROOT / "digest" / "data" / MODEL).read_text(encoding="utf-8"))
    assert list(data) == sorted(data), "sorted keys: a retrain is comparable line by line"
    assert data["training_size"] == sum(data["training_sets"].values())
    quality = bench_module("quality")
    assert {"double-6", "double-8"} <= set(data["training_sets"]), "the two-reader sets of stop 25"
    assert not (quality.NEVER_TRAINED | quality.NOT_YET_TRAINED) & set(data["training_sets"]), (
        "never a set nobody tuned on, nor one not yet trained on")
    for lid in LAYER_IDS:
        names = model.weights[lid]
        assert any(n.startswith("w:") for n in names) and any(n.startswith("p:") for n in names)
        assert "rules" in names and "share" in names


def test_a_malformed_model_is_a_config_error(tmp_path: Path) -> None:
    good = json.loads((ROOT / "digest" / "data" / MODEL).read_text(encoding="utf-8"))
    assert model_from(good).threshold == good["threshold"]
    with pytest.raises(ConfigError, match="a model for each of"):
        model_from({**good, "layers": {k: v for k, v in good["layers"].items() if k != "runtime"}})
    broken = json.loads(json.dumps(good))
    broken["layers"]["runtime"]["weights"]["w:kernel"] = "heavy"
    with pytest.raises(ConfigError, match="layer runtime needs a numeric bias"):
        model_from(broken)
    for threshold in (0, 1, True, "0.4", None):
        with pytest.raises(ConfigError, match="threshold must be a number between 0 and 1"):
            model_from({**good, "threshold": threshold})
    with pytest.raises(ConfigError, match="must be a file name"):
        load_layer_model("../layer_model.json")
    with pytest.raises(ConfigError, match="cannot read"):
        load_layer_model("no_such_layer_model.json")
    text = default_taxonomy_path().read_text(encoding="utf-8")
    assert f'layer_model = "{MODEL}"' in text
    off = tmp_path / "off.toml"
    off.write_text(text.replace(f'layer_model = "{MODEL}"', 'layer_model = ""'), encoding="utf-8")
    assert load_taxonomy(off).layer_model is None, '"" leaves the layers to the rules'
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(text.replace(f'layer_model = "{MODEL}"', "layer_model = 1"), encoding="utf-8")
    with pytest.raises(ConfigError, match="layer_model must be a file name"):
        load_taxonomy(wrong)


def test_choose_takes_every_layer_over_the_threshold_or_else_the_likeliest() -> None:
    model = LayerModel(0.4, dict.fromkeys(LAYER_IDS, 0.0), {lid: {} for lid in LAYER_IDS})
    assert model.choose({"runtime": 0.5, "frontend": 0.41, "graph_ir": 0.39}) == ("frontend", "runtime")
    assert model.choose({"runtime": 0.2, "frontend": 0.3}) == ("frontend",)
    assert model.choose({"runtime": 0.3, "frontend": 0.3}) == ("frontend",), "ties: the fixed order"
    assert model.choose({}) == ()
    weighted = LayerModel(0.5, dict.fromkeys(LAYER_IDS, -1.0),
                          {lid: {"w:graph": 3.0} if lid == "graph_ir" else {} for lid in LAYER_IDS})
    assert weighted.probability("graph_ir", {"w:graph": 1.0, "w:unknown": 1.0}) > 0.85
    assert weighted.probability("runtime", {"w:graph": 1.0}) < 0.3


def test_the_classifier_records_the_models_probabilities_from_the_trainers_inputs(
        taxonomy: Taxonomy, rules: Taxonomy) -> None:
    """Training and inference read the same numbers: classify.layer_inputs over the same text."""
    model = taxonomy.layer_model
    assert model is not None
    for example in load()[::7]:
        item = example.item()
        verdict = classify(item, taxonomy)
        plain = classify(item, rules)
        inputs = layer_inputs(plain.totals, plain.evidence, classified_text([item]), rules)
        for lid in LAYER_IDS:
            assert verdict.totals[f"learned.{lid}"] == round(model.probability(lid, inputs[lid]), 6)
        if verdict.relevant:
            assert verdict.layers == model.choose(
                {lid: verdict.totals[f"learned.{lid}"] for lid in LAYER_IDS})


def _only_gives_layers_to_layerless_news(item: Item, taxonomy: Taxonomy) -> Classification:
    """Classify ``item`` with and without the model and check what the model may change:
    the rules' relevant stay relevant; a new one is news the rules gave no layer, with
    the layers the model is sure of."""
    verdict = classify(item, taxonomy)
    plain = classify(item, replace(taxonomy, layer_model=None))
    model = taxonomy.layer_model
    assert model is not None
    assert bool(verdict.layers) == verdict.relevant, "relevant: at least one layer"
    if plain.relevant:
        assert verdict.relevant
    elif verdict.relevant:
        assert relevance_distance(plain.totals, taxonomy) >= 0 and not rules_layers(plain.totals, taxonomy)
        assert all(verdict.totals[f"learned.{lid}"] >= model.threshold for lid in verdict.layers)
    return verdict


def test_the_model_takes_no_relevance_away_and_gives_it_only_to_news_without_a_layer(
        taxonomy: Taxonomy, rules: Taxonomy) -> None:
    examples = load()
    for example in examples:
        _only_gives_layers_to_layerless_news(example.item(), taxonomy)
    with_model = predict(examples, taxonomy)
    assert with_model != predict(examples, rules), "the model chooses layers of its own"


# LDC 1.32.2's notes (github.com/ldc-developers/ldc, CHANGELOG.md): compiler news by the rules'
# core evidence ("compile", "LLVM"), spread too thin over the layers' tables for any threshold
RELEASE_NOTES = """Big news

- New command-line option --fwarn-stack-size=<threshold> with LLVM 13+. (#4378)
- New command-line option --fsplit-stack for incremental stack allocations. (#4379)
- New UDA ldc.attributes.noSplitStack disables it on a per-function basis. (#4382)

Bug fixes

- Fix potentially huge compile slowdowns with -g and LLVM 15+. (#4354, #4393)"""


def _sure_of(layers: set[str]) -> LayerModel:
    """A model that is sure of ``layers`` (P 0.99) and of nothing else (P 0.01), whatever the text."""
    return LayerModel(0.35, {lid: 4.6 if lid in layers else -4.6 for lid in LAYER_IDS},
                      {lid: {} for lid in LAYER_IDS})


def test_news_the_rules_give_no_layer_has_the_layers_the_model_is_sure_of_else_it_is_not_relevant(
        rules: Taxonomy) -> None:
    release = blog_item("LDC 1.32.2", RELEASE_NOTES, kind="github-releases")
    plain = classify(release, rules)
    assert relevance_distance(plain.totals, rules) >= 0 and not rules_layers(plain.totals, rules)
    assert not plain.relevant, "the rules alone: news without a layer is not relevant"
    sure = _only_gives_layers_to_layerless_news(
        release, replace(rules, layer_model=_sure_of({"frontend", "kernel_codegen"})))
    assert (sure.relevant, sure.layers) == (True, ("frontend", "kernel_codegen"))
    unsure = _only_gives_layers_to_layerless_news(release, replace(rules, layer_model=_sure_of(set())))
    assert (unsure.relevant, unsure.layers) == (False, ()), "no layer at the threshold: not the likeliest"
    dull = blog_item("Our summer picnic", "Photos of the team picnic and the winners of the raffle.")
    assert not classify(dull, replace(rules, layer_model=_sure_of(set(LAYER_IDS)))).relevant, \
        "a model sure of every layer still cannot make what is not news relevant"


def test_a_triage_promotion_takes_the_models_layers(taxonomy: Taxonomy) -> None:
    item = blog_item("A new pass for loop fusion in MLIR",
                 "We add a loop fusion pass to the MLIR affine dialect and lower fused loops to LLVM IR.")
    verdict = classify(item, taxonomy)
    demoted = with_verdict(verdict, False, taxonomy)
    assert (demoted.relevant, demoted.layers) == (False, ())
    promoted = with_verdict(demoted, True, taxonomy)
    assert promoted.layers == layers_of(verdict.totals, taxonomy) == verdict.layers
    assert verdict.relevant and rules_layers(verdict.totals, taxonomy), "the rules found a layer"


def test_an_event_of_several_entries_reads_all_their_words(taxonomy: Taxonomy) -> None:
    paper = blog_item("Fusing attention kernels", "A Triton kernel generator for fused attention on H100.",
                  kind="arxiv")
    post = blog_item("Serving with CUDA graphs", "The serving runtime captures decode steps in CUDA graphs.")
    together = classify_items([paper, post], taxonomy)
    assert words(classified_text([paper, post])) >= words(classified_text([paper])) | {"serving", "graphs"}
    assert together.totals["learned.runtime"] > classify(paper, taxonomy).totals["learned.runtime"]


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300))
def test_any_text_keeps_the_rules_relevant_and_a_relevant_entry_has_a_layer(text: str) -> None:
    taxonomy = load_taxonomy()
    verdict = _only_gives_layers_to_layerless_news(
        blog_item("Kernel fusion in the MLIR compiler " + text[:40], text), taxonomy)
    assert set(verdict.layers) <= set(LAYER_IDS)


def test_only_the_texts_opening_gives_words_so_a_longer_copy_keeps_its_layers(taxonomy: Taxonomy) -> None:
    """Words past the opening are not read (the rules still weigh what they match there)."""
    summary = ("We present a compiler that lowers tensor programs through MLIR to GPU kernels, "
               "with a cost model for tiling and an autotuner. ") * 20
    short = blog_item("A tensor compiler for GPUs", summary)
    thanks = " We thank the reviewers for their comments." * 200
    longer = blog_item("A tensor compiler for GPUs", summary + thanks)
    assert len(classified_text([short])) > TEXT_CHARS
    assert words(classified_text([short])) == words(classified_text([longer]))
    probabilities = [{lid: classify(entry, taxonomy).totals[f"learned.{lid}"] for lid in LAYER_IDS}
                     for entry in (short, longer)]
    assert probabilities[0] == probabilities[1]


def test_on_the_sets_it_learned_from_the_model_and_the_rules_stay_above_the_floor(
        taxonomy: Taxonomy, rules: Taxonomy) -> None:
    """A guard that the shipped file is a trained one (a training figure, not a quality claim:
    bench/train_layers.py prints the held-out ones)."""
    examples = [e for e in load() if e.relevant]
    mine = count(examples, predict(examples, taxonomy)).micro.f1
    theirs = count(examples, predict(examples, rules)).micro.f1
    assert mine > 0.8 and theirs > 0.8, (mine, theirs)


def test_the_trainer_never_learns_from_the_never_tuned_set_and_keeps_shared_words() -> None:
    """bench/train_layers.py's pure parts (fitting needs the train extra, not the test one)."""
    trainer = bench_module("train_layers")
    sets = trainer.training_sets()
    assert not set(sets) & (trainer.NEVER_TRAINED | trainer.NOT_YET_TRAINED)
    assert {"project", "double-1", "double-2", "double-5"} <= set(sets)
    assert all(e.relevant for examples in sets.values() for e in examples)
    shared = [{lid: {"share": 0.5, "w:fusion": 1.0} for lid in LAYER_IDS}] * (trainer.MIN_DF - 1)
    rows = [{lid: {"share": 1.0, "p:mlir": 1.0, "w:fusion": 1.0, "w:rare": 1.0} for lid in LAYER_IDS},
            *shared]
    assert trainer.vocabulary(row[LAYER_IDS[0]] for row in rows) == ["p:mlir", "share", "w:fusion"], (
        "every non-word input, and words in at least MIN_DF entries")
    data = json.loads((ROOT / "digest" / "data" / MODEL).read_text(encoding="utf-8"))
    assert data["training_sets"] == {name: len(examples) for name, examples in sets.items()}, (
        "the shipped file was trained on exactly these sets (retrain: bench/train_layers.py)")
    assert (data["threshold"], data["C"], data["min_df"]) == (trainer.THRESHOLD, trainer.C, trainer.MIN_DF)
