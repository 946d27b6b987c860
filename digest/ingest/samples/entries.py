"""The dated items of each sample feed: the one place their guid, link, title and date are made.

Every item is dated ``now - age_minutes``. The renderers write these entries
and :func:`sample_items` lists them, so a feed document and the items tests
check it against cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

from digest.ingest.samples.content import Content, Paper, Post, Release
from digest.ingest.samples.feeds import FeedStyle, SampleFeed


@dataclass(frozen=True)
class SampleItem:
    """One item as a sample feed carries it (what tests check the documents against)."""

    source: str
    guid: str
    title: str
    link: str
    published: datetime
    relevant: bool
    announce_type: str = ""  # arXiv only: new | cross | replace | replace-cross


RecordT = TypeVar("RecordT", Paper, Post, Release)


@dataclass(frozen=True)
class Entry(Generic[RecordT]):
    """A content record with the item it becomes in one feed."""

    item: SampleItem
    record: RecordT


def check_now(now: datetime) -> datetime:
    """``now`` in whole seconds; refused when naive (the output must not depend on the machine)."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be an aware datetime")
    return now.replace(microsecond=0)


def dated(now: datetime, age_minutes: int) -> datetime:
    """The UTC instant ``age_minutes`` before ``now``."""
    return (now - timedelta(minutes=age_minutes)).astimezone(UTC)


def newest(entries: Iterable[Entry[RecordT]], now: datetime) -> datetime:
    """The latest item date of a feed (``now`` for an empty one)."""
    return max((entry.item.published for entry in entries), default=now)


def _ordinal_date(moment: datetime) -> str:
    """``November 23rd 2026``, as LLVM Weekly titles its issues."""
    day = moment.day
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{moment:%B} {day}{suffix} {moment.year}"


# ------------------------------------------------------------------ arXiv listings

_ARXIV_ORDER = {"new": 0, "cross": 1, "replace": 2, "replace-cross": 3}


def announce_type(paper: Paper, category: str) -> str:
    """``new``/``replace`` in the primary category's listing, ``cross``/``replace-cross`` elsewhere."""
    if category == paper.categories[0]:
        return paper.announce
    return "cross" if paper.announce == "new" else "replace-cross"


def arxiv_entries(feed: SampleFeed, content: Content, now: datetime) -> list[Entry[Paper]]:
    """One category listing in arXiv's order: new, cross-lists, replacements."""
    papers = [p for p in content.papers if feed.category in p.categories]
    papers.sort(key=lambda p: (_ARXIV_ORDER[announce_type(p, feed.category)], p.id))
    return [Entry(_paper_item(feed, paper, now), paper) for paper in papers]


def _paper_item(feed: SampleFeed, paper: Paper, now: datetime) -> SampleItem:
    return SampleItem(
        source=feed.key,
        guid=f"oai:arXiv.org:{paper.id}v{paper.version}",
        title=paper.title,
        link=f"https://arxiv.org/abs/{paper.id}",
        published=dated(now, paper.age_minutes),
        relevant=paper.relevant,
        announce_type=announce_type(paper, feed.category),
    )


# ------------------------------------------------------------------ blog posts

# WordPress permalinks and guids (``?p=<post id>``) per blog.
_WORDPRESS_LINKS = {
    "pytorch-blog": ("https://pytorch.org/blog/{slug}/", "https://pytorch.org/?p={id}"),
    "nvidia-blog": (
        "https://developer.nvidia.com/blog/{slug}/",
        "https://developer.nvidia.com/blog/?p={id}",
    ),
}


def post_entries(feed: SampleFeed, content: Content, now: datetime) -> list[Entry[Post]]:
    """A blog's or newsletter's posts, newest first."""
    posts = sorted((p for p in content.posts if p.feed == feed.key), key=lambda p: p.age_minutes)
    return [Entry(_post_item(feed, post, now), post) for post in posts]


def _post_item(feed: SampleFeed, post: Post, now: datetime) -> SampleItem:
    published = dated(now, post.age_minutes)
    link, guid = _post_link_and_guid(feed, post, published)
    title = post.title.replace("{date}", _ordinal_date(published))
    return SampleItem(feed.key, guid, title, link, published, post.relevant)


def _post_link_and_guid(feed: SampleFeed, post: Post, published: datetime) -> tuple[str, str]:
    """WordPress guids are ``?p=`` URLs; Hugo and LLVM Weekly use the permalink as guid."""
    if feed.style is FeedStyle.WORDPRESS:
        link, guid = _WORDPRESS_LINKS[feed.key]
        return link.format(slug=post.slug), guid.format(id=post.post_id)
    if feed.style is FeedStyle.HUGO:
        link = f"https://blog.llvm.org/posts/{published:%Y-%m-%d}-{post.slug}/"
    else:
        link = f"http://llvmweekly.org/issue/{post.post_id}"
    return link, link


# ------------------------------------------------------------------ GitHub releases


def release_entries(feed: SampleFeed, content: Content, now: datetime) -> list[Entry[Release]]:
    """A repository's releases, newest first."""
    releases = sorted((r for r in content.releases if r.feed == feed.key),
                      key=lambda r: r.age_minutes)
    return [Entry(_release_item(feed, release, now), release) for release in releases]


def _release_item(feed: SampleFeed, release: Release, now: datetime) -> SampleItem:
    return SampleItem(
        source=feed.key,
        guid=f"tag:github.com,2008:Repository/{feed.repo_id}/{release.tag}",
        title=release.title,
        link=f"https://github.com/{feed.repo}/releases/tag/{release.tag}",
        published=dated(now, release.age_minutes),
        relevant=release.relevant,
    )
