"""The write-up values shared by the writers, the build and the views, and who wrote a digest.

Plain values (standard library only): ``digest.write`` produces them,
``digest.build`` stores them, ``digest.domain.views`` recomposes them.
A ``mode`` is the model name that wrote a text, or ``WriteMode.EXTRACTIVE``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from digest.domain.status import WriteMode

PAPER, BLOG, RELEASE, ROUNDUP = "paper", "blog", "release", "roundup"
_ROUNDUP_TITLE = re.compile(r"\b(?:weekly|newsletter|roundup|round-up|this week in)\b", re.I)
_RELEASE_URL = re.compile(r"^https?://github\.com/[^/]+/[^/]+/releases(?:/|$)", re.I)
_PAPER_URL = re.compile(r"^https?://(?:www\.|export\.)?(?:arxiv\.org|doi\.org|openreview\.net)/", re.I)


def item_kind(url: str | None, title: str = "", source_kind: str = "") -> str:
    """What an entry is: ``paper``, ``release``, ``roundup`` (a newsletter issue) or ``blog``.

    From the source's kind when known (``arxiv``, ``github-releases``), else from the URL and title.
    """
    if source_kind == "arxiv" or _PAPER_URL.match(url or ""):
        return PAPER
    if source_kind == "github-releases" or _RELEASE_URL.match(url or ""):
        return RELEASE
    return ROUNDUP if _ROUNDUP_TITLE.search(title) else BLOG


@dataclass(frozen=True)
class SourceText:
    """One source of an event, as the writer sees it; ``kind`` is the source's kind when known."""

    name: str
    url: str | None
    title: str
    summary: str
    kind: str = ""

    @property
    def item_kind(self) -> str:
        """``paper``, ``release``, ``roundup`` or ``blog`` (see :func:`item_kind`)."""
        return item_kind(self.url, self.title, self.kind)


@dataclass(frozen=True)
class TriageQuestion:
    """One event put to the LLM triage: its primary entry's id, kind, source, title and text."""

    entry_id: int
    kind: str  # paper | blog | release | roundup (:func:`item_kind`)
    source: str
    title: str
    summary: str
    body: str = ""


@dataclass(frozen=True)
class TriageAnswer:
    """The LLM triage's verdict on one event: relevant or not, and the known layer ids it named."""

    relevant: bool
    layers: tuple[str, ...] = ()


@dataclass(frozen=True)
class EventInput:
    """An event to write up: its rule layers, score and sources (primary first)."""

    event_id: int
    title: str
    layers: tuple[str, ...]
    score: float
    sources: tuple[SourceText, ...]


@dataclass(frozen=True)
class EventWriteup:
    """An event's write-up in one locale; ``mode`` is the model name or ``extractive``."""

    title: str
    summary: str
    why_it_matters: str
    watch: tuple[str, ...]
    layers: tuple[str, ...]
    mode: str
    kind: str = ""  # the primary source's item kind (:func:`item_kind`), for the day's overview


@dataclass(frozen=True)
class DayWriteup:
    """The day's title, overview and watch list in one locale."""

    title: str
    overview: str
    watchlist: tuple[str, ...]
    mode: str


@dataclass(frozen=True)
class BriefItem:
    """One line of a roundup, in the roundup's own words, and its link when the roundup gives one."""

    text: str
    url: str | None = None


@dataclass(frozen=True)
class Brief:
    """A roundup (a weekly newsletter) shown as one 简讯 / Briefs entry: its name and its items.

    Not a main event: it takes no rank and never names the day. ``layers`` and
    ``score`` are the roundup event's, for the subscriber filter.
    """

    event_id: int
    title: str
    name: str
    url: str | None
    source: str
    layers: tuple[str, ...]
    score: float
    items: tuple[BriefItem, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (a digest's stats keep its briefs)."""
        return {"event_id": self.event_id, "title": self.title, "name": self.name, "url": self.url,
                "source": self.source, "layers": list(self.layers), "score": self.score,
                "items": [{"text": i.text, "url": i.url} for i in self.items]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Brief | None:
        """A stored brief, or None when the stored value does not have the shape :meth:`as_dict` gives."""
        try:
            items = tuple(BriefItem(str(i["text"]), i["url"] if isinstance(i.get("url"), str) else None)
                          for i in data["items"] if isinstance(i, Mapping) and i.get("text"))
            url = data.get("url")
            return cls(int(data["event_id"]), str(data["title"]), str(data["name"]),
                       url if isinstance(url, str) else None, str(data.get("source", "")),
                       tuple(str(x) for x in data.get("layers", ())), float(data.get("score", 0.0)),
                       items)
        except (KeyError, TypeError, ValueError):
            return None


def briefs_of(stored: object) -> tuple[Brief, ...]:
    """The briefs a digest's stats keep under ``briefs`` (malformed entries skipped)."""
    if not isinstance(stored, list):
        return ()
    found = (Brief.from_dict(b) for b in stored if isinstance(b, Mapping))
    return tuple(b for b in found if b is not None and b.items)


def overall_mode(modes: Iterable[str]) -> str:
    """The model name when the LLM wrote every part, ``extractive`` (also for none), or ``mixed``."""
    distinct = set(modes)
    if not distinct:
        return WriteMode.EXTRACTIVE
    return distinct.pop() if len(distinct) == 1 else WriteMode.MIXED
