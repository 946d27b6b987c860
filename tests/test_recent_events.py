"""``recent_events`` (/recent, /api/events): each event once, at its first showing in the order asked.

The query picks each event's first showing in SQL (ROW_NUMBER per event, then
LIMIT); these tests compare it, on SQLite and PostgreSQL, with the rule written
plainly in Python over the same random archive.
"""

from __future__ import annotations

import datetime as dt
import random

import pytest

from digest.store.db import SessionFactory
from digest.store.models import Digest, DigestEvent, Event
from digest.store.queries import recent_events

START = dt.datetime(2026, 11, 1, 0, 0, tzinfo=dt.UTC)
LAYERS = ("runtime", "kernel_codegen", "frontend")
Showing = tuple[dt.date, int, int, float, tuple[str, ...]]  # date, rank, event id, score, layers


async def _archive(sessions: SessionFactory, seed: int) -> list[Showing]:
    """Ten digests showing events drawn from twenty (many shown twice or more); the showings."""
    rng = random.Random(seed)
    shown: list[Showing] = []
    async with sessions.begin() as session:
        events = [Event(cluster_key=f"k{n}", title=f"Event {n}", url=f"https://example.org/{n}",
                        relevant=True, first_seen=START, updated_at=START) for n in range(20)]
        session.add_all(events)
        await session.flush()
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
                                        layers=list(layers)))
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
