"""A learned judge over the rules' relevance decision (``data/news_veto.json``).

Why: the rules let in what merely sounds like a compiler (serving-system and
model-launch posts full of "kernels" and "CUDA graphs", "compiling" in another
sense, papers on chip floorplans), and they miss what readers call compiler
news without a compiler's words (collectives with fused compression kernels, a
language release that lists its new syntax). A logistic model trained by
``bench/train_veto.py`` on every tuned labelled set reads what the readers
read (the words) beside the rules' own evidence.

- **Veto:** an entry the rules call news stays news only when the model gives
  it P(news) >= the file's ``threshold``.
- **Promotion** (the file's ``promote``; absent: none): an entry the rules
  reject is news when the model gives it P(news) >= ``promote`` (at least the
  threshold), unless a guard of the rules says otherwise: a community/admin
  title or a patch release that only fixes bugs is never news, and it still
  needs a layer (digest/analyze/classify.py: :func:`decide`).

Neither applies to an entry from a compiler project's own source (a source
prior): the rules and the prior judge those. Both are slacks of the rules'
distance (digest/analyze/classify.py, :func:`relevance_distance`): P within
``1 / SCALE`` of a threshold is as close as one unit of compiler evidence, so a
near veto or a near promotion is a borderline call an LLM triage may overturn.
(The learned relevance decision of digest/analyze/learned.py, which replaced
the rules outright, lost recall on sources it had never seen.)

Inputs (:func:`news_features`, shared by the trainer and the classifier):
the rules' relevance features (digest/analyze/learned.py's, as ``r:<name>``),
each taxonomy phrase matched for the core, the negative evidence or a layer
(``p:<phrase>``), and each word of the text's first characters
(digest/analyze/layer_model.py's ``words``, ``w:<word>``). Standard library
only; the file is read once per process.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from digest.analyze.layer_model import words
from digest.analyze.learned import (
    FEATURES,
    features,
    is_number,
    read_logistic,
    read_model_file,
    read_threshold,
    sigmoid,
)
from digest.domain.errors import ConfigError
from digest.domain.layers import LAYER_IDS

SCALE = 10.0  # units of the rules' distance per unit of probability
_PHRASE_KEYS = ("core", "negative", *LAYER_IDS)


def news_features(totals: Mapping[str, float], evidence: Mapping[str, Sequence[str]],
                  distance: float, text: str) -> dict[str, float]:
    """The veto's named inputs (the names the file's weights use).

    ``distance``: the rules' own distance from the decision, without the veto.
    """
    values = dict(zip((f"r:{name}" for name in FEATURES), features(totals, evidence, distance),
                      strict=True))
    values.update({f"p:{p}": 1.0 for key in _PHRASE_KEYS for p in evidence.get(key, ())})
    values.update({f"w:{word}": 1.0 for word in words(text)})
    return values


@dataclass(frozen=True)
class NewsVeto:
    """One logistic model of P(news) over named features, the threshold the rules' news needs,
    and the probability at which it promotes what the rules reject (None: never)."""

    threshold: float
    bias: float
    weights: Mapping[str, float]
    promote: float | None = None

    def probability(self, inputs: Mapping[str, float]) -> float:
        """P(the entry is compiler news) from its :func:`news_features`."""
        return sigmoid(self.bias + math.fsum(
            self.weights[name] * value for name, value in inputs.items() if name in self.weights))

    def slack(self, probability: float) -> float:
        """How far ``probability`` is above the threshold, in units of the rules' distance."""
        return (probability - self.threshold) * SCALE

    def promotion(self, probability: float) -> float:
        """How far ``probability`` is above ``promote`` in units of the rules' distance (-inf: off)."""
        return -math.inf if self.promote is None else (probability - self.promote) * SCALE


def veto_from(data: Mapping[str, object], where: str = "news veto") -> NewsVeto:
    """A veto from its JSON document; ConfigError when a number is missing or malformed."""
    threshold = read_threshold(data, where)
    promote = data.get("promote")
    if promote is not None and (not is_number(promote) or not threshold <= promote < 1):
        raise ConfigError(f"{where}: promote must be a number from the threshold up to 1")
    read = read_logistic(data)
    if read is None:
        raise ConfigError(f"{where}: needs a numeric bias and a table of numeric weights")
    return NewsVeto(threshold, *read, None if promote is None else float(promote))


@functools.cache
def load_news_veto(name: str) -> NewsVeto:
    """The veto file ``name`` in the package's data folder (read once per process)."""
    return veto_from(*read_model_file(name, "news veto"))
