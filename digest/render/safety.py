"""Escaping for every output format: pure functions, no I/O.

Everything that reaches a reader from a feed, a subscriber or an LLM is
untrusted. The rules, per format:

- all formats: control characters, zero-width characters and bidi marks are
  removed (:func:`clean_text`; feed text is cleaned by the same rule at
  ingest); only http(s) links survive (:func:`safe_url`);
- HTML and Telegram HTML: autoescaped by Jinja2 (``&``, ``<``, ``>``, quotes),
  or :func:`tg_escape` / :func:`tg_attr` when built in Python;
- Markdown: :func:`md_escape`;
- Discord: :func:`discord_escape` escapes its markdown and neutralises every
  mention form, so nothing pings even if ``allowed_mentions`` were lost.
"""

from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import urlsplit

ZWSP = "\u200b"

# C0 (except tab and newline), DEL, C1, zero-width characters and bidi marks (ZWSP, ZWNJ,
# ZWJ, LRM, RLM, word joiner, Arabic letter mark), bidi embeddings/overrides/isolates, BOM,
# the noncharacters U+FFFE/U+FFFF, and lone surrogates (a JSON answer can carry "\ud83d"
# alone; it cannot be encoded for any platform). Feed text is cleaned with the same rule.
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069"
    "\ufeff\ufffe\uffff\ud800-\udfff]"
)
_SPACE = re.compile(r"\s")
_LINE_SEPARATORS = re.compile("\r\n?|[\u2028\u2029\x85]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~])")
_MD_LINE_START = re.compile(r"^(\s*)([#+\-=>]|\d+(?=[.)]))")
_DISCORD_SPECIAL = re.compile(r"([\\`*_\[\]()|~])")
_DISCORD_LINE_START = re.compile(r"^([ \t]*)([#>\-+]|\d+(?=\.))", re.MULTILINE)
_DISCORD_MASS_MENTION = re.compile(r"@(?=everyone|here)", re.IGNORECASE)
# <@id> <@!id> <@&id> <#id> </cmd:id> <:emoji:id> <a:emoji:id> <t:unix> <id:guide>
_DISCORD_ANGLE_MENTION = re.compile(r"<(?=@|#\d|/[\w \-]+:\d|a?:\w+:\d|t:-?\d|id:)", re.IGNORECASE)


def strip_controls(text: str) -> str:
    """``text`` without control, zero-width and bidi characters (the one rule, see ``_CONTROL``)."""
    return _CONTROL.sub("", text)


def clean_text(text: object) -> str:
    """``text`` as a string with newlines normalised and control characters removed."""
    return strip_controls(_LINE_SEPARATORS.sub("\n", str(text)))


def one_line(text: object, limit: int) -> str:
    """``text`` on one line (whitespace collapsed), cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(clean_text(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def safe_url(url: object) -> str | None:
    """The URL when it is http(s), else None (javascript:, data: and the rest are dropped)."""
    return _safe_url(url) if isinstance(url, str) else None


@lru_cache(maxsize=8192)
def _safe_url(url: str) -> str | None:
    url = url.strip()
    if _CONTROL.search(url) or _SPACE.search(url):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return url


def md_escape(text: object) -> str:
    """Escape Markdown syntax in untrusted text (inline marks everywhere, block marks at the start)."""
    flat = _MD_SPECIAL.sub(r"\\\1", " ".join(clean_text(text).split()))
    return _MD_LINE_START.sub(_escape_mark, flat)


def _escape_mark(match: re.Match[str]) -> str:
    """Escape a block mark: ``\\#`` for a symbol, ``1\\.`` for a list number."""
    indent, mark = match.group(1), match.group(2)
    if mark[0].isdigit():
        return indent + mark + "\\"
    return indent + "\\" + mark


def md_url(url: str) -> str:
    """A URL safe inside Markdown's ``(...)``."""
    return url.replace("(", "%28").replace(")", "%29").replace(" ", "%20").replace("<", "%3C")


def tg_escape(text: object) -> str:
    """Text for Telegram's HTML parse mode: ``&``, ``<`` and ``>`` become entities."""
    return clean_text(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def tg_attr(text: object) -> str:
    """An attribute value for Telegram's HTML parse mode (also escapes ``"``)."""
    return tg_escape(text).replace('"', "&quot;")


def neutralise_mentions(text: str) -> str:
    """Break every Discord mention form with a zero-width space (@everyone, @here, <@id>, <#id>...)."""
    text = _DISCORD_MASS_MENTION.sub("@" + ZWSP, text)
    return _DISCORD_ANGLE_MENTION.sub("<" + ZWSP, text)


def discord_escape(text: object) -> str:
    """Untrusted text for Discord: markdown escaped, mentions neutralised."""
    escaped = _DISCORD_SPECIAL.sub(r"\\\1", clean_text(text))
    escaped = _DISCORD_LINE_START.sub(_escape_mark, escaped)
    return neutralise_mentions(escaped)


def discord_url(url: str) -> str:
    """A URL safe inside a Discord masked link's ``(...)``."""
    return md_url(url).replace("\\", "%5C")
