"""Bundled offline sample feeds, so the pipeline and the demo run with no network.

:func:`write_samples` writes realistic feed documents (arXiv listing RSS,
WordPress RSS for the PyTorch and NVIDIA blogs, Hugo RSS for the LLVM blog,
LLVM Weekly RSS, GitHub ``releases.atom``) plus a ``sources.toml`` naming them
by relative path, in the source-file format of :mod:`digest.ingest.sources`.

The content lives in ``digest/data/samples/content.toml``; items carry no
dates there, only an age. Every item is dated ``now - age`` (from a few
minutes to about three days, plus a few older GitHub releases as real release
feeds have), densely enough that the latest closed window
``[D-1 08:00, D 08:00)`` before ``now`` always holds a good number of
compiler-relevant items, whatever the time of day. The output depends only on
``now``: the same ``now`` gives the same bytes, and nothing here reads the clock.

    feeds.py      the sample sources and their formats
    content.py    content.toml -> pydantic models (one-line errors naming the field)
    entries.py    content -> dated items: the one place guids, links and titles are made
    renderers.py  one renderer per feed format
    writer.py     sample_items(now), write_samples(out_dir, now)
"""

from __future__ import annotations

from digest.ingest.samples.content import (
    Content,
    Paper,
    Post,
    Release,
    SampleContentError,
    content_path,
    load_content,
    parse_content,
)
from digest.ingest.samples.entries import SampleItem
from digest.ingest.samples.feeds import FEEDS, FeedStyle, SampleFeed
from digest.ingest.samples.writer import sample_items, write_samples

__all__ = [
    "FEEDS",
    "Content",
    "FeedStyle",
    "Paper",
    "Post",
    "Release",
    "SampleContentError",
    "SampleFeed",
    "SampleItem",
    "content_path",
    "load_content",
    "parse_content",
    "sample_items",
    "write_samples",
]
