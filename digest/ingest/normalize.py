"""Pure normalisation: a parsed feed document in, normalised entry records out.

Nothing here does I/O or reads the clock: the fetch time comes in as a value.
feedparser hands over loosely typed dictionaries (a title may be a dict, a date
None, a key missing), so every accessor accepts anything and degrades to an
empty value instead of raising.

    parsed document ─► feed_context()     base URL for relative links, the feed's GitHub repo
                    ─► normalize_entry()  one record per entry: id, URLs, text, date, external ids
                    ─► normalize_feed()   every entry, repeated ids dropped, notes → warnings

A title stays text (``std::vector<int>`` and ``<script>`` included) unless the
feed says it is HTML; summaries and content are HTML and become plain text.
The summary is the feed's teaser (content only when the teaser is empty); the
body is the whole content (content:encoded, Atom content) as plain paragraphs,
bounded to ``BODY_MAX`` characters, so the classifier reads the entire post.
The entry key is the guid, else the canonical link, else a hash of title and
summary. The content hash covers every normalised field except a fallback
date (which is the fetch time and would change on every fetch).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from digest.domain.arxiv import ARXIV_PREFIX_RE
from digest.ingest.due import feed_interval
from digest.ingest.extids import (
    ARXIV_TITLE_SUFFIX_RE,
    ArxivRef,
    arxiv_ref,
    doi_of,
    github_release,
    github_repo,
    is_prerelease,
)
from digest.ingest.feedtext import (
    absolute_url,
    body_text,
    canonical_url,
    clean_id,
    field_text,
    hrefs,
    plain_text,
    text_of,
    truncate,
    unique,
)

SUMMARY_MAX = 4000
BODY_MAX = 20_000
TITLE_MAX = 500
KEY_MAX = 512
LINKS_MAX = 100
FUTURE_SLACK = dt.timedelta(days=1)
_SKIPPED_RELS = frozenset({"self", "edit", "edit-media", "replies", "license"})
_SPLIT_AUTHORS_RE = re.compile(r",|\band\b")
_PARENS_RE = re.compile(r"\([^()]*\)")
_SPACE_RE = re.compile(r"\s+")


@dataclass(frozen=True)
class FeedContext:
    """What normalising one entry needs to know about its document and source."""

    kind: str
    fetched_at: dt.datetime
    base_url: str | None = None
    repo: str | None = None


@dataclass(frozen=True)
class NormalizedEntry:
    """One feed entry, normalised: the values of an ``Entry`` row (minus bookkeeping)."""

    entry_key: str
    url: str | None
    canonical_url: str | None
    title: str
    summary: str
    authors: tuple[str, ...]
    categories: tuple[str, ...]
    links: tuple[str, ...]
    published: dt.datetime
    published_is_fallback: bool
    arxiv_id: str | None = None
    arxiv_version: int | None = None
    announce_type: str | None = None
    doi: str | None = None
    repo: str | None = None
    tag: str | None = None
    prerelease: bool = False
    notes: tuple[str, ...] = ()
    body: str = ""
    content_hash: str = ""

    def row(self) -> dict[str, Any]:
        """The ``Entry`` column values (lists for the JSON columns)."""
        return {
            "entry_key": self.entry_key, "url": self.url, "canonical_url": self.canonical_url,
            "title": self.title, "summary": self.summary, "authors": list(self.authors),
            "categories": list(self.categories), "links": list(self.links),
            "published": self.published, "published_is_fallback": self.published_is_fallback,
            "content_hash": self.content_hash, "arxiv_id": self.arxiv_id,
            "arxiv_version": self.arxiv_version, "announce_type": self.announce_type,
            "doi": self.doi, "repo": self.repo, "tag": self.tag, "prerelease": self.prerelease,
            "body": self.body,
        }


@dataclass(frozen=True)
class NormalizedFeed:
    """A whole document: entries (one per key), the raw entry count, warnings, API errors.

    ``interval``: how long the document asks to be left alone (``<ttl>``, ``sy:update*``).
    """

    entries: list[NormalizedEntry]
    total: int
    warnings: list[str]
    api_errors: list[str]
    interval: dt.timedelta | None = None


# ---------------------------------------------------------------- fields of one entry


def parsed_time(entry: Mapping[str, Any]) -> dt.datetime | None:
    """The entry's published (else updated, else created) time as aware UTC, or None."""
    for key in ("published_parsed", "updated_parsed", "created_parsed"):
        # dict.get: FeedParserDict.get("updated_parsed") aliases the published date, with a warning
        value = dict.get(entry, key) if isinstance(entry, dict) else entry.get(key)
        if not isinstance(value, tuple):  # time.struct_time is a tuple; None or junk is skipped
            continue
        try:
            year, month, day, hour, minute, second = (int(v) for v in value[:6])
            return dt.datetime(year, month, day, hour, minute, min(second, 59), tzinfo=dt.UTC)
        except (TypeError, ValueError, OverflowError):
            continue
    return None


def _published(entry: Mapping[str, Any], fetched_at: dt.datetime) -> tuple[dt.datetime, str | None]:
    when = parsed_time(entry)
    if when is None:
        return fetched_at, "no usable date (published set to fetch time)"
    if when > fetched_at + FUTURE_SLACK:
        return fetched_at, "date in the future (published set to fetch time)"
    return when, None


def _links(item: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    links = item.get("links")
    return [link for link in links if isinstance(link, Mapping)] if isinstance(links, list) else []


def _content_parts(entry: Mapping[str, Any]) -> list[str]:
    content = entry.get("content")
    return [text_of(item) for item in content] if isinstance(content, list) else []


def _summary_markup(entry: Mapping[str, Any]) -> str:
    summary = text_of(entry.get("summary"))
    if summary.strip():
        return summary
    return next((part for part in _content_parts(entry) if part.strip()), "")


def _body(entry: Mapping[str, Any], summary: str) -> str:
    """The full text: the longest content part (content:encoded, Atom content) as paragraphs.

    Empty when the entry has no content, or its content is just the summary in one paragraph: a
    content whose words are the summary's but that has paragraphs or list items (a release's notes,
    a roundup's items) is kept, since the summary has lost where one item ends.
    """
    parts = [part for part in _content_parts(entry) if part.strip()]
    if not parts:
        return ""
    body = body_text(max(parts, key=len), BODY_MAX)
    return "" if "\n\n" not in body and " ".join(body.split()) == summary else body


def _all_links(entry: Mapping[str, Any], base: str | None) -> tuple[str, ...]:
    raw = [text_of(link.get("href")) for link in _links(entry)
           if text_of(link.get("rel")) not in _SKIPPED_RELS]
    for part in [text_of(entry.get("summary")), *_content_parts(entry)]:
        raw += hrefs(part)
    canonical = (canonical_url(href, base) for href in dict.fromkeys(raw))
    return unique((url for url in canonical if url), LINKS_MAX)


def _authors(entry: Mapping[str, Any], split_lists: bool) -> tuple[str, ...]:
    raw = entry.get("authors")
    names = [text_of(author) for author in raw] if isinstance(raw, list) else []
    if not any(names):
        names = [text_of(entry.get("author"))]
    names = [plain_text(name) for name in names]
    if split_lists:  # arXiv: "A, B and C (Univ. X)" is one string; affiliations in parentheses
        names = [part.strip() for name in names
                 for part in _SPLIT_AUTHORS_RE.split(_without_parentheses(name))]
    return unique((truncate(name, 200) for name in names), 50)


def _without_parentheses(text: str) -> str:
    previous = None
    while previous != text:
        previous, text = text, _PARENS_RE.sub("", text)
    return text


def _categories(entry: Mapping[str, Any]) -> tuple[str, ...]:
    tags = entry.get("tags")
    if not isinstance(tags, list):
        return ()
    terms = (text_of(tag.get("term") or tag.get("label")) if isinstance(tag, Mapping)
             else text_of(tag) for tag in tags)
    return unique((plain_text(term, 200) for term in terms), 50)


def _title_type(entry: Mapping[str, Any]) -> str:
    """What the feed says its title is: text (an RSS title, Atom ``type="text"``) or HTML.

    feedparser gives it in ``title_detail``; an entry without one (a JSON Feed
    entry, whose title :mod:`digest.jsonfeed` escapes) is HTML.
    """
    detail = entry.get("title_detail")
    kind = text_of(detail.get("type")) if isinstance(detail, Mapping) else ""
    return kind or "text/html"


def _title(raw_title: str, kind: str, summary: str, url: str | None) -> tuple[str, str | None]:
    title = field_text(raw_title, kind, TITLE_MAX)
    if title:
        return title, None
    fallback = truncate(summary, 80) or url or "(untitled)"
    return fallback, "no title (used the summary or link)"


def _entry_key(guid: str, canonical: str | None, title: str, summary: str) -> str:
    key = clean_id(_SPACE_RE.sub(" ", guid)) or canonical or ""
    if not key or len(key) > KEY_MAX:
        basis = key or f"{title}\x00{summary}"
        return "sha256:" + hashlib.sha256(basis.encode("utf-8", "replace")).hexdigest()
    return key


def _entry_link(entry: Mapping[str, Any]) -> str:
    """The post's own link: FeedBurner's original link beats its redirecting proxy link."""
    return text_of(entry.get("feedburner_origlink")).strip() or text_of(entry.get("link")).strip()


# ---------------------------------------------------------------- one entry


def normalize_entry(entry: Mapping[str, Any], ctx: FeedContext) -> NormalizedEntry:
    """Turn one feedparser entry into a normalised record (never raises on odd input)."""
    guid = text_of(entry.get("id"))
    raw_link = _entry_link(entry)
    canonical = canonical_url(raw_link, ctx.base_url)
    url = absolute_url(raw_link, ctx.base_url) if canonical else None
    raw_title = text_of(entry.get("title"))
    summary = plain_text(_summary_markup(entry), SUMMARY_MAX + 200)  # room for an arXiv prefix
    arxiv = arxiv_ref(entry, guid, url, summary, raw_title)
    if arxiv is not None:
        summary = ARXIV_PREFIX_RE.sub("", summary, count=1)
        raw_title = ARXIV_TITLE_SUFFIX_RE.sub("", raw_title)
    summary = truncate(summary, SUMMARY_MAX)
    title, title_note = _title(raw_title, _title_type(entry), summary, url)
    published, date_note = _published(entry, ctx.fetched_at)
    repo, tag = github_release((raw_link, url or ""), guid, ctx.kind, ctx.repo)
    release_like = tag is not None or ctx.kind == "github-releases"
    record = NormalizedEntry(
        entry_key=_entry_key(guid, canonical, title, summary),
        url=url, canonical_url=canonical, title=title, summary=summary,
        authors=_authors(entry, split_lists=arxiv is not None),
        categories=_categories(entry), links=_all_links(entry, url or ctx.base_url),
        published=published, published_is_fallback=date_note is not None,
        doi=doi_of(entry, _links(entry)), repo=repo, tag=tag,
        prerelease=release_like and is_prerelease(tag or "", title),
        notes=tuple(note for note in (title_note, date_note) if note),
        body=_body(entry, summary),
        **_arxiv_fields(arxiv),
    )
    return dataclasses.replace(record, content_hash=content_hash(record))


def _arxiv_fields(ref: ArxivRef | None) -> dict[str, Any]:
    if ref is None:
        return {}
    return {"arxiv_id": ref.arxiv_id, "arxiv_version": ref.version,
            "announce_type": ref.announce_type}


def content_hash(record: NormalizedEntry) -> str:
    """SHA-256 over the normalised fields; a fallback date (the fetch time) is left out."""
    fields = record.row()
    del fields["content_hash"]
    if not record.body:  # entries without a body keep the hash they had before bodies were kept
        del fields["body"]
    fields["published"] = None if record.published_is_fallback else record.published.isoformat()
    blob = json.dumps(fields, ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8", "replace")).hexdigest()


# ---------------------------------------------------------------- one document


def feed_context(parsed: Mapping[str, Any], kind: str, fetched_at: dt.datetime,
                 source_url: str | None) -> FeedContext:
    """The base URL (the source's URL, else the feed's own link) and the GitHub repo."""
    feed = parsed.get("feed")
    feed = feed if isinstance(feed, Mapping) else {}
    own_links = [text_of(feed.get("link"))] + [text_of(link.get("href")) for link in _links(feed)]
    base = absolute_url(source_url or "", None) or next(
        (url for url in (absolute_url(link, None) for link in own_links) if url), None
    )
    repo = github_repo([text_of(feed.get("id")), *own_links])
    return FeedContext(kind=kind, fetched_at=fetched_at, base_url=base, repo=repo)


def looks_like_feed(parsed: Mapping[str, Any]) -> bool:
    """False for an HTML page, an empty body or anything without entries, title or version."""
    feed = parsed.get("feed")
    title = text_of(feed.get("title")).strip() if isinstance(feed, Mapping) else ""
    entries = parsed.get("entries")
    return bool(parsed.get("version") or title or (isinstance(entries, list) and entries))


def _api_error(entry: Mapping[str, Any]) -> str | None:
    """The message of an arXiv API error entry (id ``.../api/errors#...``), else None."""
    guid = text_of(entry.get("id"))
    if "arxiv.org/api/errors" not in guid:
        return None
    return plain_text(text_of(entry.get("summary")) or guid, 200) or "unknown error"


def _feed_error(parsed: Mapping[str, Any]) -> str | None:
    """arXiv's Atom listings answer a bad query with a feed titled "Feed error for query..."."""
    feed = parsed.get("feed")
    title = text_of(feed.get("title")).strip() if isinstance(feed, Mapping) else ""
    return plain_text(title, 200) if title.lower().startswith("feed error for query") else None


def _normalize_or_note(index: int, raw: object, ctx: FeedContext,
                       notes: Counter[str]) -> NormalizedEntry | None:
    """Normalise one entry; a failure costs the entry (and a note), never the source."""
    if not isinstance(raw, Mapping):
        notes["skipped (not a mapping)"] += 1
        return None
    try:
        record = normalize_entry(raw, ctx)
    except Exception as exc:  # feedparser oddities we did not foresee: skip, say so, go on
        notes[f"skipped (#{index + 1} {type(exc).__name__}: {exc})"[:200]] += 1
        return None
    return record


def normalize_feed(parsed: Mapping[str, Any], ctx: FeedContext) -> NormalizedFeed:
    """Normalise every entry; keep the first of repeated keys; aggregate notes as warnings."""
    raw_entries = parsed.get("entries")
    raw_entries = raw_entries if isinstance(raw_entries, list) else []
    records: dict[str, NormalizedEntry] = {}
    notes: Counter[str] = Counter()
    api_errors = [message for message in [_feed_error(parsed)] if message]
    repeated: list[str] = []
    for index, raw in enumerate(raw_entries):
        error = _api_error(raw) if isinstance(raw, Mapping) else None
        if error is not None:
            api_errors.append(error)
            continue
        record = _normalize_or_note(index, raw, ctx, notes)
        if record is None:
            continue
        if record.entry_key in records:
            repeated.append(record.entry_key)
        else:
            records[record.entry_key] = record
            notes.update(record.notes)
    warnings = [f"{count} {'entry' if count == 1 else 'entries'}: {note}"
                for note, count in notes.items()]
    if repeated:
        shown = ", ".join(repeated[:3]) + (", ..." if len(repeated) > 3 else "")
        warnings.append(f"{len(repeated)} repeated entry ids, first kept: {shown}")
    return NormalizedFeed(list(records.values()), len(raw_entries), warnings, api_errors,
                          feed_interval(parsed.get("feed")))


def bozo_warning(parsed: Mapping[str, Any]) -> str | None:
    """A one-line warning when feedparser flagged the document as ill-formed."""
    if not parsed.get("bozo"):
        return None
    exc = parsed.get("bozo_exception")
    detail = _SPACE_RE.sub(" ", f"{type(exc).__name__}: {exc}" if exc else "unknown problem")
    return f"ill-formed feed, kept what parsed ({detail[:200]})"
