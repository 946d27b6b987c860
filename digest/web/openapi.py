"""The OpenAPI 3.1 description of the JSON API (served at ``/api/openapi.json``).

Hand-written and small; ``tests/test_web.py`` checks live responses against it.
"""

from __future__ import annotations

from typing import Any

from digest.domain.layers import LAYER_IDS
from digest.domain.locales import LOCALES

_STR = {"type": "string"}
_INT = {"type": "integer"}
_NUM = {"type": "number"}
_DATE = {"type": "string", "format": "date"}
_TIME = {"type": "string", "format": "date-time"}
_URL = {"type": ["string", "null"], "format": "uri",
        "description": "http(s) only; null when unsafe or absent"}
_LAYERS = {"type": "array", "items": {"type": "string", "enum": list(LAYER_IDS)}}
_BREAKDOWN = {"type": "object", "additionalProperties": _NUM,
              "description": "points per score component; they sum to the score"}


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "object", "required": list(required), "properties": required | (optional or {})}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _list(name: str) -> dict[str, Any]:
    return {"type": "array", "items": _ref(name)}


SCHEMAS: dict[str, Any] = {
    "Error": _obj({"error": _STR}),
    "Health": _obj({"status": {"type": "string", "enum": ["ok", "error"]}}, {
        "error": _STR, "database": _STR, "last_run": {"type": ["object", "null"]},
        "next_run": {"type": ["string", "null"]}}),
    "DigestSummary": _obj({
        "date": _DATE, "locale": _STR, "title": _STR, "events": _INT, "layers": _LAYERS,
        "top_score": _NUM, "built_at": _TIME, "published_at": {"type": ["string", "null"]},
        "url": _STR,
    }),
    "DigestList": _obj({"page": _INT, "pages": _INT, "total": _INT, "layer": {"type": ["string", "null"]},
                        "digests": _list("DigestSummary")}),
    "Source": _obj({"name": _STR, "url": _URL}),
    "DigestEvent": _obj({
        "id": _INT, "rank": _INT, "title": _STR, "url": _URL, "score": _NUM,
        "score_breakdown": _BREAKDOWN, "layers": _LAYERS, "sources": _list("Source"),
        "summary": _STR, "why_it_matters": _STR, "watch": {"type": "array", "items": _STR},
        "written_by": _STR, "updated": {"type": "boolean"},
    }),
    "Digest": _obj({
        "date": _DATE, "locale": _STR, "title": _STR, "overview": _STR,
        "generation_mode": {"type": "string", "description": "model name, extractive, or mixed"},
        "window": _obj({"start": _TIME, "end": _TIME}), "events": _list("DigestEvent"),
        "briefs": _list("Brief"),
        "watchlist": {"type": "array", "items": _STR},
        "stats": _obj({"entries_by_source": {"type": "object", "additionalProperties": _INT},
                       "tokens": _INT}),
    }),
    "Brief": _obj({
        "event_id": _INT, "name": _STR, "title": _STR, "url": _URL, "source": _STR, "layers": _LAYERS,
        "score": _NUM, "items": {"type": "array", "items": _obj({"text": _STR, "url": _URL})},
    }),
    "RecentEvent": _obj({
        "id": _INT, "title": _STR, "summary": _STR, "url": _URL, "score": _NUM,
        "score_breakdown": _BREAKDOWN, "layers": _LAYERS, "date": _DATE, "rank": _INT,
        "first_seen": _TIME, "page": _STR,
    }),
    "EventList": _obj({"days": _INT, "layer": {"type": ["string", "null"]}, "min_score": _NUM,
                       "locale": _STR, "events": _list("RecentEvent")}),
    "EventSource": _obj({"name": _STR, "title": _STR, "url": _URL, "published": _TIME}),
    "Appearance": _obj({"date": _DATE, "title": _STR, "rank": _INT, "score": _NUM, "url": _STR}),
    "EventDetail": _obj({
        "id": _INT, "locale": _STR, "title": _STR, "summary": _STR, "why_it_matters": _STR,
        "watch": {"type": "array", "items": _STR}, "written_by": _STR, "url": _URL, "score": _NUM,
        "score_breakdown": _BREAKDOWN, "layers": _LAYERS, "first_seen": _TIME, "page": _STR,
        "sources": _list("EventSource"), "digests": _list("Appearance"),
    }),
    "SearchHit": _obj({
        "kind": {"type": "string", "enum": ["event", "digest"]}, "id": _INT, "title": _STR, "snippet": _STR,
        "locale": {"type": "string", "description": "of the matching text; empty for an event's own title"},
        "score": {"type": "number", "description": "higher is better, within one search"},
        "date": {"type": ["string", "null"], "format": "date", "description": "a digest's date"},
        "url": _STR,
    }),
    "SearchResults": _obj({"query": _STR, "layer": {"type": ["string", "null"]}, "locale": _STR,
                           "results": _list("SearchHit")}),
    "WeeklyCounts": _obj({
        "weeks": {"type": "array", "items": _DATE, "description": "each week's Monday, oldest first"},
        "layers": _LAYERS,
        "counts": {"type": "object", "additionalProperties": {"type": "array", "items": _INT},
                   "description": "per layer, events first shown in each week (same order as weeks)"},
    }),
    "Stats": _obj({"weeks": {"type": "array", "items": _DATE}, "layers": _LAYERS,
                   "counts": {"type": "object", "additionalProperties": {"type": "array", "items": _INT}},
                   "archive": _ref("WeeklyCounts")}),  # the last 12 weeks; archive: since the first digest
}


def _param(name: str, schema: dict[str, Any], description: str, where: str = "query") -> dict[str, Any]:
    return {"name": name, "in": where, "required": where == "path", "schema": schema,
            "description": description}


_LANG = _param("lang", {"type": "string", "enum": list(LOCALES)}, "locale of the texts (default: the site's)")
_LAYER = _param("layer", {"type": "string", "enum": list(LAYER_IDS)}, "keep items with this layer")


def _answer(schema: str, description: str, *errors: int) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": {"description": description,
                                         "content": {"application/json": {"schema": _ref(schema)}}}}
    for code in errors:
        responses[str(code)] = {"description": {400: "bad parameter", 404: "not found"}[code],
                                "content": {"application/json": {"schema": _ref("Error")}}}
    return responses


def _get(summary: str, params: list[dict[str, Any]], responses: dict[str, Any]) -> dict[str, Any]:
    return {"get": {"summary": summary, "parameters": params, "responses": responses}}


def openapi(site_url: str) -> dict[str, Any]:
    """The OpenAPI document, with ``site_url`` as its server."""
    page = _param("page", {"type": "integer", "minimum": 1}, "page number (20 per page)")
    date = _param("date", {"type": "string", "format": "date"}, "YYYY-MM-DD", "path")
    event_id = _param("id", {"type": "integer", "minimum": 1}, "event id", "path")
    days = _param("days", {"type": "integer", "minimum": 1, "maximum": 365, "default": 7},
                  "digests whose window ended in the last N days")
    score = _param("min_score", {"type": "number", "minimum": 0, "maximum": 100, "default": 0},
                   "minimum event score")
    query = {**_param("q", {"type": "string", "minLength": 1, "maxLength": 200},
                      "words to find (all of them); English or Chinese"), "required": True}
    limit = _param("limit", {"type": "integer", "minimum": 1, "maximum": 50, "default": 20}, "at most N hits")
    return {
        "openapi": "3.1.0",
        "info": {"title": "compiler-digest archive API", "version": "1",
                 "description": "Read-only JSON over the built digests. Errors are {\"error\": \"...\"}."},
        "servers": [{"url": site_url}],
        "paths": {
            "/api/digests": _get("Built digests, newest first", [page, _LAYER, _LANG],
                                 _answer("DigestList", "a page of digests", 400)),
            "/api/digests/{date}": _get("One digest (the object of `digest preview --format json`)",
                                        [date, _LANG], _answer("Digest", "the digest", 400, 404)),
            "/api/events": _get("Events shown in recent digests, newest digest first, then rank",
                                [_LAYER, days, score, _LANG], _answer("EventList", "events", 400)),
            "/api/events/{id}": _get("One event with every source and digest", [event_id, _LANG],
                                     _answer("EventDetail", "the event", 400, 404)),
            "/api/search": _get("Full-text search of events and digests, best first",
                                [query, _LAYER, limit, _LANG], _answer("SearchResults", "hits", 400)),
            "/api/stats": _get("Events per layer per week (first showing in a listed digest)",
                               [_LAYER], _answer("Stats", "weekly counts", 400)),
            "/healthz": _get("Database health", [], {
                "200": {"description": "ok", "content": {"application/json": {"schema": _ref("Health")}}},
                "503": {"description": "database unavailable",
                        "content": {"application/json": {"schema": _ref("Health")}}},
            }),
        },
        "components": {"schemas": SCHEMAS},
    }
