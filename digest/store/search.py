"""Full-text search over events and digests, and the weekly counts per layer: the one query module.

The index is one table of documents (kind, ref_id, locale, title, body), created by migration 0005:
on SQLite an FTS5 table with the trigram tokenizer (``search_fts``, ranked by bm25), on PostgreSQL
``search_doc`` with a generated tsvector under a GIN index (ranked by ts_rank, 'simple' config).
Trigrams find nothing under three characters and the 'simple' parser keeps a run of Chinese as one
word, so such terms (two-character Chinese ones, say) are matched by LIKE/ILIKE instead, on the
same table. :func:`refresh` rewrites one digest's documents; the build calls it in its transaction.

A query is user text: it is cut into at most :data:`MAX_TERMS` terms, every term is quoted for
FTS5 (or given to plainto_tsquery) and every LIKE pattern escaped; nothing reaches SQL unbound.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from digest.domain.errors import UsageError
from digest.domain.layers import LAYER_IDS
from digest.domain.locales import CJK
from digest.domain.writeups import briefs_of
from digest.render.safety import strip_controls
from digest.store.models import Digest, DigestEvent
from digest.store.queries import listed

MAX_QUERY = 200  # characters
MAX_TERMS = 8
MAX_LIMIT = 50
SNIPPET = 160  # characters of body around the first hit


class QueryError(UsageError):
    """The search query is empty or too long (the web answers 400)."""


@dataclass(frozen=True)
class Hit:
    """One search result: an event or a digest, the document that matched and its rank."""

    kind: str  # "event" or "digest"
    id: int
    locale: str  # of the matching text ("" for an event's own title)
    title: str
    snippet: str
    score: float  # higher is better, comparable within one search only
    date: dt.date | None  # a digest's date (None for events)


def parse_query(query: str) -> tuple[str, ...]:
    """The distinct terms of ``query`` (case folded), or a QueryError when empty or too long."""
    stripped = strip_controls(query.encode("utf-8", "replace").decode()).strip()  # no NUL, no lone surrogate
    if len(stripped) > MAX_QUERY:
        raise QueryError(f"search query too long: at most {MAX_QUERY} characters")
    terms = tuple(dict.fromkeys(t.casefold() for t in stripped.split() if t))
    if not terms:
        raise QueryError("search query is empty")
    return terms[:MAX_TERMS]


def _indexable(term: str, dialect: str) -> bool:
    """Whether the full-text index can find ``term`` (else it is matched by LIKE)."""
    if len(term) < 3:
        return False
    return dialect == "sqlite" or not CJK.search(term)


def _fts5_phrase(term: str) -> str:
    """``term`` as one FTS5 string: every operator, NEAR, *, ( or : inside it is plain text."""
    return '"' + term.replace('"', '""') + '"'


def _like(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


@dataclass(frozen=True)
class _Plan:
    """The SQL pieces of one search: a WHERE, a rank expression and the bound parameters."""

    where: str
    rank: str
    params: dict[str, Any]


def _plan(terms: Sequence[str], dialect: str) -> _Plan:
    indexed = [t for t in terms if _indexable(t, dialect)]
    others = [t for t in terms if not _indexable(t, dialect)]
    params: dict[str, Any] = {f"l{n}": _like(t) for n, t in enumerate(others)}
    op = "LIKE" if dialect == "sqlite" else "ILIKE"
    wheres = [f"(title {op} :l{n} ESCAPE '\\' OR body {op} :l{n} ESCAPE '\\')" for n in range(len(others))]
    bonus = " + ".join(f"(CASE WHEN title {op} :l{n} ESCAPE '\\' THEN 2 ELSE 1 END)"
                       for n in range(len(others))) or "0"
    rank = bonus
    if indexed and dialect == "sqlite":
        params["match"] = " ".join(_fts5_phrase(t) for t in indexed)
        wheres.insert(0, "search_fts MATCH :match")
        rank = f"-bm25(search_fts, 0, 0, 0, 10.0, 1.0) + {bonus}"
    elif indexed:
        params["tsq"] = " ".join(indexed)
        wheres.insert(0, "tsv @@ plainto_tsquery('simple', :tsq)")
        rank = f"ts_rank(tsv, plainto_tsquery('simple', :tsq)) * 10 + {bonus}"
    return _Plan(" AND ".join(wheres), rank, params)


_VISIBLE = """(
  (kind = 'event' AND EXISTS (SELECT 1 FROM digest_event de JOIN digest d ON d.id = de.digest_id
     WHERE de.event_id = ref_id AND d.partial = :no AND d.hidden_at IS NULL {event_layer}))
  OR (kind = 'digest' AND EXISTS (SELECT 1 FROM digest d WHERE d.id = ref_id AND d.partial = :no
     AND d.hidden_at IS NULL {digest_layer}))
)"""
_LAYER_OF = "AND CAST(de.layers AS TEXT) LIKE :layer"
_DIGEST_LAYER = ("AND EXISTS (SELECT 1 FROM digest_event de WHERE de.digest_id = d.id "
                 "AND CAST(de.layers AS TEXT) LIKE :layer)")


def _visible(layer: str | None) -> str:
    if layer is None:
        return _VISIBLE.format(event_layer="", digest_layer="")
    return _VISIBLE.format(event_layer=_LAYER_OF, digest_layer=_DIGEST_LAYER)


def _dialect(session: AsyncSession) -> str:
    return session.get_bind().dialect.name


def _table(dialect: str) -> str:
    return "search_fts" if dialect == "sqlite" else "search_doc"


async def search(session: AsyncSession, query: str, *, locale: str = "", layer: str | None = None,
                 limit: int = 20) -> list[Hit]:
    """Events and digests readers can see that match every term of ``query``, best first.

    ``layer`` keeps events shown with that layer and digests with an event in it; of an item's
    matching texts the one in ``locale`` is shown when there is one.
    """
    terms = parse_query(query)
    if layer is not None and layer not in LAYER_IDS:
        raise QueryError(f"unknown layer {layer!r}; valid: {', '.join(LAYER_IDS)}")
    dialect = _dialect(session)
    plan = _plan(terms, dialect)
    params = plan.params | {"no": False, "cap": max(1, min(limit, MAX_LIMIT)) * 4}
    if layer is not None:
        params["layer"] = f'%"{layer}"%'
    sql = (f"SELECT kind, ref_id, locale, title, body, {plan.rank} AS score FROM {_table(dialect)} "
           f"WHERE {plan.where} AND {_visible(layer)} ORDER BY score DESC, ref_id DESC LIMIT :cap")
    rows = (await session.execute(text(sql), params)).all()
    return await _hits(session, rows, terms, locale, min(limit, MAX_LIMIT))


async def _hits(session: AsyncSession, rows: Sequence[Any], terms: Sequence[str], locale: str,
                limit: int) -> list[Hit]:
    """One hit per event or digest, at its best score, showing its text in ``locale`` if it matched."""
    best: dict[tuple[str, int], Any] = {}
    score: dict[tuple[str, int], float] = {}
    for row in rows:
        key = (row.kind, int(row.ref_id))
        score.setdefault(key, float(row.score))
        if key not in best or (row.locale == locale and best[key].locale != locale):
            best[key] = row
    chosen = list(best.values())[:limit]
    ids = [int(r.ref_id) for r in chosen if r.kind == "digest"]
    found = await session.execute(select(Digest.id, Digest.date).where(Digest.id.in_(ids)))
    dates: dict[int, dt.date] = {digest_id: date for digest_id, date in found}
    return [Hit(r.kind, int(r.ref_id), r.locale, r.title, snippet(r.body, terms),
                score[(r.kind, int(r.ref_id))], dates.get(int(r.ref_id)) if r.kind == "digest" else None)
            for r in chosen]


def snippet(body: str, terms: Sequence[str]) -> str:
    """About :data:`SNIPPET` characters of ``body`` around the first term found (its start if none)."""
    folded = body.casefold()
    at = min((i for i in (folded.find(t) for t in terms) if i >= 0), default=0)
    start = max(0, at - SNIPPET // 4)
    cut = body[start:start + SNIPPET].strip()
    return ("…" if start else "") + cut + ("…" if start + SNIPPET < len(body) else "")


# --- Keeping the index current: the build rewrites one digest's documents. ---

# (kind, ref_id, locale, title, body) of every document, each from one table; {where} narrows it.
DOCUMENTS = (
    "SELECT 'event', e.id, '', e.title, '' FROM event e WHERE e.id IN ({events})",
    "SELECT 'event', w.event_id, w.locale, w.title, w.summary || ' ' || w.why_it_matters "
    "FROM writeup w WHERE w.event_id IN ({events})",
    "SELECT 'digest', t.digest_id, t.locale, t.title, t.overview FROM digest_text t "
    "WHERE t.digest_id = :digest",
)
_SHOWN = "SELECT event_id FROM digest_event WHERE digest_id = :digest"


async def refresh(session: AsyncSession, digest_id: int) -> None:
    """Rewrite the documents of digest ``digest_id`` and of the events it shows (in the caller's
    transaction, after its rows are added: the build calls this, so a rebuild re-indexes)."""
    await session.flush()
    table = _table(_dialect(session))
    params = {"digest": digest_id}
    await session.execute(text(
        f"DELETE FROM {table} WHERE (kind = 'event' AND ref_id IN ({_SHOWN})) "
        f"OR (kind = 'digest' AND ref_id = :digest)"), params)
    for select_sql in DOCUMENTS:
        await session.execute(text(f"INSERT INTO {table} (kind, ref_id, locale, title, body) "
                                   + select_sql.format(events=_SHOWN)), params)
    stats = await session.scalar(select(Digest.stats).where(Digest.id == digest_id))
    briefs = briefs_of((stats or {}).get("briefs"))
    if briefs:  # a roundup's items are found through its digest (the brief has no page of its own)
        await session.execute(text(f"INSERT INTO {table} (kind, ref_id, locale, title, body) "
                                   "VALUES ('digest', :digest, '', :title, :body)"),
                              [{"digest": digest_id, "title": b.name,
                                "body": " ".join(item.text for item in b.items)} for b in briefs])


# --- The picture of the field: events per layer per week. ---

@dataclass(frozen=True)
class WeeklyCounts:
    """Events first shown each week (weeks start on Monday), per layer; ``counts[layer][n]``
    is the count of ``weeks[n]``."""

    weeks: tuple[dt.date, ...]
    layers: tuple[str, ...]
    counts: dict[str, tuple[int, ...]]

    def total(self, n: int) -> int:
        """Events of week ``n`` over every layer (an event in two layers counts in both)."""
        return sum(self.counts[lid][n] for lid in self.layers)


def week_of(date: dt.date) -> dt.date:
    """The Monday of ``date``'s week."""
    return date - dt.timedelta(days=date.weekday())


async def first_showings(session: AsyncSession) -> dict[int, tuple[dt.date, tuple[str, ...]]]:
    """Each event's first listed digest date and the layers it was shown with there."""
    rows = await session.execute(
        select(DigestEvent.event_id, Digest.date, DigestEvent.layers)
        .join(Digest, Digest.id == DigestEvent.digest_id).where(listed()).order_by(Digest.date)
    )
    first: dict[int, tuple[dt.date, tuple[str, ...]]] = {}
    for event_id, date, layers in rows:
        first.setdefault(event_id, (date, tuple(layers)))
    return first


def weekly(showings: dict[int, tuple[dt.date, tuple[str, ...]]], *, start: dt.date | None,
           end: dt.date, layer: str | None = None) -> WeeklyCounts:
    """The counts of the weeks from ``start`` (default: the first showing's) to ``end``."""
    first = start or min((week_of(d) for d, _ in showings.values()), default=week_of(end))
    weeks = tuple(week_of(first) + dt.timedelta(weeks=n)
                  for n in range((week_of(end) - week_of(first)).days // 7 + 1))
    layers = (layer,) if layer else LAYER_IDS
    found: dict[str, dict[dt.date, int]] = defaultdict(lambda: defaultdict(int))
    for date, shown in showings.values():
        for lid in shown:
            found[lid][week_of(date)] += 1
    return WeeklyCounts(weeks, layers, {lid: tuple(found[lid][w] for w in weeks) for lid in layers})


async def stats(session: AsyncSession, today: dt.date, *, recent_weeks: int = 12,
                layer: str | None = None) -> tuple[WeeklyCounts, WeeklyCounts]:
    """The last ``recent_weeks`` weeks up to ``today``'s, and the whole archive (to today's week, or
    its last showing's if that is later)."""
    showings = await first_showings(session)
    recent = weekly(showings, start=week_of(today) - dt.timedelta(weeks=recent_weeks - 1), end=today,
                    layer=layer)
    last = max((date for date, _ in showings.values()), default=today)
    return recent, weekly(showings, start=None, end=max(today, last), layer=layer)
