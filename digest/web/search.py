"""Search and the picture of the field: ``/search``, ``/stats`` and their JSON twins.

Routes::

    GET /search?q=&layer=              results page (a form when there is no ``q``)
    GET /api/search?q=&layer=&limit=   the same hits as JSON
    GET /stats?layer=                  events per layer per week: an SVG chart and its table
    GET /api/stats?layer=              the same counts as JSON

The query is user text, handled by :mod:`digest.store.search` (bounded, quoted, bound);
an empty or too long one is a 400. The chart is drawn here on the server: no script.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from digest.domain.layers import BY_ID, LAYERS
from digest.render.safety import clean_text
from digest.store import search
from digest.web.api import _layer_param, int_param

if TYPE_CHECKING:  # the app mounts these routes: a type only, no import cycle
    from digest.web.app import WebPages

DEFAULT_LIMIT = 20
RECENT_WEEKS = 12

SEARCH_LABELS: dict[str, dict[str, str]] = {
    "zh": {"search": "搜索", "search_label": "搜索事件与日报", "no_results": "没有找到匹配的结果。",
           "results_for": "“{q}”的搜索结果", "stats": "各层级每周事件数", "recent": "最近 12 周",
           "whole": "全部往期", "week": "周（起始日）", "events": "事件",
           "chart_desc": "每周首次出现的事件数，按层级堆叠；下表列出相同数据。", "stats_link": "每周趋势图",
           "digest": "日报"},
    "en": {"search": "Search", "search_label": "Search events and digests", "no_results": "Nothing matches.",
           "results_for": "Results for “{q}”", "stats": "Events per layer per week",
           "recent": "Last 12 weeks",
           "whole": "Whole archive", "week": "Week of", "events": "events",
           "chart_desc": "Events first shown each week, stacked by layer; the table below has the same data.",
           "stats_link": "Weekly trend", "digest": "Digest"},
}


def clean_hit(hit: search.Hit) -> search.Hit:
    """``hit`` with its feed-borne texts cleaned of control characters (the pages' rule)."""
    return replace(hit, title=clean_text(hit.title), snippet=clean_text(hit.snippet))


def hit_json(hit: search.Hit, url: str) -> dict[str, Any]:
    """One search result as the API returns it."""
    return {"kind": hit.kind, "id": hit.id, "title": hit.title, "snippet": hit.snippet, "locale": hit.locale,
            "score": round(hit.score, 4),
            "date": hit.date.isoformat() if hit.date else None, "url": url}


def counts_json(counts: search.WeeklyCounts) -> dict[str, Any]:
    """Weekly counts: ``counts[layer][n]`` belongs to ``weeks[n]`` (a Monday)."""
    return {"weeks": [w.isoformat() for w in counts.weeks], "layers": list(counts.layers),
            "counts": {lid: list(counts.counts[lid]) for lid in counts.layers}}


class SearchPages:
    """The search and stats routes, on the archive's :class:`WebPages` (reader, chrome, clock)."""

    def __init__(self, web: WebPages) -> None:
        self.web = web

    def routes(self) -> list[Route]:
        """The four routes."""
        return [Route("/search", self.page), Route("/api/search", self.api),
                Route("/stats", self.stats_page), Route("/api/stats", self.stats_api)]

    def _url(self, hit: search.Hit, lang: str | None) -> str:
        links = self.web.link_type(lang=lang)
        return links.digest(hit.date) if hit.date else links.event(hit.id)

    async def _search(self, request: Request, locale: str, limit: int) -> list[search.Hit]:
        async with self.web.sessions() as session:
            try:
                hits = await search.search(session, request.query_params.get("q", ""), locale=locale,
                                           layer=_layer_param(request), limit=limit)
            except search.QueryError as exc:
                raise HTTPException(400, str(exc)) from None
        return [clean_hit(h) for h in hits]

    async def api(self, request: Request) -> Response:
        """``/api/search``: hits as JSON."""
        reader = self.web.reader(request)
        limit = int_param(request, "limit", DEFAULT_LIMIT, 1, search.MAX_LIMIT)
        hits = await self._search(request, reader.locale, limit)
        return JSONResponse({"query": request.query_params.get("q", "").strip(),
                             "layer": request.query_params.get("layer") or None, "locale": reader.locale,
                             "results": [hit_json(h, self._url(h, reader.lang)) for h in hits]})

    async def page(self, request: Request) -> Response:
        """``/search``: the form, and the hits when there is a query."""
        reader = self.web.reader(request)
        query = request.query_params.get("q")
        hits = None if query is None else await self._search(request, reader.locale, DEFAULT_LIMIT)
        return self.web.html(self._render("search.html.j2", reader, {
            "q": (query or "").strip(), "layer": request.query_params.get("layer") or None,
            "hits": [(h, self._url(h, reader.lang)) for h in hits or []], "searched": hits is not None,
            "layers": LAYERS}), reader)

    async def _counts(self, request: Request) -> tuple[search.WeeklyCounts, search.WeeklyCounts]:
        today = self.web.clock().date()
        async with self.web.sessions() as session:
            return await search.stats(session, today, recent_weeks=RECENT_WEEKS, layer=_layer_param(request))

    async def stats_api(self, request: Request) -> Response:
        """``/api/stats``: the last 12 weeks at the top level, the whole archive under ``archive``."""
        recent, whole = await self._counts(request)
        return JSONResponse(counts_json(recent) | {"archive": counts_json(whole)})

    async def stats_page(self, request: Request) -> Response:
        """``/stats``: two charts (last 12 weeks, whole archive), each with its data table."""
        reader = self.web.reader(request)
        recent, whole = await self._counts(request)
        t = SEARCH_LABELS.get(reader.locale, SEARCH_LABELS["en"])
        charts = [(f"chart-{key}", title, counts, self._svg(f"chart-{key}", title, counts, reader.locale))
                  for key, title, counts in (("recent", t["recent"], recent), ("archive", t["whole"], whole))]
        return self.web.html(self._render("stats.html.j2", reader, {
            "layer": request.query_params.get("layer") or None, "charts": charts}), reader)

    def _svg(self, key: str, title: str, counts: search.WeeklyCounts, locale: str) -> str:
        return self._render_plain("stats.svg.j2", locale, {"key": key, "title": title,
                                                           "chart": chart(counts)})

    def _context(self, reader: Any) -> dict[str, Any]:
        base = self.web.pages._base(reader.locale, reader.chrome)
        base["t"] = base["t"] | SEARCH_LABELS.get(reader.locale, SEARCH_LABELS["en"])
        return base

    def _render(self, name: str, reader: Any, context: dict[str, Any]) -> str:
        return self.web.pages._render(name, self._context(reader) | context)

    def _render_plain(self, name: str, locale: str, context: dict[str, Any]) -> str:
        t = SEARCH_LABELS.get(locale, SEARCH_LABELS["en"])
        label = {lid: BY_ID[lid].label(locale) for lid in BY_ID}
        return self.web.pages._render(name, {"t": t, "layer_label": label.__getitem__} | context)


# --- The chart's geometry: stacked bars, one per week, one colour class per layer. ---

WIDTH, HEIGHT, PAD = 640, 220, 32


def chart(counts: search.WeeklyCounts) -> dict[str, Any]:
    """Bars (x, y, width, height, layer, count, week) and axis marks for ``stats.svg.j2``."""
    n = max(1, len(counts.weeks))
    top = max([counts.total(i) for i in range(len(counts.weeks))] + [1])
    step = (WIDTH - 2 * PAD) / n
    scale = (HEIGHT - 2 * PAD) / top
    bars = []
    for i, week in enumerate(counts.weeks):
        y = float(HEIGHT - PAD)
        for lid in counts.layers:
            if value := counts.counts[lid][i]:
                y -= value * scale
                bars.append({"x": round(PAD + i * step, 1), "y": round(y, 1),
                             "w": round(max(step * 0.8, 1), 1), "h": round(value * scale, 1),
                             "layer": lid, "count": value, "week": week})
    return {"width": WIDTH, "height": HEIGHT, "pad": PAD, "top": top, "bars": bars, "counts": counts,
            "first": counts.weeks[0] if counts.weeks else None,
            "last": counts.weeks[-1] if counts.weeks else None, "layers": counts.layers,
            "index": _layer_index(counts.layers)}


def _layer_index(layers: tuple[str, ...]) -> dict[str, int]:
    """Each layer's colour slot (its place in the taxonomy), stable across filters."""
    order = {layer.id: n for n, layer in enumerate(LAYERS)}
    return {lid: order[lid] for lid in layers}
