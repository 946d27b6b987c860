"""The LLM triage: a second opinion on the events' relevance and layers, in batches.

In LLM mode the build asks the model about its events (``scope``: ``all`` of them,
the default, or only the ``borderline`` ones, :func:`digest.analyze.classify.is_borderline`),
at most ``limit`` of them (the rules' news first, then the others by how close they
came: a day of thousands of entries costs a bounded number of calls), up to
``TRIAGE_BATCH`` per call: each event's primary entry, as its kind, source, title
and a bounded excerpt of its text (:func:`digest.write.prompts.triage_message`).
An answer decides the event's relevance and, when it names known layers, its layers
(:func:`digest.analyze.classify.with_verdict`); the score follows. A failed call, or an
event the answer leaves out, keeps the rules' verdict. Answers are cached, so a
rebuild asks the same questions for no tokens. ``bench/quality.py --llm`` measures
this same path against the labelled sets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from digest.analyze.classify import Classification, is_borderline, news_margin, with_verdict
from digest.analyze.taxonomy import Taxonomy
from digest.domain.items import Item
from digest.domain.writeups import TriageAnswer, TriageQuestion, item_kind
from digest.write.llm import LLMClient
from digest.write.writer import WriteStats, llm_triage

log = logging.getLogger(__name__)

TriageScope = Literal["all", "borderline"]
TRIAGE_SCOPES: tuple[TriageScope, ...] = ("all", "borderline")
TRIAGE_BATCH = 25  # events per call (a bounded excerpt each: about 12,000 tokens a call)
TRIAGE_CONCURRENCY = 4  # calls at a time
TRIAGE_LIMIT = 150  # events asked about per build at most (DIGEST_LLM_TRIAGE_LIMIT): six calls


@dataclass
class TriageCounts:
    """What the triage did: events asked about, answered, promoted, demoted and relayered."""

    asked: int = 0
    answered: int = 0
    promoted: int = 0
    demoted: int = 0
    relayered: int = 0  # relevant before and after, with other layers

    def as_dict(self) -> dict[str, int]:
        """A JSON-ready summary (the digest's stats keep it under ``triage``)."""
        return asdict(self)


def question(item: Item) -> TriageQuestion:
    """What the model is shown of an event: its primary entry."""
    return TriageQuestion(item.entry_id, item_kind(item.url, item.title, item.kind),
                          item.source_name, item.title, item.summary, item.body_beyond_summary)


async def triage_verdicts(
    llm: LLMClient,
    cases: Sequence[tuple[Item, Classification]],
    taxonomy: Taxonomy,
    counts: TriageCounts,
    *,
    scope: TriageScope = "all",
    limit: int | None = None,
    stats: WriteStats | None = None,
) -> list[Classification]:
    """Each case's verdict, with the model's answer applied where it gave one (counted).

    A case is an event's primary entry and the rules' verdict on the event. With a
    ``limit``, the cases asked about are the first ``limit`` in scope by :func:`_priority`.
    """
    chosen = [n for n, (_, verdict) in enumerate(cases)
              if scope == "all" or is_borderline(verdict, taxonomy)]
    if limit is not None:
        chosen = sorted(chosen, key=lambda n: _priority(cases[n], taxonomy))[:max(0, limit)]
    asked = {cases[n][0].entry_id: n for n in chosen}
    counts.asked = len(asked)
    answers = await _ask(llm, [question(cases[n][0]) for _, n in sorted(asked.items())], stats)
    counts.answered = len(answers)
    return [_apply(item, verdict, answers, taxonomy, counts) if item.entry_id in asked else verdict
            for item, verdict in cases]


def _priority(case: tuple[Item, Classification], taxonomy: Taxonomy) -> tuple[bool, float, int]:
    """The rules' news first, then the rest; each by its margin over the decision, the largest first."""
    item, verdict = case
    return (not verdict.relevant, -news_margin(verdict.totals, verdict.evidence, taxonomy),
            item.entry_id)


async def _ask(llm: LLMClient, questions: Sequence[TriageQuestion],
               stats: WriteStats | None) -> dict[int, TriageAnswer]:
    """The answers of every batch that answered; a failed batch answers nothing."""
    gate = asyncio.Semaphore(TRIAGE_CONCURRENCY)

    async def ask(batch: Sequence[TriageQuestion]) -> dict[int, TriageAnswer] | None:
        async with gate:
            return await llm_triage(llm, batch, stats=stats)

    batches = [questions[n:n + TRIAGE_BATCH] for n in range(0, len(questions), TRIAGE_BATCH)]
    answers = await asyncio.gather(*(ask(batch) for batch in batches))
    if any(answer is None for answer in answers):
        log.warning("LLM triage: %d of %d batch(es) failed; the rules decide those events",
                    sum(answer is None for answer in answers), len(batches))
    return {i: verdict for answer in answers if answer for i, verdict in answer.items()}


def _apply(item: Item, verdict: Classification, answers: Mapping[int, TriageAnswer],
           taxonomy: Taxonomy, counts: TriageCounts) -> Classification:
    answer = answers.get(item.entry_id)
    if answer is None:
        return verdict
    judged = with_verdict(verdict, answer.relevant, taxonomy, answer.layers)
    if judged.relevant != verdict.relevant:
        counts.promoted += judged.relevant
        counts.demoted += not judged.relevant
        log.info("LLM triage %s event %r", "promoted" if judged.relevant else "demoted", item.title)
    elif judged.relevant and judged.layers != verdict.layers:
        counts.relayered += 1
    return judged
