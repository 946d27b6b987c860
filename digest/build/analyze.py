"""Analyze a window's entries into stored events: cluster, classify, triage, score, save.

Three phases, so that no database transaction is open while the LLM is asked:

1. read     one read-only session: the identity keys of recent events, the
            clusters (pure), and the entries of the stored events they extend.
2. decide   no session: classify each cluster with its event's entries (pure);
            in LLM mode, ask the model about the events (:mod:`digest.build.triage`:
            every event, or the borderline ones only). Its verdict decides an
            event's relevance and layers (the score follows); a failed call keeps
            the rules' verdicts.
3. save     one transaction: create or extend the events, link the entries,
            store the final verdicts and their scores.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from digest.analyze.classify import is_news, is_roundup
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
from digest.build.triage import TRIAGE_LIMIT, TriageCounts, TriageScope, triage_verdicts
from digest.domain.items import Item
from digest.store.db import SessionFactory
from digest.write.llm import LLMClient
from digest.write.writer import WriteStats

log = logging.getLogger(__name__)


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
    triage_scope: TriageScope = "all",
    triage_limit: int | None = TRIAGE_LIMIT,
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
        planned = await triage(llm, planned, taxonomy, counts, stats, triage_scope, triage_limit)
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
    scope: TriageScope = "all",
    limit: int | None = TRIAGE_LIMIT,
) -> list[PlannedEvent]:
    """``planned`` with the LLM's verdicts on its events (``scope``, at most ``limit``) applied."""
    verdicts = await triage_verdicts(llm, [(p.primary, p.verdict) for p in planned], taxonomy,
                                     counts, scope=scope, limit=limit, stats=stats)
    return [p if v is p.verdict else replace(p, verdict=v)
            for p, v in zip(planned, verdicts, strict=True)]
