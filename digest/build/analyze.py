"""Analyze a window's entries into stored events: cluster, classify, triage, score, save.

Three phases, so that no database transaction is open while the LLM is asked:

1. read     one read-only session: the identity keys of recent events, the
            clusters (pure), and the entries of the stored events they extend.
2. decide   no session: classify each cluster with its event's entries (pure);
            in LLM mode, ask :func:`digest.write.llm_triage` about the borderline
            ones (:func:`digest.classify.is_borderline`), up to ``TRIAGE_BATCH``
            titles per call (one call on most days). A verdict promotes or demotes
            the event (the score follows); a failed call keeps the rules' verdicts.
            Answers are cached, so a rebuild asks the same questions for no tokens.
3. save     one transaction: create or extend the events, link the entries,
            store the final verdicts and their scores.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from digest.analyze.classify import is_borderline, is_news, is_roundup, with_verdict
from digest.analyze.cluster import cluster, cluster_keys
from digest.analyze.score import ScoreWeights
from digest.analyze.taxonomy import Taxonomy
from digest.build.event_store import (
    EventRecord,
    PlannedEvent,
    load_known_keys,
    plan_event,
    save_events,
    stored_items,
)
from digest.domain.items import Item
from digest.store.db import SessionFactory
from digest.write.llm import LLMClient
from digest.write.writer import WriteStats, llm_triage

log = logging.getLogger(__name__)
TRIAGE_BATCH = 100  # titles per call
TRIAGE_CONCURRENCY = 4  # calls at a time, on a day with many borderline events


@dataclass
class TriageCounts:
    """What the triage did: events asked about, answered, promoted and demoted."""

    asked: int = 0
    answered: int = 0
    promoted: int = 0
    demoted: int = 0

    def as_dict(self) -> dict[str, int]:
        """A JSON-ready summary (the digest's stats keep it under ``triage``)."""
        return {"asked": self.asked, "answered": self.answered, "promoted": self.promoted,
                "demoted": self.demoted}


@dataclass(frozen=True)
class Analysis:
    """The window's events as stored, what the triage changed, and which events are roundups."""

    records: list[EventRecord]
    triage: TriageCounts
    roundups: frozenset[int] = frozenset()  # event ids the classifier marks as roundups (briefs)


async def analyze(
    sessions: SessionFactory,
    items: Sequence[Item],
    taxonomy: Taxonomy,
    weights: ScoreWeights,
    *,
    now: dt.datetime,
    date: dt.date,
    include_prereleases: bool = False,
    llm: LLMClient | None = None,
    stats: WriteStats | None = None,
) -> Analysis:
    """Cluster, classify, triage (LLM mode only), score and save the window's events."""
    news = [i for i in items if is_news(i, include_prereleases=include_prereleases)]
    async with sessions() as session:  # read only: closed before the LLM is asked
        known = await load_known_keys(session, now)
        updates = [i for i in items if i.announce_type in ("replace", "replace-cross")]
        attachable = [i for i in updates if any(k in known for k in cluster_keys(i))]
        clusters = cluster([*news, *attachable], known=known)
        stored = await stored_items(session, clusters)
    planned = [plan_event(c, s, taxonomy) for c, s in zip(clusters, stored, strict=True)]
    counts = TriageCounts()
    if llm is not None:
        planned = await triage(llm, planned, taxonomy, counts, stats)
    async with sessions.begin() as session:
        records = await save_events(session, planned, taxonomy, weights, now, before=date)
    roundups = frozenset(r.event_id for r, p in zip(records, planned, strict=True)
                         if is_roundup(p.verdict.totals, taxonomy))
    return Analysis(records, counts, roundups)


async def triage(
    llm: LLMClient,
    planned: Sequence[PlannedEvent],
    taxonomy: Taxonomy,
    counts: TriageCounts,
    stats: WriteStats | None = None,
) -> list[PlannedEvent]:
    """``planned`` with the LLM's verdicts on the borderline events applied (counted)."""
    borderline = {p.primary.entry_id: p for p in planned if is_borderline(p.verdict, taxonomy)}
    counts.asked = len(borderline)
    verdicts = await _ask(llm, [(i, borderline[i].primary.title) for i in sorted(borderline)], stats)
    counts.answered = len(verdicts)
    return [_apply(p, verdicts, taxonomy, counts) if p.primary.entry_id in borderline else p
            for p in planned]


async def _ask(
    llm: LLMClient, questions: Sequence[tuple[int, str]], stats: WriteStats | None
) -> dict[int, bool]:
    """The verdicts of every batch that answered; a failed batch answers nothing."""
    gate = asyncio.Semaphore(TRIAGE_CONCURRENCY)

    async def ask(batch: Sequence[tuple[int, str]]) -> dict[int, bool] | None:
        async with gate:
            return await llm_triage(llm, batch, stats=stats)

    batches = [questions[n:n + TRIAGE_BATCH] for n in range(0, len(questions), TRIAGE_BATCH)]
    answers = await asyncio.gather(*(ask(batch) for batch in batches))
    if any(answer is None for answer in answers):
        log.warning("LLM triage: %d of %d batch(es) failed; the rules decide those events",
                    sum(answer is None for answer in answers), len(batches))
    return {i: relevant for answer in answers if answer for i, relevant in answer.items()}


def _apply(
    plan: PlannedEvent, verdicts: Mapping[int, bool], taxonomy: Taxonomy, counts: TriageCounts
) -> PlannedEvent:
    relevant = verdicts.get(plan.primary.entry_id)
    if relevant is None:
        return plan
    if relevant != plan.verdict.relevant:
        counts.promoted += relevant
        counts.demoted += not relevant
        log.info("LLM triage %s event %r", "promoted" if relevant else "demoted", plan.primary.title)
    return replace(plan, verdict=with_verdict(plan.verdict, relevant, taxonomy))
