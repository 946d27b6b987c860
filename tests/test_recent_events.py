"""``recent_events`` (/recent, /api/events): each event once, at its first showing in the order asked.

The query picks each event's first showing in SQL (ROW_NUMBER per event, then
LIMIT) and brings its write-up in the asked locale in the same statement; these
tests compare it, on SQLite and PostgreSQL, with the rule written plainly in
Python over the same random archive, and each row's fields with what the ORM
objects and :func:`event_texts` (the event page's write-ups) say.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pytest
from sqlalchemy import event as sa_event
from sqlalchemy import select

from digest.store.db import SessionFactory
from digest.store.models import Digest, DigestEvent, Event, Writeup
from digest.store.queries import event_texts, recent_events

START = dt.datetime(2026, 11, 1, 0, 0, tzinfo=dt.UTC)
LAYERS = ("runtime", "kernel_codegen", "frontend")
Showing = tuple[dt.date, int, int, float, tuple[str, ...]]  # date, rank, event id, score, layers


async def _archive(sessions: SessionFactory, seed: int) -> list[Showing]:
    """Ten digests showing events drawn from twenty (many shown twice or more); the showings.

    Every even event has an English write-up, none a Chinese one (those are written extractively).
    """
    rng = random.Random(seed)
    shown: list[Showing] = []
    async with sessions.begin() as session:
        events = [Event(cluster_key=f"k{n}", title=f"Event {n}", url=f"https://example.org/{n}",
                        relevant=True, first_seen=START, updated_at=START) for n in range(20)]
        session.add_all(events)
        await session.flush()
        session.add_all(Writeup(event_id=e.id, locale="en", title=f"Written {e.id}", summary=f"About {e.id}.",
                                why_it_matters="Why.", watch=[], mode="deepseek-chat", created_at=START)
                        for e in events[::2])
        for day in range(10):
            end = START + dt.timedelta(days=day + 1)
            digest = Digest(date=end.date(), window_start=end - dt.timedelta(days=1), window_end=end,
                            built_at=end, partial=day == 9)  # the newest is a partial draft: never listed
            session.add(digest)
            await session.flush()
            for rank, event in enumerate(rng.sample(events, rng.randint(1, 8)), start=1):
                score = float(rng.choice([40, 55, 55, 70, 85]))
                layers = tuple(sorted(rng.sample(LAYERS, rng.randint(1, 2))))
                session.add(DigestEvent(digest_id=digest.id, event_id=event.id, rank=rank, score=score,
                                        layers=list(layers), score_breakdown={"authority": score - day}))
                if not digest.partial:
                    shown.append((digest.date, rank, event.id, score, layers))
    return shown


def _expected(shown: list[Showing], *, since: dt.date, layer: str | None,
              min_score: float, limit: int, order: str) -> list[tuple[int, dt.date, int]]:
    kept = [s for s in shown if s[0] > since and s[3] >= min_score and (layer is None or layer in s[4])]
    if order == "score":
        kept.sort(key=lambda s: (-s[3], -s[0].toordinal(), s[1], s[2]))
    else:
        kept.sort(key=lambda s: (-s[0].toordinal(), s[1], s[2]))
    first: dict[int, tuple[int, dt.date, int]] = {}
    for date, rank, event, _, _ in kept:
        first.setdefault(event, (event, date, rank))
    return list(first.values())[:limit]


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_each_event_once_at_its_first_showing_in_the_order_asked(sessions: SessionFactory,
                                                                       seed: int) -> None:
    shown = await _archive(sessions, seed)
    rng = random.Random(seed * 7)
    async with sessions() as session:
        for _ in range(12):
            days = rng.randint(1, 10)
            asked = {"layer": rng.choice([None, *LAYERS]), "min_score": float(rng.choice([0, 55, 70])),
                     "limit": rng.choice([1, 3, 200]), "order": rng.choice(["date", "score"])}
            since = START + dt.timedelta(days=10 - days)
            got = await recent_events(session, "en", since=since, **asked)  # type: ignore[arg-type]
            want = _expected(shown, since=since.date(), **asked)  # type: ignore[arg-type]
            assert [(r.id, r.date, r.rank) for r in got] == want, asked
            assert len({r.id for r in got}) == len(got)


@pytest.mark.parametrize("locale", ["en", "zh"])
async def test_each_row_carries_its_showing_and_the_write_up_in_the_locale(sessions: SessionFactory,
                                                                         locale: str) -> None:
    await _archive(sessions, 4)
    since = START
    async with sessions() as session:
        for order in ("date", "score"):
            got = await recent_events(session, locale, since=since, order=order)
            assert got, order
            shows = {(s.event_id, s.digest_id): s for s in (await session.scalars(select(DigestEvent))).all()}
            dates = {d.date: d.id for d in (await session.scalars(select(Digest))).all()}
            events = {e.id: e for e in (await session.scalars(select(Event))).all()}
            picked = [(events[r.id], shows[r.id, dates[r.date]]) for r in got]
            texts = await event_texts(session, picked, locale)  # the event page's write-ups
            for row, (event, snap) in zip(got, picked, strict=True):
                assert (row.title, row.summary) == (texts[event.id].title, texts[event.id].summary)
                assert (row.url, row.first_seen) == (event.url, event.first_seen)
                assert (row.score, row.rank, row.layers, row.score_breakdown) == (
                    snap.score, snap.rank, tuple(snap.layers), snap.score_breakdown)
            have = set(await session.scalars(select(Writeup.event_id).where(Writeup.locale == locale)))
            written = {r.id for r in got if r.title == f"Written {r.id}"}
            assert written == have & {r.id for r in got}
            assert len(written) < len(got) and (written or locale == "zh")  # both kinds of row, in English


async def test_values_are_bound_so_every_call_of_a_shape_sends_the_same_sql(sessions: SessionFactory) -> None:
    await _archive(sessions, 5)
    engine = sessions.kw["bind"].sync_engine
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        sent.append((statement, parameters))

    sa_event.listen(engine, "before_cursor_execute", record)
    try:
        async with sessions() as session:
            asked = (("runtime", 3, 0.0, 5, "en"), ("frontend", 9, 55.0, 2, "zh"))
            for layer, days, score, limit, locale in asked:
                await recent_events(session, locale, since=START + dt.timedelta(days=10 - days), layer=layer,
                                    min_score=score, limit=limit, order="score")
    finally:
        sa_event.remove(engine, "before_cursor_execute", record)
    main = [statement for statement, _ in sent if "row_number" in statement.lower()]
    assert len(main) == 2 and main[0] == main[1]  # one statement: reused, its compiled form cached
    assert "runtime" not in main[0] and "frontend" not in main[0] and "55" not in main[0]
