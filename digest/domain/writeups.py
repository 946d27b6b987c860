"""The write-up values shared by the writers, the build and the views, and who wrote a digest.

Plain values (standard library only): ``digest.write`` produces them,
``digest.build`` stores them, ``digest.domain.views`` recomposes them.
A ``mode`` is the model name that wrote a text, or ``WriteMode.EXTRACTIVE``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from digest.domain.status import WriteMode


@dataclass(frozen=True)
class SourceText:
    """One source of an event, as the writer sees it."""

    name: str
    url: str | None
    title: str
    summary: str


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


@dataclass(frozen=True)
class DayWriteup:
    """The day's title, overview and watch list in one locale."""

    title: str
    overview: str
    watchlist: tuple[str, ...]
    mode: str


def overall_mode(modes: Iterable[str]) -> str:
    """The model name when the LLM wrote every part, ``extractive`` (also for none), or ``mixed``."""
    distinct = set(modes)
    if not distinct:
        return WriteMode.EXTRACTIVE
    return distinct.pop() if len(distinct) == 1 else WriteMode.MIXED
