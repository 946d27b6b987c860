"""Pure decisions about entries: is it news, is it compiler news, which layers it touches.

Relevance needs compiler evidence (the taxonomy's core phrases, or a compiler
project's own feed); hardware or benchmark words alone never suffice, and
general-ML evidence (fine-tuning, RLHF, medical imaging...) blocks an entry
whose compiler evidence is weak. Layers are assigned per layer when the
weights of its matched phrases reach the layer's threshold, and a relevant
entry always has one: readers choose layers, so an event with none would
reach nobody who filters and show an empty layer row to everyone else.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from digest.analyze.taxonomy import Taxonomy, figures
from digest.domain.items import Item
from digest.domain.layers import LAYER_IDS

NEWS_ANNOUNCE_TYPES = frozenset({"new", "cross"})
_PRERELEASE_TAG = re.compile(
    r"nightly|snapshot|canary|preview|alpha|beta|\.dev|(?<![a-z])dev\d*(?![a-z])|(?:[-_.]|\d)rc\d*$",
    re.IGNORECASE,
)
_NIGHTLY_TITLE = re.compile(r"\bnightly\b", re.IGNORECASE)


@dataclass(frozen=True)
class Classification:
    """Whether an entry (or an event's entries) is compiler news, its layers and the evidence.

    ``evidence`` maps ``core``, ``negative``, ``novelty``, each layer id and
    ``source_prior`` to the matched phrases, and ``figures`` to the quantitative
    figures found; ``totals`` holds the summed weights behind each decision.
    """

    relevant: bool
    relevance: float
    layers: tuple[str, ...]
    evidence: dict[str, list[str]] = field(default_factory=dict)
    totals: dict[str, float] = field(default_factory=dict)


def is_prerelease(item: Item) -> bool:
    """A GitHub pre-release, release candidate or nightly build."""
    if item.prerelease:
        return True
    if item.tag and _PRERELEASE_TAG.search(item.tag):
        return True
    return item.kind == "github-releases" and bool(_NIGHTLY_TITLE.search(item.title))


def is_news(item: Item, *, include_prereleases: bool = False) -> bool:
    """Whether an entry is news on its own (arXiv new/cross; releases unless pre-release)."""
    if item.kind == "arxiv":
        if item.announce_type:
            return item.announce_type.lower() in NEWS_ANNOUNCE_TYPES
        return item.arxiv_version in (None, 1)
    if item.kind == "github-releases" and is_prerelease(item):
        return include_prereleases
    return True


def _hits(matched: set[str], table: Mapping[str, float]) -> tuple[list[str], float]:
    found = sorted(p for p in matched if p in table)
    return found, sum((table[p] for p in found), 0.0)


def _prior(items: Iterable[Item], taxonomy: Taxonomy) -> tuple[list[str], float]:
    keys = {item.source_key for item in items} | {i.repo.lower() for i in items if i.repo}
    found = sorted(k for k in keys if k in taxonomy.source_prior)
    return found, max((taxonomy.source_prior[k] for k in found), default=0.0)


def _totals(matched: set[str], figs: int, prior: float, taxonomy: Taxonomy) -> dict[str, float]:
    totals = {"core": _hits(matched, taxonomy.core)[1] + prior,
              "negative": _hits(matched, taxonomy.negative)[1],
              "novelty": _hits(matched, taxonomy.novelty)[1]}
    for lid, rule in taxonomy.layers.items():
        figure_weight = rule.figure_weight * min(figs, rule.max_figures)
        totals[lid] = _hits(matched, rule.phrases)[1] + figure_weight
    return totals


def _evidence(matched: set[str], figs: list[str], taxonomy: Taxonomy) -> dict[str, list[str]]:
    tables = {"core": taxonomy.core, "negative": taxonomy.negative, "novelty": taxonomy.novelty}
    tables.update({lid: rule.phrases for lid, rule in taxonomy.layers.items()})
    evidence = {name: _hits(matched, table)[0] for name, table in tables.items()}
    evidence["figures"] = figs
    return {name: found for name, found in evidence.items() if found}


def relevance_distance(totals: Mapping[str, float], taxonomy: Taxonomy) -> float:
    """How far the compiler evidence is from the relevance decision: >= 0 means compiler news.

    Both conditions must hold: ``core`` reaches the threshold, and it beats the
    negative evidence by the margin; the distance is the smaller of the two slacks.
    Compiler news is relevant when it also has a layer (:func:`decide`).
    """
    compiler, negative = totals["core"], totals["negative"]
    return min(compiler - taxonomy.relevance_threshold,
               compiler - negative - taxonomy.relevance_margin)


def _is_relevant(totals: Mapping[str, float], taxonomy: Taxonomy) -> bool:
    return relevance_distance(totals, taxonomy) >= 0


def _strength(totals: Mapping[str, float], taxonomy: Taxonomy) -> float:
    layer_total = sum(totals[lid] for lid in LAYER_IDS)
    amount = totals["core"] - totals["negative"] + taxonomy.layer_share * layer_total
    return round(1.0 - math.exp(-max(0.0, amount) / taxonomy.saturation), 3)


def layers_of(totals: Mapping[str, float], taxonomy: Taxonomy) -> tuple[str, ...]:
    """The layers whose evidence reaches their threshold, in the fixed layer order."""
    return tuple(lid for lid in LAYER_IDS if totals.get(lid, 0.0) >= taxonomy.layers[lid].threshold)


def decide(totals: Mapping[str, float], taxonomy: Taxonomy,
           compiler_news: bool) -> tuple[bool, float, tuple[str, ...]]:
    """Relevant, strength and layers: relevant is compiler news with at least one layer.

    The one relevance rule, for the rules' verdict and a triage verdict alike;
    not relevant means no strength and no layers.
    """
    layers = layers_of(totals, taxonomy) if compiler_news else ()
    if not layers:
        return False, 0.0, ()
    return True, _strength(totals, taxonomy), layers


def classify_text(text: str, taxonomy: Taxonomy, *, prior: float = 0.0) -> Classification:
    """Classify a text, with ``prior`` extra compiler evidence from the source."""
    matched = taxonomy.matcher.find(text)
    figs = figures(text)
    totals = _totals(matched, len(figs), prior, taxonomy)
    relevant, strength, layers = decide(totals, taxonomy, _is_relevant(totals, taxonomy))
    return Classification(relevant, strength, layers, _evidence(matched, figs, taxonomy), totals)


def classify_items(items: Sequence[Item], taxonomy: Taxonomy) -> Classification:
    """Classify the entries of one event together (their texts joined, the best source prior)."""
    if not items:
        raise ValueError("classify_items needs at least one item")
    prior_keys, prior = _prior(items, taxonomy)
    text = "\n\n".join(dict.fromkeys(item.text for item in items))
    result = classify_text(text, taxonomy, prior=prior)
    if prior_keys:
        result.evidence["source_prior"] = prior_keys
    return result


def classify(item: Item, taxonomy: Taxonomy) -> Classification:
    """Classify one entry: compiler news or not, its layers, and the matched evidence."""
    return classify_items([item], taxonomy)


def is_borderline(verdict: Classification, taxonomy: Taxonomy) -> bool:
    """Whether the rules' relevance decision is a close call worth a second opinion.

    Close means the compiler evidence lies within ``taxonomy.triage_band`` of the
    decision (:func:`relevance_distance`), on either side: not relevant but close,
    or relevant but weak. A band of 0 makes nothing borderline, and so does the
    lack of a layer: no answer could make such an event relevant (:func:`decide`).
    """
    if not layers_of(verdict.totals, taxonomy):
        return False
    return abs(relevance_distance(verdict.totals, taxonomy)) < taxonomy.triage_band


def with_verdict(verdict: Classification, relevant: bool, taxonomy: Taxonomy) -> Classification:
    """``verdict`` with a triage decision applied (recorded as ``evidence["triage"]``).

    Promoted: relevant, with the strength and the layers its totals give (still
    not relevant when they give no layer). Demoted: not relevant, no layers, no
    strength (as the rules leave a negative).
    """
    evidence = {**verdict.evidence, "triage": ["relevant" if relevant else "not_relevant"]}
    if relevant == verdict.relevant:
        return replace(verdict, evidence=evidence)
    relevant, strength, layers = decide(verdict.totals, taxonomy, relevant)
    return replace(verdict, relevant=relevant, relevance=strength, layers=layers, evidence=evidence)
