"""Pure text and URL helpers for feed content: plain text from HTML, canonical URLs, hrefs.

Feed text is untrusted: what leaves here is plain text (tags stripped,
entities decoded, control characters removed) and only http(s) URLs.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterable, Mapping
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

URL_MAX = 2048
TRACKING_PARAMS = frozenset(
    {
        "fbclid", "gclid", "dclid", "gclsrc", "msclkid", "yclid", "igshid", "twclid",
        "mc_cid", "mc_eid", "_hsenc", "_hsmi", "mkt_tok", "ref", "ref_src", "ref_url",
        "spm", "trk", "si",
    }
)

_DROP_RE = re.compile(
    r"<(script|style|template|noscript|iframe|object)\b[^>]*>.*?</\1\s*>|<!--.*?-->", re.I | re.S
)
_ANY_TAG_RE = re.compile(
    r"</?([a-zA-Z][a-zA-Z0-9]*(?::[a-zA-Z][a-zA-Z0-9]*)?)(?:\s[^<>]*)?/?>|<![^<>]*>|<\?[^<>]*\?>"
)
# Inline elements vanish without a space ("<b>2016</b>," stays "2016,"); other HTML
# elements become a space; anything else that looks like a tag is kept as text, so
# that ``std::vector<int>`` survives.
_INLINE_TAGS = frozenset(str.split(
    "a abbr b bdi bdo big cite code del dfn em font i ins kbd mark q s samp small span strike "
    "strong sub sup time tt u var"
))
_BLOCK_TAGS = frozenset(str.split(
    "acronym address article aside audio blockquote body br button caption center col colgroup "
    "dd details div dl dt embed fieldset figcaption figure footer form h1 h2 h3 h4 h5 h6 head "
    "header hr html iframe img input label legend li link main meta nav noscript object ol p "
    "picture pre script section source style summary svg table tbody td template tfoot th "
    "thead title tr ul video wbr math mi mn mo mrow msub msup mfrac"
))
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]")
_URL_JUNK_RE = re.compile(r"[\x00-\x1f\x7f]")  # as browsers do: tabs, newlines, controls
# Case-sensitive on purpose: feedparser's sanitizer lowercases attribute names, and a
# literal prefix makes the scan an order of magnitude faster on large posts.
_HREF_RE = re.compile(r"""href\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def text_of(value: object) -> str:
    """A string from whatever feedparser gave (str, detail dict, list, None, number)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return text_of(value.get("value") or value.get("name") or value.get("term"))
    if isinstance(value, list | tuple):
        return " ".join(text_of(item) for item in value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def plain_text(markup: str, limit: int | None = None) -> str:
    """HTML or text to one line of plain text: tags stripped, entities decoded, spaces collapsed.

    With a ``limit``, a long document is first converted only as far as needed.
    """
    if limit is not None and len(markup) > 4 * limit:
        cut = markup.rfind("<", 0, 4 * limit)
        head = _plain(markup[: cut if cut > 0 else 4 * limit])
        if len(head) > limit:
            return truncate(head, limit)
    text = _plain(markup)
    return truncate(text, limit) if limit is not None else text


def _plain(markup: str) -> str:
    if "<" in markup:
        markup = _ANY_TAG_RE.sub(_tag_replacement, _DROP_RE.sub(" ", markup))
    if "&" in markup:
        markup = html.unescape(markup)
    return " ".join(_CONTROL_RE.sub("", markup).split())


def _tag_replacement(match: re.Match[str]) -> str:
    name = match.group(1)
    if name is None:  # comment, doctype, CDATA marker, processing instruction
        return " "
    name = name.lower()
    if name in _INLINE_TAGS:
        return ""
    return " " if name in _BLOCK_TAGS or ":" in name else match.group(0)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a word boundary, with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 0.8:
        cut = cut[:space]
    return cut.rstrip() + "…"


def unique(items: Iterable[str], limit: int) -> tuple[str, ...]:
    """The non-empty items, first occurrence kept, at most ``limit`` of them."""
    return tuple(dict.fromkeys(item for item in items if item))[:limit]


def clean_id(value: str, limit: int | None = None) -> str:
    """An identifier safe for a text column: no control characters, trimmed, capped."""
    return _CONTROL_RE.sub("", value).strip()[:limit]


def absolute_url(url: str, base: str | None) -> str | None:
    """``url`` resolved against ``base`` when it is then http(s), else None (query kept)."""
    url = _URL_JUNK_RE.sub("", url).strip().replace(" ", "%20")
    if not url:
        return None
    if base and not url.startswith(("http://", "https://")):
        try:
            url = urljoin(base, url)
        except ValueError:
            return None
    if not url[:8].lower().startswith(("http://", "https://")) or len(url) > URL_MAX:
        return None
    return url


def canonical_url(url: str, base: str | None = None) -> str | None:
    """An absolute http(s) URL, tracking parameters, fragment and userinfo dropped, or None."""
    absolute = absolute_url(url, base)
    return None if absolute is None else _canonical(absolute)


@functools.lru_cache(maxsize=8192)
def _canonical(absolute: str) -> str | None:
    """Canonical form of an absolute http(s) URL (cached: feeds repeat their links)."""
    try:
        parts = urlsplit(absolute)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    scheme = parts.scheme.lower()
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    query = parts.query
    if query:
        query = "&".join(p for p in query.split("&") if p and not _is_tracking(p))
    return urlunsplit((scheme, netloc, parts.path or "/", query, ""))


def _is_tracking(pair: str) -> bool:
    name = unquote(pair.split("=", 1)[0]).lower()
    return name.startswith("utm_") or name in TRACKING_PARAMS


def hrefs(markup: str) -> list[str]:
    """Every ``href`` value in an HTML fragment, entities decoded."""
    if "href" not in markup:
        return []
    found = (a or b or c for a, b, c in _HREF_RE.findall(markup))
    return [html.unescape(href) if "&" in href else href for href in found]
