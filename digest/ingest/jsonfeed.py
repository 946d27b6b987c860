"""JSON Feed documents (https://jsonfeed.org, 1.0 and 1.1) in the shape feedparser gives.

feedparser 6.0 reads XML only; this turns a JSON Feed body into the same kind
of mapping (``version``, ``feed``, ``entries`` with ``*_parsed`` UTC struct
times), so normalisation has one input shape. Pure: bytes in, mapping out.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import time
from typing import Any

_VERSION_PREFIX = "https://jsonfeed.org/version/"


def parse_json_feed(body: bytes) -> dict[str, Any] | None:
    """The feedparser-shaped document of a JSON Feed body, or None when it is not one."""
    if body.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] != b"{":
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not str(data.get("version", "")).startswith(_VERSION_PREFIX):
        return None
    items = data.get("items")
    entries = [_entry(item) for item in items if isinstance(item, dict)] if isinstance(
        items, list) else []
    version = "json1" + str(data["version"])[len(_VERSION_PREFIX):].replace(".", "")
    feed = {
        "title": _str(data.get("title")),
        "link": _str(data.get("home_page_url")),
        "links": [{"rel": "self", "href": _str(data.get("feed_url"))}],
    }
    return {"version": version, "bozo": False, "feed": feed, "entries": entries}


def _entry(item: dict[str, Any]) -> dict[str, Any]:
    content = _str(item.get("content_html")) or html.escape(_str(item.get("content_text")))
    links = [{"rel": "alternate", "href": _str(item.get("url"))},
             {"rel": "related", "href": _str(item.get("external_url"))}]
    return {
        "id": _str(item.get("id")),
        "title": html.escape(_str(item.get("title"))),
        "link": _str(item.get("url")) or _str(item.get("external_url")),
        "links": [link for link in links if link["href"]],
        "summary": html.escape(_str(item.get("summary"))),
        "content": [{"value": content}] if content else [],
        "published_parsed": _time(item.get("date_published")),
        "updated_parsed": _time(item.get("date_modified")),
        "tags": [{"term": tag} for tag in _list(item.get("tags")) if isinstance(tag, str)],
        "authors": [{"name": _str(a.get("name"))} for a in _authors(item) if isinstance(a, dict)],
    }


def _authors(item: dict[str, Any]) -> list[Any]:
    """1.1 has ``authors``; 1.0 had a single ``author``."""
    return _list(item.get("authors")) or ([item["author"]] if "author" in item else [])


def _str(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _time(value: object) -> time.struct_time | None:
    """An RFC 3339 date as a UTC struct_time (feedparser's ``*_parsed`` form), or None."""
    if not isinstance(value, str):
        return None
    try:
        when = dt.datetime.fromisoformat(value.strip())
        when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
        return when.astimezone(dt.UTC).timetuple()
    except (ValueError, OverflowError):
        return None
