"""What a reader sees: a digest in one locale, optionally filtered. Pure values."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from digest.domain.daytext import extractive_day
from digest.domain.writeups import Brief, EventWriteup, item_kind, overall_mode


@dataclass(frozen=True)
class SourceLink:
    """One source of an event."""

    name: str
    url: str | None


@dataclass(frozen=True)
class EventView:
    """One event as a digest shows it."""

    id: int
    rank: int
    title: str
    url: str | None
    score: float
    score_breakdown: dict[str, float]
    layers: tuple[str, ...]
    sources: tuple[SourceLink, ...]
    summary: str
    why_it_matters: str
    watch: tuple[str, ...]
    written_by: str
    updated: bool = False

    def as_writeup(self) -> EventWriteup:
        """The write-up part, for recomposing a day's text (the kind from the primary source's link)."""
        primary = self.sources[0].url if self.sources else self.url
        return EventWriteup(self.title, self.summary, self.why_it_matters, self.watch,
                            self.layers, self.written_by, item_kind(primary, self.title))


@dataclass(frozen=True)
class DigestView:
    """A digest in one locale."""

    date: dt.date
    locale: str
    title: str
    overview: str
    watchlist: tuple[str, ...]
    day_mode: str
    window_start: dt.datetime
    window_end: dt.datetime
    events: tuple[EventView, ...]
    stats: dict[str, Any] = field(default_factory=dict)
    tokens: int = 0
    read_count: int = 0
    filtered: bool = False
    briefs: tuple[Brief, ...] = ()  # roundups as one 简讯 / Briefs entry below the events

    @property
    def generation_mode(self) -> str:
        """The model name when the LLM wrote everything, ``extractive``, or ``mixed``."""
        return overall_mode([*(e.written_by for e in self.events), self.day_mode])

    @property
    def modes_used(self) -> dict[str, int]:
        """How many parts each mode wrote (events and the day's text)."""
        counts: dict[str, int] = {}
        for mode in [e.written_by for e in self.events] + [self.day_mode]:
            counts[mode] = counts.get(mode, 0) + 1
        return counts


class Filterable(Protocol):
    """What the subscriber filter reads of an event: a digest's view of it, or the outbox's facts."""

    @property
    def layers(self) -> Collection[str]: ...

    @property
    def score(self) -> float: ...


def keeps(event: Filterable, layers: AbstractSet[str] | None, min_score: float | None) -> bool:
    """The one subscriber filter rule: >= 1 layer shared with ``layers`` and a score >= ``min_score``.

    ``None`` leaves that half out. Preview, publish and the chat commands all filter with this.
    """
    return ((layers is None or not layers.isdisjoint(event.layers))
            and (min_score is None or event.score >= min_score))


def filter_view(
    view: DigestView, layers: Collection[str] | None = None, min_score: float | None = None
) -> DigestView:
    """Keep the events and briefs :func:`keeps` keeps for ``layers`` and ``min_score``.

    When anything is filtered out, the title, overview and watch list are
    recomposed from the kept events so they never name an event the reader
    did not choose.
    """
    wanted = frozenset(layers) if layers is not None else None
    kept = tuple(e for e in view.events if keeps(e, wanted, min_score))
    briefs = tuple(b for b in view.briefs if keeps(b, wanted, min_score))
    if len(kept) == len(view.events) and len(briefs) == len(view.briefs):
        return view
    day = extractive_day([e.as_writeup() for e in kept], view.locale, view.date,
                         briefs=[b.name for b in briefs])
    return replace(view, events=kept, briefs=briefs, title=day.title, overview=day.overview,
                   watchlist=tuple(day.watchlist), day_mode=day.mode, filtered=True)
