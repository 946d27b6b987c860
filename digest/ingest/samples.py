"""Bundled offline sample feeds, so the pipeline and the demo run with no network.

:func:`write_samples` writes realistic feed documents (arXiv listing RSS,
WordPress RSS for the PyTorch and NVIDIA blogs, Hugo RSS for the LLVM blog,
LLVM Weekly RSS, GitHub ``releases.atom``) plus a ``sources.toml`` naming them
by relative path, in the source-file format of :mod:`digest.sources`.

The content lives in ``digest/data/samples/content.toml``; items carry no
dates there, only an age. Every item is dated ``now - age`` (from a few
minutes to about three days, plus a few older GitHub releases as real release
feeds have), densely enough that the latest closed window
``[D-1 08:00, D 08:00)`` before ``now`` always holds a good number of
compiler-relevant items, whatever the time of day. The output depends only on
``now``: the same ``now`` gives the same bytes, and nothing here reads the clock.
"""

from __future__ import annotations

import functools
import json
import tomllib
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from email.utils import format_datetime
from pathlib import Path
from typing import Any, TypeVar
from xml.sax.saxutils import escape, quoteattr
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from digest.domain.errors import DigestError
from digest.resources import data_dir

__all__ = [
    "FEEDS",
    "Content",
    "Paper",
    "Post",
    "Release",
    "SampleFeed",
    "SampleItem",
    "content_path",
    "load_content",
    "sample_items",
    "write_samples",
]

_DEFAULT_ARXIV_LICENSE = "http://arxiv.org/licenses/nonexclusive-distrib/1.0/"


@dataclass(frozen=True)
class SampleFeed:
    """One sample source: its entry in ``sources.toml`` and how its document is rendered."""

    key: str
    name: str
    kind: str
    weight: float
    filename: str
    style: str  # arxiv | wordpress | hugo | llvm-weekly | github
    category: str = ""  # arXiv category of a listing feed
    repo: str = ""  # GitHub owner/name of a release feed
    repo_id: int = 0  # GitHub repository id (in entry ids)


# Keys, names, kinds and weights as in the built-in real list (digest/data/sources.toml).
FEEDS: tuple[SampleFeed, ...] = (
    SampleFeed("arxiv-cs.pl", "arXiv cs.PL", "arxiv", 0.7, "arxiv-cs.pl.xml", "arxiv", "cs.PL"),
    SampleFeed("arxiv-cs.ar", "arXiv cs.AR", "arxiv", 0.7, "arxiv-cs.ar.xml", "arxiv", "cs.AR"),
    SampleFeed("arxiv-cs.dc", "arXiv cs.DC", "arxiv", 0.6, "arxiv-cs.dc.xml", "arxiv", "cs.DC"),
    SampleFeed("arxiv-cs.lg", "arXiv cs.LG", "arxiv", 0.5, "arxiv-cs.lg.xml", "arxiv", "cs.LG"),
    SampleFeed("pytorch-blog", "PyTorch", "rss", 0.9, "pytorch-blog.xml", "wordpress"),
    SampleFeed("nvidia-blog", "NVIDIA", "rss", 0.8, "nvidia-blog.xml", "wordpress"),
    SampleFeed("llvm-blog", "LLVM Blog", "rss", 0.9, "llvm-blog.xml", "hugo"),
    SampleFeed("llvm-weekly", "LLVM Weekly", "rss", 0.7, "llvm-weekly.xml", "llvm-weekly"),
    SampleFeed(
        "gh-triton", "triton-lang/triton releases", "github-releases", 0.8,
        "gh-triton.atom", "github", repo="triton-lang/triton", repo_id=151887049,
    ),
    SampleFeed(
        "gh-llvm", "llvm/llvm-project releases", "github-releases", 0.8,
        "gh-llvm.atom", "github", repo="llvm/llvm-project", repo_id=75821432,
    ),
)
_FEEDS_BY_KEY = {feed.key: feed for feed in FEEDS}
_ARXIV_FEED_BY_CATEGORY = {feed.category: feed for feed in FEEDS if feed.style == "arxiv"}

# The channel element of each WordPress blog: (title, site link, feed URL, description).
_WORDPRESS_SITES: dict[str, tuple[str, str, str, str]] = {
    "pytorch-blog": ("PyTorch", "https://pytorch.org", "https://pytorch.org/feed/", ""),
    "nvidia-blog": (
        "NVIDIA Technical Blog",
        "https://developer.nvidia.com/blog",
        "https://developer.nvidia.com/blog/feed/",
        "News and tutorials for developers, data scientists, and IT admins",
    ),
}


# ------------------------------------------------------------------ content


@dataclass(frozen=True)
class Paper:
    """One arXiv paper version, listed in each sample category feed it names."""

    id: str
    version: int
    announce: str  # new | replace: the type in the primary category's listing
    categories: tuple[str, ...]  # the first is the primary category
    age_minutes: int
    relevant: bool
    title: str
    authors: str
    abstract: str
    license: str


@dataclass(frozen=True)
class Post:
    """One blog or newsletter post."""

    feed: str
    post_id: int
    age_minutes: int
    relevant: bool
    slug: str
    title: str
    author: str
    categories: tuple[str, ...]
    excerpt: str
    html: str


@dataclass(frozen=True)
class Release:
    """One GitHub release."""

    feed: str
    tag: str
    title: str
    author: str
    age_minutes: int
    relevant: bool
    html: str


@dataclass(frozen=True)
class Content:
    """Everything the sample feeds say, undated."""

    papers: tuple[Paper, ...]
    posts: tuple[Post, ...]
    releases: tuple[Release, ...]


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


def content_path() -> Path:
    """The TOML file holding the sample content."""
    return data_dir() / "samples" / "content.toml"


class _Table:
    """Typed access to one table of the content file; errors name the table."""

    def __init__(self, kind: str, index: int, data: Any) -> None:
        if not isinstance(data, dict):
            raise ValueError(f"{content_path()}: [[{kind}]] #{index + 1} is not a table")
        self._data: dict[str, Any] = data
        self._where = f"{content_path()}: [[{kind}]] #{index + 1}"

    def _get(self, key: str, kind: type, default: object = None) -> object:
        value = self._data.get(key, default)
        # bool is a subclass of int: never accept one for the other.
        if not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool):
            raise ValueError(f"{self._where}: {key!r} is missing or has the wrong type")
        return value

    def text(self, key: str, default: str | None = None) -> str:
        """A string field, stripped (``default`` when absent, if given)."""
        value = self._get(key, str, default)
        assert isinstance(value, str)
        return value.strip()

    def number(self, key: str, default: int | None = None) -> int:
        """An integer field."""
        value = self._get(key, int, default)
        assert isinstance(value, int)
        return value

    def flag(self, key: str) -> bool:
        """A boolean field."""
        value = self._get(key, bool)
        assert isinstance(value, bool)
        return value

    def texts(self, key: str, default: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """A list of strings."""
        value = self._data.get(key, default)
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{self._where}: {key!r} must be a list of strings")
        return tuple(v.strip() for v in value)


def _tables(data: dict[str, Any], kind: str) -> list[_Table]:
    raw = data.get(kind, [])
    if not isinstance(raw, list):
        raise ValueError(f"{content_path()}: {kind!r} must be an array of tables")
    return [_Table(kind, i, table) for i, table in enumerate(raw)]


@functools.cache
def load_content() -> Content:
    """Read and check ``content.toml`` (cached: it ships with the package)."""
    data = tomllib.loads(content_path().read_text(encoding="utf-8"))
    papers = tuple(
        Paper(
            id=t.text("id"),
            version=t.number("version"),
            announce=t.text("announce"),
            categories=t.texts("categories"),
            age_minutes=t.number("age_minutes"),
            relevant=t.flag("relevant"),
            title=t.text("title"),
            authors=t.text("authors"),
            abstract=t.text("abstract"),
            license=t.text("license", _DEFAULT_ARXIV_LICENSE),
        )
        for t in _tables(data, "paper")
    )
    posts = tuple(
        Post(
            feed=t.text("feed"),
            post_id=t.number("post_id", 0),
            age_minutes=t.number("age_minutes"),
            relevant=t.flag("relevant"),
            slug=t.text("slug", ""),
            title=t.text("title"),
            author=t.text("author", ""),
            categories=t.texts("categories", ()),
            excerpt=t.text("excerpt", ""),
            html=t.text("html"),
        )
        for t in _tables(data, "post")
    )
    releases = tuple(
        Release(
            feed=t.text("feed"),
            tag=t.text("tag"),
            title=t.text("title"),
            author=t.text("author"),
            age_minutes=t.number("age_minutes"),
            relevant=t.flag("relevant"),
            html=t.text("html"),
        )
        for t in _tables(data, "release")
    )
    for paper in papers:
        if paper.announce not in ("new", "replace") or not paper.categories:
            raise ValueError(f"{content_path()}: paper {paper.id}: bad announce or categories")
    wanted: list[tuple[str, tuple[str, ...]]] = [
        (post.feed, ("wordpress", "hugo", "llvm-weekly")) for post in posts
    ]
    wanted += [(release.feed, ("github",)) for release in releases]
    for key, styles in wanted:
        feed = _FEEDS_BY_KEY.get(key)
        if feed is None or feed.style not in styles:
            raise ValueError(f"{content_path()}: unknown or unsuitable feed {key!r}")
    return Content(papers, posts, releases)


# ------------------------------------------------------------------ dates


@functools.cache
def _arxiv_zone() -> tzinfo:
    """arXiv dates its listings in US Eastern time (UTC when no tz database is installed)."""
    try:
        return ZoneInfo("America/New_York")
    except ZoneInfoNotFoundError:
        return UTC


def _check_now(now: datetime) -> datetime:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be an aware datetime")
    return now.replace(microsecond=0)


def _dated(now: datetime, age_minutes: int) -> datetime:
    return (now - timedelta(minutes=age_minutes)).astimezone(UTC)


def _rfc822(moment: datetime, zone: tzinfo = UTC) -> str:
    """RSS dates: ``Mon, 04 Mar 2024 00:00:00 -0500``."""
    return format_datetime(moment.astimezone(zone))


def _rfc3339(moment: datetime) -> str:
    """Atom dates as GitHub writes them: ``2024-03-04T05:00:00Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ordinal_date(moment: datetime) -> str:
    """``November 23rd 2026``, as LLVM Weekly titles its issues."""
    day = moment.day
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{moment:%B} {day}{suffix} {moment.year}"


# ------------------------------------------------------------------ items


def _arxiv_type(paper: Paper, category: str) -> str:
    if category == paper.categories[0]:
        return paper.announce
    return "cross" if paper.announce == "new" else "replace-cross"


def _post_link(feed: SampleFeed, post: Post, published: datetime) -> str:
    if feed.key == "pytorch-blog":
        return f"https://pytorch.org/blog/{post.slug}/"
    if feed.key == "nvidia-blog":
        return f"https://developer.nvidia.com/blog/{post.slug}/"
    if feed.style == "hugo":
        return f"https://blog.llvm.org/posts/{published:%Y-%m-%d}-{post.slug}/"
    return f"http://llvmweekly.org/issue/{post.post_id}"


def _post_guid(feed: SampleFeed, post: Post, link: str) -> str:
    if feed.key == "pytorch-blog":
        return f"https://pytorch.org/?p={post.post_id}"
    if feed.key == "nvidia-blog":
        return f"https://developer.nvidia.com/blog/?p={post.post_id}"
    return link


def _post_title(post: Post, published: datetime) -> str:
    return post.title.replace("{date}", _ordinal_date(published))


def sample_items(now: datetime) -> list[SampleItem]:
    """Every item the sample feeds carry when written for ``now``, feed by feed."""
    now = _check_now(now)
    content = load_content()
    items: list[SampleItem] = []
    for feed in FEEDS:
        if feed.style == "arxiv":
            for paper in _arxiv_papers(content, feed.category):
                items.append(
                    SampleItem(
                        source=feed.key,
                        guid=f"oai:arXiv.org:{paper.id}v{paper.version}",
                        title=paper.title,
                        link=f"https://arxiv.org/abs/{paper.id}",
                        published=_dated(now, paper.age_minutes),
                        relevant=paper.relevant,
                        announce_type=_arxiv_type(paper, feed.category),
                    )
                )
        elif feed.style == "github":
            for release in _newest_first(r for r in content.releases if r.feed == feed.key):
                items.append(
                    SampleItem(
                        source=feed.key,
                        guid=f"tag:github.com,2008:Repository/{feed.repo_id}/{release.tag}",
                        title=release.title,
                        link=f"https://github.com/{feed.repo}/releases/tag/{release.tag}",
                        published=_dated(now, release.age_minutes),
                        relevant=release.relevant,
                    )
                )
        else:
            for post in _newest_first(p for p in content.posts if p.feed == feed.key):
                published = _dated(now, post.age_minutes)
                link = _post_link(feed, post, published)
                items.append(
                    SampleItem(
                        source=feed.key,
                        guid=_post_guid(feed, post, link),
                        title=_post_title(post, published),
                        link=link,
                        published=published,
                        relevant=post.relevant,
                    )
                )
    return items


_ARXIV_ORDER = {"new": 0, "cross": 1, "replace": 2, "replace-cross": 3}


def _arxiv_papers(content: Content, category: str) -> list[Paper]:
    """The papers of one category listing, in arXiv's order: new, cross, replacements."""
    papers = [p for p in content.papers if category in p.categories]
    return sorted(papers, key=lambda p: (_ARXIV_ORDER[_arxiv_type(p, category)], p.id))


_Dated = TypeVar("_Dated", Post, Release)


def _newest_first(entries: Iterable[_Dated]) -> list[_Dated]:
    return sorted(entries, key=lambda entry: entry.age_minutes)


# ------------------------------------------------------------------ rendering


def _cdata(text: str) -> str:
    """A CDATA section, as WordPress writes its feeds (``]]>`` split safely)."""
    return "<![CDATA[" + text.replace("]]>", "]]]]><![CDATA[>") + "]]>"


def _render_arxiv(feed: SampleFeed, content: Content, now: datetime) -> str:
    zone = _arxiv_zone()
    papers = _arxiv_papers(content, feed.category)
    newest = min((p.age_minutes for p in papers), default=0)
    url = f"http://rss.arxiv.org/rss/{feed.category}"
    out = [
        "<?xml version='1.0' encoding='UTF-8'?>",
        '<rss xmlns:arxiv="http://arxiv.org/schemas/atom" '
        'xmlns:dc="http://purl.org/dc/elements/1.1/" '
        'xmlns:atom="http://www.w3.org/2005/Atom" '
        'xmlns:content="http://purl.org/rss/1.0/modules/content/" version="2.0">',
        "  <channel>",
        f"    <title>{feed.category} updates on arXiv.org</title>",
        f"    <link>{url}</link>",
        f"    <description>{feed.category} updates on the arXiv.org e-print archive.</description>",
        f'    <atom:link href="{url}" rel="self" type="application/rss+xml"/>',
        "    <docs>http://www.rssboard.org/rss-specification</docs>",
        "    <language>en-us</language>",
        f"    <lastBuildDate>{_rfc822(now)}</lastBuildDate>",
        "    <managingEditor>rss-help@arxiv.org</managingEditor>",
        f"    <pubDate>{_rfc822(_dated(now, newest), zone)}</pubDate>",
        "    <skipDays>",
        "      <day>Saturday</day>",
        "      <day>Sunday</day>",
        "    </skipDays>",
    ]
    for paper in papers:
        kind = _arxiv_type(paper, feed.category)
        versioned = f"{paper.id}v{paper.version}"
        description = f"arXiv:{versioned} Announce Type: {kind} \nAbstract: {paper.abstract}"
        out += [
            "    <item>",
            f"      <title>{escape(paper.title)}</title>",
            f"      <link>https://arxiv.org/abs/{paper.id}</link>",
            f"      <description>{escape(description)}</description>",
            f'      <guid isPermaLink="false">oai:arXiv.org:{versioned}</guid>',
            *(f"      <category>{escape(c)}</category>" for c in paper.categories),
            f"      <pubDate>{_rfc822(_dated(now, paper.age_minutes), zone)}</pubDate>",
            f"      <arxiv:announce_type>{kind}</arxiv:announce_type>",
            f"      <dc:rights>{escape(paper.license)}</dc:rights>",
            f"      <dc:creator>{escape(paper.authors)}</dc:creator>",
            "    </item>",
        ]
    out += ["  </channel>", "</rss>", ""]
    return "\n".join(out)


def _render_wordpress(feed: SampleFeed, content: Content, now: datetime) -> str:
    site_title, site_link, self_url, site_description = _WORDPRESS_SITES[feed.key]
    posts = _newest_first(p for p in content.posts if p.feed == feed.key)
    newest = _dated(now, posts[0].age_minutes) if posts else now
    out = [
        '<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"',
        '\txmlns:content="http://purl.org/rss/1.0/modules/content/"',
        '\txmlns:wfw="http://wellformedweb.org/CommentAPI/"',
        '\txmlns:dc="http://purl.org/dc/elements/1.1/"',
        '\txmlns:atom="http://www.w3.org/2005/Atom"',
        '\txmlns:sy="http://purl.org/rss/1.0/modules/syndication/"',
        '\txmlns:slash="http://purl.org/rss/1.0/modules/slash/"',
        "\t>",
        "",
        "<channel>",
        f"\t<title>{escape(site_title)}</title>",
        f'\t<atom:link href="{self_url}" rel="self" type="application/rss+xml" />',
        f"\t<link>{site_link}</link>",
        f"\t<description>{escape(site_description)}</description>",
        f"\t<lastBuildDate>{_rfc822(newest)}</lastBuildDate>",
        "\t<language>en-US</language>",
        "\t<sy:updatePeriod>\n\thourly\t</sy:updatePeriod>",
        "\t<sy:updateFrequency>\n\t1\t</sy:updateFrequency>",
        "\t<generator>https://wordpress.org/?v=6.8.3</generator>",
    ]
    for post in posts:
        published = _dated(now, post.age_minutes)
        link = _post_link(feed, post, published)
        footer = (
            f'<p>The post <a href="{link}">{escape(post.title)}</a> appeared first on '
            f'<a href="{site_link}">{escape(site_title)}</a>.</p>'
        )
        excerpt = f"<p>{post.excerpt} [&#8230;]</p>\n{footer}" if post.excerpt else footer
        out += [
            "\t\t<item>",
            f"\t\t<title>{escape(post.title)}</title>",
            f"\t\t<link>{link}</link>",
            f"\t\t\t\t\t<dc:creator>{_cdata(post.author)}</dc:creator>",
            f"\t\t<pubDate>{_rfc822(published)}</pubDate>",
            *(f"\t\t<category>{_cdata(c)}</category>" for c in post.categories),
            f'\t\t<guid isPermaLink="false">{_guid_text(feed, post, link)}</guid>',
            "",
            f"\t\t\t\t\t<description>{_cdata(excerpt)}</description>",
            f"\t\t\t\t\t\t\t\t\t\t<content:encoded>{_cdata(post.html + chr(10) + footer)}"
            "</content:encoded>",
            "\t\t\t\t\t",
            "\t\t</item>",
        ]
    out += ["\t</channel>", "</rss>", ""]
    return "\n".join(out)


def _guid_text(feed: SampleFeed, post: Post, link: str) -> str:
    return escape(_post_guid(feed, post, link))


def _render_hugo(feed: SampleFeed, content: Content, now: datetime) -> str:
    posts = _newest_first(p for p in content.posts if p.feed == feed.key)
    newest = _dated(now, posts[0].age_minutes) if posts else now
    out = [
        '<?xml version="1.0" encoding="utf-8" standalone="yes"?>',
        '<rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom">',
        "  <channel>",
        "    <title>The LLVM Project Blog</title>",
        "    <link>https://blog.llvm.org/</link>",
        "    <description>Recent content on The LLVM Project Blog</description>",
        "    <generator>Hugo</generator>",
        "    <language>en-us</language>",
        f"    <lastBuildDate>{_rfc822(newest)}</lastBuildDate>",
        '    <atom:link href="https://blog.llvm.org/index.xml" rel="self" '
        'type="application/rss+xml" />',
    ]
    for post in posts:
        published = _dated(now, post.age_minutes)
        link = _post_link(feed, post, published)
        body = f"<p>By {escape(post.author)}</p>\n{post.html}" if post.author else post.html
        out += [
            "    <item>",
            f"      <title>{escape(_post_title(post, published))}</title>",
            f"      <link>{link}</link>",
            f"      <pubDate>{_rfc822(published)}</pubDate>",
            f"      <guid>{link}</guid>",
            f"      <description>{escape(body)}</description>",
            "    </item>",
        ]
    out += ["  </channel>", "</rss>", ""]
    return "\n".join(out)


def _render_llvm_weekly(feed: SampleFeed, content: Content, now: datetime) -> str:
    posts = _newest_first(p for p in content.posts if p.feed == feed.key)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom">',
        "<channel>",
        "<title>LLVM Weekly</title>",
        "<link>http://llvmweekly.org/</link>",
        '<atom:link href="https://llvmweekly.org/rss.xml" rel="self" type="application/rss+xml"/>',
        "<description>A weekly newsletter covering developments in LLVM, Clang, and related "
        "projects</description>",
        "<language>en-gb</language>",
    ]
    for post in posts:
        published = _dated(now, post.age_minutes)
        link = _post_link(feed, post, published)
        out += [
            "<item>",
            f"<title>{escape(_post_title(post, published))}</title>",
            f"<link>{link}</link>",
            f"<guid>{link}</guid>",
            f"<pubDate>{_rfc822(published)}</pubDate>",
            f"<description>{escape(post.html)}</description>",
            "</item>",
        ]
    out += ["</channel>", "</rss>", ""]
    return "\n".join(out)


def _render_github(feed: SampleFeed, content: Content, now: datetime) -> str:
    releases = _newest_first(r for r in content.releases if r.feed == feed.key)
    newest = _dated(now, releases[0].age_minutes) if releases else now
    base = f"https://github.com/{feed.repo}"
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<feed xmlns="http://www.w3.org/2005/Atom" xmlns:media="http://search.yahoo.com/mrss/" '
        'xml:lang="en-US">',
        f"  <id>tag:github.com,2008:{base}/releases</id>",
        f'  <link type="text/html" rel="alternate" href="{base}/releases"/>',
        f'  <link type="application/atom+xml" rel="self" href="{base}/releases.atom"/>',
        f"  <title>Release notes from {escape(feed.repo.split('/')[1])}</title>",
        f"  <updated>{_rfc3339(newest)}</updated>",
    ]
    for release in releases:
        avatar = (
            f"https://avatars.githubusercontent.com/u/{zlib.crc32(release.author.encode()) % 10**8}"
            "?s=60&v=4"
        )
        out += [
            "  <entry>",
            f"    <id>tag:github.com,2008:Repository/{feed.repo_id}/{escape(release.tag)}</id>",
            f"    <updated>{_rfc3339(_dated(now, release.age_minutes))}</updated>",
            f'    <link rel="alternate" type="text/html" '
            f'href="{base}/releases/tag/{escape(release.tag)}"/>',
            f"    <title>{escape(release.title)}</title>",
            f'    <content type="html">{escape(release.html)}</content>',
            "    <author>",
            f"      <name>{escape(release.author)}</name>",
            "    </author>",
            f'    <media:thumbnail height="30" width="30" url={quoteattr(avatar)}/>',
            "  </entry>",
        ]
    out += ["</feed>", ""]
    return "\n".join(out)


_RENDERERS: dict[str, Callable[[SampleFeed, Content, datetime], str]] = {
    "arxiv": _render_arxiv,
    "wordpress": _render_wordpress,
    "hugo": _render_hugo,
    "llvm-weekly": _render_llvm_weekly,
    "github": _render_github,
}


def _render_sources(now: datetime) -> str:
    out = [
        "# Offline sample sources written by digest.samples.write_samples().",
        f"# Items are dated relative to {now.isoformat()}; urls are relative to this file.",
    ]
    for feed in FEEDS:
        out += [
            "",
            "[[source]]",
            f"key = {json.dumps(feed.key)}",
            f"name = {json.dumps(feed.name)}",
            f"url = {json.dumps(feed.filename)}",
            f"kind = {json.dumps(feed.kind)}",
            f"weight = {feed.weight}",
        ]
    return "\n".join(out) + "\n"


def write_samples(out_dir: Path, now: datetime) -> Path:
    """Write the sample feeds and their ``sources.toml`` into ``out_dir``; return the TOML path.

    ``now`` must be timezone-aware; every item is dated relative to it (whole
    seconds). Existing files of the same names are overwritten, others are left
    alone. The same ``now`` always gives byte-identical files.
    """
    now = _check_now(now)
    content = load_content()
    documents = {feed.filename: _RENDERERS[feed.style](feed, content, now) for feed in FEEDS}
    documents["sources.toml"] = _render_sources(now)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, document in documents.items():
            (out_dir / name).write_bytes(document.encode("utf-8"))
    except OSError as exc:
        raise DigestError(f"cannot write the samples to {out_dir}: {exc.strerror or exc}") from None
    return out_dir / "sources.toml"
