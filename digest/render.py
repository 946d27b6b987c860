"""One Jinja2 environment renders a digest view into every output format.

Everything in a view is untrusted (feeds, LLM): HTML autoescapes, Markdown is
escaped, and only http(s) links survive.
"""

from __future__ import annotations

import json
import re
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from digest.i18n import component_label, labels
from digest.layers import BY_ID
from digest.resources import templates_dir
from digest.views import DigestView

FORMATS = ("md", "text", "html", "json")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~])")
_MD_LINE_START = re.compile(r"^(\s*)([#+\-=>]|\d+[.)])")


def safe_url(url: object) -> str | None:
    """The URL when it is http(s), else None (javascript:, data: and the rest are dropped)."""
    if not isinstance(url, str):
        return None
    url = url.strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return url


def md_escape(text: object) -> str:
    """Escape Markdown syntax in untrusted text (inline marks everywhere, block marks at the start)."""
    flat = _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))
    return _MD_LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), flat)


def md_url(url: str) -> str:
    """A URL safe inside Markdown's ``(...)``."""
    return url.replace("(", "%28").replace(")", "%29").replace(" ", "%20")


class Renderer:
    """Renders digest views; one per process (the environment caches templates)."""

    def __init__(self, templates: Path | None = None, *, site_url: str = "http://127.0.0.1:8000",
                 timezone: str = "Asia/Shanghai") -> None:
        self.templates = templates or templates_dir()
        self.site_url = site_url.rstrip("/")
        self.timezone = timezone

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
        )
        env.filters.update(safe_url=safe_url, md=md_escape, md_url=md_url)
        return env

    def context(self, view: DigestView) -> dict[str, Any]:
        """What every template gets."""
        zone = ZoneInfo(self.timezone)
        return {
            "view": view,
            "t": labels(view.locale),
            "layer_label": lambda lid: BY_ID[lid].label(view.locale) if lid in BY_ID else lid,
            "component_label": lambda name: component_label(name, view.locale),
            "window_start": view.window_start.astimezone(zone).isoformat(),
            "window_end": view.window_end.astimezone(zone).isoformat(),
            "publishers": _publishers(view),
            "site_url": self.site_url,
        }

    def render(self, view: DigestView, fmt: str) -> str:
        """Render ``view`` as ``fmt`` (md, text, html or json)."""
        if fmt == "json":
            return json.dumps(self.as_json(view), ensure_ascii=False, indent=2) + "\n"
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
        name = {"md": "digest.md.j2", "text": "digest.txt.j2", "html": "digest.html.j2"}[fmt]
        return self.env.get_template(name).render(self.context(view))

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
            "events": [
                {
                    "id": e.id, "rank": e.rank, "title": e.title, "url": safe_url(e.url),
                    "score": round(e.score, 1), "score_breakdown": e.score_breakdown,
                    "layers": list(e.layers),
                    "sources": [{"name": s.name, "url": safe_url(s.url)} for s in e.sources],
                    "summary": e.summary, "why_it_matters": e.why_it_matters,
                    "watch": list(e.watch), "written_by": e.written_by, "updated": e.updated,
                }
                for e in view.events
            ],
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


def _publishers(view: DigestView) -> list[tuple[str, int]]:
    counts = view.stats.get("entries_by_publisher") or view.stats.get("entries_by_source") or {}
    return sorted(((str(k), int(v)) for k, v in counts.items()), key=lambda kv: (-kv[1], kv[0]))
