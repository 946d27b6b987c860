"""Train the learned news veto (digest/data/news_veto.json) and measure it set by set.

    python bench/train_veto.py            # leave each set out in turn, then write the veto
    python bench/train_veto.py --by-set   # only the leave-one-set-out figures
    python bench/train_veto.py --check    # retrain and say whether the shipped file is the same

Needs the ``train`` extra, like bench/train_layers.py, whose sets, vocabulary
rule and fitting it shares: every entry (relevant or not) of every labelled set
the learned models may learn from (never a set named in quality.NEVER_TRAINED
or NOT_YET_TRAINED), the readers' relevance as the target. The inputs are the
product's own (digest/analyze/news_veto.py's ``news_features``, computed with
the veto off); one L2 logistic regression (C = :data:`C`). The rules' news
stays news at P >= :data:`THRESHOLD`, and always when its source has a prior (a
compiler project's own blog or releases: the veto never applies).

``--by-set`` is the honest figure: each set in turn is left out of training
and measured, relevance precision and recall of the rules alone and of the
rules with the veto, on the same entries. C and the threshold were chosen on
those figures (the best mean relevance F1 over the sets of a small grid, C in
0.03, 0.1, 0.3, threshold 0.2 to 0.5), so they are tuning figures; the
never-trained sets are measured only by bench/quality.py.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from labelled import Example
from train_layers import MIN_DF, Features, arguments, fit_logistic, labelled_sets, ship, vocabulary

from digest.analyze.classify import classified_text, classify, relevance_distance
from digest.analyze.news_veto import NewsVeto, news_features, veto_from
from digest.analyze.taxonomy import Taxonomy, load_taxonomy
from digest.resources import data_dir

VETO = data_dir() / "news_veto.json"
C = 0.03  # inverse L2 strength (scikit-learn's C)
THRESHOLD = 0.4


@dataclass(frozen=True)
class Row:
    """One entry as the veto sees it: the rules' verdict, whether its source has a prior, the inputs."""

    news: bool
    prior: bool
    inputs: Features


def inputs_of(examples: Sequence[Example], rules: Taxonomy) -> list[Row]:
    """Each example's rules verdict and veto inputs, as the classifier computes them (veto off)."""
    out = []
    for example in examples:
        item = example.item()
        verdict = classify(item, rules)
        out.append(Row(verdict.relevant, verdict.totals.get("prior", 0.0) > 0, news_features(
            verdict.totals, verdict.evidence, relevance_distance(verdict.totals, rules),
            classified_text([item]))))
    return out


def fit(rows: Sequence[Features], relevant: Sequence[bool]) -> dict[str, object]:
    """The veto document fitted on ``rows`` and the readers' relevance."""
    document = fit_logistic(rows, relevant, vocabulary(rows), C)
    return {**document, "threshold": THRESHOLD, "C": C, "min_df": MIN_DF, "training_size": len(rows)}


def _pr(predicted: Sequence[bool], relevant: Sequence[bool]) -> tuple[float, float, float]:
    tp = sum(p and r for p, r in zip(predicted, relevant, strict=True))
    fp = sum(p and not r for p, r in zip(predicted, relevant, strict=True))
    fn = sum(r and not p for p, r in zip(predicted, relevant, strict=True))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return precision, recall, (2 * tp / (2 * tp + fp + fn) if tp else 0.0)


def vetoed(veto: NewsVeto, row: Row) -> bool:
    """The rules' verdict with the veto applied (never to an entry whose source has a prior)."""
    return row.news and (row.prior or veto.probability(row.inputs) >= veto.threshold)


def by_set(sets: Mapping[str, Sequence[Example]], rows: Mapping[str, list[Row]]) -> None:
    """Leave each set out of training in turn; print its relevance P/R/F1, rules without and with the veto."""
    print(f"relevance on each set, the set left out of training (C {C}, threshold {THRESHOLD}, "
          f"words in >= {MIN_DF} entries)")
    print(f"{'set':<12} {'entries':>7}   rules P/R/F1         with veto P/R/F1")
    gains = []
    for name, examples in sets.items():
        train = [(r.inputs, e.relevant) for other in sets if other != name
                 for r, e in zip(rows[other], sets[other], strict=True)]
        veto = veto_from(fit([row for row, _ in train], [y for _, y in train]))
        truth = [e.relevant for e in examples]
        rules = _pr([row.news for row in rows[name]], truth)
        mine = _pr([vetoed(veto, row) for row in rows[name]], truth)
        gains.append(mine[2] - rules[2])
        print(f"{name:<12} {len(examples):>7}   {rules[0]:.3f}/{rules[1]:.3f}/{rules[2]:.3f}"
              f"    {mine[0]:.3f}/{mine[1]:.3f}/{mine[2]:.3f}", flush=True)
    print(f"mean relevance F1 gain over {len(gains)} sets: {sum(gains) / len(gains):+.3f}")


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(__doc__.split("\n", 1)[0], argv)
    rules = replace(load_taxonomy(None), veto=None, model=None)
    sets = labelled_sets()
    rows = {name: inputs_of(examples, rules) for name, examples in sets.items()}
    if not args.check:
        by_set(sets, rows)
    if args.by_set:
        return 0
    document = fit([row.inputs for name in sets for row in rows[name]],
                   [e.relevant for name in sets for e in sets[name]])
    return ship(VETO, document, sets, check=args.check, weights=len(veto_from(document).weights))

if __name__ == "__main__":
    raise SystemExit(main())
