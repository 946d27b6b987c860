"""A learned choice of a relevant entry's layers (``data/layer_model.json``).

Why: the rules' layer tables fit the sets they were tuned on and no more (layer
F1 0.58 on relevant items of a set two readers labelled and nobody tuned on,
against the readers' 0.89 with each other). A logistic model per layer, trained
by ``bench/train_layers.py`` on every labelled set, reads what the readers
read: the words. Left out of its training one set at a time, it beat the rules
on four of the five sets (the README's figures).

The rules still decide what is compiler news and still give their evidence: an
entry is relevant only when the rules find it compiler news
(digest/analyze/classify.py); the model then chooses which layers. News the
rules give no layer has the layers the model is sure of (P >= the threshold),
else none: a release's notes spread their evidence too thin over the layers'
tables for any threshold, while the words say which layer it is. Its inputs
for layer L (:func:`layer_features`, shared by the trainer and the classifier):

- the rules' evidence for L: its share of L's threshold (clipped at 3), its
  heaviest phrase in the subject (clipped at 5), whether the rules chose L,
  whether L is the strongest and its share of the strongest;
- the entry's kinds (paper, blog, release);
- each taxonomy phrase the rules matched (``p:<phrase>``);
- each word of the text's first :data:`TEXT_CHARS` characters (``w:<word>``),
  present or absent, so a longer copy of a post does not count a word twice.

The layers are those with P >= the file's threshold, or (when the rules found a
layer) the most probable one when none reaches it: a relevant entry always has a
layer. Standard library only; the file is read once per process.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from digest.analyze.learned import read_logistic, read_model_file, read_threshold, sigmoid
from digest.domain.errors import ConfigError
from digest.domain.layers import LAYER_IDS

TEXT_CHARS = 2100  # a title and about 2,000 characters: an abstract, a post's opening
_WORD = re.compile(r"[a-z][a-z0-9+#]*(?:[-.][a-z0-9+#]+)*")
_KINDS = ("kind.arxiv", "kind.blog", "kind.release")
_MOST_SHARE = 3.0
_MOST_SPECIFIC = 5.0


def words(text: str) -> frozenset[str]:
    """The distinct lower-case words of ``text``'s first :data:`TEXT_CHARS` characters."""
    return frozenset(_WORD.findall(text[:TEXT_CHARS].lower()))


def layer_features(layer: str, shares: Mapping[str, float], rules_layers: Iterable[str],
                   totals: Mapping[str, float], phrases: Iterable[str],
                   text_words: Iterable[str]) -> dict[str, float]:
    """The model's named inputs for ``layer`` (the names the model file's weights use).

    ``shares``: each layer's evidence as a share of its threshold (a roundup's
    own); ``rules_layers``: the layers the rules chose; ``phrases``: every
    taxonomy phrase matched for a layer or the core.
    """
    top = max(shares.values(), default=0.0) or 1.0
    share = shares.get(layer, 0.0)
    values = {
        "share": min(share, _MOST_SHARE),
        "specific": min(totals.get(f"{layer}.specific", 0.0), _MOST_SPECIFIC),
        "rules": 1.0 if layer in set(rules_layers) else 0.0,
        "strongest": 1.0 if share == top else 0.0,
        "of_strongest": share / top,
    }
    values.update({kind: totals.get(kind, 0.0) for kind in _KINDS})
    values.update({f"p:{phrase}": 1.0 for phrase in phrases})
    values.update({f"w:{word}": 1.0 for word in text_words})
    return values


@dataclass(frozen=True)
class LayerModel:
    """One logistic model per layer over named features, and the decision threshold."""

    threshold: float
    biases: Mapping[str, float]
    weights: Mapping[str, Mapping[str, float]]

    def probability(self, layer: str, features: Mapping[str, float]) -> float:
        """P(the entry touches ``layer``) from its :func:`layer_features`."""
        weights = self.weights[layer]
        return sigmoid(self.biases[layer] + math.fsum(
            weights[name] * value for name, value in features.items() if name in weights))

    def choose(self, probabilities: Mapping[str, float]) -> tuple[str, ...]:
        """The layers at or above the threshold, in the fixed order; else the most probable."""
        chosen = tuple(lid for lid in LAYER_IDS if probabilities.get(lid, 0.0) >= self.threshold)
        if chosen or not probabilities:
            return chosen
        return (max(LAYER_IDS, key=lambda lid: (probabilities.get(lid, 0.0), -LAYER_IDS.index(lid))),)


def model_from(data: Mapping[str, object], where: str = "layer model") -> LayerModel:
    """A model from its JSON document; ConfigError when a layer or a number is missing or malformed."""
    threshold = read_threshold(data, where)
    layers = data.get("layers")
    if not isinstance(layers, dict) or set(layers) != set(LAYER_IDS):
        raise ConfigError(f"{where}: layers must hold a model for each of {', '.join(LAYER_IDS)}")
    biases: dict[str, float] = {}
    weights: dict[str, dict[str, float]] = {}
    for lid, entry in layers.items():
        read = read_logistic(entry)
        if read is None:
            raise ConfigError(f"{where}: layer {lid} needs a numeric bias and a table of weights")
        biases[lid], weights[lid] = read
    return LayerModel(threshold, biases, weights)


@functools.cache
def load_layer_model(name: str) -> LayerModel:
    """The model file ``name`` in the package's data folder (read once per process)."""
    return model_from(*read_model_file(name, "layer model"))
