"""A learned relevance decision over the rules' evidence (``data/relevance_model.json``).

The rules' totals (:class:`digest.analyze.classify.Classification`) are the
features, each in a form that does not grow with the text's length (a shorter
copy of the same post is the same news): the rules' verdict and clipped
distance, the compiler and negative evidence as shares, the subject's evidence
(title and opening), the prior's deciding part, the titles' community and
roundup weights, the kinds of entry and whether figures were found.
:func:`features` is the one way to compute them: the trainer
(bench/train_relevance.py) imports it, so training and inference read the same
numbers. The model is L2-regularised logistic regression; the file holds the
feature names, the training set's means and scales, the weights, the bias and
the decision threshold. Standard library only, no I/O beyond reading the file
once.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from digest.domain.errors import ConfigError
from digest.domain.layers import LAYER_IDS
from digest.resources import data_dir

# The kinds of entry, one-hot (an event of several kinds has several): what ``kind.<name>``
# in the totals records (classify_items).
KINDS: Mapping[str, str] = {"arxiv": "arxiv", "rss": "blog", "atom": "blog",
                            "github-releases": "release"}
_SCALE = 3.0  # the saturation scale of an evidence total: the rules' relevance threshold
_CLIP = 3.0  # the rules' distance counts up to this far either side of the decision
_MOST_FIGURES = 3
FEATURES: tuple[str, ...] = (
    "news", "distance", "core", "prior_decides", "negative", "subject", "community", "roundup",
    "novelty", *(f"{lid}.specific" for lid in LAYER_IDS),
    *(f"kind.{k}" for k in dict.fromkeys(KINDS.values())), "figures",
)


def sigmoid(z: float) -> float:
    """The logistic function, without overflow for large negative ``z``."""
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def _saturated(value: float) -> float:
    """1 - exp(-value / scale) of a non-negative total: 0 for none, towards 1 for much."""
    return 1.0 - math.exp(-max(0.0, value) / _SCALE)


def features(totals: Mapping[str, float], evidence: Mapping[str, Sequence[str]],
             distance: float) -> list[float]:
    """The model's inputs (:data:`FEATURES`, in order) from a classification's totals and evidence.

    None of them grows with the text's length (round 1's did, and a shorter
    copy of the same post lost its verdict): the rules' verdict (``news``:
    ``distance`` >= 0) and their distance clipped to +-3; the text's compiler
    evidence (``core`` plus the layers' share, without the source prior) and
    its negative evidence as shares of both (more text adds to each); the
    subject's evidence (a title and the opening: ``subject`` and each layer's
    heaviest phrase there, ``<layer>.specific``), the titles' community and
    roundup weights and the novelty phrases, each saturated (1 - exp(-x/3));
    the prior's deciding part (at most the rules' margin); the kinds, 0/1;
    whether figures were found, up to 3.
    """
    get = totals.get
    prior = get("prior", 0.0)
    text = max(0.0, get("core", 0.0) - prior) + get("layer_evidence", 0.0)
    negative = max(0.0, get("negative", 0.0))
    values = {"news": 1.0 if distance >= 0 else 0.0,
              "distance": max(-1.0, min(1.0, distance / _CLIP)),
              "core": text / (text + negative + 1.0),
              "prior_decides": min(prior, get("prior_decides", prior)),
              "negative": negative / (text + negative + 1.0),
              "figures": min(len(evidence.get("figures", ())), _MOST_FIGURES) / _MOST_FIGURES}
    for name in FEATURES:
        if name.startswith("kind."):
            values[name] = get(name, 0.0)
        elif name not in values:
            values[name] = _saturated(get(name, 0.0))
    return [values[name] for name in FEATURES]


@dataclass(frozen=True)
class RelevanceModel:
    """Logistic regression over standardised :func:`features`: P(relevant) and its threshold."""

    features: tuple[str, ...]
    means: tuple[float, ...]
    scales: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    threshold: float
    band: float  # probabilities this close to the threshold are borderline (LLM triage)

    def probability(self, values: Sequence[float]) -> float:
        """P(relevant) of one feature vector (in :attr:`features` order)."""
        z = self.bias + math.fsum(w * (v - m) / s for w, v, m, s in
                                  zip(self.weights, values, self.means, self.scales, strict=True))
        return sigmoid(z)


def model_from(data: Mapping[str, object], where: str = "relevance model") -> RelevanceModel:
    """A model from its JSON document; ConfigError when it does not fit :data:`FEATURES`."""
    def numbers(key: str) -> tuple[float, ...]:
        values = data[key]
        if not isinstance(values, list):
            raise TypeError(f"{key} must be a list")
        return tuple(float(x) for x in values)

    def number(key: str, default: float | None = None) -> float:
        value = data[key] if default is None else data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"{key} must be a number")
        return float(value)

    try:
        names = data["features"]
        if not isinstance(names, list):
            raise TypeError("features must be a list")
        means, scales, weights = numbers("means"), numbers("scales"), numbers("weights")
        bias, threshold, band = number("bias"), number("threshold"), number("band", 0.0)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: missing or malformed field ({exc})") from exc
    if tuple(names) != FEATURES:
        raise ConfigError(f"{where}: its features are not this version's (retrain it: "
                          "bench/train_relevance.py)")
    if any(len(c) != len(FEATURES) for c in (means, scales, weights)) or min(scales) <= 0:
        raise ConfigError(f"{where}: means, scales and weights must match the features")
    return RelevanceModel(FEATURES, means, scales, weights, bias, threshold, band)


def read_model_file(name: str, what: str) -> tuple[Mapping[str, object], str]:
    """The JSON object in the data folder's file ``name`` and where it was read (for messages).

    ConfigError when ``name`` is not a plain file name or the file is missing,
    unreadable or not a JSON object; ``what`` names the model in the message.
    """
    if not name or Path(name).name != name:
        raise ConfigError(f"{what}: {name!r} must be a file name in {data_dir()}")
    path = data_dir() / name
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what}: {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{what}: {path} must hold a JSON object")
    return data, f"{what} {path}"


def is_number(value: object) -> TypeGuard[int | float]:
    """An int or a float, never a bool (JSON's ``true`` is not a weight)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def read_threshold(data: Mapping[str, object], where: str) -> float:
    """A model file's ``threshold``: a probability strictly between 0 and 1, else a ConfigError."""
    threshold = data.get("threshold")
    if not is_number(threshold) or not 0 < threshold < 1:
        raise ConfigError(f"{where}: threshold must be a number between 0 and 1")
    return float(threshold)


def read_logistic(entry: object) -> tuple[float, dict[str, float]] | None:
    """``{"bias": number, "weights": {name: number}}`` as (bias, weights); None when malformed."""
    bias = entry.get("bias") if isinstance(entry, dict) else None
    table = entry.get("weights") if isinstance(entry, dict) else None
    if not is_number(bias) or not isinstance(table, dict):
        return None
    weights: dict[str, float] = {}
    for name, weight in table.items():
        if not is_number(weight):
            return None
        weights[str(name)] = float(weight)
    return float(bias), weights


@functools.cache
def load_model(name: str) -> RelevanceModel:
    """The model file ``name`` in the package's data folder (read once per process)."""
    return model_from(*read_model_file(name, "relevance model"))


def probability(totals: Mapping[str, float], evidence: Mapping[str, Sequence[str]],
                distance: float, model: RelevanceModel) -> float:
    """P(relevant) the model gives a classification's totals, evidence and relevance distance."""
    return model.probability(features(totals, evidence, distance))
