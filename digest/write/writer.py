"""Write-ups: the LLM writer (validated, figure-checked) and the extractive writer.

For each (event, locale) the build asks :func:`llm_event`; ``None`` means
"write it extractively" (:func:`extractive_event`, re-exported from
``digest.write.extractive``), and the reason is counted in :class:`WriteStats` and on
the client. An LLM answer is used only when:

1. it is one JSON object with the required keys, of the right types and lengths
   (unknown keys are ignored; a write-up's layers are the event's: the classifier's,
   or the triage's, never the writer's);
2. it is in the reader's language (zh text for zh; for en, Chinese text only
   where the sources have it, i.e. names);
3. every figure it states appears in the event's sources (``digest.analyze.figures``);
   otherwise the write-up falls back and ``figures`` is counted.

The day's title, overview and watch list follow the same rules against the
event write-ups (:func:`llm_day`); :func:`llm_triage` judges many entries
(relevance and layers) in one call.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from digest.analyze.figures import unsupported_figures
from digest.domain.daytext import extractive_day
from digest.domain.layers import LAYER_IDS
from digest.domain.writeups import (
    DayWriteup,
    EventInput,
    EventWriteup,
    SourceText,
    TriageAnswer,
    TriageQuestion,
)
from digest.write import prompts
from digest.write.extractive import clean_text, extractive_event
from digest.write.llm import LLMAnswer, LLMClient, LLMFailure

__all__ = [
    "WriteStats",
    "extractive_day",
    "extractive_event",
    "llm_day",
    "llm_event",
    "llm_triage",
    "triage_answers",
]

log = logging.getLogger(__name__)
T = TypeVar("T", EventWriteup, DayWriteup)

TITLE_MAX = 200
SUMMARY_MAX = 1500
WHY_MAX = 1000
WATCH_MAX_ITEMS = 8
WATCH_ITEM_MAX = 80
OVERVIEW_MAX = 2000
WATCHLIST_ITEM_MAX = 120

_CJK_RUN = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uf900-\ufaff\uff00-\uffef]+")


@dataclass
class WriteStats:
    """What the writers cost and why they fell back; goes into the digest's data notes."""

    calls: int = 0  # prompts sent to the endpoint (cache misses within the budget)
    cache_hits: int = 0
    tokens: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)

    @property
    def figure_fallbacks(self) -> int:
        """Write-ups dropped because they stated a figure no source states."""
        return self.fallbacks["figures"]

    def add(self, other: WriteStats) -> None:
        """Count ``other``'s calls, hits, tokens and fallbacks in these."""
        self.calls += other.calls
        self.cache_hits += other.cache_hits
        self.tokens += other.tokens
        self.fallbacks.update(other.fallbacks)

    def record(self, result: LLMAnswer | LLMFailure, prefix: str = "") -> None:
        """Count one answer or failure of the client."""
        if isinstance(result, LLMAnswer):
            self.cache_hits += result.cached
            self.calls += not result.cached
            self.tokens += result.tokens
            return
        self.fallbacks[prefix + result.reason] += 1
        self.calls += result.reason != "budget"
        self.tokens += result.tokens

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "tokens": self.tokens,
            "fallbacks": dict(sorted(self.fallbacks.items())),
            "figure_fallbacks": self.figure_fallbacks,
        }


class _Invalid(ValueError):
    """The answer does not have the promised shape."""


async def llm_event(
    client: LLMClient, event: EventInput, locale: str, *, stats: WriteStats | None = None
) -> EventWriteup | None:
    """The LLM's write-up of one event in ``locale``, or None to fall back (counted)."""
    sources = [_source_payload(s) for s in event.sources]
    user = prompts.event_message(event.title, event.layers, sources)
    answer = await _ask(client, prompts.event_system(locale), user, stats)
    if answer is None:
        return None
    what = f"event {event.event_id} ({locale})"
    try:
        written = _event_writeup(answer.data, event, client.model)
    except _Invalid as exc:
        _reject(client, stats, "invalid", f"{what}: {exc}")
        return None
    evidence = _event_evidence(event)
    texts = [written.title, written.summary, written.why_it_matters, *written.watch]
    return _checked(client, stats, what, written, texts, locale, evidence)


async def llm_day(
    client: LLMClient,
    events: Sequence[EventWriteup],
    locale: str,
    date: dt.date,
    *,
    stats: WriteStats | None = None,
) -> DayWriteup | None:
    """The LLM's title, overview and watch list over ``events``, or None to fall back."""
    if not events:
        return None
    user = prompts.day_message(date.isoformat(), [_day_payload(e) for e in events])
    answer = await _ask(client, prompts.day_system(locale), user, stats)
    if answer is None:
        return None
    what = f"day {date.isoformat()} ({locale})"
    try:
        day = _day_writeup(answer.data, client.model)
    except _Invalid as exc:
        _reject(client, stats, "invalid", f"{what}: {exc}")
        return None
    evidence = [text for e in events for text in _writeup_texts(e)]
    allowed = [date.isoformat(), (date - dt.timedelta(days=1)).isoformat(), str(len(events))]
    texts = [day.title, day.overview, *day.watchlist]
    return _checked(client, stats, what, day, texts, locale, evidence, allowed)


async def llm_triage(
    client: LLMClient, questions: Sequence[TriageQuestion], *, stats: WriteStats | None = None
) -> dict[int, TriageAnswer] | None:
    """Relevance and layers of many entries in one call: {id: answer} for the ids asked, or None.

    A row is kept when its id was asked and ``relevant`` is a boolean; its layers are the
    known ids it names (unknown ones dropped, logged). A relevant row naming none leaves
    the layers to the rules; a row that is not a verdict is ignored (the rules decide);
    an answer without an ``items`` list is a failure (None, counted as ``triage_invalid``).
    """
    if not questions:
        return {}
    user = prompts.triage_message(questions)
    answer = await _ask(client, prompts.TRIAGE_SYSTEM, user, stats, prefix="triage_")
    if answer is None:
        return None
    rows = answer.data.get("items")
    if not isinstance(rows, list):
        _reject(client, stats, "triage_invalid", "triage: no 'items' list")
        return None
    return triage_answers(rows, {question.entry_id for question in questions})


def triage_answers(rows: Sequence[object], asked: Collection[int]) -> dict[int, TriageAnswer]:
    """The verdicts of a triage answer's rows on the ids ``asked`` (any other row is ignored)."""
    verdicts: dict[int, TriageAnswer] = {}
    for row in rows:
        item_id, verdict = _verdict(row)
        if item_id is not None and item_id in asked and verdict is not None:
            verdicts[item_id] = verdict
    return verdicts


async def _ask(
    client: LLMClient, system: str, user: str, stats: WriteStats | None, prefix: str = ""
) -> LLMAnswer | None:
    result = await client.ask_json(prompts.PROMPT_VERSION, system, user)
    if stats is not None:
        stats.record(result, prefix)
    return result if isinstance(result, LLMAnswer) else None


def _reject(client: LLMClient, stats: WriteStats | None, reason: str, why: str) -> None:
    client.record_failure(reason)
    if stats is not None:
        stats.fallbacks[reason] += 1
    log.warning("LLM answer rejected (%s): %s", reason, why)


def _checked(
    client: LLMClient,
    stats: WriteStats | None,
    what: str,
    written: T,
    texts: Sequence[str],
    locale: str,
    evidence: Sequence[str],
    allowed: Sequence[str] = (),
) -> T | None:
    """``written`` when its language and figures pass, else None (counted)."""
    problem = language_problem(texts, locale, evidence)
    if problem:
        _reject(client, stats, "language", f"{what}: {problem}")
        return None
    missing = unsupported_figures(texts, evidence, allowed)
    if missing:
        _reject(client, stats, "figures", f"{what}: {', '.join(missing)} not in the sources")
        return None
    return written


def language_problem(texts: Sequence[str], locale: str, evidence: Iterable[str]) -> str | None:
    """Why ``texts`` are not in ``locale`` (zh needs Chinese; en only the sources' CJK)."""
    if locale == "zh":
        return None if any(_CJK_RUN.search(t) for t in texts) else "no Chinese text"
    known = " ".join(evidence)
    foreign = [run for t in texts for run in _CJK_RUN.findall(t) if run not in known]
    return f"Chinese text in an {locale} write-up: {foreign[0]!r}" if foreign else None


def _source_payload(source: SourceText) -> dict[str, str | None]:
    return {"name": source.name, "title": clean_text(source.title), "url": source.url,
            "summary": clean_text(source.summary)}


def _event_evidence(event: EventInput) -> list[str]:
    """Everything the event's sources say, in full (the model saw them bounded)."""
    texts = [event.title]
    for s in event.sources:
        texts += [s.name, s.title, clean_text(s.summary), s.url or ""]
    return texts


def _day_payload(event: EventWriteup) -> dict[str, object]:
    return {
        "title": event.title,
        "summary": prompts.clip(event.summary, prompts.DAY_SUMMARY_LIMIT),
        "why_it_matters": prompts.clip(event.why_it_matters, prompts.DAY_SUMMARY_LIMIT),
        "layers": list(event.layers),
        "watch": list(event.watch),
    }


def _writeup_texts(event: EventWriteup) -> list[str]:
    return [event.title, event.summary, event.why_it_matters, *event.watch]


def _event_writeup(data: dict[str, Any], event: EventInput, model: str) -> EventWriteup:
    return EventWriteup(
        title=_text(data, "title", TITLE_MAX),
        summary=_text(data, "summary", SUMMARY_MAX),
        why_it_matters=_text(data, "why_it_matters", WHY_MAX),
        watch=_strings(data, "watch", WATCH_MAX_ITEMS, WATCH_ITEM_MAX),
        layers=event.layers,
        mode=model,
    )


def _day_writeup(data: dict[str, Any], model: str) -> DayWriteup:
    return DayWriteup(
        title=_text(data, "title", TITLE_MAX),
        overview=_text(data, "overview", OVERVIEW_MAX),
        watchlist=_strings(data, "watchlist", WATCH_MAX_ITEMS, WATCHLIST_ITEM_MAX),
        mode=model,
    )


def _text(data: dict[str, Any], key: str, limit: int) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _Invalid(f"{key!r} missing or not text")
    if len(value.strip()) > limit:
        raise _Invalid(f"{key!r} has {len(value.strip())} characters (max {limit})")
    return value.strip()


def _strings(data: dict[str, Any], key: str, most: int, limit: int) -> tuple[str, ...]:
    value = data.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _Invalid(f"{key!r} missing or not a list of texts")
    if len(value) > most or any(len(v.strip()) > limit for v in value):
        raise _Invalid(f"{key!r} over {most} items or an item over {limit} characters")
    return tuple(dict.fromkeys(v.strip() for v in value))


def _verdict(row: object) -> tuple[int | None, TriageAnswer | None]:
    """(id, answer) of one triage row; None where a field is missing or mistyped."""
    if not isinstance(row, dict):
        return None, None
    raw_id, relevant, named = row.get("id"), row.get("relevant"), row.get("layers")
    item_id: int | None = None
    if isinstance(raw_id, int) and not isinstance(raw_id, bool):
        item_id = raw_id
    elif isinstance(raw_id, str) and raw_id.strip().isdigit():
        item_id = int(raw_id)
    if not isinstance(relevant, bool):
        return item_id, None
    named = named if isinstance(named, list) else []
    unknown = [v for v in named if v not in LAYER_IDS]
    if unknown and relevant:
        log.warning("triage of entry %s: dropped %d unknown layer id(s)", item_id, len(unknown))
    layers = tuple(lid for lid in LAYER_IDS if lid in named) if relevant else ()
    return item_id, TriageAnswer(relevant, layers)
