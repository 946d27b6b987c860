"""The plain input of the analysis core: one feed entry, as values (no ORM, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Item:
    """One stored entry, reduced to what clustering, classification and scoring read."""

    entry_id: int
    source_key: str
    source_name: str
    source_weight: float
    kind: str  # rss | atom | arxiv | github-releases
    title: str
    summary: str
    url: str | None  # canonical url
    links: tuple[str, ...] = ()
    published: datetime | None = None
    arxiv_id: str | None = None
    arxiv_version: int | None = None
    announce_type: str | None = None
    doi: str | None = None
    repo: str | None = None
    tag: str | None = None
    prerelease: bool = False
    body: str = ""  # the sanitised full text (bounded at ingestion), "" when the feed has none

    @property
    def lead_text(self) -> str:
        """Title and summary: the entry's own statement of what it is."""
        return f"{self.title}\n{self.summary}"

    @property
    def body_beyond_summary(self) -> str:
        """The body, or "" when it only says the summary again (kept for its paragraphs)."""
        if self.body and " ".join(self.body.split()) == " ".join(self.summary.split()):
            return ""
        return self.body

    @property
    def text(self) -> str:
        """Title, summary and body: everything the entry says, each word once."""
        return "\n".join(part for part in (self.title, self.summary, self.body_beyond_summary) if part)
