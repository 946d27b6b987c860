"""The email parts of a digest: subject, HTML with inlined CSS, wrapped text, preheader.

The mailer renders once per filter group and calls :func:`personalise` per
subscriber, which swaps the two link placeholders for the reader's own
unsubscribe and preferences URLs.

Line lengths: the text part has no line over 998 octets (``digest.wrap``), so
it is legal even as 8bit. The HTML part makes no such promise (a long
paragraph is one line): the mailer must send it quoted-printable or base64.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

from digest.render.safety import one_line, safe_url
from digest.render.wrap import MAX_URL_OCTETS, wrap_text

if TYPE_CHECKING:
    from jinja2 import Environment

UNSUBSCRIBE_PLACEHOLDER = "__DIGEST_UNSUBSCRIBE_URL__"
PREFERENCES_PLACEHOLDER = "__DIGEST_PREFERENCES_URL__"
SUBJECT_MAX = 200
PREHEADER_MAX = 100
# Zero-width filler after the preheader, so clients do not pull body text into the preview.
_PREHEADER_PAD = "&#847;&zwnj;&nbsp;" * 60  # marked safe in the template
_PLACEHOLDERS = re.compile(f"({UNSUBSCRIBE_PLACEHOLDER}|{PREFERENCES_PLACEHOLDER})")


@dataclass(frozen=True)
class EmailParts:
    """One rendered email, before the personal links are filled in."""

    subject: str
    html: str
    text: str
    preheader: str


@cache
def _inliner() -> Any:
    import css_inline

    return css_inline.CSSInliner(keep_at_rules=True, load_remote_stylesheets=False)


def mail_url(url: object) -> str | None:
    """An http(s) URL short enough to sit unbroken on one line of the text part, else None."""
    safe = safe_url(url)
    return safe if safe is not None and len(safe.encode()) <= MAX_URL_OCTETS else None


def email_parts(env: Environment, ctx: dict[str, Any]) -> EmailParts:
    """Render the email parts from the renderer's context."""
    view = ctx["view"]
    preheader = one_line(view.overview, PREHEADER_MAX)
    ctx = {**ctx, "preheader": preheader, "preheader_pad": _PREHEADER_PAD,
           "unsubscribe_url": UNSUBSCRIBE_PLACEHOLDER, "preferences_url": PREFERENCES_PLACEHOLDER}
    page = env.get_template("email.html.j2").render(ctx)
    text = wrap_text(env.get_template("email.txt.j2").render(ctx)).strip() + "\n"
    return EmailParts(subject=subject(ctx), html=_inliner().inline(page),
                      text=text, preheader=preheader)


def subject(ctx: dict[str, Any]) -> str:
    """The brand, the date and the day's title on one safe line: "编译器技术日报 2026-12-01：A；B"."""
    view, t = ctx["view"], ctx["t"]
    return one_line(f"{t['site_name']} {view.date.isoformat()}{t['colon']}{view.title}", SUBJECT_MAX)


def _checked_link(url: str) -> str:
    if safe_url(url) != url or len(url.encode()) > MAX_URL_OCTETS:
        raise ValueError(f"not a usable personal link: {url[:80]!r}")
    return url


@lru_cache(maxsize=64)
def _slots(body: str) -> tuple[str, ...]:
    """``body`` cut at the placeholders: text, placeholder, text, ... (cached per rendered body)."""
    return tuple(_PLACEHOLDERS.split(body))


def _fill(body: str, values: dict[str, str]) -> str:
    return "".join(values.get(piece, piece) if i % 2 else piece for i, piece in enumerate(_slots(body)))


def personalise(parts: EmailParts, unsubscribe_url: str, preferences_url: str) -> EmailParts:
    """``parts`` with the placeholders replaced by one subscriber's links (HTML-escaped in the HTML)."""
    unsubscribe, preferences = _checked_link(unsubscribe_url), _checked_link(preferences_url)
    raw = {UNSUBSCRIBE_PLACEHOLDER: unsubscribe, PREFERENCES_PLACEHOLDER: preferences}
    escaped = {key: html.escape(value) for key, value in raw.items()}
    return replace(parts, html=_fill(parts.html, escaped), text=_fill(parts.text, raw))
