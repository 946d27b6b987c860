"""Pure decisions about entries: is it news, is it compiler news, which layers it touches.

Relevance needs compiler evidence: the taxonomy's core phrases plus a capped
share of the layers' phrases (runtime and kernel work such as CUDA graphs or
FlashAttention counts), and a compiler project's own source as a prior: at
most the margin, for its releases as for its blog or newsletter (a tie
breaker: the text must make an entry news), never outweighing negative
evidence. Hardware or benchmark words alone never suffice; general-ML evidence
(fine-tuning, RLHF, medical imaging...) blocks an entry whose compiler
evidence is weak; a community or admin post (a board update, office hours, a
meeting programme, the programme of Summer of Code rather than a project
report from it) is never news, nor is a patch release whose notes only fix
bugs (digest/analyze/releases.py: a release is news for what it changes).

Evidence is weighed by where it stands: a phrase in a title or in the lead of
a summary (an abstract's length) counts in full, one met only further on or in
a body at the taxonomy's ``body_share``; a specific layer phrase in a title
counts ``title_share`` times towards its layer. Layers are assigned per layer
when the weights of its matched phrases reach the layer's threshold (a
roundup, such as a weekly newsletter, has lower ones: each item is a sentence;
outside a roundup a layer other than the strongest needs one specific phrase
in a title or lead), and a relevant entry always has one: readers choose layers, so an event with
none would reach nobody who filters and show an empty layer row to everyone
else. Compiler news whose layer evidence falls just short takes its nearest
compiler layer (``fallback_share``), never hardware or benchmark.

With ``[relevance] model`` set, a learned model over these totals decides
whether an entry is compiler news (:func:`news_margin`, digest/analyze/learned.py);
the community rule and the strength stay the rules'. With ``layer_model`` set, a
learned model per layer chooses a relevant entry's layers (:func:`layers_of`,
digest/analyze/layer_model.py), and gives compiler news the rules found no layer
for the layers it is sure of; whether an entry is compiler news stays as above. With
``[relevance] veto`` set, a learned model over the same words judges the rules'
decision: rules' news it finds unlikely is not news, and (with its ``promote``)
what the rules reject but it finds very likely is, guards permitting
(digest/analyze/news_veto.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from digest.analyze.layer_model import layer_features, words
from digest.analyze.learned import KINDS, probability
from digest.analyze.news_veto import news_features
from digest.analyze.releases import is_fix_release
from digest.analyze.taxonomy import Taxonomy, figures, measurements, tokenize
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
    ``source_prior`` to the matched phrases, ``figures`` to the speed-ups and
    percentages found and ``measures`` to the measured times, rates and sizes;
    ``totals`` holds the summed weights behind each decision.
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


_SPECIFIC = 1.0  # a layer phrase this heavy names the subject; lighter ones are generic words
Matches = Mapping[str, float]  # matched phrase -> the share of its weight it counts at


def _hits(matched: Matches, table: Mapping[str, float]) -> tuple[list[str], float]:
    found = sorted(p for p in matched if p in table)
    return found, sum((table[p] * matched[p] for p in found), 0.0)


def _matches(leads: Sequence[tuple[str, str]], body: str, taxonomy: Taxonomy,
             roundup: bool = False) -> tuple[dict[str, float], set[str], set[str]]:
    """Each matched phrase with the share of its weight it counts at, those in a title, the subject's.

    ``leads`` are the entries' titles and summaries. A phrase counts in full in
    a title or in the lead of a summary (its first ``lead_chars`` characters, an
    abstract's length), at ``body_share`` when met only further on or in a body:
    a long post mentions much in passing, evidence weaker than its lead. A
    roundup's summary counts in full: its items are spread all through it.
    The subject's phrases are those in a title or in a summary's first
    ``subject_chars`` characters (its opening paragraph; all of a roundup's), and
    after a teaser shorter than that, in the body's first characters up to it.
    """
    found: dict[str, float] = {}
    titled: set[str] = set()
    subject: set[str] = set()

    def take(keys: Iterable[str], share: float) -> None:
        for key in keys:
            found[key] = max(found.get(key, 0.0), share)

    for title, summary in leads:
        titled |= taxonomy.matcher.find(title)
        tokens = tokenize(summary)
        cut = len(tokens) if roundup or not taxonomy.lead_chars else len(
            tokenize(summary[: taxonomy.lead_chars]))
        first = taxonomy.matcher.first_positions(tokens)
        opening = len(tokens) if roundup or not taxonomy.subject_chars else len(
            tokenize(summary[: taxonomy.subject_chars]))
        subject |= {key for key, at in first.items() if at < min(cut, opening)}
        take([key for key, at in first.items() if at < cut], 1.0)
        take([key for key, at in first.items() if at >= cut], taxonomy.body_share)
    take(titled, 1.0)
    if body:
        take(taxonomy.matcher.find(body), taxonomy.body_share)
        # a teaser's subject runs on into the body: the opening is the first subject_chars of both
        rest = taxonomy.subject_chars - sum(len(summary) for _, summary in leads)
        if taxonomy.subject_chars and rest > 0:
            subject |= taxonomy.matcher.find(body[:rest])
    return found, titled, subject | titled


def _prior(items: Iterable[Item], taxonomy: Taxonomy) -> tuple[list[str], float, float]:
    """The source prior's keys, its weight and the part of it that may decide relevance.

    Whatever the source, the prior decides at most ``relevance_margin``: it
    breaks a tie, but the entry's own text must make it compiler news (a
    project's blog also posts board news and meeting programmes; a framework's
    release may change only its Python API, a kernel library's patch release
    only fix bugs: a release is news for what it changes). The weight itself
    (the strength of compiler news, once news) is the best one.
    """
    found: set[str] = set()
    weight = decides = 0.0
    for item in items:
        keys = {item.source_key, *([item.repo.lower()] if item.repo else [])}
        mine = [k for k in keys if k in taxonomy.source_prior]
        found |= set(mine)
        own = max((taxonomy.source_prior[k] for k in mine), default=0.0)
        weight = max(weight, own)
        decides = max(decides, min(own, taxonomy.relevance_margin))
    return sorted(found), weight, decides


def _totals(matched: Matches, titled: set[str], opening: set[str], figs: int, prior: float,
            taxonomy: Taxonomy) -> dict[str, float]:
    """The summed weights: relevance evidence, and each layer's (a title's phrases at ``title_share``).

    ``<layer>.specific`` is the heaviest of the layer's phrases in ``opening``
    (the subject: a title or a summary's opening, :func:`_matches`); ``subject`` is the
    compiler evidence there: its core phrases and the heaviest evidence-layer phrase.
    """
    totals = {"core": _hits(matched, taxonomy.core)[1] + prior, "prior": prior,
              "negative": _hits(matched, taxonomy.negative)[1],
              "novelty": _hits(matched, taxonomy.novelty)[1]}
    for lid, rule in taxonomy.layers.items():
        figure_weight = rule.figure_weight * min(figs, rule.max_figures)
        subject = {**matched, **{p: taxonomy.title_share for p in titled
                                 if rule.phrases.get(p, 0.0) >= _SPECIFIC}}
        totals[lid] = _hits(subject, rule.phrases)[1] + figure_weight
        totals[f"{lid}.specific"] = max((rule.phrases[p] for p in opening if p in rule.phrases),
                                        default=0.0)
    totals["layer_evidence"] = _layer_evidence(matched, taxonomy)
    totals["subject"] = sum(taxonomy.core.get(p, 0.0) for p in opening) + max(
        (totals[f"{lid}.specific"] for lid in taxonomy.evidence_layers), default=0.0)
    return totals


def _layer_evidence(matched: Matches, taxonomy: Taxonomy) -> float:
    """The compiler evidence the layers' phrases give: a capped share of their weights.

    Hardware and benchmark words and figures are not among them, and a phrase
    that is already core evidence counts there only (once towards relevance).
    """
    own = {p: share for p, share in matched.items() if p not in taxonomy.core}
    weight = sum(_hits(own, taxonomy.layers[lid].phrases)[1] for lid in taxonomy.evidence_layers)
    return min(taxonomy.layer_evidence_cap, taxonomy.layer_evidence * weight)


def _evidence(matched: Matches, figs: list[str], measures: list[str],
              taxonomy: Taxonomy) -> dict[str, list[str]]:
    tables = {"core": taxonomy.core, "negative": taxonomy.negative, "novelty": taxonomy.novelty}
    tables.update({lid: rule.phrases for lid, rule in taxonomy.layers.items()})
    evidence = {name: _hits(matched, table)[0] for name, table in tables.items()}
    evidence["figures"] = figs
    evidence["measures"] = measures
    return {name: found for name, found in evidence.items() if found}


def relevance_distance(totals: Mapping[str, float], taxonomy: Taxonomy) -> float:
    """How far the compiler evidence is from the relevance decision: >= 0 means compiler news.

    Compiler evidence is the core phrases plus the layers' share
    (``layer_evidence``). Four conditions must hold: it reaches the threshold
    with the part of the source prior that may decide (``prior_decides``, at
    most the margin: :func:`_prior`); it beats the negative evidence by the
    margin, where the prior counts at most the margin (a prior breaks a tie, it
    never outweighs negative evidence); the subject names compiler work
    (``subject`` reaches ``subject_evidence``: a long post's passing mentions do
    not make it news); the titles are not a community/admin post
    (``community`` at most its threshold); and the entries are not only patch
    releases that fix bugs (``fix_release``, digest/analyze/releases.py: such
    an event sits ``taxonomy.fix_release`` below the decision, 0: off). The
    distance is the smallest slack.

    With a learned judge (``taxonomy.veto``; its P(news) is in the totals as
    ``learned.news``, :func:`_classify`; digest/analyze/news_veto.py), the
    model's P must also reach its threshold (the veto), and a P at or above
    its ``promote`` makes news of what the rules' evidence alone does not
    (a promotion; the community and fix-release guards still hold). Neither
    applies to an entry from a compiler project's own source (a ``prior``:
    every post there is about a compiler, and the community rule takes its
    admin posts). Compiler news is relevant when it also has a layer
    (:func:`decide`).
    """
    prior = totals.get("prior", 0.0)
    decides = min(prior, totals.get("prior_decides", prior))
    text = totals["core"] - prior + totals.get("layer_evidence", 0.0)
    subject = totals.get("subject", taxonomy.subject_evidence)
    fixes_only = -taxonomy.fix_release if totals.get("fix_release", 0.0) else math.inf
    evidence = min(text + decides - taxonomy.relevance_threshold,
                   subject - taxonomy.subject_evidence,
                   text + min(prior, taxonomy.relevance_margin) - totals["negative"]
                   - taxonomy.relevance_margin)
    guards = min(taxonomy.community_threshold - totals.get("community", 0.0), fixes_only)
    news = totals.get("learned.news")
    judge = taxonomy.veto
    if judge is None or news is None or prior:
        return min(evidence, guards)
    return min(max(min(evidence, judge.slack(news)), judge.promotion(news)), guards)


def news_margin(totals: Mapping[str, float], evidence: Mapping[str, Sequence[str]],
                taxonomy: Taxonomy) -> float:
    """How far an entry is from the relevance decision: >= 0 means compiler news.

    The rules' :func:`relevance_distance`, or with a learned model
    (``taxonomy.model``, digest/analyze/learned.py) its P(relevant) minus its
    threshold. Either way a community/admin post is never news.
    """
    distance = relevance_distance(totals, taxonomy)
    model = taxonomy.model
    if model is None:
        return distance
    if is_community(totals, taxonomy):
        return taxonomy.community_threshold - totals.get("community", 0.0)
    return probability(totals, evidence, distance, model) - model.threshold


def is_community(totals: Mapping[str, float], taxonomy: Taxonomy) -> bool:
    """Whether the titles make this a community/admin post (never news, whatever the source)."""
    return totals.get("community", 0.0) > taxonomy.community_threshold


def _strength(totals: Mapping[str, float], taxonomy: Taxonomy) -> float:
    layer_total = sum(totals[lid] for lid in LAYER_IDS)
    amount = totals["core"] - totals["negative"] + taxonomy.layer_share * layer_total
    return round(1.0 - math.exp(-max(0.0, amount) / taxonomy.saturation), 3)


def is_roundup(totals: Mapping[str, float], taxonomy: Taxonomy) -> bool:
    """Whether the titles make this a roundup (a weekly newsletter: many items, brief each)."""
    return bool(taxonomy.roundup) and totals.get("roundup", 0.0) >= taxonomy.roundup_threshold


def layer_shares(totals: Mapping[str, float], taxonomy: Taxonomy) -> dict[str, float]:
    """Each layer's evidence as a share of its threshold (a roundup's own)."""
    roundup = is_roundup(totals, taxonomy)
    return {lid: totals.get(lid, 0.0) / taxonomy.layers[lid].needs(roundup) for lid in LAYER_IDS}


def layers_of(totals: Mapping[str, float], taxonomy: Taxonomy) -> tuple[str, ...]:
    """The entry's layers: the rules' (:func:`rules_layers`), chosen again by the learned model.

    With a layer model (``taxonomy.layer_model``; its probabilities are in the
    totals as ``learned.<layer>``, :func:`_classify`), an entry the rules give
    any layer has the model's layers (digest/analyze/layer_model.py). One they
    give none has the layers the model is sure of (at its threshold), and else
    none: compiler news whose evidence is spread thin over the layers' tables
    (a release's "--fsplit-stack" and "LLVM 13+") still has a layer when the
    words say which, and an entry that is not news stays out (:func:`decide`).
    """
    found = rules_layers(totals, taxonomy)
    model = taxonomy.layer_model
    if model is None or f"learned.{LAYER_IDS[0]}" not in totals:
        return found
    probabilities = {lid: totals.get(f"learned.{lid}", 0.0) for lid in LAYER_IDS}
    if not found:
        return tuple(lid for lid in LAYER_IDS if probabilities[lid] >= model.threshold)
    return model.choose(probabilities)


def layer_inputs(totals: Mapping[str, float], evidence: Mapping[str, Sequence[str]], text: str,
                 taxonomy: Taxonomy) -> dict[str, dict[str, float]]:
    """The layer model's inputs for each layer, from the rules' totals and evidence and the text.

    The one computation the classifier and the trainer (bench/train_layers.py) share.
    """
    shares = layer_shares(totals, taxonomy)
    chosen = rules_layers(totals, taxonomy)
    phrases = sorted({p for key in ("core", *LAYER_IDS) for p in evidence.get(key, ())})
    text_words = words(text)
    return {lid: layer_features(lid, shares, chosen, totals, phrases, text_words)
            for lid in LAYER_IDS}


def rules_layers(totals: Mapping[str, float], taxonomy: Taxonomy) -> tuple[str, ...]:
    """The layers whose evidence reaches their threshold (a roundup's own), in the fixed order.

    Outside a roundup, a layer other than the strongest (by its share of its
    threshold) also needs one specific phrase, of at least ``secondary_weight``,
    in a title or a summary's opening (``<layer>.specific`` in the totals): a long post says
    "instruction", "kernel" and "backend" in passing, which adds up to a layer
    the post is not about. The evaluation's context (``context_layers``: the
    hardware it runs on, the benchmark) is exempt: an abstract states it last.
    With none, the nearest compiler layer (``evidence_layers``: never hardware or
    benchmark) when its evidence is at least ``fallback_share`` of its threshold:
    an entry about the Clang driver may name Clang once.
    """
    roundup = is_roundup(totals, taxonomy)
    share = layer_shares(totals, taxonomy)
    found = tuple(lid for lid in LAYER_IDS if share[lid] >= 1.0)
    if found and not roundup:
        found = _secondary(found, share, totals, taxonomy)
    nearest = max(taxonomy.evidence_layers or LAYER_IDS,
                  key=lambda lid: (share[lid], -LAYER_IDS.index(lid)))
    if found or taxonomy.fallback_share <= 0 or share[nearest] < taxonomy.fallback_share:
        return found
    return (nearest,)


def _secondary(found: tuple[str, ...], share: Mapping[str, float], totals: Mapping[str, float],
               taxonomy: Taxonomy) -> tuple[str, ...]:
    """The layers kept outside a roundup: the strongest, and others the subject names.

    A layer other than the strongest needs a specific phrase in the subject
    (``secondary_weight``; context layers exempt) and ``secondary_share`` of the
    strongest's share; at most ``max_layers`` are kept, the strongest first.
    """
    top = max(found, key=lambda lid: share[lid])
    weight, least = taxonomy.secondary_weight, taxonomy.secondary_share * share[top]
    kept = [lid for lid in found if lid == top or (
        (weight <= 0 or lid in taxonomy.context_layers
         or totals.get(f"{lid}.specific", 0.0) >= weight) and share[lid] >= least)]
    if taxonomy.max_layers > 0:
        strongest = sorted(kept, key=lambda lid: (-share[lid], LAYER_IDS.index(lid)))
        kept = [lid for lid in kept if lid in strongest[: taxonomy.max_layers]]
    return tuple(kept)


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


def classify_text(text: str, taxonomy: Taxonomy, *, prior: float = 0.0,
                  titles: Sequence[str] = (), body: str = "") -> Classification:
    """Classify a text (titles and summaries) and ``body``, with ``prior`` from the source.

    ``titles`` are read for community/admin phrases: an event is a community
    post when every one of its titles says so. Figures count wherever they are.
    """
    return _classify([("", text)], taxonomy, prior=prior, titles=titles, body=body)


def _classify(leads: Sequence[tuple[str, str]], taxonomy: Taxonomy, *, prior: float,
              titles: Sequence[str], body: str,
              prior_decides: float | None = None, kinds: Sequence[str] = (),
              fixes_only: bool = False) -> Classification:
    """Classify entries' titles and summaries (``leads``) and their joined bodies.

    ``prior_decides``: how much of ``prior`` may count towards the relevance
    threshold (:func:`_prior`; None: all of it). ``kinds``: the entries' kinds,
    recorded in the totals as ``kind.<arxiv|blog|release>`` (the learned model reads them).
    ``fixes_only``: every entry is a patch release that only fixes bugs (``fix_release``).
    """
    roundup = _title_weight(titles, taxonomy.roundup, taxonomy)
    matched, titled, opening = _matches(leads, body, taxonomy,
                                        is_roundup({"roundup": roundup}, taxonomy))
    whole = _whole(leads, body)
    figs, measures = figures(whole), measurements(whole)
    totals = _totals(matched, titled, opening, len(figs), prior, taxonomy)
    totals["prior_decides"] = prior if prior_decides is None else prior_decides
    totals["community"] = _community(titles, taxonomy)
    totals["roundup"] = roundup
    if fixes_only:
        totals["fix_release"] = 1.0
    totals.update({f"kind.{KINDS[kind]}": 1.0 for kind in kinds if kind in KINDS})
    evidence = _evidence(matched, figs, measures, taxonomy)
    if taxonomy.veto is not None:
        # its inputs read the rules' distance without the veto: learned.news is not yet set
        news = news_features(totals, evidence, relevance_distance(totals, taxonomy), whole)
        totals["learned.news"] = round(taxonomy.veto.probability(news), 6)
    if taxonomy.layer_model is not None:
        model = taxonomy.layer_model
        inputs = layer_inputs(totals, evidence, whole, taxonomy)
        totals.update({f"learned.{lid}": round(model.probability(lid, inputs[lid]), 6)
                       for lid in LAYER_IDS})
    relevant, strength, layers = decide(totals, taxonomy, news_margin(totals, evidence, taxonomy) >= 0)
    return Classification(relevant, strength, layers, evidence, totals)


def _title_weight(titles: Sequence[str], table: Mapping[str, float], taxonomy: Taxonomy) -> float:
    """The weakest title's weight of ``table``'s phrases (0 without titles)."""
    weights = [_hits(dict.fromkeys(taxonomy.matcher.find(t), 1.0), table)[1] for t in titles]
    return min(weights, default=0.0)


_SUBTITLE = re.compile(r":\s|\s[-–—]+\s|,\s")


def _community(titles: Sequence[str], taxonomy: Taxonomy) -> float:
    """The weakest title's community evidence; a programme's name counts without a subtitle.

    "LLVM accepted to Google Summer of Code" is about the programme; "GSoC 2025:
    Byte Types in LLVM IR" and "..., GSoC'23 Project" report a project of it.
    """
    def weight(title: str) -> float:
        found = dict.fromkeys(taxonomy.matcher.find(title), 1.0)
        programme = 0.0 if _SUBTITLE.search(title) else _hits(found, taxonomy.programmes)[1]
        return _hits(found, taxonomy.community)[1] + programme

    return min((weight(t) for t in titles), default=0.0)


def _texts(items: Sequence[Item]) -> tuple[list[tuple[str, str]], str]:
    """The entries' distinct titles and summaries, and their distinct bodies joined."""
    leads = list(dict.fromkeys((item.title, item.summary) for item in items))
    body = "\n\n".join(dict.fromkeys(item.body_beyond_summary for item in items
                                     if item.body_beyond_summary))
    return leads, body


def _whole(leads: Sequence[tuple[str, str]], body: str) -> str:
    text = "\n\n".join(f"{title}\n{summary}" if title else summary for title, summary in leads)
    return f"{text}\n\n{body}" if body else text


def classified_text(items: Sequence[Item]) -> str:
    """The text :func:`classify_items` reads: each title and summary, then the bodies."""
    return _whole(*_texts(items))


def classify_items(items: Sequence[Item], taxonomy: Taxonomy) -> Classification:
    """Classify the entries of one event together (their texts joined, the best source prior)."""
    if not items:
        raise ValueError("classify_items needs at least one item")
    prior_keys, prior, decides = _prior(items, taxonomy)
    leads, body = _texts(items)
    result = _classify(leads, taxonomy, prior=prior, titles=[item.title for item in items],
                       body=body, prior_decides=decides, kinds=[item.kind for item in items],
                       fixes_only=all(item.kind == "github-releases" and is_fix_release(
                           item.title, classified_text([item]), item.url) for item in items))
    if prior_keys:
        result.evidence["source_prior"] = prior_keys
    return result


def classify(item: Item, taxonomy: Taxonomy) -> Classification:
    """Classify one entry: compiler news or not, its layers, and the matched evidence."""
    return classify_items([item], taxonomy)


def is_borderline(verdict: Classification, taxonomy: Taxonomy) -> bool:
    """Whether the relevance decision is a close call worth a second opinion.

    Close means the compiler evidence lies within ``taxonomy.triage_band`` of the
    decision (:func:`relevance_distance`), on either side: not relevant but close,
    or relevant but weak. A band of 0 makes nothing borderline, and so does the
    lack of a layer: no answer could make such an event relevant (:func:`decide`);
    nor is a community/admin post (no second opinion makes it news). With a
    learned model (``taxonomy.model``) close means P(relevant) within the
    model's band of its threshold (:func:`news_margin`); the trainer sets the band so
    that as many entries are borderline as under the rules' band.
    """
    if taxonomy.triage_band <= 0 or not layers_of(verdict.totals, taxonomy) or is_community(
            verdict.totals, taxonomy):
        return False
    band = taxonomy.model.band if taxonomy.model else taxonomy.triage_band
    return abs(news_margin(verdict.totals, verdict.evidence, taxonomy)) < band


def with_verdict(verdict: Classification, relevant: bool, taxonomy: Taxonomy,
                 layers: Sequence[str] = ()) -> Classification:
    """``verdict`` with a triage decision applied (recorded as ``evidence["triage"]``).

    Relevant: the triage's ``layers`` when it named any, else the verdict's own (a
    promotion: those its totals give, and still not relevant when they give none);
    a promotion takes the strength its totals give. Not relevant: no layers, no strength
    (as the rules leave a negative).
    """
    evidence = {**verdict.evidence, "triage": ["relevant" if relevant else "not_relevant"]}
    if not relevant:
        return replace(verdict, relevant=False, relevance=0.0, layers=(), evidence=evidence)
    chosen = tuple(layers) or (verdict.layers if verdict.relevant
                               else layers_of(verdict.totals, taxonomy))
    if not chosen:
        return replace(verdict, evidence=evidence)
    strength = verdict.relevance if verdict.relevant else _strength(verdict.totals, taxonomy)
    return replace(verdict, relevant=True, relevance=strength, layers=chosen, evidence=evidence)
