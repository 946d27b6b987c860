"""Builders for feed documents used by the ingestion tests (RSS 2.0, Atom, arXiv, GitHub).

They write the shapes the real feeds have (see SOURCES.md of the shared corpus):
an arXiv RSS 2.0 listing item carries ``<arxiv:announce_type>``, a guid
``oai:arXiv.org:ID vN`` and a description ``arXiv:IDvN Announce Type: T Abstract: ...``;
a GitHub releases Atom feed has entry ids ``tag:github.com,2008:Repository/N/TAG``.
"""

from __future__ import annotations

import datetime as dt
from email.utils import format_datetime
from xml.sax.saxutils import escape


def rfc822(when: dt.datetime) -> str:
    """An RSS date."""
    return format_datetime(when.astimezone(dt.UTC), usegmt=True)


def rss(items: list[dict[str, str]], *, title: str = "Example feed",
        link: str = "https://example.org/", encoding: str = "utf-8",
        declare: bool = True) -> bytes:
    """An RSS 2.0 document; each item maps element names to (already escaped) text."""
    head = f'<?xml version="1.0" encoding="{encoding}"?>\n' if declare else ""
    body = "".join(
        "<item>" + "".join(f"<{k}>{v}</{k}>" for k, v in item.items()) + "</item>\n"
        for item in items
    )
    text = (f'{head}<rss version="2.0"><channel><title>{title}</title><link>{link}</link>'
            f"<description>d</description>\n{body}</channel></rss>\n")
    return text.encode(encoding)


def atom(entries: list[dict[str, str]], *, title: str = "Example Atom",
         feed_id: str = "urn:example:feed", link: str = "https://example.org/") -> bytes:
    """An Atom 1.0 document; ``link`` keys become ``<link href=...>``, others elements."""
    parts = []
    for entry in entries:
        fields = "".join(
            f'<link rel="alternate" href="{escape(v, {chr(34): "&quot;"})}"/>' if k == "link"
            else f"<{k}>{v}</{k}>"
            for k, v in entry.items()
        )
        parts.append(f"<entry>{fields}</entry>\n")
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<feed xmlns="http://www.w3.org/2005/Atom">'
        f'<id>{feed_id}</id><title>{title}</title><link rel="alternate" href="{link}"/>'
        f"<updated>2024-01-01T00:00:00Z</updated>\n{''.join(parts)}</feed>\n"
    ).encode()


def arxiv_item(arxiv_id: str, version: int, announce: str, title: str, when: dt.datetime,
               abstract: str = "We compile things.", doi: str | None = None) -> str:
    """One ``<item>`` of an arXiv RSS 2.0 listing (rss.arxiv.org since 2024)."""
    doi_element = f"<arxiv:DOI>{doi}</arxiv:DOI>" if doi else ""
    return (
        f"<item><title>{escape(title)}</title>"
        f"<link>https://arxiv.org/abs/{arxiv_id}</link>"
        f"<description>arXiv:{arxiv_id}v{version} Announce Type: {announce} \n"
        f"Abstract: {escape(abstract)}</description>"
        f'<guid isPermaLink="false">oai:arXiv.org:{arxiv_id}v{version}</guid>'
        f"<category>cs.PL</category><pubDate>{rfc822(when)}</pubDate>"
        f"<arxiv:announce_type>{announce}</arxiv:announce_type>"
        f"<dc:rights>http://creativecommons.org/licenses/by/4.0/</dc:rights>"
        f"<dc:creator>Ada Lovelace, Alan Turing and Grace Hopper</dc:creator>{doi_element}</item>\n"
    )


def arxiv_listing(items: list[str], category: str = "cs.PL") -> bytes:
    """An arXiv RSS 2.0 listing document around ``items``."""
    return (
        "<?xml version='1.0' encoding='UTF-8'?>\n"
        '<rss xmlns:arxiv="http://arxiv.org/schemas/atom" '
        'xmlns:dc="http://purl.org/dc/elements/1.1/" '
        'xmlns:atom="http://www.w3.org/2005/Atom" version="2.0"><channel>'
        f"<title>{category} updates on arXiv.org</title>"
        f"<link>http://rss.arxiv.org/rss/{category}</link>"
        f"<description>{category} updates on the arXiv.org e-print archive.</description>"
        f'<atom:link href="https://rss.arxiv.org/rss/{category}" rel="self" '
        'type="application/rss+xml"/>'
        f"<skipDays><day>Sunday</day><day>Saturday</day></skipDays>\n{''.join(items)}"
        "</channel></rss>\n"
    ).encode()


def github_releases(owner: str, repo: str, tags: list[tuple[str, dt.datetime]], *,
                    relative: bool = True) -> bytes:
    """A GitHub ``releases.atom`` (relative entry links, as in the 2015 layout)."""
    prefix = "" if relative else "https://github.com"
    entries = "".join(
        f"<entry><id>tag:github.com,2008:Repository/11167738/{tag}</id>"
        f"<updated>{when.isoformat()}</updated>"
        f'<link rel="alternate" type="text/html" href="{prefix}/{owner}/{repo}/releases/tag/{tag}"/>'
        f"<title>{tag}</title>"
        f'<content type="html">&lt;p&gt;Release {tag}, see '
        f'&lt;a href="https://github.com/{owner}/{repo}/compare/x...{tag}?utm_source=feed"&gt;'
        f"changes&lt;/a&gt;&lt;/p&gt;</content>"
        f"<author><name>octocat</name></author></entry>\n"
        for tag, when in tags
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<feed xmlns="http://www.w3.org/2005/Atom" xml:lang="en-US">'
        f"<id>tag:github.com,2008:https://github.com/{owner}/{repo}/releases</id>"
        f'<link type="text/html" rel="alternate" href="https://github.com/{owner}/{repo}/releases"/>'
        f"<title>Release notes from {repo}</title><updated>2024-01-01T00:00:00Z</updated>\n"
        f"{entries}</feed>\n"
    ).encode()
