"""Classifier quality (rules mode): relevance P/R, layer micro-F1, per layer.

    .venv/bin/python bench/quality.py [--errors SPLIT] [--taxonomy PATH] [--no-final]
        [--cv [--cv-on outside-tune|unseen-tune|dev+unseen-tune]] [--model FILE]

Two kinds of figures, printed apart:

- the tuned sets, tests/data/labelled.jsonl: ``dev`` is tuned on; ``heldout``
  and ``heldout2`` (``heldout-all``: both) were already looked at, so they are
  no longer independent;
- the never-tuned set, bench/data/unseen_labels.jsonl, labelled blind by
  someone who never saw the classifier: overall, and without the LLVM Weekly
  roundups (long multi-topic issues). Its errors are never listed: reading
  them would make it one more tuned set.

The never-tuned set is split in two halves by a stable hash of each item's
``id`` (its URL): the first byte of SHA-256(id) below 128 puts the item in
``unseen-tune``, otherwise in ``unseen-final`` (:func:`unseen_half`; no
randomness, no dependence on file order). ``unseen-tune`` may be tuned on
(``--errors unseen-tune`` lists its errors); ``unseen-final`` is never tuned
on and its errors are never printed: it is the only never-tuned figure.
While tuning, ``--no-final`` leaves its figures out too (print them once, at
the end of a round of work).

Later blind-labelled sets (:data:`LATER_SETS`: ``blogs``, PyTorch and TVM
blog posts; ``releases``, CUTLASS and JAX releases and IREE blog posts; the
first set has none of these sources) are split the same way into
``<name>-tune`` (``--errors <name>-tune``) and ``<name>-final`` (never tuned
on, never listed; left out with ``--no-final``), each also printed for one
built-in source alone. Last of the blind-labelled figures, every final half
pooled: the one never-tuned figure over all the sources.

``--cv`` first cross-validates the knobs that are chosen by cross-validation
(``CV_GRID``), 5 folds by a stable hash of each item's id
(:func:`_cross_validate`), over the outside readers' labels (``outside-tune``:
every blind-labelled set's tuning half, the convention the never-tuned
figures follow, 1-2 layers an entry), over unseen-tune alone, or, with
``--cv-on dev+unseen-tune``, pooled with dev (whose labels give 3-4): never
on a final half, never on heldout.

``--model FILE`` measures with a learned relevance decision (a file in
digest/data written by bench/train_relevance.py; ``--model ""`` with the
rules alone) whatever the taxonomy's ``[relevance] model`` says; the expert
order is always the built-in taxonomy's (the shipped model on, as the
pipeline runs).

Last, the order of the days' events against a compiler engineer's ranking
(tests/test_expert_order.py, tests/data/expert_*.toml): the bundled sample days
and four real days of LLVM blog posts, each built through the pipeline; per day
the share of pairs of different tiers the scores put in order, Kendall's tau-b
and the named pairs that hold.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import statistics
import sys
import tempfile
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from labelled import SPLITS, Example, Prediction, Quality, count, evaluate, load, report, split
from test_expert_order import measure
from test_expert_order import report as order_report

from digest.analyze.classify import Classification, classify, decide, news_margin
from digest.analyze.learned import load_model
from digest.analyze.taxonomy import Taxonomy, load_taxonomy

_DATA = Path(__file__).resolve().parent / "data"
UNSEEN = _DATA / "unseen_labels.jsonl"
UNSEEN_HALVES = ("unseen-tune", "unseen-final")
# Later sets labelled blind (each name's labels in bench/data/<file>), from sources the first
# set lacks: PyTorch and TVM blog posts; CUTLASS and JAX releases (the changelogs' sections, as
# GitHub releases) and IREE blog posts. Each is split in halves by the same hash as the first
# set, before anything was tuned on it: ``<name>-tune`` may be tuned on, ``<name>-final`` never
# (its errors are never listed; printed with unseen-final and left out with it). Each is also
# shown for the named built-in source alone.
LATER_SETS: dict[str, tuple[str, str]] = {"blogs": ("blog_labels.jsonl", "pytorch-blog"),
                                          "releases": ("release_labels.jsonl", "gh-jax")}
_BUILT_IN = ("pytorch-blog", "gh-cutlass", "gh-jax")  # the later sets' sources the pipeline has
_KIND_KEYS = {"arxiv": "arxiv-cs.pl", "rss": "blog", "atom": "blog",
              "github-releases": "gh-unknown"}


def _source_key(row: dict[str, object]) -> str:
    """The source key the pipeline would give the entry's feed (its prior, if any)."""
    title, source_file = str(row["title"]).lower(), str(row["source_file"])
    if row.get("source") in _BUILT_IN:
        return str(row["source"])
    if title.startswith("llvm weekly"):
        return "llvm-weekly"
    if source_file.startswith("llvm-blog"):
        return "llvm-blog"
    return _KIND_KEYS[str(row["source_kind"])]


def unseen_half(item_id: str, named: str = "unseen") -> str:
    """``<named>-tune`` or ``<named>-final``: the first byte of SHA-256 of the item's id."""
    digest = hashlib.sha256(item_id.encode("utf-8")).digest()
    return f"{named}-tune" if digest[0] < 128 else f"{named}-final"


def load_unseen(path: Path = UNSEEN, named: str = "unseen") -> list[Example]:
    """The blind-labelled examples, each with its half (``<named>-tune`` or ``<named>-final``) as split."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [Example(r["title"], r["summary"] or "", r["source_kind"], bool(r["relevant"]),
                    frozenset(r["layers"]), unseen_half(str(r["id"]), named),
                    _source_key(r), str(r["id"]))
            for r in rows]


def _tuned(taxonomy: Taxonomy, errors: str | None) -> None:
    print("######## tuned sets (tests/data/labelled.jsonl)")
    examples = load()
    for name in SPLITS:
        quality = evaluate(split(examples, name), taxonomy)
        print(report(name, quality))
        if errors == name:
            print("\n".join(quality.errors))


def _never_tuned(taxonomy: Taxonomy, errors: str | None, final: bool = True) -> None:
    print("######## unseen set (bench/data/unseen_labels.jsonl), in two halves")
    unseen = load_unseen()
    _halves("unseen", unseen, {"without-llvm-weekly": lambda e: e.source_key != "llvm-weekly",
                               "llvm-weekly-only": lambda e: e.source_key == "llvm-weekly"},
            taxonomy, errors, final)
    for named, (file, source) in LATER_SETS.items():
        print(f"######## {named}: labelled blind (bench/data/{file}), in two halves")
        _halves(named, load_later(named), {source: lambda e, source=source: e.source_key == source},
                taxonomy, errors, final)
    if final:
        finals = [e for e in unseen if e.split == "unseen-final"]
        finals += [e for named in LATER_SETS for e in load_later(named) if e.split == f"{named}-final"]
        print("######## every final half pooled (never tuned on)")
        print(report("finals-pooled", evaluate(finals, taxonomy)))


def load_later(named: str) -> list[Example]:
    """A later set's examples (:data:`LATER_SETS`), split into ``<named>-tune`` and ``<named>-final``."""
    return load_unseen(_DATA / LATER_SETS[named][0], named)


def _halves(named: str, examples: Sequence[Example], subsets: Mapping[str, Callable[[Example], bool]],
            taxonomy: Taxonomy, errors: str | None, final: bool) -> None:
    """A set's tuning half (and its final half, if ``final``), each whole and in ``subsets``.

    ``errors`` lists the misclassified entries of the tuning half only, never the final half's.
    """
    for half in (f"{named}-tune", f"{named}-final") if final else (f"{named}-tune",):
        chosen = [e for e in examples if e.split == half]
        sets = {half: chosen, **{f"{half}-{suffix}": [e for e in chosen if keep(e)]
                                 for suffix, keep in subsets.items()}}
        for name, subset in sets.items():
            quality = evaluate(subset, taxonomy)
            print(report(name, quality))
            if errors == name == f"{named}-tune":
                print("\n".join(quality.errors))


CV_FOLDS = 5
# The knobs chosen by cross-validation, each with the values tried (the grid is
# their product; every other setting as in the taxonomy measured).
CV_GRID: dict[str, tuple[Any, ...]] = {
    "secondary_weight": (0.0, 1.0, 1.5, 2.0),
    "subject_chars": (400, 700, 1500),
    "context_layers": (("benchmark",), ("hardware_backend", "benchmark")),
    "fallback_share": (0.6, 0.8, 1.0),
    "secondary_share": (0.0, 0.2, 0.35, 0.5),
    "max_layers": (0, 2, 3),
    "subject_evidence": (0.0, 2.0, 2.5, 3.0),
}
# The sets cross-validation may run over: the outside readers' labels (the
# convention the never-tuned figures follow; the blog posts' tuning half with
# them by default), the first set's alone, or pooled with dev.
CV_SETS = ("outside-tune", "unseen-tune", "dev+unseen-tune")
# Knobs read only when the layers are chosen from an entry's totals
# (classify.layers_of): variants differing only in these (and in the layers'
# thresholds, ``layers.<id>.threshold``) share the totals.
_LAYER_ONLY = frozenset({"secondary_weight", "context_layers", "fallback_share",
                         "secondary_share", "max_layers"})
_SHOWN = 15  # variants printed (the best by CV objective, and the taxonomy's)


def knob_value(taxonomy: Taxonomy, knob: str) -> Any:
    """A knob's value: a taxonomy field, or ``layers.<id>.<field>`` of one layer's rule."""
    if knob.startswith("layers."):
        _, lid, name = knob.split(".")
        return getattr(taxonomy.layers[lid], name)
    return getattr(taxonomy, knob)


def with_knobs(taxonomy: Taxonomy, overrides: Mapping[str, Any]) -> Taxonomy:
    """``taxonomy`` with the knobs' values (see :func:`knob_value`)."""
    layers = dict(taxonomy.layers)
    fields: dict[str, Any] = {}
    for knob, value in overrides.items():
        if knob.startswith("layers."):
            _, lid, name = knob.split(".")
            layers[lid] = replace(layers[lid], **{name: value})
        else:
            fields[knob] = value
    return replace(taxonomy, layers=layers, **fields)


def cv_fold(example: Example, folds: int = CV_FOLDS) -> int:
    """The example's fold: the first byte of SHA-256 of its key (id, else title) modulo ``folds``."""
    return hashlib.sha256(example.key.encode("utf-8")).digest()[0] % folds


def cv_examples(on: str) -> list[Example]:
    """The examples cross-validation runs over (:data:`CV_SETS`): never a final half, never heldout."""
    examples = [e for e in load() if e.split == "dev"] if on == "dev+unseen-tune" else []
    if on == "outside-tune":  # every blind-labelled set's tuning half
        examples = [e for named in LATER_SETS for e in load_later(named) if e.split == f"{named}-tune"]
    return examples + [e for e in load_unseen() if e.split == "unseen-tune"]


def predict_variants(examples: Sequence[Example], taxonomy: Taxonomy,
                     grid: Mapping[str, tuple[Any, ...]]) -> dict[tuple[Any, ...], list[Prediction]]:
    """Every grid variant's predictions; the totals are computed once per non-layer knob setting."""
    cache: dict[tuple[Any, ...], list[Classification]] = {}
    variants: dict[tuple[Any, ...], list[Prediction]] = {}
    for values in itertools.product(*grid.values()):
        overrides: dict[str, Any] = dict(zip(grid, values, strict=True))
        variant = with_knobs(taxonomy, overrides)
        key = tuple(v for k, v in overrides.items()
                    if k not in _LAYER_ONLY and not k.startswith("layers."))
        if key not in cache:
            cache[key] = [classify(e.item(), variant) for e in examples]
        decided = (decide(v.totals, variant, news_margin(v.totals, v.evidence, variant) >= 0)
                   for v in cache[key])
        variants[values] = [(relevant, frozenset(layers)) for relevant, _, layers in decided]
    return variants


def _objective(quality: Quality) -> float:
    """What cross-validation maximises: the mean of relevance F1 and layer micro-F1."""
    return (quality.relevance.f1 + quality.micro.f1) / 2


def _figures(quality: Quality) -> str:
    return (f"relevance P {quality.relevance.precision:.3f} R {quality.relevance.recall:.3f}, "
            f"layer F1 {quality.micro.f1:.3f} (P {quality.micro.precision:.3f} "
            f"R {quality.micro.recall:.3f})")


def mean_and_error(gains: Sequence[float]) -> tuple[float, float]:
    """The mean of paired per-fold gains and its standard error (0 for one fold)."""
    mean = statistics.fmean(gains)
    return mean, statistics.stdev(gains) / math.sqrt(len(gains)) if len(gains) > 1 else 0.0


def _gain(gains: Sequence[float]) -> str:
    """Paired per-fold gains over the taxonomy's: mean, standard error, folds that gain."""
    mean, error = mean_and_error(gains)
    return (f"gain {mean:+.3f} (se {error:.3f}, {sum(g > 0 for g in gains)}/{len(gains)} folds "
            f"up{', clear' if mean > 2 * error and mean > 0 else ''})")


def _cross_validate(taxonomy: Taxonomy, on: str = CV_SETS[0]) -> None:
    """Nested 5-fold cross-validation of the grid's knobs over ``on`` (:data:`CV_SETS`).

    The folds are a stable hash of each example's id (:func:`cv_fold`). Per
    variant: the pooled figures, and the objective's gain over the taxonomy's
    per fold (paired: the same entries), with its standard error; a gain
    counts as clear above twice that. Then the choice itself: per fold, the
    variant with the best objective on the other four folds, measured on the
    held-out fold; the out-of-fold figures pooled are the CV figure of
    choosing by CV, set against the taxonomy's own on the same folds.
    """
    examples = cv_examples(on)
    folds = [cv_fold(e) for e in examples]
    print(f"######## {CV_FOLDS}-fold cross-validation over {on} "
          f"({len(examples)} entries; folds by SHA-256 of the id)")
    variants = predict_variants(examples, taxonomy, CV_GRID)

    def quality(values: tuple[Any, ...], among: Container[int]) -> Quality:
        chosen = [i for i, fold in enumerate(folds) if fold in among]
        return count([examples[i] for i in chosen], [variants[values][i] for i in chosen])

    every = range(CV_FOLDS)
    shipped = tuple(knob_value(taxonomy, knob) for knob in CV_GRID)
    base = [_objective(quality(shipped, {k})) for k in every] if shipped in variants else None
    ranked = sorted(variants, key=lambda v: -_objective(quality(v, every)))
    shown = ranked if len(ranked) <= _SHOWN else [*ranked[:_SHOWN], shipped]
    print(f"variant ({', '.join(CV_GRID)}): pooled figures; objective gain over the taxonomy's "
          f"per fold ({len(variants)} variants, the best {min(_SHOWN, len(ranked))} shown)")
    for values in dict.fromkeys(v for v in shown if v in variants):
        gains = ([_objective(quality(values, {k})) - b for k, b in zip(every, base, strict=True)]
                 if base else [])
        mark = "  <- the taxonomy's" if values == shipped else ""
        print(f"  {values}: {_figures(quality(values, every))}"
              f"{'; ' + _gain(gains) if gains else ''}{mark}")
    out_examples: list[Example] = []
    out_predictions: list[Prediction] = []
    picks, nested = [], []
    for k in every:
        others = set(every) - {k}
        best = max(variants, key=lambda v: (round(_objective(quality(v, others)), 6),
                                            v == shipped))
        picks.append(best)
        nested.append(_objective(quality(best, {k})))
        held = [i for i, fold in enumerate(folds) if fold == k]
        out_examples += [examples[i] for i in held]
        out_predictions += [variants[best][i] for i in held]
    print("chosen per fold: " + ", ".join(str(p) for p in picks))
    print(f"== CV (choosing by CV): {_figures(count(out_examples, out_predictions))}"
          + (f"; {_gain([n - b for n, b in zip(nested, base, strict=True)])}" if base else ""))
    if shipped in variants:
        print(f"== CV (the taxonomy's): {_figures(quality(shipped, every))}")


def _expert_order() -> None:
    """The order of the sample and real days' events against the expert's (tests/test_expert_order.py).

    Each day is built through the pipeline with the built-in taxonomy and score weights.
    """
    print("######## expert order (tests/data/expert_*.toml): pairs of different tiers in order, "
          "Kendall tau-b, named pairs held")
    with tempfile.TemporaryDirectory() as tmp:
        samples, real = measure(Path(tmp))
    print(order_report("samples", samples))
    print(order_report("real", real))


def main() -> int:
    """Print the tuned sets' figures, the never-tuned set's, then the expert-order agreement."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    tuning_halves = ["unseen-tune", *(f"{named}-tune" for named in LATER_SETS)]
    parser.add_argument("--errors", choices=[*SPLITS, *tuning_halves], default=None,
                        help="also list the misclassified entries of this split "
                             "(never of a final half)")
    parser.add_argument("--taxonomy", type=Path, default=None, help="taxonomy TOML to measure")
    parser.add_argument("--no-final", action="store_true",
                        help="leave out the final halves' figures (while tuning)")
    parser.add_argument("--cv", action="store_true",
                        help="also cross-validate the knobs of CV_GRID (over --cv-on)")
    parser.add_argument("--cv-on", choices=CV_SETS, default=CV_SETS[0],
                        help="the labels to cross-validate on: the outside readers' "
                             "(both tuning halves, the default; unseen-tune alone) or pooled with dev")
    parser.add_argument("--model", default=None, metavar="FILE",
                        help="the learned relevance model to measure with (\"\": the rules alone)")
    args = parser.parse_args()
    taxonomy = load_taxonomy(args.taxonomy)
    if args.model is not None:
        taxonomy = replace(taxonomy, model=load_model(args.model) if args.model else None)
    print(f"######## relevance decided by {'the learned model' if taxonomy.model else 'the rules'}")
    if args.cv:
        _cross_validate(taxonomy, args.cv_on)
    _tuned(taxonomy, args.errors)
    _never_tuned(taxonomy, args.errors, final=not args.no_final)
    _expert_order()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
