"""Pure text and URL helpers for feed content: plain text from HTML, canonical URLs, hrefs.

Feed text is untrusted: what leaves here is plain text (tags stripped and
entities decoded where a field is HTML; control, zero-width and bidi
characters removed by :func:`digest.safety.strip_controls`) and only http(s)
URLs that are valid RFC 3986 URIs (anything else percent-encoded, hosts in IDNA).
"""

from __future__ import annotations

import functools
import html
import ipaddress
import re
from collections.abc import Iterable, Mapping
from urllib.parse import SplitResult, quote, unquote, urljoin, urlsplit, urlunsplit

from digest.render.safety import strip_controls

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
_MARKUP_TYPES = ("html", "xml")  # text/html, application/xhtml+xml; text/plain is text
_URL_JUNK_RE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")  # as browsers do: tabs, newlines, controls
# RFC 3986: what each component may hold besides unreserved characters and %XX escapes.
_SUB_DELIMS = "!$&'()*+,;="
_USERINFO_SAFE = _SUB_DELIMS + ":"
_PATH_SAFE = _SUB_DELIMS + ":@/"
_QUERY_SAFE = _PATH_SAFE + "?"  # also the fragment's
_STRAY_PERCENT_RE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_ESCAPE_RE = re.compile(r"%[0-9A-Fa-f]{2}")
_HOST_RE = re.compile(r"[a-z0-9\-._~!$&'()*+,;=]+")  # a reg-name, without %XX escapes
# Case-sensitive for speed: a literal prefix makes the scan several times faster on
# large posts; markup that spells it otherwise (HREF=, Href=) takes the slow scan.
_HREF_VALUE = r"""\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))"""
_HREF_RE = re.compile("href" + _HREF_VALUE)
_ANY_CASE_HREF_RE = re.compile("href" + _HREF_VALUE, re.I)
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


def is_markup(content_type: str) -> bool:
    """Whether a field of this type (feedparser's ``*_detail["type"]``) is HTML, not text."""
    return any(kind in content_type.lower() for kind in _MARKUP_TYPES)


def field_text(value: str, content_type: str, limit: int | None = None) -> str:
    """A feed field as one line of plain text, converted from markup only when it is HTML.

    A text field (an RSS title, an Atom ``type="text"`` title) keeps what looks
    like a tag: ``std::vector<int>`` and ``<script>`` in a title are its text,
    which every output format escapes. Only HTML fields lose their tags.
    """
    if is_markup(content_type):
        return plain_text(value, limit)
    text = " ".join(strip_controls(value).split())
    return truncate(text, limit) if limit is not None else text


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


_PARAGRAPH_RE = re.compile(
    r"</?(?:p|div|li|h[1-6]|br|blockquote|pre|tr|section|article|header|footer|figcaption|dd|dt|hr)"
    r"\b[^<>]*>", re.I)


def body_text(markup: str, limit: int) -> str:
    """HTML to plain paragraphs (joined by blank lines), bounded to ``limit`` characters.

    Paragraph breaks survive so a reader of the body can pick its most
    informative paragraphs; inside a paragraph it is :func:`plain_text`.
    """
    head = markup
    if len(markup) > 4 * limit:  # long posts: convert only as far as needed, never half a tag
        cut = markup.rfind("<", 0, 4 * limit)
        head = markup[: cut if cut > 0 else 4 * limit]
    paragraphs = (_text(part) for part in _PARAGRAPH_RE.split(_drop(head)))
    text = "\n\n".join(p for p in paragraphs if p)
    return truncate(text, limit)


def _plain(markup: str) -> str:
    return _text(_drop(markup))


def _drop(markup: str) -> str:
    """Scripts, styles, embedded objects and comments removed (the one pass that removes them)."""
    return _DROP_RE.sub(" ", markup) if "<" in markup else markup


def _text(markup: str) -> str:
    """Markup already through :func:`_drop` as one line of text."""
    if "<" in markup:
        markup = _ANY_TAG_RE.sub(_tag_replacement, markup)
    if "&" in markup:
        markup = html.unescape(markup)
    return " ".join(strip_controls(markup).split())


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
    return strip_controls(value).strip()[:limit]


def absolute_url(url: str, base: str | None) -> str | None:
    """``url`` resolved against ``base`` when it is then http(s), as a valid URI, else None.

    Query and fragment are kept; what RFC 3986 does not allow is percent-encoded
    (``<``, ``"``, spaces, non-ASCII as UTF-8) and a non-ASCII host becomes IDNA.
    """
    url = _URL_JUNK_RE.sub("", url).strip()
    if not url:
        return None
    if base and not url.startswith(("http://", "https://")):
        try:
            url = urljoin(base, url)
        except ValueError:
            return None
    if not url[:8].lower().startswith(("http://", "https://")):
        return None
    uri = _as_uri(url)
    return uri if uri is not None and len(uri) <= URL_MAX else None


@functools.lru_cache(maxsize=8192)
def _as_uri(url: str) -> str | None:
    """An absolute http(s) URL with every component made valid RFC 3986, or None."""
    try:
        parts = urlsplit(url)
        netloc = _netloc(parts, keep_userinfo=True)
    except ValueError:
        return None
    if netloc is None:
        return None
    return urlunsplit((parts.scheme, netloc, _escape(parts.path, _PATH_SAFE),
                       _escape(parts.query, _QUERY_SAFE), _escape(parts.fragment, _QUERY_SAFE)))


def _escape(component: str, safe: str) -> str:
    """``component`` with what ``safe`` and RFC 3986's unreserved set leave out percent-encoded.

    Valid ``%XX`` escapes are kept (in upper case), so escaping twice changes nothing.
    """
    escaped = quote(_STRAY_PERCENT_RE.sub("%25", component), safe=safe + "%")
    return _ESCAPE_RE.sub(lambda m: m.group(0).upper(), escaped) if "%" in escaped else escaped


def _netloc(parts: SplitResult, *, keep_userinfo: bool) -> str | None:
    """Host (IDNA, or a bracketed IPv6 address) and explicit port, or None when invalid.

    Raises ValueError for a port that is not a number in range (``parts.port`` does).
    """
    host, port = _host(parts.hostname or ""), parts.port
    if host is None:
        return None
    netloc = host if port is None else f"{host}:{port}"
    userinfo = parts.netloc.rpartition("@")[0] if keep_userinfo else ""
    return f"{_escape(userinfo, _USERINFO_SAFE)}@{netloc}" if userinfo else netloc


def _host(host: str) -> str | None:
    if ":" in host:  # IPv6 (urlsplit took the brackets off); a zone id is refused
        if "%" in host:
            return None
        try:
            return f"[{ipaddress.IPv6Address(host).compressed}]"
        except ValueError:
            return None
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    return host if _HOST_RE.fullmatch(host) else None


def canonical_url(url: str, base: str | None = None) -> str | None:
    """An absolute http(s) URI, tracking parameters, fragment and userinfo dropped, or None.

    Idempotent: a canonical URL is its own canonical form.
    """
    absolute = absolute_url(url, base)
    return None if absolute is None else _canonical(absolute)


@functools.lru_cache(maxsize=8192)
def _canonical(absolute: str) -> str | None:
    """Canonical form of an absolute http(s) URI (cached: feeds repeat their links)."""
    try:
        parts = urlsplit(absolute)
        scheme = parts.scheme.lower()
        if parts.port == _DEFAULT_PORTS[scheme]:
            parts = parts._replace(netloc=parts.netloc.rpartition(":")[0])
        netloc = _netloc(parts, keep_userinfo=False)
    except ValueError:
        return None
    if netloc is None:
        return None
    query = parts.query
    if query:
        query = "&".join(p for p in query.split("&") if p and not _is_tracking(p))
    return urlunsplit((scheme, netloc, parts.path or "/", query, ""))


def _is_tracking(pair: str) -> bool:
    name = unquote(pair.split("=", 1)[0]).lower()
    return name.startswith("utm_") or name in TRACKING_PARAMS


def hrefs(markup: str) -> list[str]:
    """Every ``href`` value in an HTML fragment (any case of ``href``), entities decoded."""
    pattern = _HREF_RE
    if "HREF" in markup or "Href" in markup:
        pattern = _ANY_CASE_HREF_RE
    elif "href" not in markup:
        return []
    found = (a or b or c for a, b, c in pattern.findall(markup))
    return [html.unescape(href) if "&" in href else href for href in found]
