"""Classifier quality (rules mode): relevance P/R, layer micro-F1, per layer.

    .venv/bin/python bench/quality.py [--errors SPLIT] [--taxonomy PATH] [--no-final]

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

Last, the order of the days' events against a compiler engineer's ranking
(tests/test_expert_order.py, tests/data/expert_*.toml): the bundled sample days
and four real days of LLVM blog posts, each built through the pipeline; per day
the share of pairs of different tiers the scores put in order, Kendall's tau-b
and the named pairs that hold.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from labelled import SPLITS, Example, evaluate, load, report, split
from test_expert_order import measure
from test_expert_order import report as order_report

from digest.analyze.taxonomy import Taxonomy, load_taxonomy

UNSEEN = Path(__file__).resolve().parent / "data" / "unseen_labels.jsonl"
UNSEEN_HALVES = ("unseen-tune", "unseen-final")
_KIND_KEYS = {"arxiv": "arxiv-cs.pl", "rss": "blog", "atom": "blog",
              "github-releases": "gh-unknown"}


def _source_key(row: dict[str, object]) -> str:
    """The source key the pipeline would give the entry's feed (its prior, if any)."""
    title, source_file = str(row["title"]).lower(), str(row["source_file"])
    if title.startswith("llvm weekly"):
        return "llvm-weekly"
    if source_file.startswith("llvm-blog"):
        return "llvm-blog"
    return _KIND_KEYS[str(row["source_kind"])]


def unseen_half(item_id: str) -> str:
    """``unseen-tune`` or ``unseen-final``: the first byte of SHA-256 of the item's id."""
    digest = hashlib.sha256(item_id.encode("utf-8")).digest()
    return "unseen-tune" if digest[0] < 128 else "unseen-final"


def load_unseen(path: Path = UNSEEN) -> list[Example]:
    """The never-tuned examples, each with its half (``unseen-tune`` or ``unseen-final``) as split."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [Example(r["title"], r["summary"] or "", r["source_kind"], bool(r["relevant"]),
                    frozenset(r["layers"]), unseen_half(str(r["id"])), _source_key(r))
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
    for half in UNSEEN_HALVES if final else UNSEEN_HALVES[:1]:
        examples = [e for e in unseen if e.split == half]
        sets = {half: examples,
                f"{half}-without-llvm-weekly": [e for e in examples
                                                if e.source_key != "llvm-weekly"],
                f"{half}-llvm-weekly-only": [e for e in examples
                                             if e.source_key == "llvm-weekly"]}
        for name, subset in sets.items():
            quality = evaluate(subset, taxonomy)
            print(report(name, quality))
            if errors == name == "unseen-tune":  # never the final half's
                print("\n".join(quality.errors))


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
    parser.add_argument("--errors", choices=[*SPLITS, "unseen-tune"], default=None,
                        help="also list the misclassified entries of this split "
                             "(never of unseen-final)")
    parser.add_argument("--taxonomy", type=Path, default=None, help="taxonomy TOML to measure")
    parser.add_argument("--no-final", action="store_true",
                        help="leave out unseen-final's figures (while tuning)")
    args = parser.parse_args()
    taxonomy = load_taxonomy(args.taxonomy)
    _tuned(taxonomy, args.errors)
    _never_tuned(taxonomy, args.errors, final=not args.no_final)
    _expert_order()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
