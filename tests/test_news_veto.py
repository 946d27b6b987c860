"""The learned news judge (digest/analyze/news_veto.py), through the real classifier: its veto
takes the rules' news away, its promotion adds what the rules reject, within the rules' guards."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from labelled import load

from digest.analyze.classify import (
    classified_text,
    classify,
    is_borderline,
    relevance_distance,
    with_verdict,
)
from digest.analyze.news_veto import SCALE, NewsVeto, load_news_veto, news_features, veto_from
from digest.analyze.taxonomy import Taxonomy, default_taxonomy_path, load_taxonomy
from digest.domain.errors import ConfigError
from digest.domain.items import Item
from tests.bench_modules import bench_module
from tests.items import blog_item

ROOT = Path(__file__).resolve().parent.parent
VETO = "news_veto.json"
_COMPILER = ("We add a loop fusion pass to the MLIR affine dialect, lower the fused loops to LLVM IR "
             "and generate Triton kernels for attention on H100.")


@pytest.fixture(scope="module")
def rules(taxonomy: Taxonomy) -> Taxonomy:
    return replace(taxonomy, veto=None)


def _against(word: str, weight: float) -> NewsVeto:
    """A veto that knows one word, and is sure of news without it."""
    return NewsVeto(0.4, 4.0, {f"w:{word}": weight})


def test_the_shipped_taxonomy_names_the_shipped_veto(taxonomy: Taxonomy) -> None:
    veto = load_news_veto(VETO)
    assert taxonomy.veto is veto, "read once, named by the taxonomy"
    data = json.loads((ROOT / "digest" / "data" / VETO).read_text(encoding="utf-8"))
    assert list(data) == sorted(data), "sorted keys: a retrain is comparable line by line"
    assert data["training_size"] == sum(data["training_sets"].values())
    names = set(veto.weights)
    assert {"r:news", "r:distance"} <= names
    assert any(n.startswith("w:") for n in names) and any(n.startswith("p:") for n in names)


def test_a_malformed_veto_is_a_config_error(tmp_path: Path) -> None:
    good = json.loads((ROOT / "digest" / "data" / VETO).read_text(encoding="utf-8"))
    assert veto_from(good).threshold == good["threshold"]
    for threshold in (0, 1, True, "0.4", None):
        with pytest.raises(ConfigError, match="threshold must be a number between 0 and 1"):
            veto_from({**good, "threshold": threshold})
    assert veto_from(good).promote == good["promote"]
    assert veto_from({k: v for k, v in good.items() if k != "promote"}).promote is None, "no promotion"
    for promote in (0.3, 1, True, "0.6"):
        with pytest.raises(ConfigError, match="promote must be a number from the threshold up to 1"):
            veto_from({**good, "threshold": 0.4, "promote": promote})
    for broken in ({**good, "bias": None}, {**good, "bias": True},
                   {**good, "weights": {"w:vllm": "heavy"}}, {**good, "weights": [1.0]}):
        with pytest.raises(ConfigError, match="numeric bias and a table of numeric weights"):
            veto_from(broken)
    with pytest.raises(ConfigError, match="must be a file name"):
        load_news_veto("../news_veto.json")
    with pytest.raises(ConfigError, match="cannot read"):
        load_news_veto("no_such_veto.json")
    text = default_taxonomy_path().read_text(encoding="utf-8")
    assert f'veto = "{VETO}"' in text
    off = tmp_path / "off.toml"
    off.write_text(text.replace(f'veto = "{VETO}"', 'veto = ""'), encoding="utf-8")
    assert load_taxonomy(off).veto is None, '"" leaves relevance to the rules'
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(text.replace(f'veto = "{VETO}"', "veto = 2"), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[relevance\] veto must be a file name"):
        load_taxonomy(wrong)


def test_the_classifier_records_p_news_from_the_trainers_inputs(taxonomy: Taxonomy, rules: Taxonomy) -> None:
    """Training and inference read the same numbers: news_features over the same text, veto off."""
    veto = taxonomy.veto
    assert veto is not None
    for example in load()[::9]:
        item = example.item()
        plain = classify(item, rules)
        inputs = news_features(plain.totals, plain.evidence, relevance_distance(plain.totals, rules),
                               classified_text([item]))
        assert classify(item, taxonomy).totals["learned.news"] == round(veto.probability(inputs), 6)
        assert "learned.news" not in plain.totals


def test_a_word_the_veto_distrusts_takes_rules_news_away(rules: Taxonomy) -> None:
    vetoing = replace(rules, veto=_against("vllm", -8.0))
    plain = blog_item("Loop fusion in MLIR", _COMPILER)
    served = blog_item("Loop fusion in MLIR for vLLM", _COMPILER)
    assert classify(plain, rules).relevant and classify(served, rules).relevant
    assert classify(plain, vetoing).relevant, "without the word the veto is sure of news"
    verdict = classify(served, vetoing)
    assert (verdict.relevant, verdict.layers) == (False, ())
    assert verdict.totals["learned.news"] < 0.4
    assert relevance_distance(verdict.totals, vetoing) == pytest.approx(
        (verdict.totals["learned.news"] - 0.4) * SCALE, abs=1e-5)


def test_an_entry_from_a_compiler_projects_own_source_is_never_vetoed(rules: Taxonomy) -> None:
    """Every post of the LLVM blog is about a compiler; the community rule takes its admin posts."""
    vetoing = replace(rules, veto=_against("vllm", -8.0))
    own = Item(1, "llvm-blog", "LLVM Project Blog", 1.0, "rss", "Loop fusion in MLIR for vLLM",
               _COMPILER, "https://blog.llvm.org/posts/fusion")
    verdict = classify(own, vetoing)
    assert verdict.totals["prior"] > 0 and verdict.totals["learned.news"] < 0.4
    assert verdict.relevant and not is_borderline(verdict, vetoing)


def test_a_close_veto_is_borderline_and_triage_may_overturn_it(rules: Taxonomy) -> None:
    served = blog_item("Loop fusion in MLIR for vLLM", _COMPILER)
    # P(news) = sigmoid(4 - 4.5) = 0.38: 0.02 below the threshold, 0.2 of the rules' distance
    close = replace(rules, veto=_against("vllm", -4.5))
    verdict = classify(served, close)
    assert not verdict.relevant and is_borderline(verdict, close)
    promoted = with_verdict(verdict, True, close)
    assert promoted.relevant and promoted.layers == classify(served, rules).layers
    far = replace(rules, veto=_against("vllm", -12.0))
    assert not is_borderline(classify(served, far), far), "a confident veto needs no second opinion"


def test_without_a_promotion_the_veto_never_lets_in_what_the_rules_reject(rules: Taxonomy) -> None:
    eager = replace(rules, veto=NewsVeto(0.4, 20.0, {}))
    for example in load()[::5]:
        item = example.item()
        assert classify(item, eager).relevant == classify(item, rules).relevant


# The rules reject it (no compiler evidence) but give it layers: execution work readers count
COLLECTIVES = blog_item("Compressed collectives on H100",
                        "We fuse quantisation into NCCL all-reduce kernels on H100 GPUs and overlap "
                        "communication with compute, cutting communication time 3x in tensor-parallel "
                        "training.", kind="arxiv")


def _sure(promote: float = 0.6) -> NewsVeto:
    """A judge sure of news (P 1.0) whatever the text, promoting at ``promote``."""
    return NewsVeto(0.4, 20.0, {}, promote)


def test_a_promotion_makes_news_of_what_the_rules_reject_when_it_has_a_layer(rules: Taxonomy) -> None:
    plain = classify(COLLECTIVES, rules)
    assert not plain.relevant and relevance_distance(plain.totals, rules) < 0
    promoting = replace(rules, veto=_sure())
    verdict = classify(COLLECTIVES, promoting)
    assert verdict.relevant and verdict.layers and set(verdict.layers) <= {
        "kernel_codegen", "hardware_backend", "runtime", "distributed", "benchmark"}
    assert classify(COLLECTIVES, replace(rules, veto=NewsVeto(0.4, 20.0, {}))).relevant is False, \
        "no promote in the file: no promotion"
    picnic = blog_item("Our summer picnic", "Photos of the team picnic and the winners of the raffle.")
    assert not classify(picnic, promoting).relevant, "no layer, nothing to promote"


def test_a_promotion_keeps_the_rules_guards_and_never_touches_a_prior_source(rules: Taxonomy) -> None:
    promoting = replace(rules, veto=_sure())
    admin = blog_item("LLVM office hours: compressed collectives on H100", COLLECTIVES.summary)
    assert classify(admin, rules).totals["community"] > rules.community_threshold
    assert not classify(admin, promoting).relevant, "a community/admin post is never news"
    fixes = Item(1, "gh-other", "A compiler's releases", 0.7, "github-releases", "NCCLZ 2.3.1",
                 "Bug fixes\n\n- Fix a hang in the all-reduce kernels on H100 GPUs (#12)", None,
                 tag="v2.3.1")
    assert classify(fixes, promoting).totals.get("fix_release") and not classify(fixes, promoting).relevant
    own = replace(COLLECTIVES, source_key="llvm-blog", kind="rss")
    verdict = classify(own, promoting)
    assert verdict.totals["prior"] > 0
    assert verdict.relevant == classify(own, rules).relevant, "a prior's source: the rules decide"


def test_a_near_promotion_is_borderline_and_a_far_one_is_not(rules: Taxonomy) -> None:
    # P(news) = sigmoid(0.2) = 0.55: 0.05 below a promotion at 0.6, half a unit of the rules' distance
    near = replace(rules, veto=NewsVeto(0.4, 0.2, {}, 0.6))
    verdict = classify(COLLECTIVES, near)
    assert not verdict.relevant and is_borderline(verdict, near)
    assert relevance_distance(verdict.totals, near) == pytest.approx(
        (verdict.totals["learned.news"] - 0.6) * SCALE, abs=1e-5)
    far = replace(rules, veto=NewsVeto(0.4, -6.0, {}, 0.6))
    assert not is_borderline(classify(COLLECTIVES, far), far)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300))
def test_any_text_changes_the_rules_verdict_only_through_the_veto_or_a_promotion(text: str) -> None:
    taxonomy = load_taxonomy()
    item = blog_item("Kernel fusion in the MLIR compiler " + text[:40], _COMPILER + " " + text)
    verdict = classify(item, taxonomy)
    plain = classify(item, replace(taxonomy, veto=None))
    judge = taxonomy.veto
    assert judge is not None and judge.promote is not None
    news = verdict.totals["learned.news"]
    assert 0.0 <= news <= 1.0
    if verdict.relevant and not plain.relevant:
        assert news >= judge.promote, "let in only by a promotion"
    if plain.relevant and not verdict.relevant:
        assert news < judge.threshold, "taken away only by the veto"
    assert bool(verdict.layers) == verdict.relevant


def test_the_trainer_decides_as_the_classifier_does(taxonomy: Taxonomy, rules: Taxonomy) -> None:
    """bench/train_veto.py measures the product's decision: its inputs and its verdict are the
    classifier's (the rules with the judge off, then the shipped judge)."""
    trainer = bench_module("train_veto")
    judge = taxonomy.veto
    assert judge is not None
    examples = load()[::3]
    for example, row in zip(examples, trainer.inputs_of(examples, rules), strict=True):
        assert trainer.decided(judge, row) == classify(example.item(), taxonomy).relevant, example.title


def test_the_trainer_learns_every_entry_of_the_tuned_sets_only() -> None:
    """bench/train_veto.py's pure parts (fitting needs the train extra, not the test one)."""
    trainer = bench_module("train_veto")
    sets = trainer.news_sets()
    assert not set(sets) & trainer.NEVER_TRAINED
    assert {"project", "unseen", "double-1", "double-4", "double-6"} <= set(sets), \
        "every tuned set, those the layer model does not learn from yet (NOT_YET_TRAINED) too"
    assert any(not e.relevant for examples in sets.values() for e in examples), "negatives too"
    data = json.loads((ROOT / "digest" / "data" / VETO).read_text(encoding="utf-8"))
    assert data["training_sets"] == {name: len(examples) for name, examples in sets.items()}, (
        "the shipped file was trained on exactly these sets (retrain: bench/train_veto.py)")
    assert (data["threshold"], data["promote"], data["C"], data["min_df"]) == (
        trainer.THRESHOLD, trainer.PROMOTE, trainer.C, trainer.MIN_DF)
    distrusting = _against("vllm", -8.0)
    assert trainer.decided(distrusting, trainer.Row(True, False, True, {"w:vllm": 1.0})) is False
    assert trainer.decided(distrusting, trainer.Row(True, True, True, {"w:vllm": 1.0})) is True, "a prior"
    assert trainer.decided(distrusting, trainer.Row(True, False, True, {})) is True
    assert trainer.decided(NewsVeto(0.4, 20.0, {}), trainer.Row(False, False, True, {})) is False
    assert trainer.decided(_sure(), trainer.Row(False, False, True, {})) is True, "promoted"
    assert trainer.decided(_sure(), trainer.Row(False, False, False, {})) is False, "not eligible"
    assert trainer.decided(_sure(), trainer.Row(False, True, True, {})) is False, "a prior: the rules"
