"""One renderer per sample feed format, each writing the entries :mod:`.entries` dated.

The documents imitate the real feeds byte for byte in their quirks (WordPress
tabs and CDATA, arXiv's namespaces and US Eastern dates, GitHub's Atom), so the
parser meets in the demo what it meets in production. Guids, links, titles and
dates come from the entries; a renderer only decides how they are written.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from email.utils import format_datetime
from typing import Any, Generic
from xml.sax.saxutils import escape, quoteattr
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from digest.ingest.samples.content import Content, Paper, Post, Release
from digest.ingest.samples.entries import (
    Entry,
    RecordT,
    SampleItem,
    arxiv_entries,
    newest,
    post_entries,
    release_entries,
)
from digest.ingest.samples.feeds import FeedStyle, SampleFeed

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


@functools.cache
def _arxiv_zone() -> tzinfo:
    """arXiv dates its listings in US Eastern time (UTC when no tz database is installed)."""
    try:
        return ZoneInfo("America/New_York")
    except ZoneInfoNotFoundError:
        return UTC


def _rfc822(moment: datetime, zone: tzinfo = UTC) -> str:
    """RSS dates: ``Mon, 04 Mar 2024 00:00:00 -0500``."""
    return format_datetime(moment.astimezone(zone))


def _rfc3339(moment: datetime) -> str:
    """Atom dates as GitHub writes them: ``2024-03-04T05:00:00Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cdata(text: str) -> str:
    """A CDATA section, as WordPress writes its feeds (``]]>`` split safely)."""
    return "<![CDATA[" + text.replace("]]>", "]]]]><![CDATA[>") + "]]>"


def _document(head: list[str], items: list[list[str]], tail: list[str]) -> str:
    return "\n".join([*head, *(line for item in items for line in item), *tail, ""])


# ------------------------------------------------------------------ arXiv listing RSS


def render_arxiv(feed: SampleFeed, entries: list[Entry[Paper]], now: datetime) -> str:
    """An ``rss.arxiv.org`` category listing."""
    url = f"http://rss.arxiv.org/rss/{feed.category}"
    head = [
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
        f"    <pubDate>{_rfc822(newest(entries, now), _arxiv_zone())}</pubDate>",
        "    <skipDays>",
        "      <day>Saturday</day>",
        "      <day>Sunday</day>",
        "    </skipDays>",
    ]
    return _document(head, [_arxiv_item(entry) for entry in entries], ["  </channel>", "</rss>"])


def _arxiv_item(entry: Entry[Paper]) -> list[str]:
    item, paper = entry.item, entry.record
    versioned = f"{paper.id}v{paper.version}"
    kind = item.announce_type
    description = f"arXiv:{versioned} Announce Type: {kind} \nAbstract: {paper.abstract}"
    return [
        "    <item>",
        f"      <title>{escape(item.title)}</title>",
        f"      <link>{escape(item.link)}</link>",
        f"      <description>{escape(description)}</description>",
        f'      <guid isPermaLink="false">{escape(item.guid)}</guid>',
        *(f"      <category>{escape(c)}</category>" for c in paper.categories),
        f"      <pubDate>{_rfc822(item.published, _arxiv_zone())}</pubDate>",
        f"      <arxiv:announce_type>{kind}</arxiv:announce_type>",
        f"      <dc:rights>{escape(paper.license)}</dc:rights>",
        f"      <dc:creator>{escape(paper.authors)}</dc:creator>",
        "    </item>",
    ]


# ------------------------------------------------------------------ WordPress RSS


def render_wordpress(feed: SampleFeed, entries: list[Entry[Post]], now: datetime) -> str:
    """A WordPress blog's ``/feed/``: tab-indented, CDATA text, a "first appeared on" footer."""
    site_title, site_link, self_url, site_description = _WORDPRESS_SITES[feed.key]
    head = [
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
        f"\t<lastBuildDate>{_rfc822(newest(entries, now))}</lastBuildDate>",
        "\t<language>en-US</language>",
        "\t<sy:updatePeriod>\n\thourly\t</sy:updatePeriod>",
        "\t<sy:updateFrequency>\n\t1\t</sy:updateFrequency>",
        "\t<generator>https://wordpress.org/?v=6.8.3</generator>",
    ]
    footer = functools.partial(_wordpress_footer, site_link, site_title)
    items = [_wordpress_item(entry, footer(entry.item)) for entry in entries]
    return _document(head, items, ["\t</channel>", "</rss>"])


def _wordpress_footer(site_link: str, site_title: str, item: SampleItem) -> str:
    return (
        f'<p>The post <a href="{item.link}">{escape(item.title)}</a> appeared first on '
        f'<a href="{site_link}">{escape(site_title)}</a>.</p>'
    )


def _wordpress_item(entry: Entry[Post], footer: str) -> list[str]:
    item, post = entry.item, entry.record
    excerpt = f"<p>{post.excerpt} [&#8230;]</p>\n{footer}" if post.excerpt else footer
    return [
        "\t\t<item>",
        f"\t\t<title>{escape(item.title)}</title>",
        f"\t\t<link>{escape(item.link)}</link>",
        f"\t\t\t\t\t<dc:creator>{_cdata(post.author)}</dc:creator>",
        f"\t\t<pubDate>{_rfc822(item.published)}</pubDate>",
        *(f"\t\t<category>{_cdata(c)}</category>" for c in post.categories),
        f'\t\t<guid isPermaLink="false">{escape(item.guid)}</guid>',
        "",
        f"\t\t\t\t\t<description>{_cdata(excerpt)}</description>",
        f"\t\t\t\t\t\t\t\t\t\t<content:encoded>{_cdata(post.html + chr(10) + footer)}"
        "</content:encoded>",
        "\t\t\t\t\t",
        "\t\t</item>",
    ]


# ------------------------------------------------------------------ Hugo RSS (LLVM blog)


def render_hugo(feed: SampleFeed, entries: list[Entry[Post]], now: datetime) -> str:
    """Hugo's ``index.xml`` for the LLVM blog: the body, with its byline, as escaped HTML."""
    head = [
        '<?xml version="1.0" encoding="utf-8" standalone="yes"?>',
        '<rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom">',
        "  <channel>",
        "    <title>The LLVM Project Blog</title>",
        "    <link>https://blog.llvm.org/</link>",
        "    <description>Recent content on The LLVM Project Blog</description>",
        "    <generator>Hugo</generator>",
        "    <language>en-us</language>",
        f"    <lastBuildDate>{_rfc822(newest(entries, now))}</lastBuildDate>",
        '    <atom:link href="https://blog.llvm.org/index.xml" rel="self" '
        'type="application/rss+xml" />',
    ]
    return _document(head, [_hugo_item(entry) for entry in entries], ["  </channel>", "</rss>"])


def _hugo_item(entry: Entry[Post]) -> list[str]:
    item, post = entry.item, entry.record
    body = f"<p>By {escape(post.author)}</p>\n{post.html}" if post.author else post.html
    return [
        "    <item>",
        f"      <title>{escape(item.title)}</title>",
        f"      <link>{escape(item.link)}</link>",
        f"      <pubDate>{_rfc822(item.published)}</pubDate>",
        f"      <guid>{escape(item.guid)}</guid>",
        f"      <description>{escape(body)}</description>",
        "    </item>",
    ]


# ------------------------------------------------------------------ LLVM Weekly RSS


def render_llvm_weekly(feed: SampleFeed, entries: list[Entry[Post]], now: datetime) -> str:
    """LLVM Weekly's ``rss.xml``: unindented, no build date."""
    head = [
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
    return _document(head, [_llvm_weekly_item(entry) for entry in entries], ["</channel>", "</rss>"])


def _llvm_weekly_item(entry: Entry[Post]) -> list[str]:
    item = entry.item
    return [
        "<item>",
        f"<title>{escape(item.title)}</title>",
        f"<link>{escape(item.link)}</link>",
        f"<guid>{escape(item.guid)}</guid>",
        f"<pubDate>{_rfc822(item.published)}</pubDate>",
        f"<description>{escape(entry.record.html)}</description>",
        "</item>",
    ]


# ------------------------------------------------------------------ GitHub releases Atom


def render_github(feed: SampleFeed, entries: list[Entry[Release]], now: datetime) -> str:
    """A repository's ``releases.atom``."""
    base = f"https://github.com/{feed.repo}"
    head = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<feed xmlns="http://www.w3.org/2005/Atom" xmlns:media="http://search.yahoo.com/mrss/" '
        'xml:lang="en-US">',
        f"  <id>tag:github.com,2008:{base}/releases</id>",
        f'  <link type="text/html" rel="alternate" href="{base}/releases"/>',
        f'  <link type="application/atom+xml" rel="self" href="{base}/releases.atom"/>',
        f"  <title>Release notes from {escape(feed.repo.split('/')[1])}</title>",
        f"  <updated>{_rfc3339(newest(entries, now))}</updated>",
    ]
    return _document(head, [_github_entry(entry) for entry in entries], ["</feed>"])


def _github_entry(entry: Entry[Release]) -> list[str]:
    item, release = entry.item, entry.record
    avatar_id = zlib.crc32(release.author.encode()) % 10**8  # a stable made-up user id
    avatar = f"https://avatars.githubusercontent.com/u/{avatar_id}?s=60&v=4"
    return [
        "  <entry>",
        f"    <id>{escape(item.guid)}</id>",
        f"    <updated>{_rfc3339(item.published)}</updated>",
        f'    <link rel="alternate" type="text/html" href="{escape(item.link)}"/>',
        f"    <title>{escape(item.title)}</title>",
        f'    <content type="html">{escape(release.html)}</content>',
        "    <author>",
        f"      <name>{escape(release.author)}</name>",
        "    </author>",
        f'    <media:thumbnail height="30" width="30" url={quoteattr(avatar)}/>',
        "  </entry>",
    ]


# ------------------------------------------------------------------ the formats


@dataclass(frozen=True)
class FeedFormat(Generic[RecordT]):
    """A feed format: which entries a feed of it carries, and how its document is written."""

    entries: Callable[[SampleFeed, Content, datetime], list[Entry[RecordT]]]
    render: Callable[[SampleFeed, list[Entry[RecordT]], datetime], str]

    def items(self, feed: SampleFeed, content: Content, now: datetime) -> list[SampleItem]:
        """The items of ``feed`` written for ``now``."""
        return [entry.item for entry in self.entries(feed, content, now)]

    def document(self, feed: SampleFeed, content: Content, now: datetime) -> str:
        """The document of ``feed`` written for ``now``."""
        return self.render(feed, self.entries(feed, content, now), now)


FORMATS: dict[FeedStyle, FeedFormat[Any]] = {
    FeedStyle.ARXIV: FeedFormat(arxiv_entries, render_arxiv),
    FeedStyle.WORDPRESS: FeedFormat(post_entries, render_wordpress),
    FeedStyle.HUGO: FeedFormat(post_entries, render_hugo),
    FeedStyle.LLVM_WEEKLY: FeedFormat(post_entries, render_llvm_weekly),
    FeedStyle.GITHUB: FeedFormat(release_entries, render_github),
}
