"""The weighted phrase taxonomy (``data/taxonomy.toml``): loader and matcher.

The taxonomy is data so it can be tuned without touching code. Phrase syntax:

- lower case; matching is case-insensitive and word-boundary aware, so ``pass``
  never matches inside ``compass`` and ``tir`` never inside ``satire``;
- a hyphen is a space (``all-reduce`` matches "all reduce" and "all-reduce");
- the last word may take a plural ``s``/``es`` ("kernel" matches "kernels");
- a trailing ``*`` makes the last word a prefix (``autotun*`` matches "autotuning");
- Chinese phrases are sequences of characters and match anywhere (no word
  boundaries in Chinese).

Matching tokenises the text once and looks phrases up by their first word, so
a text costs one pass whatever the size of the taxonomy.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from digest.analyze.figures import extract_figures, normalise
from digest.analyze.layer_model import LayerModel, load_layer_model
from digest.analyze.learned import RelevanceModel, load_model
from digest.analyze.news_veto import NewsVeto, load_news_veto
from digest.domain.errors import ConfigError
from digest.domain.layers import LAYER_IDS
from digest.resources import data_dir

_TOKEN = re.compile(r"[a-z0-9_]+|[^\sa-z0-9_]")
M = TypeVar("M")  # a learned model read from the data folder
_DASHES = re.compile(r"[-‐‑‒–—]")
_SPEEDUP_SIGNS = ("x", "×", "倍")
# After a ratio's sign: a shape or a name ("4x4", "2x_"), or a count of hardware ("8x H100", "4x GPUs").
_NOT_A_SPEEDUP = re.compile(r"[a-z0-9_]|\s*(?:[a-z]+\d{2,}|gpus?|nodes?|cores?)", re.I)
_TOP_KEYS = {"version", "layer_model", "relevance", "negative", "source_prior", "novelty", "layers",
             "community", "roundup"}
_RELEVANCE_KEYS = {"threshold", "margin", "saturation", "layer_share", "triage_band", "core",
                   "layer_evidence", "layer_evidence_cap", "evidence_layers", "body_share",
                   "lead_chars", "title_share", "fallback_share", "secondary_weight",
                   "subject_chars", "context_layers", "secondary_share", "max_layers",
                   "subject_evidence", "model", "fix_release", "veto"}
_COMMUNITY_KEYS = {"threshold", "phrases", "programmes"}
_LAYER_KEYS = {"threshold", "phrases", "figure_weight", "max_figures", "roundup_threshold"}


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens (ASCII words, single other characters), hyphens as spaces."""
    folded = unicodedata.normalize("NFKC", text).lower()
    return _TOKEN.findall(_DASHES.sub(" ", folded))


def figures(text: str) -> list[str]:
    """Distinct figures as layer evidence: speed-ups ("2.52x", "1.56 倍" as "1.56x"), then percentages.

    Read by the one extractor (``digest.analyze.figures``); only figures written
    with their own sign count (a range's low end, "3 times" or "50 percent" do not).
    """
    normal = normalise(text)
    found = extract_figures(text)
    speedups = [f for f in found if f.kind == "ratio" and f.unit.lower() in _SPEEDUP_SIGNS
                and not _NOT_A_SPEEDUP.match(normal, f.end)]
    percents = [f for f in found if f.kind == "percent" and f.unit == "%"]
    return list(dict.fromkeys(f.compact for f in [*speedups, *percents]))


_MEASURE_UNIT = re.compile(
    r"\s?(?:[kmgtpe]?flop/?s|[kmgtpe]?flops|tokens?/s|tok/s|qps|"
    r"[kmgtp]i?b|bytes|ms|µs|us|ns|s|secs?|seconds?|mins?|minutes?|h|hrs?|hours?|days?)(?![a-z0-9])",
    re.I)


def measurements(text: str) -> list[str]:
    """Distinct measured quantities: times, throughput and memory ("38 minutes", "1,450 TFLOPS").

    Figures without a sign of their own (speed-ups and percentages are
    :func:`figures`) followed by a unit of time, compute rate or memory.
    """
    normal = normalise(text)
    found = []
    for figure in extract_figures(text):
        unit = _MEASURE_UNIT.match(normal, figure.end)
        if figure.kind == "" and not figure.scaled and unit:
            found.append(f"{figure.number} {unit.group(0).strip()}")
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class _Phrase:
    key: str
    words: tuple[str, ...]
    stem: bool

    def matches_at(self, tokens: list[str], start: int) -> bool:
        """Whether this phrase occurs in ``tokens`` starting at ``start``."""
        end = start + len(self.words)
        if end > len(tokens) or tokens[start : end - 1] != list(self.words[:-1]):
            return False
        last, token = self.words[-1], tokens[end - 1]
        if self.stem:
            return token.startswith(last)
        return token in (last, last + "s", last + "es")


def _compile_phrase(raw: str) -> _Phrase:
    stem = raw.endswith("*")
    words = tuple(tokenize(raw.rstrip("*")))
    if not words or (stem and len(words[-1]) < 3):
        raise ConfigError(f"taxonomy: bad phrase {raw!r} (empty, or a prefix under 3 letters)")
    return _Phrase(raw.lower(), words, stem)


class PhraseMatcher:
    """Finds which of a fixed set of phrases occur in a text."""

    def __init__(self, phrases: Iterable[str]) -> None:
        self._exact: dict[str, list[_Phrase]] = {}
        self._stems: dict[str, list[_Phrase]] = {}
        for raw in sorted(set(phrases)):
            phrase = _compile_phrase(raw)
            if phrase.stem and len(phrase.words) == 1:
                self._stems.setdefault(phrase.words[0][:3], []).append(phrase)
            else:
                self._exact.setdefault(phrase.words[0], []).append(phrase)

    def _candidates(self, token: str) -> list[_Phrase]:
        found = list(self._exact.get(token, ()))
        for cut in (1, 2):  # a one-word phrase may appear in the plural
            found += [p for p in self._exact.get(token[:-cut], ()) if len(p.words) == 1]
        return found + self._stems.get(token[:3], [])

    def find(self, text: str) -> set[str]:
        """The keys of the phrases occurring in ``text``."""
        return set(self.first_positions(tokenize(text)))

    def first_positions(self, tokens: list[str]) -> dict[str, int]:
        """Each occurring phrase's key with the token position where it first starts."""
        found: dict[str, int] = {}
        for i, token in enumerate(tokens):
            for phrase in self._candidates(token):
                if phrase.key not in found and phrase.matches_at(tokens, i):
                    found[phrase.key] = i
        return found


@dataclass(frozen=True)
class LayerRule:
    """The phrases of one layer and the evidence it needs."""

    phrases: Mapping[str, float]
    threshold: float
    figure_weight: float = 0.0
    max_figures: int = 0
    roundup_threshold: float | None = None  # in a roundup (one mention per item); None: threshold

    def needs(self, roundup: bool) -> float:
        """The evidence this layer needs, in a roundup or in a single-topic entry."""
        if roundup and self.roundup_threshold is not None:
            return self.roundup_threshold
        return self.threshold


@dataclass(frozen=True)
class Taxonomy:
    """Weighted phrases for relevance, negatives, novelty and each layer."""

    core: Mapping[str, float]
    negative: Mapping[str, float]
    source_prior: Mapping[str, float]
    novelty: Mapping[str, float]
    layers: Mapping[str, LayerRule]
    relevance_threshold: float
    relevance_margin: float
    saturation: float
    layer_share: float
    triage_band: float  # relevance decisions this close are borderline (LLM triage)
    matcher: PhraseMatcher = field(compare=False, repr=False)
    # Layer evidence counted as compiler evidence: a share of the phrase weights of
    # ``evidence_layers`` (never hardware or benchmark words), at most the cap.
    layer_evidence: float = 0.0
    layer_evidence_cap: float = 0.0
    evidence_layers: tuple[str, ...] = ()
    # Community/admin posts (boards, office hours, calls for papers): matched in titles.
    community: Mapping[str, float] = field(default_factory=dict)
    community_threshold: float = 0.0
    # Roundups (weekly newsletters, release roundups): matched in titles; many items,
    # each mentioned briefly, so layers need their ``roundup_threshold``.
    roundup: Mapping[str, float] = field(default_factory=dict)
    roundup_threshold: float = 0.0
    # Programme names (Summer of Code): community evidence in a title without a subtitle.
    programmes: Mapping[str, float] = field(default_factory=dict)
    body_share: float = 1.0  # the share of its weight a phrase found only in a body counts at
    # The lead of an entry's summary: its first ``lead_chars`` characters (0: all of
    # it; an abstract's length). Beyond it a phrase counts at ``body_share``.
    lead_chars: int = 0
    title_share: float = 1.0  # what a phrase in a title counts at: a title states the subject
    # Compiler news with no layer at its threshold takes its nearest layer when that
    # has at least this share of its threshold (0: never): news always has a layer.
    fallback_share: float = 0.0
    # A layer other than the strongest (outside a roundup, and not one measured by
    # figures) needs a phrase at least this heavy in the subject: a title or the
    # first ``subject_chars`` characters of a summary (0: all of its lead).
    # Generic words ("instruction", "kernel", "backend") add up in a long post. 0: off.
    secondary_weight: float = 0.0
    subject_chars: int = 0
    # Layers of the evaluation's context (what the work runs on, how it was
    # measured): stated wherever the evaluation is, so exempt from that rule.
    context_layers: tuple[str, ...] = ()
    # Outside a roundup, a layer other than the strongest also needs at least this
    # share of the strongest's evidence (each by its share of its threshold; 0: off),
    # and no more than ``max_layers`` layers are kept, the strongest (0: no limit).
    secondary_share: float = 0.0
    max_layers: int = 0
    # Compiler news names compiler work in its subject (a title or a summary's first
    # ``subject_chars``): the core phrases there and the heaviest evidence-layer phrase
    # there must reach this (0: off). A framework's release post or a library's
    # announcement says "JIT" and "CUDA" further on.
    subject_evidence: float = 0.0
    # How far below the decision a patch release that only fixes bugs sits (0: off).
    fix_release: float = 0.0
    # The learned relevance decision over these rules' evidence (``[relevance] model``, a file
    # in the package's data folder; "" or absent: the rules decide). See digest/analyze/learned.py.
    model: RelevanceModel | None = None
    # The learned choice of a relevant entry's layers (top-level ``layer_model``, a file in the
    # package's data folder; "" or absent: the rules choose). See digest/analyze/layer_model.py.
    layer_model: LayerModel | None = None
    # A learned veto over the rules' relevance decision (``[relevance] veto``, a file in the
    # package's data folder; "" or absent: none). See digest/analyze/news_veto.py.
    veto: NewsVeto | None = None


def _weights(table: object, where: str) -> dict[str, float]:
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"taxonomy: [{where}] must be a non-empty table of phrase = weight")
    out: dict[str, float] = {}
    for phrase, weight in table.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise ConfigError(f"taxonomy: [{where}] {phrase!r} needs a number, got {weight!r}")
        out[phrase.lower()] = float(weight)
    return out


def _number(table: Mapping[str, Any], key: str, where: str, default: float | None = None) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"taxonomy: [{where}] {key} must be a number")
    return float(value)


def _unknown(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise ConfigError(f"taxonomy: unknown key(s) in [{where}]: {', '.join(extra)}")


def _layer(lid: str, table: object) -> LayerRule:
    where = f"layers.{lid}"
    if not isinstance(table, dict):
        raise ConfigError(f"taxonomy: [{where}] must be a table")
    _unknown(table, _LAYER_KEYS, where)
    return LayerRule(
        phrases=_weights(table.get("phrases"), f"{where}.phrases"),
        threshold=_number(table, "threshold", where),
        figure_weight=_number(table, "figure_weight", where, 0.0),
        max_figures=int(_number(table, "max_figures", where, 0.0)),
        roundup_threshold=(_number(table, "roundup_threshold", where)
                           if "roundup_threshold" in table else None),
    )


def _layers(table: object) -> dict[str, LayerRule]:
    if not isinstance(table, dict):
        raise ConfigError("taxonomy: [layers] must be a table")
    missing = [lid for lid in LAYER_IDS if lid not in table]
    unknown = [lid for lid in table if lid not in LAYER_IDS]
    if missing or unknown:
        problems = [f"missing layer(s) {', '.join(missing)}"] if missing else []
        problems += [f"unknown layer(s) {', '.join(unknown)}"] if unknown else []
        raise ConfigError(f"taxonomy: {'; '.join(problems)}; valid: {', '.join(LAYER_IDS)}")
    return {lid: _layer(lid, table[lid]) for lid in LAYER_IDS}


def _layer_list(rel: Mapping[str, Any], key: str) -> tuple[str, ...]:
    ids = rel.get(key, [])
    if not isinstance(ids, list) or any(lid not in LAYER_IDS for lid in ids):
        raise ConfigError(f"taxonomy: [relevance] {key} must list layer ids of "
                          f"{', '.join(LAYER_IDS)}")
    return tuple(ids)


def _title_phrases(table: object, where: str) -> tuple[dict[str, float], float, dict[str, float]]:
    """A table of title phrases, its threshold and its programmes ([community], [roundup])."""
    if table is None:
        return {}, 0.0, {}
    if not isinstance(table, dict):
        raise ConfigError(f"taxonomy: [{where}] must be a table")
    _unknown(table, _COMMUNITY_KEYS, where)
    programmes = (_weights(table["programmes"], f"{where}.programmes")
                  if "programmes" in table else {})
    return (_weights(table.get("phrases"), f"{where}.phrases"),
            _number(table, "threshold", where), programmes)


def build_taxonomy(data: Mapping[str, Any]) -> Taxonomy:
    """A taxonomy from parsed TOML data; raise ConfigError naming what is wrong."""
    _unknown(data, _TOP_KEYS, "top level")
    rel = data.get("relevance")
    if not isinstance(rel, dict):
        raise ConfigError("taxonomy: missing [relevance] table")
    _unknown(rel, _RELEVANCE_KEYS, "relevance")
    core = _weights(rel.get("core"), "relevance.core")
    negative = _weights(data.get("negative"), "negative")
    novelty = _weights(data.get("novelty"), "novelty")
    prior = _weights(data["source_prior"], "source_prior") if "source_prior" in data else {}
    layers = _layers(data.get("layers"))
    community, community_threshold, programmes = _title_phrases(data.get("community"),
                                                                "community")
    roundup, roundup_threshold, _ = _title_phrases(data.get("roundup"), "roundup")
    every = [*core, *negative, *novelty, *community, *roundup, *programmes]
    every += [p for rule in layers.values() for p in rule.phrases]
    if _number(rel, "saturation", "relevance", 8.0) <= 0:
        raise ConfigError("taxonomy: [relevance] saturation must be positive")
    if _number(rel, "triage_band", "relevance", 0.0) < 0:
        raise ConfigError("taxonomy: [relevance] triage_band must not be negative")
    return Taxonomy(
        core=core, negative=negative, source_prior=prior, novelty=novelty, layers=layers,
        relevance_threshold=_number(rel, "threshold", "relevance"),
        relevance_margin=_number(rel, "margin", "relevance", 0.0),
        saturation=_number(rel, "saturation", "relevance", 8.0),
        layer_share=_number(rel, "layer_share", "relevance", 0.0),
        triage_band=_number(rel, "triage_band", "relevance", 0.0),
        matcher=PhraseMatcher(every),
        layer_evidence=_number(rel, "layer_evidence", "relevance", 0.0),
        layer_evidence_cap=_number(rel, "layer_evidence_cap", "relevance", 0.0),
        evidence_layers=_layer_list(rel, "evidence_layers"),
        community=community, community_threshold=community_threshold,
        roundup=roundup, roundup_threshold=roundup_threshold, programmes=programmes,
        body_share=_number(rel, "body_share", "relevance", 1.0),
        lead_chars=int(_number(rel, "lead_chars", "relevance", 0.0)),
        title_share=_number(rel, "title_share", "relevance", 1.0),
        fallback_share=_number(rel, "fallback_share", "relevance", 0.0),
        secondary_weight=_number(rel, "secondary_weight", "relevance", 0.0),
        subject_chars=int(_number(rel, "subject_chars", "relevance", 0.0)),
        context_layers=_layer_list(rel, "context_layers"),
        secondary_share=_number(rel, "secondary_share", "relevance", 0.0),
        max_layers=int(_number(rel, "max_layers", "relevance", 0.0)),
        subject_evidence=_number(rel, "subject_evidence", "relevance", 0.0),
        fix_release=_number(rel, "fix_release", "relevance", 0.0),
        model=_model_file(rel, "model", "[relevance] model", load_model),
        layer_model=_model_file(data, "layer_model", "layer_model", load_layer_model),
        veto=_model_file(rel, "veto", "[relevance] veto", load_news_veto),
    )


def _model_file(table: Mapping[str, Any], key: str, where: str, load: Callable[[str], M]) -> M | None:
    """The learned model the file name at ``table[key]`` names, read by ``load`` (None for "" or none).

    ``where`` names the key in the one-line error when the value is not a file name.
    """
    name = table.get(key, "")
    if not isinstance(name, str):
        raise ConfigError(f"taxonomy: {where} must be a file name (\"\" for none)")
    return load(name) if name else None


def default_taxonomy_path() -> Path:
    """The taxonomy shipped with the package."""
    return data_dir() / "taxonomy.toml"


def load_taxonomy(path: Path | None = None) -> Taxonomy:
    """Load the taxonomy TOML (default: the shipped one); raise ConfigError on a bad file."""
    path = path or default_taxonomy_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"taxonomy: cannot read {path}: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"taxonomy: {path} is not valid TOML: {exc}") from exc
    try:
        return build_taxonomy(data)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (in {path})") from exc
