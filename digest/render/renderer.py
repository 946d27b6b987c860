"""One Jinja2 environment renders a digest view into every output format.

Formats: ``md``, ``text``, ``html`` (the web page), ``json``, the email parts
(:meth:`Renderer.email_parts`), Telegram messages (:meth:`Renderer.telegram`)
and Discord payloads (:meth:`Renderer.discord`). Telegram and Discord output
is already split to the platforms' limits (``digest.split``).

Everything in a view is untrusted (feeds, LLM): control characters are
removed first (:func:`clean_view`), HTML autoescapes, Markdown, Telegram and
Discord text is escaped (``digest.safety``), and only http(s) links survive.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from digest.domain.layers import BY_ID
from digest.domain.status import WriteMode
from digest.domain.views import DigestView, EventView, SourceLink
from digest.domain.writeups import Brief, BriefItem
from digest.render.email import (
    PREFERENCES_PLACEHOLDER,
    UNSUBSCRIBE_PLACEHOLDER,
    EmailParts,
    email_parts,
    mail_url,
    personalise,
)
from digest.render.i18n import component_label, labels, part_lang
from digest.render.safety import clean_text, md_escape, md_url, one_line, safe_url
from digest.render.template_cache import TemplateCache
from digest.resources import templates_dir

__all__ = [
    "FORMATS",
    "PREFERENCES_PLACEHOLDER",
    "UNSUBSCRIBE_PLACEHOLDER",
    "EmailParts",
    "Renderer",
    "clean_view",
    "md_escape",
    "personalise",
    "safe_url",
]

FORMATS = ("md", "text", "html", "json", "telegram", "discord")
BRIEF_TITLE_MAX = 200  # a brief's name, title and source, on one line
BRIEF_LINE_MAX = 200  # one item line (the writer keeps them to 160; stored or hostile ones are cut here)

# Labels only the push formats use (kept here so i18n.py stays the web's and the core's).
EXTRA_LABELS: dict[str, dict[str, str]] = {
    "zh": {"colon": "：", "web": "在网页上阅读", "unsubscribe": "退订",
           "preferences": "修改订阅偏好", "details": "详情", "of": "/",
           "footer": "你收到这封邮件，是因为订阅了编译器技术日报。",
           "site_name": "编译器技术日报"},
    "en": {"colon": ": ", "web": "Read on the web", "unsubscribe": "Unsubscribe",
           "preferences": "Change preferences", "details": "Details", "of": "/",
           "footer": "You get this email because you subscribed to the compiler digest.",
           "site_name": "Compiler Digest"},
}


def _clean_event(e: EventView) -> EventView:
    return replace(
        e, title=clean_text(e.title), summary=clean_text(e.summary),
        why_it_matters=clean_text(e.why_it_matters), watch=tuple(clean_text(w) for w in e.watch),
        sources=tuple(SourceLink(clean_text(s.name), s.url) for s in e.sources),
        written_by=clean_text(e.written_by), layers=tuple(clean_text(x) for x in e.layers),
    )


def _clean_brief(b: Brief) -> Brief:
    """A brief with clean one-line texts and only http(s) links."""
    return replace(
        b, title=one_line(b.title, BRIEF_TITLE_MAX), name=one_line(b.name, BRIEF_TITLE_MAX),
        source=one_line(b.source, BRIEF_TITLE_MAX), url=safe_url(b.url),
        layers=tuple(clean_text(x) for x in b.layers),
        items=tuple(BriefItem(one_line(i.text, BRIEF_LINE_MAX), safe_url(i.url)) for i in b.items),
    )


def clean_view(view: DigestView) -> DigestView:
    """``view`` with control characters and bidi overrides removed from every text."""
    return replace(
        view, title=clean_text(view.title), overview=clean_text(view.overview),
        watchlist=tuple(clean_text(w) for w in view.watchlist),
        events=tuple(_clean_event(e) for e in view.events),
        briefs=tuple(_clean_brief(b) for b in view.briefs),
    )


def lang_attr(text: str, page_locale: str) -> Markup:
    """`` lang="en"`` for an HTML element quoting ``text`` on a page in another language, else nothing."""
    lang = part_lang(text, page_locale)
    return Markup(f' lang="{lang}"') if lang else Markup("")


class Renderer:
    """Renders digest views; one per process (the environment caches templates).

    ``compiled``: a folder that keeps the compiled templates for the next process
    (:class:`~digest.render.template_cache.TemplateCache`); None compiles them in each one.
    """

    def __init__(self, templates: Path | None = None, *, site_url: str = "http://127.0.0.1:8000",
                 timezone: str = "Asia/Shanghai", compiled: Path | None = None) -> None:
        self.templates = templates or templates_dir()
        self.site_url = site_url.rstrip("/")
        self.timezone = timezone
        self.compiled = compiled

    @cached_property
    def env(self) -> Environment:
        """The Jinja2 environment (built on first use, never at import)."""
        env = Environment(
            loader=FileSystemLoader(str(self.templates)),
            autoescape=select_autoescape(enabled_extensions=("html.j2", "xml.j2")),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            bytecode_cache=None if self.compiled is None else TemplateCache(self.compiled),
        )
        env.filters.update(safe_url=safe_url, md=md_escape, md_url=md_url, mail_url=mail_url,
                           lang_attr=lang_attr)
        return env

    def context(self, view: DigestView) -> dict[str, Any]:
        """What every template gets."""
        zone = ZoneInfo(self.timezone)
        site = self.site_url
        t = {**labels(view.locale), **EXTRA_LABELS.get(view.locale, EXTRA_LABELS["en"])}
        publishers = _publishers(view)
        return {
            "view": view,
            "t": t,
            "layer_label": lambda lid: BY_ID[lid].label(view.locale) if lid in BY_ID else lid,
            "component_label": lambda name: component_label(name, view.locale),
            "window_start": view.window_start.astimezone(zone).isoformat(),
            "window_end": view.window_end.astimezone(zone).isoformat(),
            "publishers": publishers,
            "mode_line": mode_line(view),
            "extractive_note": extractive_note(view, t),
            "raw_line": t["list_sep"].join(t["raw_item"].format(name=k, n=v) for k, v in publishers),
            "site_url": site,
            "digest_url": safe_url(f"{site}/d/{view.date.isoformat()}"),
            "event_url": lambda e: safe_url(f"{site}/e/{e.id}"),
        }

    def render(self, view: DigestView, fmt: str) -> str:
        """Render ``view`` as ``fmt``; telegram and discord give the JSON array that would be sent."""
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
        if fmt in ("json", "telegram", "discord"):
            data: Any = {"json": self.as_json, "telegram": self.telegram, "discord": self.discord}[fmt](
                clean_view(view))
            return json.dumps(data, ensure_ascii=False, indent=2) + "\n"
        name = {"md": "digest.md.j2", "text": "digest.txt.j2", "html": "digest.html.j2"}[fmt]
        return self.env.get_template(name).render(self.context(clean_view(view)))

    def email_parts(self, view: DigestView) -> EmailParts:
        """Subject, HTML (CSS inlined), text and preheader, with placeholder links."""
        return email_parts(self.env, self.context(clean_view(view)))

    def telegram(self, view: DigestView) -> list[str]:
        """Telegram messages (Bot API HTML), each under 4096 UTF-16 units as Telegram counts."""
        from digest.render.chat import telegram_messages

        return telegram_messages(self.env, self.context(clean_view(view)))

    def discord(self, view: DigestView) -> list[dict[str, Any]]:
        """Discord message payloads (content, embeds, allowed_mentions), within every limit."""
        from digest.render.chat import discord_payloads

        return discord_payloads(self.context(clean_view(view)))

    def as_json(self, view: DigestView) -> dict[str, Any]:
        """The digest object of the JSON contract (DESIGN.md, "Contract details")."""
        zone = ZoneInfo(self.timezone)
        return {
            "date": view.date.isoformat(),
            "locale": view.locale,
            "title": view.title,
            "overview": view.overview,
            "generation_mode": view.generation_mode,
            "window": {"start": view.window_start.astimezone(zone).isoformat(),
                       "end": view.window_end.astimezone(zone).isoformat()},
            "events": [_event_json(e) for e in view.events],
            "briefs": [_brief_json(b) for b in view.briefs],
            "watchlist": list(view.watchlist),
            "stats": {
                "entries_by_source": view.stats.get("entries_by_source", {}),
                "tokens": int(view.tokens),
                "entries": view.stats.get("entries", 0),
                "late": view.stats.get("late", 0),
                "failed_sources": view.stats.get("failed_sources", []),
                "modes": view.modes_used,
            },
        }


def _event_json(e: EventView) -> dict[str, Any]:
    return {
        "id": e.id, "rank": e.rank, "title": e.title, "url": safe_url(e.url),
        "score": round(e.score, 1), "score_breakdown": e.score_breakdown,
        "layers": list(e.layers),
        "sources": [{"name": s.name, "url": safe_url(s.url)} for s in e.sources],
        "summary": e.summary, "why_it_matters": e.why_it_matters,
        "watch": list(e.watch), "written_by": e.written_by, "updated": e.updated,
    }


def _brief_json(b: Brief) -> dict[str, Any]:
    return {
        "event_id": b.event_id, "name": b.name, "title": b.title, "url": safe_url(b.url),
        "source": b.source, "layers": list(b.layers), "score": round(b.score, 1),
        "items": [{"text": i.text, "url": safe_url(i.url)} for i in b.items],
    }


def mode_line(view: DigestView) -> str:
    """The generation mode, with how many parts each mode wrote when it is mixed."""
    mode = view.generation_mode
    if mode != "mixed":
        return mode
    return f"{mode} (" + ", ".join(f"{k}: {v}" for k, v in view.modes_used.items()) + ")"


def extractive_note(view: DigestView, t: dict[str, str]) -> str:
    """Said once, in the data notes: which write-ups are extractive (none: empty)."""
    n = sum(e.written_by == WriteMode.EXTRACTIVE for e in view.events)
    if not n:
        return ""
    return t["extractive_all"] if n == len(view.events) else t["extractive_some"].format(n=n)


def _publishers(view: DigestView) -> list[tuple[str, int]]:
    counts = view.stats.get("entries_by_publisher") or view.stats.get("entries_by_source") or {}
    return sorted(((str(k), int(v)) for k, v in counts.items()), key=lambda kv: (-kv[1], kv[0]))
