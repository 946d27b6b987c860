"""Classifier quality on the labelled set (rules mode): relevance P/R, layer micro-F1, per layer.

    .venv/bin/python bench/quality.py [--errors SPLIT] [--taxonomy PATH]

Tune on the ``dev`` split only; ``heldout`` and ``heldout2`` (and
``heldout-all``, both together) are reported to show how far the figures carry
beyond what was looked at.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from labelled import SPLITS, evaluate, load, report, split

from digest.analyze.taxonomy import load_taxonomy


def main() -> int:
    """Print the figures for the dev split, each held-out split, both together and all."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--errors", choices=SPLITS, default=None,
                        help="also list the misclassified entries of this split")
    parser.add_argument("--taxonomy", type=Path, default=None, help="taxonomy TOML to measure")
    args = parser.parse_args()
    taxonomy = load_taxonomy(args.taxonomy)
    examples = load()
    for name in SPLITS:
        quality = evaluate(split(examples, name), taxonomy)
        print(report(name, quality))
        if args.errors == name:
            print("\n".join(quality.errors))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
