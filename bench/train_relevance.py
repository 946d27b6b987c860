"""Train the learned relevance decision (digest/data/relevance_model.json) and cross-validate it.

    .venv/bin/python bench/train_relevance.py [--on dev+outside-tune|outside-tune] [--no-write]
        [--out PATH] [--no-augment]
    .venv/bin/python bench/train_relevance.py --by-source [--no-augment]

The model ships off since stop 21 (digest/data/taxonomy.toml says why): ``--by-source``
prints the check that decided it, leave-one-source-out CV over every tuned set
(:func:`by_source`: each source predicted by a model trained on all the others,
against the rules); it takes some 25 minutes here.

The model is L2-regularised logistic regression over the rules' evidence
(:func:`digest.analyze.learned.features`: the one feature function, shared with
inference), fitted by a fixed number of Newton steps from zero weights, with
the features standardised by the training set's means and scales: no
randomness, standard library only, the same weights bit for bit on every run.

It trains on the outside readers' labels (``bench/quality.py``'s
``cv_examples("outside-tune")``: every blind-labelled set's tuning half) and, by
default, dev (``--on dev+outside-tune``): never on a final half, never on
heldout. With dev, the out-of-fold figures are also printed for each
convention's entries apart. Measured (round 1's features): trained on outside-tune alone, the model
learns from its few sharding posts (JAX release notes) that a distributed
subject is not news and rejects dev's sharding compilers (dev recall 1.000 ->
0.884 out of sample); with dev, the outside entries' out-of-fold figures are
the same (relevance F1 0.949 vs 0.946) and dev's stay 1.000.

The features do not grow with the text's length (round 1's did, and the
expert's real days, shorter texts than the labelled copies, lost posts the
expert ranks as news), and each training entry is also trained on cut at its
first :data:`AUGMENT_CUTS` characters, with the same label (``--no-augment``:
without): a shorter copy of the same post is the same news. The copies share
their entry's fold. A length check (:func:`length_check`, training entries
only, out of fold) counts the verdicts that change when each entry is cut at
:data:`LENGTH_CUTS`, for the model and the rules.

It prints 5-fold cross-validation on the same folds as ``bench/quality.py
--cv`` (:func:`cv_fold`) of the learned decision against the rules' own on the
same entries: per fold and pooled relevance P/R/F1, and the paired per-fold
gain in relevance F1 and in the objective (the mean of relevance F1 and layer
micro-F1; the layers stay the rules', and an entry with none stays not
relevant, as ``decide`` says), with its standard error. The regularisation
strength and the decision threshold are chosen by nested CV: per outer fold,
by CV over the other four. The shipped model's are chosen the same way over
all five folds, and it is fitted on every example. The file (sorted keys)
holds the features, means, scales, weights, bias, threshold, the triage band,
the training set's name and size and the figures measured.
"""

from __future__ import annotations

import argparse
import json
import math
import operator
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from labelled import Example, Prediction, Quality, count, load
from quality import (
    CV_FOLDS,
    DOUBLE_SETS,
    LATER_SETS,
    _gain,
    _objective,
    cv_examples,
    cv_fold,
    load_double,
    load_later,
    load_unseen,
    mean_and_error,
)

from digest.analyze.classify import classify, decide, is_community, layers_of, relevance_distance
from digest.analyze.learned import FEATURES, RelevanceModel, features, model_from, sigmoid
from digest.analyze.taxonomy import Taxonomy, load_taxonomy
from digest.resources import data_dir

MODEL = data_dir() / "relevance_model.json"
LAMBDAS = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0)  # the L2 strengths tried (per example, bias free)
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(4, 17))  # 0.20 ... 0.80
NEWTON_STEPS = 25
AUGMENT_CUTS = (1000, 2000)  # each training entry also cut at these lengths (same label)
LENGTH_CUTS = (700, 1000, 1500, 2000)  # the length check's cuts (out of fold, training entries)
_DIGITS = 10  # the file's precision: last-bit differences of libm never reach it


@dataclass(frozen=True)
class Row:
    """One example as the trainer sees it: features, label, the rules' verdicts either way."""

    x: tuple[float, ...]
    y: bool
    rules: Prediction  # the rules' own decision
    if_relevant: Prediction  # the decision when the model says news (the rules' layers, or none)
    eligible: bool  # the rules' triage could ask about it (it has a layer, not a community post)
    borderline: bool  # the rules' triage band holds it


def cut(example: Example, chars: int) -> Example:
    """The same entry with its text cut at its first ``chars`` characters (the same label)."""
    return replace(example, summary=example.summary[:chars])


Copies = Sequence[Sequence[Row]]  # per example, its shorter copies' rows (augmentation)


def copies_of(examples: Sequence[Example], taxonomy: Taxonomy,
              cuts: Sequence[int] = AUGMENT_CUTS) -> list[list[Row]]:
    """Each example's copies cut at ``cuts`` (those shorter than the text), as rows."""
    return [rows_of([cut(e, c) for c in cuts if len(e.summary) > c], taxonomy) for e in examples]


def probes_of(examples: Sequence[Example], taxonomy: Taxonomy,
              cuts: Sequence[int] = LENGTH_CUTS) -> dict[int, dict[int, Row]]:
    """Per cut, the rows of the examples longer than it cut there, by the example's index."""
    probes = {}
    for c in cuts:
        longer = [i for i, e in enumerate(examples) if len(e.summary) > c]
        probes[c] = dict(zip(longer, rows_of([cut(examples[i], c) for i in longer], taxonomy),
                             strict=True))
    return probes


def rows_of(examples: Sequence[Example], taxonomy: Taxonomy) -> list[Row]:
    """Classify each example with the rules and keep what training and scoring need."""
    rows = []
    for example in examples:
        verdict = classify(example.item(), taxonomy)
        distance = relevance_distance(verdict.totals, taxonomy)
        rules = decide(verdict.totals, taxonomy, distance >= 0)
        community = is_community(verdict.totals, taxonomy)
        news = decide(verdict.totals, taxonomy, not community)  # an admin post is never news
        eligible = bool(layers_of(verdict.totals, taxonomy)) and not community
        rows.append(Row(tuple(features(verdict.totals, verdict.evidence, distance)),
                        example.relevant, (rules[0], frozenset(rules[2])),
                        (news[0], frozenset(news[2])), eligible,
                        eligible and abs(distance) < taxonomy.triage_band))
    return rows


# --- the fit


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Solve matrix @ x = vector by Gaussian elimination with partial pivoting (matrix SPD here)."""
    n = len(vector)
    a = [[*row, b] for row, b in zip(matrix, vector, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: (abs(a[r][col]), -r))
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            factor = a[r][col] / a[col][col]
            if factor:
                a[r] = [v - factor * p for v, p in zip(a[r], a[col], strict=True)]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (a[r][n] - sum(a[r][c] * x[c] for c in range(r + 1, n))) / a[r][r]
    return x


def standardise(xs: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
    """Each feature's mean and scale (population standard deviation; 1 for a constant)."""
    n = len(xs)
    means = [math.fsum(col) / n for col in zip(*xs, strict=True)]
    scales = []
    for col, mean in zip(zip(*xs, strict=True), means, strict=True):
        sd = math.sqrt(math.fsum((v - mean) ** 2 for v in col) / n)
        scales.append(sd if sd > 1e-12 else 1.0)
    return means, scales


def fit(xs: Sequence[Sequence[float]], ys: Sequence[bool], lam: float,
        steps: int = NEWTON_STEPS) -> dict[str, list[float] | float]:
    """Logistic regression minimising mean log-loss + lam/2 |w|^2 (bias free) by Newton steps.

    Returns the means, scales, weights and bias (the weights over standardised features).
    """
    means, scales = standardise(xs)
    n, d = len(xs), len(means)
    cols = [[(row[j] - means[j]) / scales[j] for row in xs] for j in range(d)] + [[1.0] * n]
    target = [1.0 if y else 0.0 for y in ys]
    w = [0.0] * (d + 1)  # the last is the bias
    for _ in range(steps):
        z = [math.fsum(map(operator.mul, w, point)) for point in zip(*cols, strict=True)]
        p = [sigmoid(v) for v in z]
        residual = [pi - t for pi, t in zip(p, target, strict=True)]
        s = [pi * (1.0 - pi) for pi in p]
        grad = [math.fsum(map(operator.mul, col, residual)) / n + (lam * w[j] if j < d else 0.0)
                for j, col in enumerate(cols)]
        weighted = [list(map(operator.mul, col, s)) for col in cols]
        hess = [[math.fsum(map(operator.mul, weighted[a], cols[b])) / n
                 + (lam if a == b and a < d else 0.0) for b in range(d + 1)] for a in range(d + 1)]
        hess[d][d] += 1e-9  # a separable fold must not make the bias's row singular
        step = _solve(hess, grad)
        w = [wi - si for wi, si in zip(w, step, strict=True)]
    return {"means": means, "scales": scales, "weights": w[:d], "bias": w[d]}


def probabilities(params: dict[str, list[float] | float], xs: Sequence[Sequence[float]]) -> list[float]:
    """P(relevant) of each feature vector under the fitted parameters (as the shipped model computes it)."""
    means, scales, weights = (params[k] for k in ("means", "scales", "weights"))
    assert isinstance(means, list) and isinstance(scales, list) and isinstance(weights, list)
    model = RelevanceModel(FEATURES, tuple(means), tuple(scales), tuple(weights),
                           float(params["bias"]), threshold=0.5, band=0.0)  # type: ignore[arg-type]
    return [model.probability(x) for x in xs]


# --- scoring and choosing


def decisions(rows: Sequence[Row], probs: Sequence[float], threshold: float) -> list[Prediction]:
    """The learned decision: compiler news when P >= threshold, relevant with the rules' layers."""
    none: Prediction = (False, frozenset())
    return [row.if_relevant if p >= threshold else none for row, p in zip(rows, probs, strict=True)]


def _quality(examples: Sequence[Example], rows: Sequence[Row], chosen: Sequence[int],
             predictions: Sequence[Prediction]) -> Quality:
    return count([examples[i] for i in chosen], [predictions[i] for i in chosen])


def fit_on(rows: Sequence[Row], copies: Copies, train: Sequence[int],
           lam: float) -> dict[str, list[float] | float]:
    """:func:`fit` on the examples ``train`` and their shorter copies."""
    chosen = [r for i in train for r in (rows[i], *copies[i])]
    return fit([r.x for r in chosen], [r.y for r in chosen], lam)


def _oof(rows: Sequence[Row], copies: Copies, folds: Sequence[int], among: Sequence[int],
         lam: float) -> dict[int, float]:
    """Out-of-fold probabilities over the folds ``among``: each fold predicted by the others."""
    probs: dict[int, float] = {}
    for k in among:
        train = [i for i, f in enumerate(folds) if f in among and f != k]
        held = [i for i, f in enumerate(folds) if f == k]
        params = fit_on(rows, copies, train, lam)
        probs.update(zip(held, probabilities(params, [rows[i].x for i in held]), strict=True))
    return probs


def choose(examples: Sequence[Example], rows: Sequence[Row], copies: Copies, folds: Sequence[int],
           among: Sequence[int]) -> tuple[float, float, float]:
    """The (lambda, threshold) with the best CV objective over the folds ``among``, and that objective.

    Ties go to the stronger regularisation, then to the threshold nearer 0.5.
    """
    chosen = [i for i, f in enumerate(folds) if f in among]
    best: tuple[float, float, float, float] | None = None
    for lam in LAMBDAS:
        probs = _oof(rows, copies, folds, among, lam)
        full = [probs.get(i, 0.0) for i in range(len(rows))]
        for t in THRESHOLDS:
            score = round(_objective(_quality(examples, rows, chosen, decisions(rows, full, t))), 9)
            key = (score, lam, -abs(t - 0.5), t)
            if best is None or key > best:
                best = key
    assert best is not None
    return best[1], best[3], best[0]


def _band(rows: Sequence[Row], probs: Sequence[float], threshold: float) -> float:
    """The probability band around the threshold holding as many entries as the rules' triage band.

    The LLM's second opinion then costs what it costs with the rules.
    """
    share = sum(r.borderline for r in rows) / len(rows)
    gaps = sorted(abs(p - threshold) for r, p in zip(rows, probs, strict=True) if r.eligible)
    want = round(share * len(rows))
    if want <= 0 or not gaps:
        return 0.0
    return round(gaps[min(want, len(gaps)) - 1] + 1e-6, 6)


def _prf(quality: Quality) -> str:
    c = quality.relevance
    return f"P {c.precision:.3f} R {c.recall:.3f} F1 {c.f1:.3f}"


def cross_validate(examples: Sequence[Example], rows: Sequence[Row], copies: Copies,
                   probes: Mapping[int, Mapping[int, Row]]) -> dict[str, object]:
    """Nested 5-fold CV of the learned decision against the rules' (printed); the figures measured.

    ``probes``: per cut of :data:`LENGTH_CUTS`, the rows of the examples longer
    than it, cut there; each is scored by its example's out-of-fold model
    (:func:`length_check`).
    """
    folds = [cv_fold(e) for e in examples]
    every = list(range(CV_FOLDS))
    rules = [r.rules for r in rows]
    out: list[Prediction] = [(False, frozenset())] * len(rows)
    full_p: dict[int, float] = {}
    cut_p: dict[int, dict[int, float]] = {c: {} for c in probes}
    gains_f1, gains_obj, per_fold = [], [], []
    for k in every:
        others = [f for f in every if f != k]
        lam, t, inner = choose(examples, rows, copies, folds, others)
        train = [i for i, f in enumerate(folds) if f != k]
        held = [i for i, f in enumerate(folds) if f == k]
        params = fit_on(rows, copies, train, lam)
        probs = probabilities(params, [rows[i].x for i in held])
        for i, p in zip(held, probs, strict=True):
            out[i] = rows[i].if_relevant if p >= t else (False, frozenset())
            full_p[i] = p - t
        for c, probe in probes.items():
            mine = [i for i in held if i in probe]
            cut_p[c].update(zip(mine, (p - t for p in probabilities(
                params, [probe[i].x for i in mine])), strict=True))
        learned, base = _quality(examples, rows, held, out), _quality(examples, rows, held, rules)
        gains_f1.append(learned.relevance.f1 - base.relevance.f1)
        gains_obj.append(_objective(learned) - _objective(base))
        per_fold.append({"fold": k, "entries": len(held), "lambda": lam, "threshold": t,
                         "learned_relevance_f1": round(learned.relevance.f1, 4),
                         "rules_relevance_f1": round(base.relevance.f1, 4)})
        print(f"  fold {k} ({len(held)} entries; chose lambda {lam}, threshold {t:.2f}, inner "
              f"objective {inner:.3f}): learned {_prf(learned)}; rules {_prf(base)}; "
              f"objective {_objective(learned):.3f} vs {_objective(base):.3f}")
    learned, base = count(examples, out), count(examples, rules)
    print(f"== pooled, learned (nested CV): {_prf(learned)}, layer F1 {learned.micro.f1:.3f}, "
          f"objective {_objective(learned):.3f}")
    print(f"== pooled, rules (same entries): {_prf(base)}, layer F1 {base.micro.f1:.3f}, "
          f"objective {_objective(base):.3f}")
    if any(e.split == "dev" for e in examples):  # with dev: each convention's entries apart
        for group, inside in (("dev", True), ("outside-tune", False)):
            chosen = [i for i, e in enumerate(examples) if (e.split == "dev") is inside]
            mine = _quality(examples, rows, chosen, out)
            theirs = _quality(examples, rows, chosen, rules)
            print(f"==   {group} entries alone ({len(chosen)}): learned {_prf(mine)}, layer F1 "
                  f"{mine.micro.f1:.3f}; rules {_prf(theirs)}, layer F1 {theirs.micro.f1:.3f}")
    print(f"== relevance F1: {_gain(gains_f1)}")
    print(f"== objective:    {_gain(gains_obj)}")
    (mean_f1, se_f1), (mean_obj, se_obj) = mean_and_error(gains_f1), mean_and_error(gains_obj)
    length = length_check(rows, probes, full_p, cut_p)
    return {"folds": per_fold, "length": length,
            "learned": _figures(learned), "rules": _figures(base),
            "relevance_f1_gain": round(mean_f1, 4), "relevance_f1_gain_se": round(se_f1, 4),
            "objective_gain": round(mean_obj, 4), "objective_gain_se": round(se_obj, 4),
            "clear": bool((mean_obj > 2 * se_obj and mean_obj > 0)
                          or (mean_f1 > 2 * se_f1 and mean_f1 > 0))}


def length_check(rows: Sequence[Row], probes: Mapping[int, Mapping[int, Row]],
                 full: Mapping[int, float], cuts: Mapping[int, Mapping[int, float]]
                 ) -> list[dict[str, int]]:
    """How many training entries change their verdict when cut shorter (printed, out of fold).

    ``full`` and ``cuts`` hold each entry's out-of-fold P(relevant) minus the
    fold's threshold, in full and cut at each length. Per cut: the entries
    longer than it, how many the model calls news in full and not once cut
    (``lost``; ``lost_relevant`` among those labelled relevant) or the reverse
    (``gained``), and the same for the rules' relevant verdict (layers
    included) and the learned one (the model's news with the rules' layers).
    """
    figures = []
    for c, probe in probes.items():
        longer = sorted(probe)
        news = [(full[i] >= 0, cuts[c][i] >= 0) for i in longer]
        learned = [(a and rows[i].if_relevant[0], b and probe[i].if_relevant[0])
                   for i, (a, b) in zip(longer, news, strict=True)]
        rules = [(rows[i].rules[0], probe[i].rules[0]) for i in longer]
        row = {"cut": c, "entries": len(longer),
               "lost": sum(a and not b for a, b in news),
               "lost_relevant": sum(a and not b and rows[i].y
                                    for i, (a, b) in zip(longer, news, strict=True)),
               "gained": sum(b and not a for a, b in news),
               "learned_lost": sum(a and not b for a, b in learned),
               "learned_gained": sum(b and not a for a, b in learned),
               "rules_lost": sum(a and not b for a, b in rules),
               "rules_gained": sum(b and not a for a, b in rules)}
        figures.append(row)
        print(f"== cut at {c} chars ({row['entries']} entries longer): model news lost "
              f"{row['lost']} ({row['lost_relevant']} labelled relevant), gained {row['gained']}; "
              f"relevant verdict lost/gained: learned {row['learned_lost']}/"
              f"{row['learned_gained']}, rules {row['rules_lost']}/{row['rules_gained']}")
    return figures


def _figures(quality: Quality) -> dict[str, float]:
    return {"relevance_precision": round(quality.relevance.precision, 4),
            "relevance_recall": round(quality.relevance.recall, 4),
            "relevance_f1": round(quality.relevance.f1, 4),
            "layer_f1": round(quality.micro.f1, 4), "objective": round(_objective(quality), 4)}


TRAINING_SETS = ("dev+outside-tune", "outside-tune")


def training_set(name: str) -> list[Example]:
    """The examples of a training set (:data:`TRAINING_SETS`): the outside tuning halves (and dev)."""
    examples = cv_examples("outside-tune")
    if name == "dev+outside-tune":
        return [e for e in load() if e.split == "dev"] + examples
    if name != "outside-tune":
        raise ValueError(f"unknown training set {name!r}")
    return examples


def train(examples: Sequence[Example], rows: Sequence[Row], copies: Copies,
          name: str) -> dict[str, object]:
    """The shipped model's document: (lambda, threshold) chosen by 5-fold CV, fitted on every row."""
    folds = [cv_fold(e) for e in examples]
    lam, threshold, objective = choose(examples, rows, copies, folds, list(range(CV_FOLDS)))
    params = fit_on(rows, copies, range(len(rows)), lam)
    probs = probabilities(params, [r.x for r in rows])
    return {"features": list(FEATURES), "training_set": name, "training_size": len(rows),
            "augment_cuts": [c for c in AUGMENT_CUTS if any(copies)],
            "training_copies": sum(len(c) for c in copies),
            "lambda": lam, "threshold": threshold, "cv_objective": round(objective, 4),
            "band": _band(rows, probs, threshold),
            **{k: _rounded(v) for k, v in params.items()}}


def source_group(example: Example) -> str:
    """The source an example comes from, as leave-one-source-out CV holds it out: its set
    (the project's own labels, or a blind-labelled set, halves together) and its source key."""
    named = "project" if example.split in ("dev", "heldout", "heldout2") else \
        example.split.removesuffix("-tune").removesuffix("-final")
    return f"{named}:{example.source_key}"


def every_tuned_example() -> list[Example]:
    """Every labelled example tuned on: the project's labels, both halves of the single-reader
    sets and the tuned double-labelled sets (never a set that is not tuned on)."""
    examples = load()
    examples += [*load_unseen(), *(e for named in LATER_SETS for e in load_later(named))]
    return examples + [e for named, (_, tuned) in DOUBLE_SETS.items() if tuned
                       for e in load_double(named)]


def by_source(examples: Sequence[Example], rows: Sequence[Row], copies: Copies) -> None:
    """Leave-one-source-out CV: each source predicted by a model trained on every other one
    (lambda and threshold chosen by 5-fold CV inside the training sources), against the rules.

    Random folds put entries of every source on both sides, so they measure a model on the
    sources it was trained on; a source it never saw is what a new feed is.
    """
    groups = [source_group(e) for e in examples]
    out: list[Prediction] = [(False, frozenset())] * len(rows)
    for group in sorted(set(groups)):
        train = [i for i, g in enumerate(groups) if g != group]
        held = [i for i, g in enumerate(groups) if g == group]
        inner = [cv_fold(examples[i]) if g != group else -1 for i, g in enumerate(groups)]
        lam, t, _ = choose(examples, rows, copies, inner, list(range(CV_FOLDS)))
        params = fit_on(rows, copies, train, lam)
        for i, p in zip(held, probabilities(params, [rows[i].x for i in held]), strict=True):
            out[i] = rows[i].if_relevant if p >= t else (False, frozenset())
    print(f"{'held-out source':<34} {'entries':>7}  {'learned':<34} rules")
    for group in [*sorted(set(groups)), "all"]:
        chosen = [i for i, g in enumerate(groups) if group in (g, "all")]
        learned = _quality(examples, rows, chosen, out)
        base = _quality(examples, rows, chosen, [r.rules for r in rows])
        layers = f"   layer F1 {learned.micro.f1:.3f} vs {base.micro.f1:.3f}" if group == "all" else ""
        print(f"{group:<34} {len(chosen):>7}  {_prf(learned):<34} {_prf(base)}{layers}")


def _rounded(value: list[float] | float) -> list[float] | float:
    return [round(v, _DIGITS) for v in value] if isinstance(value, list) else round(value, _DIGITS)


def main() -> int:
    """Cross-validate, train on the whole training set, write the model file."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--on", choices=TRAINING_SETS, default=TRAINING_SETS[0],
                        help="the labels to train on (never a final half, never heldout)")
    parser.add_argument("--no-write", action="store_true", help="print the figures only")
    parser.add_argument("--out", type=Path, default=MODEL, help="where to write the model")
    parser.add_argument("--no-augment", action="store_true",
                        help="train on the entries as labelled only (no shorter copies)")
    parser.add_argument("--by-source", action="store_true",
                        help="only print leave-one-source-out CV over every tuned set, against the rules")
    args = parser.parse_args()
    taxonomy = load_taxonomy()
    if args.by_source:
        examples = every_tuned_example()
        rows = rows_of(examples, taxonomy)
        print(f"######## leave-one-source-out CV over every tuned set ({len(examples)} entries)")
        by_source(examples, rows, copies_of(examples, taxonomy, () if args.no_augment else AUGMENT_CUTS))
        return 0
    name = args.on
    examples = training_set(name)
    rows = rows_of(examples, taxonomy)
    copies = copies_of(examples, taxonomy, () if args.no_augment else AUGMENT_CUTS)
    probes = probes_of(examples, taxonomy)
    print(f"######## learned relevance over {name} ({len(examples)} entries, "
          f"{sum(r.y for r in rows)} relevant; {len(FEATURES)} features; folds by SHA-256 of the id)")
    print(f"nested {CV_FOLDS}-fold CV: lambda from {LAMBDAS}, threshold from "
          f"{THRESHOLDS[0]:.2f}..{THRESHOLDS[-1]:.2f}, chosen per fold on the other four; "
          f"{sum(len(c) for c in copies)} shorter copies in training (cut at "
          f"{'none' if args.no_augment else AUGMENT_CUTS})")
    figures = cross_validate(examples, rows, copies, probes)
    document = train(examples, rows, copies, name)
    document["cv"] = figures
    model_from(document)  # the file must load
    print(f"shipped: lambda {document['lambda']}, threshold {document['threshold']}, "
          f"triage band {document['band']} (5-fold CV objective {document['cv_objective']})")
    if not args.no_write:
        args.out.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
