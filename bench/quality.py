"""Classifier quality on the labelled set (rules mode): relevance P/R, layer micro-F1, per layer.

    .venv/bin/python bench/quality.py [--errors dev|heldout|all] [--taxonomy PATH]

Tune on the ``dev`` split only; ``heldout`` is reported to show how far the
figures carry beyond what was looked at.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from labelled import evaluate, load, report, split

from digest.taxonomy import load_taxonomy


def main() -> int:
    """Print the figures for the dev, held-out and whole labelled set."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--errors", choices=("dev", "heldout", "all"), default=None,
                        help="also list the misclassified entries of this split")
    parser.add_argument("--taxonomy", type=Path, default=None, help="taxonomy TOML to measure")
    args = parser.parse_args()
    taxonomy = load_taxonomy(args.taxonomy)
    examples = load()
    for name in ("dev", "heldout", "all"):
        quality = evaluate(split(examples, name), taxonomy)
        print(report(name, quality))
        if args.errors == name:
            print("\n".join(quality.errors))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
