"""What an event's sources list shows: one link per URL, the publishers counted once."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from digest.build.pipeline import BuildOptions, build_digest
from digest.domain.window import latest_closed
from digest.domain.writeups import SourceText
from digest.ingest.pipeline import FetchOptions, fetch_sources
from digest.ingest.samples import write_samples
from digest.ingest.sources import load_sources
from digest.store.db import SessionFactory
from digest.store.queries import load_view, source_links

NOW = dt.datetime(2026, 12, 5, 3, 0, tzinfo=dt.UTC)


def test_a_cross_listed_paper_is_one_link_named_after_its_listings() -> None:
    url = "https://arxiv.org/abs/2611.03952"
    sources = [SourceText("arXiv cs.AR", url, "PIMLower", ""), SourceText("arXiv cs.PL", url, "PIMLower", ""),
               SourceText("LLVM Blog", "https://blog.llvm.org/p", "a post", ""),
               SourceText("arXiv cs.AR", url, "PIMLower", "")]
    links = source_links(sources)
    assert [(link.name, link.url) for link in links] == [
        ("arXiv cs.AR, cs.PL", url), ("LLVM Blog", "https://blog.llvm.org/p")]


async def test_no_event_of_the_sample_day_lists_one_url_twice(sqlite_sessions: SessionFactory,
                                                              tmp_path: Path) -> None:
    specs = load_sources(write_samples(tmp_path, NOW))
    await fetch_sources(sqlite_sessions, specs, FetchOptions(), now=NOW)
    date = latest_closed(NOW, "Asia/Shanghai")
    await build_digest(sqlite_sessions, date, BuildOptions(locales=("zh", "en")), now=NOW)
    async with sqlite_sessions() as session:
        view = await load_view(session, date, "zh")
    urls = [[link.url for link in event.sources] for event in view.events]
    assert all(len(set(u)) == len(u) for u in urls), urls
    cross = [link for event in view.events for link in event.sources if ", cs." in link.name]
    assert cross, "the sample day has a paper listed in several arXiv categories"


async def test_the_sources_are_named_in_one_order_whichever_feed_arrived_first(tmp_path: Path) -> None:
    """Entry ids follow the order feeds arrive in (they are fetched together): the page must not."""
    from digest.store.db import open_database

    specs = load_sources(write_samples(tmp_path, NOW))
    date = latest_closed(NOW, "Asia/Shanghai")
    names = []
    for n, order in enumerate((specs, list(reversed(specs)))):
        async with open_database(f"sqlite+aiosqlite:///{tmp_path / f'order{n}.db'}") as sessions:
            await fetch_sources(sessions, order, FetchOptions(concurrency=1), now=NOW)
            await build_digest(sessions, date, BuildOptions(locales=("zh",)), now=NOW)
            async with sessions() as session:
                view = await load_view(session, date, "zh")
        names.append([[link.name for link in event.sources] for event in view.events])
    assert names[0] == names[1]
    assert any(", cs." in name for event in names[0] for name in event)
