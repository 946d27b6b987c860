"""An in-memory entry for the classifier's tests (no database)."""

from __future__ import annotations

from digest.domain.items import Item


def blog_item(title: str, summary: str, kind: str = "rss") -> Item:
    """An entry of a generic blog (no source prior) with this title and summary."""
    return Item(1, "blog", "A blog", 0.5, kind, title, summary, "https://example.org/post")
