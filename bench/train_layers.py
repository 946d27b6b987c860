"""Train the learned layer choice (digest/data/layer_model.json) and measure it set by set.

    python bench/train_layers.py            # leave each set out in turn, then write the model
    python bench/train_layers.py --by-set   # only the leave-one-set-out figures
    python bench/train_layers.py --check    # retrain and say whether the shipped file is the same

Needs the ``train`` extra (``pip install -e .[train]``: scikit-learn). The
product never imports scikit-learn: the file holds plain weights and
digest/analyze/layer_model.py evaluates them with the standard library.

Training data: the relevant entries of every labelled set in
:data:`TRAINING_SETS` (never a set named in quality.NEVER_TRAINED or
NOT_YET_TRAINED), their labels the readers' (adjudicated, for the
double-labelled sets). The inputs are the product's own (classify.layer_inputs,
with the layer model off); one L2 logistic regression per layer (C = :data:`C`,
scikit-learn's lbfgs, deterministic) over the rules' evidence, the matched
phrases and the words a training entry shares with at least one other
(:data:`MIN_DF`). A layer is chosen at P >= :data:`THRESHOLD`, else the most
probable one.

``--by-set`` is the honest figure: each set in turn is left out of training
and measured (layer micro-F1 on its relevant entries), beside the rules' own
figure on the same entries. The parameters above were chosen on those
figures, so they are tuning figures; the never-trained sets are measured only
by bench/quality.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from labelled import Example, load
from quality import (
    DOUBLE_SETS,
    LATER_SETS,
    NEVER_TRAINED,
    NOT_YET_TRAINED,
    load_double,
    load_later,
    load_unseen,
)

from digest.analyze.classify import classified_text, classify, layer_inputs
from digest.analyze.layer_model import LayerModel, model_from
from digest.analyze.taxonomy import Taxonomy, load_taxonomy
from digest.domain.layers import LAYER_IDS
from digest.resources import data_dir

MODEL = data_dir() / "layer_model.json"
C = 0.1  # inverse L2 strength (scikit-learn's C)
THRESHOLD = 0.35
MIN_DF = 3  # a word must occur in at least this many training entries
_DIGITS = 5  # the file's precision
_SMALLEST = 0.01  # weights smaller than this are left out of the file

Features = dict[str, float]


def labelled_sets() -> dict[str, list[Example]]:
    """Every labelled set the learned models may learn from, by name (never a NEVER_TRAINED or a
    NOT_YET_TRAINED one)."""
    sets: dict[str, list[Example]] = {"project": list(load()), "unseen": load_unseen()}
    sets.update({name: load_later(name) for name in LATER_SETS})
    left_out = NEVER_TRAINED | NOT_YET_TRAINED
    sets.update({name: load_double(name) for name in DOUBLE_SETS if name not in left_out})
    return sets


def training_sets() -> dict[str, list[Example]]:
    """The layer model's training sets, by name: the relevant entries of each labelled set."""
    return {name: [e for e in examples if e.relevant] for name, examples in labelled_sets().items()}


def inputs_of(examples: Sequence[Example], taxonomy: Taxonomy) -> list[dict[str, Features]]:
    """Each example's model inputs per layer, as the classifier computes them."""
    rules = replace(taxonomy, layer_model=None)
    out = []
    for example in examples:
        item = example.item()
        verdict = classify(item, rules)
        out.append(layer_inputs(verdict.totals, verdict.evidence, classified_text([item]), rules))
    return out


def vocabulary(rows: Iterable[Features]) -> list[str]:
    """The feature names kept: every non-word feature, and words in at least MIN_DF rows."""
    counts: Counter[str] = Counter()
    for row in rows:
        counts.update(row)
    return sorted(n for n, k in counts.items() if not n.startswith("w:") or k >= MIN_DF)


def fit_logistic(rows: Sequence[Features], targets: Sequence[bool], names: Sequence[str],
                 c: float) -> dict[str, object]:
    """``{"bias", "weights"}`` of an L2 logistic regression (inverse strength ``c``) over ``names``."""
    import numpy as np  # the train extra's: the product does not need them
    from sklearn.linear_model import LogisticRegression

    index = {n: i for i, n in enumerate(names)}
    x = np.zeros((len(rows), len(names)))
    for r, row in enumerate(rows):
        for name, value in row.items():
            if name in index:
                x[r, index[name]] = value
    model = LogisticRegression(C=c, max_iter=10000).fit(x, np.array(targets))
    weights = {n: round(float(w), _DIGITS) for n, w in zip(names, model.coef_[0], strict=True)
               if abs(w) >= _SMALLEST}
    return {"bias": round(float(model.intercept_[0]), _DIGITS), "weights": weights}


def fit(rows: Sequence[Mapping[str, Features]], labels: Sequence[frozenset[str]]) -> dict[str, object]:
    """The model document fitted on ``rows`` (inputs per layer) and their layer labels."""
    names = vocabulary(row[LAYER_IDS[0]] for row in rows)
    layers = {lid: fit_logistic([row[lid] for row in rows], [lid in label for label in labels], names, C)
              for lid in LAYER_IDS}
    return {"threshold": THRESHOLD, "C": C, "min_df": MIN_DF, "training_size": len(rows),
            "layers": layers}


def _f1(predicted: Sequence[Sequence[str]], labels: Sequence[frozenset[str]]) -> tuple[float, int, int, int]:
    tp = fp = fn = 0
    for chosen, label in zip(predicted, labels, strict=True):
        tp += len(set(chosen) & label)
        fp += len(set(chosen) - label)
        fn += len(label - set(chosen))
    return (2 * tp / (2 * tp + fp + fn) if tp else 0.0), tp, fp, fn


def choose(model: LayerModel, row: Mapping[str, Features]) -> tuple[str, ...]:
    """The model's layers for one entry's inputs."""
    return model.choose({lid: model.probability(lid, row[lid]) for lid in LAYER_IDS})


def by_set(sets: Mapping[str, Sequence[Example]], rows: Mapping[str, list[dict[str, Features]]],
           taxonomy: Taxonomy) -> None:
    """Leave each set out of training in turn; print its layer F1, the model's and the rules'."""
    print(f"layer micro-F1 on each set's relevant entries, the set left out of training "
          f"(C {C}, threshold {THRESHOLD}, words in >= {MIN_DF} entries)")
    print(f"{'set':<12} {'entries':>7} {'rules':>7} {'model':>7}   rules tp/fp/fn   model tp/fp/fn")
    rules = replace(taxonomy, layer_model=None)
    for name, examples in sets.items():
        train_rows = [r for other in sets if other != name for r in rows[other]]
        train_labels = [e.layers for other in sets if other != name for e in sets[other]]
        model = model_from(fit(train_rows, train_labels))
        labels = [e.layers for e in examples]
        mine = _f1([choose(model, r) for r in rows[name]], labels)
        theirs = _f1([classify(e.item(), rules).layers for e in examples], labels)
        print(f"{name:<12} {len(examples):>7} {theirs[0]:>7.3f} {mine[0]:>7.3f}   "
              f"{theirs[1]:>4}/{theirs[2]:>3}/{theirs[3]:>3}     {mine[1]:>4}/{mine[2]:>3}/{mine[3]:>3}",
              flush=True)


def arguments(description: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """A trainer's command line: ``--by-set`` and ``--check``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--by-set", action="store_true", help="only the leave-one-set-out figures")
    parser.add_argument("--check", action="store_true",
                        help="retrain and compare with the shipped file (exit 1 when it differs)")
    return parser.parse_args(argv)


def ship(path: Path, document: dict[str, object], sets: Mapping[str, Sequence[Example]], *,
         check: bool, weights: int) -> int:
    """Write a trained ``document`` (with its training sets' sizes) to ``path``, or with ``check``
    say whether the shipped file is the same (exit status 1 when it differs)."""
    document["training_sets"] = {name: len(examples) for name, examples in sets.items()}
    text = json.dumps(document, indent=1, sort_keys=True) + "\n"
    if check:
        same = path.exists() and path.read_text(encoding="utf-8") == text
        print(f"{path}: {'the same as a retrain' if same else 'differs from a retrain'}")
        return 0 if same else 1
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}: {document['training_size']} entries, {weights} weights")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(__doc__.split("\n", 1)[0], argv)
    taxonomy = load_taxonomy(None)
    sets = training_sets()
    rows = {name: inputs_of(examples, taxonomy) for name, examples in sets.items()}
    if not args.check:
        by_set(sets, rows, taxonomy)
    if args.by_set:
        return 0
    document = fit([r for name in sets for r in rows[name]], [e.layers for name in sets for e in sets[name]])
    weights = sum(len(table) for table in model_from(document).weights.values())
    return ship(MODEL, document, sets, check=args.check, weights=weights)


if __name__ == "__main__":
    raise SystemExit(main())
