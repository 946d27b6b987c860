"""The labelled set (tests/data/labelled.jsonl) and the quality figures measured on it.

Each line: ``title``, ``summary``, ``source_kind``, ``relevant``, ``layers``
(empty for negatives), ``split`` (``dev`` for tuning; ``heldout`` and
``heldout2`` never looked at while tuning, ``heldout2`` written after the
first round of tuning) and an optional ``source_key``. Labelling rules, fixed
before tuning:

- relevant: the work is about compiler technology (compilers, IRs, code or
  kernel generation, autotuning, ML compiler stacks, compiler projects'
  releases); general ML or systems work that merely runs on GPUs is not.
- benchmark: a new benchmark, or an evaluation reporting several results
  (three or more figures, or comparisons across suites or platforms).
- hardware_backend: the work targets or is evaluated on named hardware
  (a GPU generation, TPU, NPU, FPGA, PIM, a CPU ISA), not "runs on GPUs".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from digest.analyze.classify import classify
from digest.analyze.taxonomy import Taxonomy
from digest.domain.items import Item
from digest.domain.layers import LAYER_IDS

LABELLED = Path(__file__).resolve().parent / "data" / "labelled.jsonl"
_DEFAULT_KEYS = {"arxiv": "arxiv-cs.pl", "rss": "blog", "github-releases": "gh-unknown"}


@dataclass(frozen=True)
class Example:
    """One labelled entry."""

    title: str
    summary: str
    source_kind: str
    relevant: bool
    layers: frozenset[str]
    split: str
    source_key: str
    id: str = ""  # a stable identity (the unseen set's URL); "" means the title

    @property
    def key(self) -> str:
        """What the cross-validation folds hash: the id, else the title."""
        return self.id or self.title

    def item(self, entry_id: int = 1) -> Item:
        """The entry as the classifier sees it."""
        return Item(entry_id, self.source_key, self.source_key, 0.7, self.source_kind,
                    self.title, self.summary, None)


def load(path: Path = LABELLED) -> list[Example]:
    """Every labelled example in file order."""
    examples = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        key = row.get("source_key") or _DEFAULT_KEYS[row["source_kind"]]
        examples.append(Example(row["title"], row["summary"], row["source_kind"], row["relevant"],
                                frozenset(row["layers"]), row.get("split", "dev"), key))
    return examples


@dataclass
class Counts:
    """True positives, false positives and false negatives of one decision."""

    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, predicted: bool, actual: bool) -> None:
        """Count one decision."""
        self.tp += predicted and actual
        self.fp += predicted and not actual
        self.fn += actual and not predicted

    @property
    def precision(self) -> float:
        """tp / (tp + fp), 1.0 when nothing was predicted."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        """tp / (tp + fn), 1.0 when nothing was expected."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    @property
    def f1(self) -> float:
        """The harmonic mean of precision and recall."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclass
class Quality:
    """Relevance and layer quality over a set of examples, plus the misclassified ones."""

    size: int = 0
    relevance: Counts = field(default_factory=Counts)
    micro: Counts = field(default_factory=Counts)
    per_layer: dict[str, Counts] = field(default_factory=lambda: {i: Counts() for i in LAYER_IDS})
    errors: list[str] = field(default_factory=list)


Prediction = tuple[bool, frozenset[str]]  # relevant, layers


def predict(examples: Iterable[Example], taxonomy: Taxonomy) -> list[Prediction]:
    """The rules' verdict on every example: relevant and its layers."""
    verdicts = (classify(example.item(), taxonomy) for example in examples)
    return [(v.relevant, frozenset(v.layers)) for v in verdicts]


def evaluate(examples: Iterable[Example], taxonomy: Taxonomy) -> Quality:
    """Classify every example and count against its labels."""
    examples = list(examples)
    return count(examples, predict(examples, taxonomy))


def count(examples: Sequence[Example], predictions: Sequence[Prediction]) -> Quality:
    """Count predictions against the examples' labels (the two in the same order)."""
    quality = Quality()
    for example, (relevant, layers) in zip(examples, predictions, strict=True):
        quality.size += 1
        quality.relevance.add(relevant, example.relevant)
        predicted = set(layers)
        for lid in LAYER_IDS:
            quality.per_layer[lid].add(lid in predicted, lid in example.layers)
            quality.micro.add(lid in predicted, lid in example.layers)
        if relevant != example.relevant or predicted != example.layers:
            quality.errors.append(_describe(example, relevant, predicted))
    return quality


def _describe(example: Example, relevant: bool, predicted: set[str]) -> str:
    missing = sorted(example.layers - predicted)
    extra = sorted(predicted - example.layers)
    return (f"[{example.split}] {example.title[:70]!r}: relevant {relevant} "
            f"(label {example.relevant}), missing {missing}, extra {extra}")


def report(name: str, quality: Quality) -> str:
    """The printed figures for one split."""
    lines = [
        f"== {name}: {quality.size} entries",
        f"relevance precision {quality.relevance.precision:.3f} "
        f"recall {quality.relevance.recall:.3f}",
        f"layer micro-F1 {quality.micro.f1:.3f} (P {quality.micro.precision:.3f} "
        f"R {quality.micro.recall:.3f})",
    ]
    lines += [f"  {lid:<17} F1 {c.f1:.3f} (tp {c.tp} fp {c.fp} fn {c.fn})"
              for lid, c in quality.per_layer.items()]
    return "\n".join(lines)


SPLITS = ("dev", "heldout", "heldout2", "heldout-all", "all")


def split(examples: Sequence[Example], name: str) -> list[Example]:
    """The examples of one split (``heldout-all`` for both held-out splits, ``all`` for every one)."""
    if name == "heldout-all":
        return [e for e in examples if e.split in ("heldout", "heldout2")]
    return [e for e in examples if name in ("all", e.split)]
