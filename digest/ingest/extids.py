"""Pure extraction of external ids from feed entries: arXiv id/version/announce type,
DOI, GitHub repository and release tag, and whether a release is a pre-release.

Only an entry's own identity counts (its guid, its link, its declared
metadata, the arXiv listing prefix): a blog post that merely links a paper is
not that paper; analysis finds such posts through the entry's ``links``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from digest.domain.arxiv import ARXIV_PREFIX_RE
from digest.ingest.feedtext import clean_id, text_of

ANNOUNCE_TYPES = ("new", "cross", "replace", "replace-cross")

_ARXIV_ID = r"(\d{4}\.\d{4,5}|[a-z][a-z-]{0,15}(?:\.[A-Z]{2})?/\d{7})(?:v(\d+))?"
_ARXIV_TEXT_RE = re.compile(r"arXiv:" + _ARXIV_ID, re.I)
_ARXIV_OAI_RE = re.compile(r"^oai:arXiv\.org:" + _ARXIV_ID + r"$", re.I)
_ARXIV_PATH_RE = re.compile(r"^/(?:abs|pdf|html)/" + _ARXIV_ID + r"(?:\.pdf)?/?$")
ARXIV_TITLE_SUFFIX_RE = re.compile(r"\s*\(arXiv:[^)]*\)\s*$", re.I)
_DOI_RE = re.compile(r"\b(10\.\d{4,9}/\S+)", re.I)
_GITHUB_TAG_PATH_RE = re.compile(r"^/([\w.-]+)/([\w.-]+)/releases/tag/(.+)$")
_GITHUB_REPO_URL_RE = re.compile(r"github\.com/([\w.-]+)/([\w.-]+)/(?:releases|commits|tags)")
_GITHUB_ENTRY_ID_RE = re.compile(r"^tag:github\.com,2008:Repository/\d+/(.+)$")
_PRERELEASE_RE = re.compile(
    r"(?<![a-z])(?:rc|alpha|beta|dev|nightly|pre-?release|preview|snapshot|canary)(?![a-z])"
    r"|\d(?:a|b|rc)\d",
    re.I,
)


@dataclass(frozen=True)
class ArxivRef:
    """An arXiv paper named by an entry: id, version (if stated) and announce type."""

    arxiv_id: str
    version: int | None = None
    announce_type: str | None = None


def arxiv_ref(entry: Mapping[str, Any], guid: str, link: str | None, summary: str,
              title: str) -> ArxivRef | None:
    """The paper an entry is (guid, link, listing prefix or title suffix), or None."""
    match = _ARXIV_OAI_RE.match(guid.strip()) or _arxiv_url_match(guid) or (
        _arxiv_url_match(link or "")
    )
    if match is None:
        match = _ARXIV_TEXT_RE.match(summary.lstrip()) or _ARXIV_TEXT_RE.search(title)
    if match is None:
        return None
    arxiv_id, version = match.group(1), match.group(2)
    if version is None:  # an unversioned link; the listing text may name the version
        named = re.search(rf"arXiv:{re.escape(arxiv_id)}v(\d+)", f"{summary[:200]} {title}", re.I)
        version = named.group(1) if named else None
    return ArxivRef(arxiv_id, int(version) if version else None,
                    announce_type(entry, summary, title))


def _arxiv_url_match(url: str) -> re.Match[str] | None:
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    if host != "arxiv.org" and not host.endswith(".arxiv.org"):
        return None
    return _ARXIV_PATH_RE.match(parts.path)


def announce_type(entry: Mapping[str, Any], summary: str, title: str) -> str | None:
    """new / cross / replace / replace-cross from ``<arxiv:announce_type>`` or the text."""
    found = text_of(entry.get("arxiv_announce_type")).strip().lower()
    prefix = ARXIV_PREFIX_RE.match(summary)
    suffix = ARXIV_TITLE_SUFFIX_RE.search(title)
    if not found and prefix:
        found = prefix.group(1).lower()
    elif not found and suffix:  # the RSS 1.0 listings retired in 2024: "(arXiv:ID [cs.XX] UPDATED)"
        upper = suffix.group(0).upper()
        found = "replace" if "UPDATED" in upper else "cross" if "CROSS" in upper else "new"
    return found if found in ANNOUNCE_TYPES else None


def doi_of(entry: Mapping[str, Any], links: list[Mapping[str, Any]]) -> str | None:
    """The DOI an entry declares (arxiv:doi, prism:doi, dc:identifier or a doi.org link)."""
    candidates = [text_of(entry.get(k)) for k in ("arxiv_doi", "prism_doi", "dc_identifier")]
    candidates += [text_of(link.get("href")) for link in links if _is_doi_link(link)]
    for candidate in candidates:
        match = _DOI_RE.search(unquote(candidate))
        if match:
            return clean_id(match.group(1).rstrip(".,;)"), 256) or None
    return None


def _is_doi_link(link: Mapping[str, Any]) -> bool:
    return text_of(link.get("title")).lower() == "doi" or "doi.org/" in text_of(link.get("href"))


def github_release(urls: tuple[str, ...], guid: str, kind: str,
                   feed_repo: str | None) -> tuple[str | None, str | None]:
    """``("owner/name", tag)`` of a GitHub release entry, from a link or from its id."""
    for candidate in urls:
        try:
            parts = urlsplit(candidate.strip())
        except ValueError:
            continue
        on_github = (parts.hostname or "").lower() in ("github.com", "www.github.com")
        relative = not parts.scheme and not parts.netloc
        match = _GITHUB_TAG_PATH_RE.match(parts.path)
        if match and (on_github or relative or kind == "github-releases"):
            return f"{match.group(1)}/{match.group(2)}", clean_id(unquote(match.group(3)), 256)
    match = _GITHUB_ENTRY_ID_RE.match(guid.strip())
    if match and (feed_repo or kind == "github-releases"):
        return feed_repo, clean_id(unquote(match.group(1)), 256)
    return None, None


def github_repo(candidates: list[str]) -> str | None:
    """The "owner/name" a GitHub feed is about (from its id or its links)."""
    for candidate in candidates:
        match = _GITHUB_REPO_URL_RE.search(candidate)
        if match:
            return f"{match.group(1)}/{match.group(2)}"
    return None


def is_prerelease(*names: str) -> bool:
    """True when a tag or title looks like a pre-release or nightly (rc, alpha, beta, dev...)."""
    return any(_PRERELEASE_RE.search(name) for name in names if name)
