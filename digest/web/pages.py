"""The archive's pages (index, digest, event, feed, error): template contexts and rendering.

Shared by the web app (:mod:`digest.web`) and the static export (:mod:`digest.web.site`);
they differ only in their :class:`Links` (URL scheme) and whether the read count shows.
Pure: every function takes query results, nothing here touches the database.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any, Protocol
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from digest.domain.layers import BY_ID, LAYERS
from digest.domain.views import DigestView
from digest.render.i18n import component_label, labels
from digest.render.renderer import Renderer, clean_view
from digest.render.safety import clean_text
from digest.store.queries import DigestPage, EventDetail
from digest.web.meta import Preview, describe

WEB_LABELS: dict[str, dict[str, str]] = {
    "zh": {
        "site": "编译器技术日报", "lang_name": "中文",
        "tagline": "每天早上八点，汇总过去 24 小时的编译器技术动态："
                   "ML 编译器、MLIR/LLVM、内核生成与硬件后端。",
        "all_layers": "全部", "filter": "按层级筛选", "archive": "往期日报",
        "newer": "← 较新", "older": "较旧 →", "page_of": "第 {page} / {pages} 页",
        "n_events": "{n} 个事件", "top_score": "最高 {score}", "no_digests": "还没有符合条件的日报。",
        "not_found": "页面不存在", "not_found_body": "没有找到这个页面，它可能尚未生成。",
        "bad_request": "请求有误", "error": "出错了", "appeared_in": "出现在这些日报中",
        "all_sources": "全部来源", "component": "评分项", "points": "分值", "total": "合计",
        "rank": "第 {rank} 条", "first_seen": "首次出现", "feed": "Atom 订阅",
        "event": "事件", "date_fmt": "{y} 年 {m} 月 {d} 日",
    },
    "en": {
        "site": "Compiler Digest", "lang_name": "English",
        "tagline": "Every morning at 08:00, the last 24 hours of compiler technology: ML compilers, "
                   "MLIR/LLVM, kernel generation and hardware back ends.",
        "all_layers": "All", "filter": "Filter by layer", "archive": "Archive",
        "newer": "← Newer", "older": "Older →", "page_of": "Page {page} of {pages}",
        "n_events": "{n} events", "top_score": "top {score}", "no_digests": "No digests match yet.",
        "not_found": "Not found", "not_found_body": "There is no such page; it may not have been built yet.",
        "bad_request": "Bad request", "error": "Error", "appeared_in": "Shown in these digests",
        "all_sources": "All sources", "component": "Component", "points": "Points", "total": "Total",
        "rank": "#{rank}", "first_seen": "First seen", "feed": "Atom feed",
        "event": "Event", "date_fmt": "{month} {d}, {y}",
    },
}


class Links(Protocol):
    """Where each page lives: the web app's routes or the static export's files."""

    def index(self, page: int = 1, layer: str | None = None) -> str:
        """The archive index (a page of it, optionally filtered by layer)."""
        ...

    def digest(self, date: dt.date) -> str:
        """The digest page of ``date``."""
        ...

    def event(self, event_id: int) -> str:
        """The event page."""
        ...

    def feed(self, layer: str | None = None) -> str:
        """The Atom feed (of one layer's digests)."""
        ...

    def css(self) -> str:
        """The stylesheet."""
        ...


@dataclass(frozen=True)
class WebLinks:
    """The web app's routes; ``base`` is empty (root-relative) or the site URL, ``lang`` sticks."""

    base: str = ""
    lang: str | None = None

    def _q(self, **params: object) -> str:
        kept = {k: v for k, v in params.items() if v is not None}
        if self.lang:
            kept["lang"] = self.lang
        return "?" + urlencode(kept) if kept else ""

    def index(self, page: int = 1, layer: str | None = None) -> str:
        """``/?layer=&page=``."""
        return f"{self.base}/" + self._q(layer=layer, page=page if page > 1 else None)

    def digest(self, date: dt.date) -> str:
        """``/d/YYYY-MM-DD``."""
        return f"{self.base}/d/{date.isoformat()}" + self._q()

    def event(self, event_id: int) -> str:
        """``/e/<id>``."""
        return f"{self.base}/e/{event_id}" + self._q()

    def feed(self, layer: str | None = None) -> str:
        """``/feed.xml?layer=``."""
        return f"{self.base}/feed.xml" + self._q(layer=layer)

    def css(self) -> str:
        """``/style.css``."""
        return f"{self.base}/style.css"


@dataclass(frozen=True)
class StaticLinks:
    """The static export's files; ``prefix`` is ``""``, ``"../"`` or the site URL with a slash."""

    prefix: str = ""

    def index(self, page: int = 1, layer: str | None = None) -> str:
        """``index.html``, ``page-2.html``, ``layer-<id>.html``, ``layer-<id>-page-2.html``."""
        return self.prefix + index_file(page, layer)

    def digest(self, date: dt.date) -> str:
        """``d/YYYY-MM-DD.html``."""
        return f"{self.prefix}d/{date.isoformat()}.html"

    def event(self, event_id: int) -> str:
        """``e/<id>.html``."""
        return f"{self.prefix}e/{event_id}.html"

    def feed(self, layer: str | None = None) -> str:
        """``feed.xml``, ``feed-<layer>.xml``."""
        return f"{self.prefix}feed-{layer}.xml" if layer else f"{self.prefix}feed.xml"

    def css(self) -> str:
        """``style.css``."""
        return f"{self.prefix}style.css"


def index_file(page: int, layer: str | None) -> str:
    """The static file name of one index page."""
    stem = f"layer-{layer}" if layer else ""
    if page > 1:
        stem = f"{stem}-page-{page}" if stem else f"page-{page}"
    return f"{stem or 'index'}.html"


@dataclass(frozen=True)
class Chrome:
    """What changes between the web app and the static export, besides links."""

    links: Links
    reads: bool = True
    reads_slot: bool = False  # the web app's cached pages: a slot (digest.web.cache) for the count
    langs: tuple[tuple[str, str, str | None], ...] = ()  # (code, name, href or None for current)


def absolute(links: Links, site_url: str) -> Links:
    """``links`` on the site URL (a page's og:url): the same scheme and language, absolute."""
    if isinstance(links, WebLinks):
        return replace(links, base=site_url)
    if isinstance(links, StaticLinks):
        return StaticLinks(site_url + "/")
    return links


def lang_switch(locale: str, href: Any) -> tuple[tuple[str, str, str | None], ...]:
    """The language links: ``href(code)`` for each locale but the current one."""
    return tuple((code, WEB_LABELS[code]["lang_name"], None if code == locale else href(code))
                 for code in WEB_LABELS)


class Pages:
    """Renders the archive's pages with one Renderer's Jinja2 environment."""

    def __init__(self, renderer: Renderer, *, site_url: str, timezone: str) -> None:
        self.renderer = renderer
        self.site_url = site_url.rstrip("/")
        self.zone = ZoneInfo(timezone)

    def _base(self, locale: str, chrome: Chrome) -> dict[str, Any]:
        return {
            "locale": locale, "t": labels(locale) | WEB_LABELS.get(locale, WEB_LABELS["en"]),
            "links": chrome.links, "reads": chrome.reads,
            "reads_slot": chrome.reads_slot, "langs": chrome.langs,
            "layer_label": lambda lid: BY_ID[lid].label(locale) if lid in BY_ID else lid,
            "component_label": lambda name: component_label(name, locale),
            "fmt_date": lambda d: self.fmt_date(d, locale),
            "local": lambda t: t.astimezone(self.zone),
            "site_url": self.site_url,
        }

    def _render(self, name: str, context: dict[str, Any]) -> str:
        return self.renderer.env.get_template(name).render(context)

    @staticmethod
    def fmt_date(date: dt.date, locale: str) -> str:
        """``2026 年 9 月 29 日`` or ``September 29, 2026``."""
        fmt = WEB_LABELS.get(locale, WEB_LABELS["en"])["date_fmt"]
        return fmt.format(y=date.year, m=date.month, d=date.day, month=date.strftime("%B"))

    def _preview(self, chrome: Chrome, title: str, text: str, url: Any, kind: str = "article") -> Preview:
        """The page's link-preview card; ``url(links)`` is its address in ``chrome``'s scheme."""
        return Preview(title, describe(text), url(absolute(chrome.links, self.site_url)), kind)

    def index(self, page: DigestPage, locale: str, chrome: Chrome, layer: str | None) -> str:
        """The archive index: one page of digests, the layer filter and pagination."""
        t = WEB_LABELS.get(locale, WEB_LABELS["en"])
        preview = self._preview(chrome, t["site"], t["tagline"],
                                lambda links: links.index(page.page, layer), "website")
        return self._render("index.html.j2", self._base(locale, chrome) | {
            "page": page, "layer": layer, "layers": LAYERS, "preview": preview,
        })

    def digest(self, view: DigestView, chrome: Chrome, discussion: tuple[tuple[str, str], ...] = ()) -> str:
        """The digest page (the seeds' layout), with the (name, url) places it is discussed."""
        clean = clean_view(view)
        preview = self._preview(chrome, clean.title, clean.overview, lambda links: links.digest(view.date))
        context = self.renderer.context(clean) | self._base(view.locale, chrome) | {
            "preview": preview, "discussion": discussion}
        return self._render("digest.html.j2", context)

    def event(self, event: EventDetail, locale: str, chrome: Chrome) -> str:
        """An event: write-up, score breakdown, every source and the digests that showed it."""
        clean = replace(event, title=clean_text(event.title), summary=clean_text(event.summary),
                        why_it_matters=clean_text(event.why_it_matters))
        preview = self._preview(chrome, clean.title, clean.summary, lambda links: links.event(event.id))
        context = self._base(locale, chrome) | {"event": clean, "preview": preview}
        return self._render("event.html.j2", context)

    def error(self, status: int, locale: str, chrome: Chrome, message: str | None = None) -> str:
        """A small error page (404, 400) in the reader's language."""
        return self._render("error.html.j2", self._base(locale, chrome) | {
            "status": status, "message": message,
        })

    def feed(self, views: list[tuple[DigestView, dt.datetime]], locale: str, links: Links,
             now: dt.datetime, layer: str | None = None) -> str:
        """The Atom feed of ``views`` (each with its built time, of ``layer``); ``links`` must be absolute."""
        updated = max((built for _, built in views), default=now)
        return self._render("feed.xml.j2", self._base(locale, Chrome(links, reads=False)) | {
            "entries": [(clean_view(view), built) for view, built in views],
            "updated": updated.astimezone(dt.UTC).isoformat(), "layer": layer,
        })

    def css(self) -> str:
        """The stylesheet."""
        return self._render("site.css", {})
