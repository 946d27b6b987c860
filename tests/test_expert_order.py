"""The order of a day's events against a compiler engineer's ranking (issue #13, "Scores and order").

The expert ranked the events of the bundled sample days (tests/data/expert_samples.toml)
and of four real days of LLVM blog posts (tests/data/expert_real.toml, posts in
expert_real.jsonl) in tiers, from titles and bodies alone, and named the pairwise
preferences that matter most. Each day is built through the real pipeline: feeds written
to local files, fetched and stored, then built; the scores of the day's events are then
compared with the tiers:

- *in order*: the share of the day's pairs of events of different tiers that the scores
  order as the expert does (a tie in score counts half);
- Kendall's tau-b between tier and score;
- each named pair holds when both items are events of the day: the upper one is shown
  and scores above the lower one (or the lower one is not shown).

bench/quality.py prints the same figures (:func:`measure`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from digest.build.pipeline import BuildOptions, build_digest
from digest.cli.digests import candidate_events
from digest.domain.window import latest_closed, window_for
from digest.ingest.fetch import FetchOptions
from digest.ingest.pipeline import fetch_sources
from digest.ingest.samples import write_samples
from digest.ingest.sources import load_sources
from digest.store.db import open_database

DATA = Path(__file__).resolve().parent / "data"
TZ = "Asia/Shanghai"
SHANGHAI = dt.timezone(dt.timedelta(hours=8))
OUT = 5  # the tier of "out": not compiler news
# Two moments to write the samples at, each with the number of closed days it fills (the
# samples reach about three days back): just after a window closed, and 19 h 50 min later,
# when the latest closed window is the "2026-12-01" day (GSoC report, Precompile).
SAMPLE_NOWS = ((dt.datetime(2026, 12, 1, 8, 5, tzinfo=SHANGHAI), 3),
               (dt.datetime(2026, 12, 2, 3, 50, tzinfo=SHANGHAI), 2))


@dataclass(frozen=True)
class Item:
    """One thing the expert ranked: its tier (1 best, 5 "out") and the URL keys naming it."""

    name: str
    tier: int
    keys: tuple[str, ...]

    def names(self, urls: Iterable[str]) -> bool:
        """Whether one of an event's entry URLs contains one of this item's keys."""
        return any(key in url for url in urls for key in self.keys)


@dataclass(frozen=True)
class Pair:
    """A preference that matters: ``above`` before ``below``, and why.

    ``known`` names a disagreement the score cannot resolve from what the day's texts
    say (reported, not asserted): a miss left visible rather than a pair left out.
    """

    above: str
    below: str
    why: str
    known: str = ""


@dataclass(frozen=True)
class Expert:
    """The expert's ranking: items in tiers and the pairs that matter."""

    items: tuple[Item, ...]
    pairs: tuple[Pair, ...]

    def item_of(self, urls: Sequence[str]) -> Item | None:
        """The best-tiered item an event's entry URLs name (None when the expert did not rank it)."""
        found = [item for item in self.items if item.names(urls)]
        return min(found, key=lambda item: item.tier, default=None)


def _expert(table: dict[str, Any]) -> Expert:
    items = tuple(Item(i["name"], OUT if i["tier"] == "out" else int(i["tier"]), tuple(i["keys"]))
                  for i in table.get("item", []))
    pairs = tuple(Pair(p["above"], p["below"], p["why"], p.get("known", ""))
                  for p in table.get("pair", []))
    known = {item.name for item in items}
    unknown = [name for pair in pairs for name in (pair.above, pair.below) if name not in known]
    if unknown:
        raise ValueError(f"expert pairs name unknown items: {unknown}")
    return Expert(items, pairs)


def sample_expert() -> Expert:
    """The ranking of the sample days."""
    return _expert(tomllib.loads((DATA / "expert_samples.toml").read_text(encoding="utf-8")))


def real_days() -> list[tuple[str, dt.date, Expert]]:
    """The real days: name, digest date and the expert's ranking."""
    table = tomllib.loads((DATA / "expert_real.toml").read_text(encoding="utf-8"))
    return [(day["name"], day["date"], _expert(day)) for day in table["day"]]


@dataclass(frozen=True)
class Event:
    """A candidate event of a built day: its score, whether it is shown, what the expert called it."""

    title: str
    score: float
    relevant: bool
    item: Item | None


@dataclass
class DayOrder:
    """One built day's events against the expert's ranking."""

    name: str
    events: list[Event]
    expert: Expert
    pairs: list[tuple[Pair, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        best: dict[str, Event] = {}
        for event in self.events:  # an item split over several events counts at its best
            if event.item is not None:
                kept = best.get(event.item.name)
                if kept is None or (event.relevant, event.score) > (kept.relevant, kept.score):
                    best[event.item.name] = event
        self.pairs = [(pair, _holds(best[pair.above], best[pair.below]))
                      for pair in self.expert.pairs if pair.above in best and pair.below in best]

    @property
    def shown(self) -> list[Event]:
        """The relevant events (what the digest shows, up to its cap), best first."""
        return sorted((e for e in self.events if e.relevant), key=lambda e: -e.score)

    @property
    def ranked(self) -> list[Event]:
        """The shown events the expert ranked."""
        return [e for e in self.shown if e.item is not None]

    @property
    def unranked(self) -> list[str]:
        """Shown events the expert never ranked (the fixture must name every one)."""
        return [e.title for e in self.shown if e.item is None]

    @property
    def missed(self) -> list[str]:
        """Items of tiers 1-4 among the candidates that are not shown."""
        shown = {e.item.name for e in self.ranked if e.item}
        return sorted({e.item.name for e in self.events if e.item and e.item.tier < OUT
                       and not e.relevant and e.item.name not in shown})

    def counts(self) -> tuple[float, int]:
        """Pairs of shown events in the expert's order (a score tie counts half), and all such pairs."""
        good, total = 0.0, 0
        for a, b in _pairs(self.ranked):
            tier_a, tier_b = _tier(a), _tier(b)
            if tier_a == tier_b:
                continue
            total += 1
            upper, lower = (a, b) if tier_a < tier_b else (b, a)
            good += 1.0 if upper.score > lower.score else 0.5 if upper.score == lower.score else 0.0
        return good, total

    def tau_b(self) -> float | None:
        """Kendall's tau-b between tier (better first) and score; None when undefined."""
        return tau_b([-_tier(e) for e in self.ranked], [e.score for e in self.ranked])


def _tier(event: Event) -> int:
    assert event.item is not None
    return event.item.tier


def _pairs(events: Sequence[Event]) -> Iterable[tuple[Event, Event]]:
    return ((a, b) for n, a in enumerate(events) for b in events[n + 1:])


def _holds(above: Event, below: Event) -> bool:
    return above.relevant and (not below.relevant or above.score > below.score)


def tau_b(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Kendall's tau-b of two paired sequences (ties on either side allowed)."""
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return None if denominator == 0 else (concordant - discordant) / denominator


# ------------------------------------------------------------------------ building the days

async def _build_days(url: str, sources: Path, now: dt.datetime, dates: Sequence[dt.date],
                      expert: Expert, label: str) -> list[DayOrder]:
    """Fetch ``sources`` at ``now`` into a fresh database, build ``dates`` oldest first."""
    days = []
    async with open_database(url) as sessions:
        await fetch_sources(sessions, load_sources(sources), FetchOptions(), now=now)
        for date in sorted(dates):
            await build_digest(sessions, date, BuildOptions(timezone=TZ), now=now)
            async with sessions() as session:
                rows = await candidate_events(session, date, TZ)
            events = [Event(str(r["title"]), float(r["score"]), bool(r["relevant"]),
                            expert.item_of(r["entry_urls"])) for r in rows]
            days.append(DayOrder(f"{label} {date}", events, expert))
    return days


async def sample_days(tmp: Path) -> list[DayOrder]:
    """The sample days: the closed days before each moment of :data:`SAMPLE_NOWS`."""
    expert, days = sample_expert(), []
    for n, (now, count) in enumerate(SAMPLE_NOWS):
        folder = tmp / f"samples-{n}"
        sources = write_samples(folder, now)
        last = latest_closed(now, TZ)
        dates = [last - dt.timedelta(days=k) for k in range(count)]
        label = f"samples@{now:%m-%d %H:%M}"
        days += await _build_days(f"sqlite+aiosqlite:///{folder / 'digest.db'}", sources, now,
                                  dates, expert, label)
    return days


def write_real_day(folder: Path, name: str, date: dt.date) -> Path:
    """The posts of real day ``name`` as an LLVM blog RSS feed dated inside ``date``'s window.

    The posts keep their real titles, links and bodies; their dates are spread over the
    window in their original order. Returns the sources.toml naming the feed as the real
    ``llvm-blog`` source (its name, kind and weight from the built-in list).
    """
    rows = [json.loads(line) for line in (DATA / "expert_real.jsonl").read_text(
        encoding="utf-8").splitlines() if line]
    posts = sorted((r for r in rows if r["day"] == name), key=lambda r: r["published"])
    window = window_for(date, TZ)
    step = (window.end - window.start - dt.timedelta(hours=1)) / max(1, len(posts))
    items = "".join(
        f"<item><title>{escape(p['title'])}</title><link>{escape(p['link'])}</link>"
        f"<pubDate>{format_datetime(window.start + dt.timedelta(minutes=30) + n * step)}</pubDate>"
        f"<guid>{escape(p['guid'])}</guid><description>{escape(p['description'])}</description></item>"
        for n, p in enumerate(posts))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "llvm-blog.xml").write_text(
        '<?xml version="1.0" encoding="utf-8" standalone="yes"?>\n<rss version="2.0"><channel>'
        "<title>LLVM Project Blog</title><link>https://blog.llvm.org/</link>"
        f"<description>LLVM Project News and Details from the Trenches</description>{items}"
        "</channel></rss>\n", encoding="utf-8")
    spec = next(s for s in load_sources() if s.key == "llvm-blog")
    sources = folder / "sources.toml"
    sources.write_text(f'[[source]]\nkey = "{spec.key}"\nname = "{spec.name}"\nurl = "llvm-blog.xml"\n'
                       f'kind = "{spec.kind}"\nweight = {spec.weight}\n', encoding="utf-8")
    return sources


async def real_day_orders(tmp: Path) -> list[DayOrder]:
    """The real days, each built in its own database just after its window closed."""
    days = []
    for name, date, expert in real_days():
        folder = tmp / name
        sources = write_real_day(folder, name, date)
        now = window_for(date, TZ).end + dt.timedelta(minutes=5)
        days += await _build_days(f"sqlite+aiosqlite:///{folder / 'digest.db'}", sources, now,
                                  [date], expert, name)
    return days


# ------------------------------------------------------------------------ figures

@dataclass(frozen=True)
class Agreement:
    """The figures over a set of days."""

    in_order: float
    pairs: int
    tau_b: float | None
    named_held: int
    named_checked: int


def agreement(days: Sequence[DayOrder]) -> Agreement:
    """In-order share and tau-b over all the days' pairs (tau-b: the mean of the days')."""
    good = sum(day.counts()[0] for day in days)
    total = sum(day.counts()[1] for day in days)
    taus = [t for t in (day.tau_b() for day in days) if t is not None]
    named = [held for day in days for _, held in day.pairs]
    return Agreement(good / total if total else 0.0, total,
                     sum(taus) / len(taus) if taus else None, sum(named), len(named))


def report(label: str, days: Sequence[DayOrder]) -> str:
    """Lines for bench/quality.py: per day, then the whole set, then the named pairs that fail."""
    lines = [f"{'day':<30} {'events':>6} {'pairs':>5} {'in-order':>8} {'tau-b':>6} {'named':>7}"]
    for day in [*days, None]:
        figures = agreement([day] if day else days)
        name = day.name if day else f"{label} (all)"
        tau = "-" if figures.tau_b is None else f"{figures.tau_b:.3f}"
        events = len(day.ranked) if day else sum(len(d.ranked) for d in days)
        lines.append(f"{name:<30} {events:>6} {figures.pairs:>5} {figures.in_order:>8.3f} {tau:>6} "
                     f"{figures.named_held:>3}/{figures.named_checked:<3}")
    for day in days:
        lines += [f"  {'known miss' if p.known else 'out of order'} on {day.name}: {p.above} above "
                  f"{p.below} ({p.known or p.why})" for p, held in day.pairs if not held]
        if day.missed:
            lines.append(f"  not shown on {day.name}: {', '.join(day.missed)}")
        if day.unranked:
            lines.append(f"  not ranked by the expert on {day.name}: {'; '.join(day.unranked)}")
    return "\n".join(lines)


def measure(tmp: Path) -> tuple[list[DayOrder], list[DayOrder]]:
    """Build the sample and the real days under ``tmp``; their orders."""
    async def both() -> tuple[list[DayOrder], list[DayOrder]]:
        return await sample_days(tmp / "samples"), await real_day_orders(tmp / "real")
    return asyncio.run(both())


# ------------------------------------------------------------------------ tests

def test_tau_b_counts_ties_and_inversions() -> None:
    assert tau_b([1, 2, 3], [10, 20, 30]) == 1.0
    assert tau_b([1, 2, 3], [30, 20, 10]) == -1.0
    assert tau_b([1, 1, 2], [1, 2, 3]) == (2 - 0) / math.sqrt(2 * 3)
    assert tau_b([1, 1], [2, 2]) is None


def test_a_day_counts_pairs_of_different_tiers_and_named_pairs() -> None:
    top, mid, low = Item("top", 1, ("a",)), Item("mid", 2, ("b",)), Item("low", 3, ("c",))
    expert = Expert((top, mid, low), (Pair("top", "low", ""), Pair("mid", "low", "")))
    events = [Event("A", 50.0, True, top), Event("B", 60.0, True, mid),
              Event("C", 55.0, True, low), Event("D", 70.0, True, None), Event("E", 10.0, False, low)]
    day = DayOrder("d", events, expert)
    assert day.counts() == (1.0, 3)  # B above C holds; A is below both
    assert day.unranked == ["D"] and day.missed == []
    assert [(p.above, held) for p, held in day.pairs] == [("top", False), ("mid", True)]
    assert expert.item_of(["https://x/b", "https://x/a"]) is top


async def test_the_sample_days_follow_the_experts_order(tmp_path: Path) -> None:
    days = await sample_days(tmp_path)
    assert len(days) == sum(count for _, count in SAMPLE_NOWS)
    assert all(len(day.ranked) >= 5 for day in days), [(d.name, len(d.ranked)) for d in days]
    assert [u for day in days for u in day.unranked] == [], "rank every shown sample event"
    failed = [(day.name, p.above, p.below) for day in days for p, held in day.pairs
              if not held and not p.known]
    figures = agreement(days)
    assert figures.named_checked >= 12 and failed == [], report("samples", days)
    assert figures.in_order >= 0.85 and (figures.tau_b or 0) >= 0.55, report("samples", days)


async def test_the_real_days_follow_the_experts_order(tmp_path: Path) -> None:
    days = await real_day_orders(tmp_path)
    assert [day.name for day in days] == [f"{name} {date}" for name, date, _ in real_days()]
    assert [u for day in days for u in day.unranked] == [], "rank every shown real event"
    # Real posts are cut at 3,000 characters and their classification is noisier than the
    # samples': the day's order is held to the aggregate, and most named pairs.
    named = [held for day in days for p, held in day.pairs if not p.known]
    figures = agreement(days)
    assert len(named) >= 8 and sum(named) >= len(named) - 2, report("real", days)
    assert figures.in_order >= 0.65, report("real", days)
