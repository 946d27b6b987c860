"""A small archive for the web tests: three built digests from real stored entries, one hostile."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from digest.build.pipeline import BuildOptions, build_digest
from digest.domain.window import window_for
from digest.render.renderer import Renderer
from digest.store.db import SessionFactory, open_database
from digest.store.queries import load_view
from tests.builders import COMPILER_PAPERS, add_entry, add_source

TZ = "Asia/Shanghai"
DAY = dt.date(2026, 9, 29)
DATES = (DAY, DAY - dt.timedelta(days=1), DAY - dt.timedelta(days=2))  # newest first
NOW = window_for(DAY, TZ).end + dt.timedelta(minutes=5)
SITE_URL = "https://digest.example"

# A feed item trying to run script: markup in the title and in the stored (plain-text) summary,
# which a reader must see as literal text, and a javascript: link.
HOSTILE_TITLE = 'Triton kernel fusion <script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
HOSTILE_SUMMARY = (
    "Triton <script>window.__pwned=3</script> kernel fusion for GPU code generation: "
    "the Triton compiler lowers fused attention kernels through MLIR to PTX and beats cuBLAS by 1.3x."
)
DISTRIBUTED = (
    "Overlapping Collectives with Compute in XLA SPMD Sharding",
    "We extend the XLA SPMD partitioner to overlap all-gather and reduce-scatter collectives with "
    "compute across 256 TPU devices, cutting step time by 18% on sharded transformer training.",
)


@dataclass(frozen=True)
class Archive:
    """What the tests need to know about the built archive."""

    dates: tuple[dt.date, ...]
    hostile_event: int
    event_ids: dict[dt.date, tuple[int, ...]]
    layers: dict[dt.date, frozenset[str]]


async def build_archive(sessions: SessionFactory) -> Archive:
    """Store entries for three days and build their digests (zh and en)."""
    arxiv = await add_source(sessions, "arxiv-cs.pl", name="arXiv cs.PL", kind="arxiv", weight=0.7)
    blog = await add_source(sessions, "triton-blog", name="Triton <b>Blog</b>", weight=0.6)
    days = {
        DATES[0]: [(arxiv, *COMPILER_PAPERS[1]), (arxiv, *COMPILER_PAPERS[2]),
                   (blog, HOSTILE_TITLE, HOSTILE_SUMMARY)],
        DATES[1]: [(arxiv, *COMPILER_PAPERS[0])],
        DATES[2]: [(arxiv, *DISTRIBUTED)],
    }
    for date, items in days.items():
        start = window_for(date, TZ).start
        for n, (source, title, summary) in enumerate(items):
            extra: dict[str, Any] = {"url": "javascript:alert(1)"} if title == HOSTILE_TITLE else {}
            await add_entry(sessions, source, title, summary, start + dt.timedelta(hours=n + 1), **extra)
    options = BuildOptions(timezone=TZ, locales=("zh", "en"))
    for date in sorted(days):
        await build_digest(sessions, date, options, now=window_for(date, TZ).end + dt.timedelta(minutes=5))
    return await _describe(sessions)


async def _describe(sessions: SessionFactory) -> Archive:
    ids: dict[dt.date, tuple[int, ...]] = {}
    layers: dict[dt.date, frozenset[str]] = {}
    hostile = 0
    async with sessions() as session:
        for date in DATES:
            view = await load_view(session, date, "en")
            ids[date] = tuple(e.id for e in view.events)
            layers[date] = frozenset(lid for e in view.events for lid in e.layers)
            hostile = next((e.id for e in view.events if "Triton" in e.title), hostile)
    assert all(ids.values()) and hostile, "every day needs events, and the hostile entry must be one"
    return Archive(DATES, hostile, ids, layers)


def renderer() -> Renderer:
    """The renderer the tests' apps use."""
    return Renderer(site_url=SITE_URL, timezone=TZ)


@asynccontextmanager
async def served_archive(tmp_path: Path) -> AsyncIterator[tuple[str, Archive]]:
    """The archive, served by ``digest serve --web``'s own code path on an ephemeral loopback port."""
    import uvicorn

    from digest.cli.web import run_web
    from digest.config import load_settings

    url = f"sqlite+aiosqlite:///{tmp_path / 'web.db'}"
    async with open_database(url) as sessions:
        archive = await build_archive(sessions)
    settings = load_settings(database_url=url, var_dir=tmp_path / "var", site_url=SITE_URL, timezone=TZ,
                             locales=["zh", "en"])
    servers: list[uvicorn.Server] = []
    task = asyncio.create_task(run_web(settings, "127.0.0.1", 0, on_server=servers.append))
    while not (servers and servers[0].started):
        assert not task.done(), task.exception()
        await asyncio.sleep(0.02)
    port = servers[0].servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", archive
    finally:
        servers[0].should_exit = True
        await task
