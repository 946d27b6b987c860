"""Put sources and entries straight into a real database, for build and query tests."""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
from typing import Any

from digest.domain.window import window_for
from digest.store.db import SessionFactory
from digest.store.models import Entry, Source

# The test day most suites build: its window (Asia/Shanghai) and a moment just after it closed.
DAY = dt.date(2026, 9, 29)
WINDOW = window_for(DAY, "Asia/Shanghai")
NOW = WINDOW.end + dt.timedelta(minutes=5)

_counter = itertools.count(1)


async def add_source(sessions: SessionFactory, key: str, *, name: str | None = None,
                     kind: str = "rss", weight: float = 0.8) -> int:
    """A source row; returns its id."""
    async with sessions.begin() as session:
        source = Source(key=key, name=name or key, url=f"https://{key}.example/feed",
                        kind=kind, weight=weight, enabled=True, consecutive_failures=0)
        session.add(source)
        await session.flush()
        return source.id


async def add_entry(sessions: SessionFactory, source_id: int, title: str, summary: str,
                    published: dt.datetime, *, first_seen: dt.datetime | None = None,
                    **fields: Any) -> int:
    """An entry row with sensible defaults; returns its id."""
    n = next(_counter)
    url = fields.pop("url", f"https://example.org/post/{n}")
    seen = first_seen or published
    async with sessions.begin() as session:
        entry = Entry(
            source_id=source_id, entry_key=fields.pop("entry_key", f"id-{n}"), url=url,
            canonical_url=url, title=title, summary=summary, authors=[], categories=[],
            links=fields.pop("links", []), published=published, first_seen=seen, updated_at=seen,
            content_hash=hashlib.sha256(f"{title}{summary}".encode()).hexdigest(), **fields,
        )
        session.add(entry)
        await session.flush()
        return entry.id


COMPILER_PAPERS = [
    ("Splyce: SIMD Vectorization of Sparse Coiteration",
     "We present Splyce, an MLIR-based auto-vectorization framework for sparse-sparse "
     "coiteration loops in sparse tensor contractions. A dual-path execution model and "
     "selective predication remove data-dependent branches. On synthetic sparse tensor kernels "
     "Splyce achieves 1.96x to 2.86x speedups and stays faster on most SuiteSparse matrices."),
    ("Learning Exact NVIDIA SASS Encoders with F2 Linear Algebra",
     "We learn exact 128-bit NVIDIA SASS instruction encoders as affine maps over F2 from pairs "
     "of disassembly and CUBIN words, for Hopper SM90, Blackwell SM100 and Rubin SM107. The "
     "resulting assembler is the first open-source SASS assembler to support SM107."),
    ("Torch-PIM: Automated Profile-Guided PIM Offloading for PyTorch",
     "Torch-PIM applies profile-guided optimization to loop nests materialized by progressive "
     "lowering in MLIR and decides host or processing-in-memory placement, reaching up to 8.6x "
     "speedup over CPU-only execution on tensor operators and 3.6x on LLaMA-7B."),
]
NEGATIVE = (
    "A Simple Trick for Faster Adam Convergence in LLM Fine-Tuning",
    "We propose a learning-rate warmup schedule for Adam that improves fine-tuning of large "
    "language models on instruction data, trained on 8 GPUs.",
)


async def add_compiler_papers(sessions: SessionFactory, window_start: dt.datetime = WINDOW.start,
                              key: str = "arxiv-cs.pl") -> list[int]:
    """The :data:`COMPILER_PAPERS` as arXiv ``new`` entries, one an hour into the window; their ids."""
    arxiv = await add_source(sessions, key, name="arXiv cs.PL", kind="arxiv", weight=0.7)
    return [await add_entry(sessions, arxiv, title, summary, window_start + dt.timedelta(hours=n + 1),
                            arxiv_id=f"2609.0000{n}", arxiv_version=1, announce_type="new",
                            url=f"https://arxiv.org/abs/2609.0000{n}")
            for n, (title, summary) in enumerate(COMPILER_PAPERS)]
