"""The sample sources: their ``sources.toml`` entries and the format each document is written in."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FeedStyle(StrEnum):
    """The feed formats the samples imitate; each has one renderer."""

    ARXIV = "arxiv"  # arXiv listing RSS 2.0
    WORDPRESS = "wordpress"  # WordPress RSS 2.0 (PyTorch, NVIDIA)
    HUGO = "hugo"  # Hugo RSS 2.0 (LLVM blog)
    LLVM_WEEKLY = "llvm-weekly"  # LLVM Weekly's RSS 2.0
    GITHUB = "github"  # GitHub ``releases.atom``


POST_STYLES = frozenset({FeedStyle.WORDPRESS, FeedStyle.HUGO, FeedStyle.LLVM_WEEKLY})


@dataclass(frozen=True)
class SampleFeed:
    """One sample source: its entry in ``sources.toml`` and how its document is rendered."""

    key: str
    name: str
    kind: str
    weight: float
    filename: str
    style: FeedStyle
    category: str = ""  # arXiv category of a listing feed
    repo: str = ""  # GitHub owner/name of a release feed
    repo_id: int = 0  # GitHub repository id (in entry ids)


def _arxiv(category: str, weight: float) -> SampleFeed:
    key = f"arxiv-{category.lower()}"
    return SampleFeed(key, f"arXiv {category}", "arxiv", weight, f"{key}.xml", FeedStyle.ARXIV,
                      category=category)


def _github(key: str, repo: str, repo_id: int) -> SampleFeed:
    return SampleFeed(key, f"{repo} releases", "github-releases", 0.8, f"{key}.atom",
                      FeedStyle.GITHUB, repo=repo, repo_id=repo_id)


# Keys, names, kinds and weights as in the built-in real list (digest/data/sources.toml).
FEEDS: tuple[SampleFeed, ...] = (
    _arxiv("cs.PL", 0.7),
    _arxiv("cs.AR", 0.7),
    _arxiv("cs.DC", 0.6),
    _arxiv("cs.LG", 0.5),
    SampleFeed("pytorch-blog", "PyTorch", "rss", 0.9, "pytorch-blog.xml", FeedStyle.WORDPRESS),
    SampleFeed("nvidia-blog", "NVIDIA", "rss", 0.8, "nvidia-blog.xml", FeedStyle.WORDPRESS),
    SampleFeed("llvm-blog", "LLVM Blog", "rss", 0.9, "llvm-blog.xml", FeedStyle.HUGO),
    SampleFeed("llvm-weekly", "LLVM Weekly", "rss", 0.7, "llvm-weekly.xml", FeedStyle.LLVM_WEEKLY),
    _github("gh-triton", "triton-lang/triton", 151887049),
    _github("gh-llvm", "llvm/llvm-project", 75821432),
)
FEEDS_BY_KEY = {feed.key: feed for feed in FEEDS}
