"""Read stored digests and events. Helpers never commit: the caller owns the transaction."""

from __future__ import annotations

import datetime as dt
import functools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Integer,
    Select,
    Text,
    and_,
    bindparam,
    cast,
    exists,
    func,
    literal,
    select,
    true,
)
from sqlalchemy.ext.asyncio import AsyncSession

from digest.domain.daytext import extractive_day
from digest.domain.errors import BuildError
from digest.domain.layers import LAYER_IDS
from digest.domain.views import DigestView, EventView, SourceLink
from digest.domain.writeups import EventInput, EventWriteup, SourceText, briefs_of
from digest.store.models import Digest, DigestEvent, DigestText, Entry, Event, EventEntry, Source, Writeup


async def get_digest(session: AsyncSession, date: dt.date, *, listed_only: bool = False) -> Digest:
    """The stored digest of ``date``, or a BuildError with a hint to build it.

    ``listed_only``: what readers may see (the web API, the chat commands): a partial or
    hidden digest is as missing.
    """
    query = select(Digest).where(Digest.date == date)
    digest = await session.scalar(query.where(listed()) if listed_only else query)
    if digest is None:
        raise BuildError(f"no digest for {date} yet; build it first: digest build --date {date}")
    return digest


EventEntries = dict[int, list[tuple[Entry, Source]]]
_CHUNK = 500  # ids per IN (...): well under every backend's limit on bound parameters


async def event_entries(session: AsyncSession, event_ids: Iterable[int]) -> EventEntries:
    """Every entry of each event with its source, best source first (the one event-to-entries join).

    Best first is :func:`digest.analyze.cluster.primary_order`'s order (weight, earliest, source
    key, id): never the order the feeds arrived in, so a page names sources the same way each build.
    Each asked id has a list, empty when the event has no entries.
    """
    ids = sorted(set(event_ids))
    found: EventEntries = {event_id: [] for event_id in ids}
    for start in range(0, len(ids), _CHUNK):
        rows = await session.execute(
            select(EventEntry.event_id, Entry, Source)
            .join(Entry, Entry.id == EventEntry.entry_id)
            .join(Source, Source.id == Entry.source_id)
            .where(EventEntry.event_id.in_(ids[start:start + _CHUNK]))
            .order_by(Source.weight.desc(), Entry.published, Source.key, Entry.id)
        )
        for event_id, entry, source in rows:
            found[event_id].append((entry, source))
    return found


async def event_sources(session: AsyncSession, event_ids: Sequence[int]) -> dict[int, list[SourceText]]:
    """Every source entry of each event as the writers read it, best source first."""
    return {event_id: [SourceText(source.name, entry.canonical_url or entry.url, entry.title, entry.summary)
                       for entry, source in pairs]
            for event_id, pairs in (await event_entries(session, event_ids)).items()}


def listed() -> ColumnElement[bool]:
    """Digests readers see: not a partial draft, not hidden by ``digest delete --force``."""
    return and_(Digest.partial.is_(False), Digest.hidden_at.is_(None))


async def latest_digest_date(session: AsyncSession) -> dt.date | None:
    """The date of the newest listed digest, or None before the first build."""
    return await session.scalar(select(func.max(Digest.date)).where(listed()))


async def load_view(session: AsyncSession, date: dt.date, locale: str, *,
                    listed_only: bool = False) -> DigestView:
    """The digest of ``date`` in ``locale``; missing write-ups are filled extractively."""
    digest = await get_digest(session, date, listed_only=listed_only)
    rows = (await session.execute(
        select(DigestEvent, Event, Writeup).join(Event, Event.id == DigestEvent.event_id)
        .outerjoin(Writeup, and_(Writeup.event_id == Event.id, Writeup.locale == locale))
        .where(DigestEvent.digest_id == digest.id).order_by(DigestEvent.rank)
    )).all()
    sources = await event_sources(session, [event.id for _, event, _ in rows])
    events = tuple(
        _event_view(snap, event, sources.get(event.id, []), writeup, locale)
        for snap, event, writeup in rows
    )
    text = await session.scalar(
        select(DigestText).where(DigestText.digest_id == digest.id, DigestText.locale == locale)
    )
    briefs = briefs_of(digest.stats.get("briefs"))
    if text is not None:
        title, overview, watch, mode = text.title, text.overview, tuple(text.watchlist), text.mode
    else:
        day = extractive_day([e.as_writeup() for e in events], locale, date,
                             briefs=[b.name for b in briefs])
        title, overview, watch, mode = day.title, day.overview, tuple(day.watchlist), day.mode
    return DigestView(
        date=date, locale=locale, title=title, overview=overview, watchlist=watch, day_mode=mode,
        window_start=digest.window_start, window_end=digest.window_end, events=events,
        stats=dict(digest.stats), tokens=digest.tokens, read_count=digest.read_count, briefs=briefs,
    )


def _event_view(
    snap: DigestEvent, event: Event, sources: list[SourceText], row: Writeup | None, locale: str
) -> EventView:
    if row is not None:
        text = EventWriteup(row.title, row.summary, row.why_it_matters, tuple(row.watch),
                            tuple(snap.layers), row.mode)
    else:
        from digest.write.extractive import extractive_event  # the writer's rules load only to fill a gap

        text = extractive_event(
            EventInput(event.id, event.title, tuple(snap.layers), snap.score, tuple(sources)),
            locale,
        )
    links = source_links(sources)
    return EventView(
        id=event.id, rank=snap.rank, title=text.title, url=event.url, score=snap.score,
        score_breakdown=dict(snap.score_breakdown), layers=tuple(snap.layers), sources=links,
        summary=text.summary, why_it_matters=text.why_it_matters, watch=tuple(text.watch),
        written_by=text.mode, updated=snap.updated,
    )


def source_links(sources: Sequence[SourceText]) -> tuple[SourceLink, ...]:
    """One link per URL, best source first: an arXiv paper cross-listed in three categories is one link
    named after all of them ("arXiv cs.AR, cs.PL"), not three links to the same page."""
    names: dict[str | None, list[str]] = {}
    for source in sources:
        have = names.setdefault(source.url, [])
        if source.name not in have:
            have.append(source.name)
    return tuple(SourceLink(_joined_name(found), url) for url, found in names.items())


def _joined_name(names: list[str]) -> str:
    prefix = "arXiv "
    if len(names) > 1 and all(n.startswith(prefix) for n in names):
        return prefix + ", ".join(n.removeprefix(prefix) for n in names)
    return names[0]


# --- The archive: lists, event detail, read counts (the web app and the static export). ---

MAX_INT32 = 2**31 - 1


@dataclass(frozen=True)
class DigestSummary:
    """One digest in the archive index."""

    date: dt.date
    title: str
    events: int
    layers: tuple[str, ...]
    top_score: float
    built_at: dt.datetime
    published_at: dt.datetime | None


@dataclass(frozen=True)
class DigestPage:
    """One page of the archive index, newest first."""

    items: tuple[DigestSummary, ...]
    page: int
    pages: int
    total: int


@dataclass(frozen=True)
class SourceEntry:
    """One entry an event gathers, as the event page lists it."""

    name: str
    title: str
    url: str | None
    published: dt.datetime


@dataclass(frozen=True)
class Appearance:
    """A digest that showed an event, with the rank and score it had there."""

    date: dt.date
    title: str
    rank: int
    score: float


@dataclass(frozen=True)
class EventDetail:
    """An event with its write-up in one locale, latest shown score, every source and digest."""

    id: int
    title: str
    summary: str
    why_it_matters: str
    watch: tuple[str, ...]
    written_by: str
    url: str | None
    score: float
    score_breakdown: dict[str, float]
    layers: tuple[str, ...]
    first_seen: dt.datetime
    sources: tuple[SourceEntry, ...]
    digests: tuple[Appearance, ...]


@dataclass(frozen=True)
class RecentEvent:
    """An event shown in a recent digest (its latest showing)."""

    id: int
    title: str
    summary: str
    url: str | None
    score: float
    score_breakdown: dict[str, float]
    layers: tuple[str, ...]
    date: dt.date
    rank: int
    first_seen: dt.datetime


def _layer_pattern(layer: str) -> str:
    """The LIKE pattern of "a JSON list of layer ids contains ``layer``"."""
    escaped = layer.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f'%"{escaped}"%'


def _layer_like(column: Any, layer: str | BindParameter[str]) -> ColumnElement[bool]:
    """A portable "JSON list contains ``layer``" test (layer ids are a closed set of plain names).

    ``layer`` is a layer id, or a bound parameter that will hold its :func:`_layer_pattern`.
    """
    pattern = _layer_pattern(layer) if isinstance(layer, str) else layer
    return cast(column, Text).like(pattern, escape="\\")


def _with_layer(layer: str | None) -> ColumnElement[bool]:
    if layer is None:
        return true()
    return exists().where(DigestEvent.digest_id == Digest.id, _layer_like(DigestEvent.layers, layer))


async def list_digests(
    session: AsyncSession, locale: str, *, page: int = 1, per_page: int = 20, layer: str | None = None
) -> DigestPage:
    """One page of listed digests, newest first; ``layer`` keeps digests with an event in it."""
    where = and_(listed(), _with_layer(layer))
    total = int(await session.scalar(select(func.count()).select_from(Digest).where(where)) or 0)
    digests = (await session.scalars(
        select(Digest).where(where).order_by(Digest.date.desc())
        .limit(per_page).offset((page - 1) * per_page)
    )).all()
    titles = await day_titles(session, digests, locale)
    shown = await _shown_events(session, [d.id for d in digests])
    items = tuple(_summary(d, titles[d.id], shown.get(d.id, [])) for d in digests)
    return DigestPage(items, page, max(1, -(-total // per_page)), total)


async def _shown_events(session: AsyncSession, ids: Sequence[int]) -> dict[int, list[DigestEvent]]:
    rows = await session.scalars(select(DigestEvent).where(DigestEvent.digest_id.in_(list(ids))))
    found: dict[int, list[DigestEvent]] = defaultdict(list)
    for row in rows:
        found[row.digest_id].append(row)
    return found


def _summary(digest: Digest, title: str, shown: list[DigestEvent]) -> DigestSummary:
    seen = {lid for row in shown for lid in row.layers}
    return DigestSummary(
        date=digest.date, title=title, events=len(shown),
        layers=tuple(lid for lid in LAYER_IDS if lid in seen),
        top_score=max((row.score for row in shown), default=0.0),
        built_at=digest.built_at, published_at=digest.published_at,
    )


async def day_titles(session: AsyncSession, digests: Sequence[Digest], locale: str) -> dict[int, str]:
    """Each digest's title in ``locale``; a missing locale is composed extractively."""
    rows = await session.scalars(select(DigestText).where(
        DigestText.digest_id.in_([d.id for d in digests]), DigestText.locale == locale))
    titles = {row.digest_id: row.title for row in rows}
    for digest in digests:
        if digest.id not in titles:
            titles[digest.id] = (await load_view(session, digest.date, locale)).title
    return titles


async def event_detail(session: AsyncSession, event_id: int, locale: str) -> EventDetail | None:
    """An event shown in at least one digest, with everything its page needs; else None."""
    if not 0 < event_id <= MAX_INT32:
        return None
    event = await session.get(Event, event_id)
    shows = (await session.execute(
        select(DigestEvent, Digest).join(Digest, Digest.id == DigestEvent.digest_id)
        .where(DigestEvent.event_id == event_id, listed()).order_by(Digest.date.desc())
    )).all()
    if event is None or not shows:
        return None
    titles = await day_titles(session, [d for _, d in shows], locale)
    latest = shows[0][0]
    text = (await event_texts(session, [(event, latest)], locale))[event.id]
    return EventDetail(
        id=event.id, title=text.title, summary=text.summary, why_it_matters=text.why_it_matters,
        watch=tuple(text.watch), written_by=text.mode, url=event.url, score=latest.score,
        score_breakdown=dict(latest.score_breakdown), layers=tuple(latest.layers),
        first_seen=event.first_seen, sources=tuple(await _source_entries(session, event.id)),
        digests=tuple(Appearance(d.date, titles[d.id], s.rank, s.score) for s, d in shows),
    )


async def _source_entries(session: AsyncSession, event_id: int) -> list[SourceEntry]:
    pairs = (await event_entries(session, [event_id]))[event_id]
    return [SourceEntry(source.name, entry.title, entry.canonical_url or entry.url, entry.published)
            for entry, source in pairs]


async def event_texts(
    session: AsyncSession, shown: Sequence[tuple[Event, DigestEvent]], locale: str
) -> dict[int, EventWriteup]:
    """Each event's write-up in ``locale``; a missing one is written extractively."""
    ids = [event.id for event, _ in shown]
    rows = await session.scalars(select(Writeup).where(Writeup.event_id.in_(ids), Writeup.locale == locale))
    found = {w.event_id: EventWriteup(w.title, w.summary, w.why_it_matters, tuple(w.watch), (), w.mode)
             for w in rows}
    found.update(await _extractive(session, [(event.id, event.title, snap.layers, snap.score)
                                             for event, snap in shown if event.id not in found], locale))
    return found


@functools.cache  # one statement per shape: its cache key and compiled form are reused
def _recent_query(by_score: bool, by_layer: bool) -> Select[Any]:
    """The /recent statement (best first or newest first, with a layer filter or not); values
    are bound per call.

    Each event's first showing is picked in SQL (``ROW_NUMBER()`` per event) and the LIMIT
    applies there, before any join: only the rows returned meet ``event``, ``digest_event``
    and ``writeup`` (the write-up in the asked locale, LEFT JOINed: a missing one is
    written extractively afterwards). Built once per shape, so its cache key and compiled
    form are reused; Core columns only, so no row becomes an ORM object.
    """
    digest, shown_in, event, writeup = (Digest.__table__.c, DigestEvent.__table__.c, Event.__table__.c,
                                        Writeup.__table__.c)
    recent = select(digest.id).where(digest.window_end > bindparam("since", type_=digest.window_end.type),
                                     listed())
    shown = (select(shown_in.event_id, shown_in.digest_id, shown_in.score, shown_in.rank, digest.date)
             .join_from(DigestEvent.__table__, Digest.__table__, digest.id == shown_in.digest_id)
             .where(shown_in.digest_id.in_(recent),  # IN: digest_event's key is used
                    shown_in.score >= bindparam("min_score", type_=shown_in.score.type)))
    if by_layer:
        shown = shown.where(_layer_like(shown_in.layers, bindparam("layer", type_=Text)))
    inner = shown.subquery("shown")

    def ranking(c: Any) -> tuple[Any, ...]:
        return ((c.score.desc(), c.date.desc(), c.rank, c.event_id) if by_score
                else (c.date.desc(), c.rank, c.event_id))

    number = func.row_number().over(partition_by=inner.c.event_id, order_by=ranking(inner.c)).label("n")
    ranked = select(inner, number).subquery("ranked")
    top = (select(ranked.c.event_id, ranked.c.digest_id, ranked.c.score, ranked.c.rank, ranked.c.date)
           .where(ranked.c.n == 1).order_by(*ranking(ranked.c))
           .limit(bindparam("limit", type_=Integer)).subquery("top"))
    return (
        select(top.c.event_id, top.c.score, top.c.rank, top.c.date, shown_in.layers,
               shown_in.score_breakdown, event.title.label("event_title"), event.url, event.first_seen,
               writeup.title, writeup.summary)
        .join_from(top, Event.__table__, event.id == top.c.event_id)
        .join(DigestEvent.__table__, and_(shown_in.event_id == top.c.event_id,
                                          shown_in.digest_id == top.c.digest_id))
        .outerjoin(Writeup.__table__, and_(writeup.event_id == top.c.event_id,
                                           writeup.locale == bindparam("locale", type_=writeup.locale.type)))
        .order_by(*ranking(top.c))
    )


async def recent_events(
    session: AsyncSession, locale: str, *, since: dt.datetime, layer: str | None = None,
    min_score: float = 0.0, limit: int = 200, order: str = "date",
) -> list[RecentEvent]:
    """Events shown in digests whose window ended after ``since``, each once.

    ``order="date"``: newest digest first, then rank; ``order="score"``: best first.
    One statement (:func:`_recent_query`) brings the chosen events with their write-ups in
    ``locale``; only an event without one costs more (its sources, for the extractive writer).
    """
    values: dict[str, Any] = {"since": since, "min_score": min_score, "limit": limit, "locale": locale}
    if layer is not None:
        values["layer"] = _layer_pattern(layer)
    connection = await session.connection()
    rows = (await connection.execute(_recent_query(order == "score", layer is not None), values)).all()
    written = await _extractive(session, [(row.event_id, row.event_title, row.layers, row.score)
                                          for row in rows if row.title is None], locale)
    found: list[RecentEvent] = []
    for row in rows:
        title, summary = ((row.title, row.summary) if row.title is not None
                          else (written[row.event_id].title, written[row.event_id].summary))
        found.append(RecentEvent(row.event_id, title, summary, row.url, row.score,
                                 dict(row.score_breakdown), tuple(row.layers), row.date, row.rank,
                                 row.first_seen))
    return found


async def _extractive(session: AsyncSession, events: Sequence[tuple[int, str, Sequence[str], float]],
                      locale: str) -> dict[int, EventWriteup]:
    """The extractive write-up of each (id, title, layers, score) that has no stored one."""
    from digest.write.extractive import extractive_event  # the writer's rules load only to fill a gap

    sources = await event_sources(session, [event_id for event_id, *_ in events]) if events else {}
    return {event_id: extractive_event(EventInput(event_id, title, tuple(layers), score,
                                                  tuple(sources.get(event_id, []))), locale)
            for event_id, title, layers, score in events}


async def all_event_ids(session: AsyncSession) -> list[int]:
    """Every event shown in at least one digest (the static export writes a page for each)."""
    rows = await session.scalars(select(DigestEvent.event_id).distinct()
                                 .join(Digest, Digest.id == DigestEvent.digest_id).where(listed())
                                 .order_by(DigestEvent.event_id))
    return list(rows)


async def ping(session: AsyncSession) -> None:
    """Raise unless the database answers."""
    await session.execute(select(literal(1)))
