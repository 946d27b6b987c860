"""The web app over real SQLite and PostgreSQL, through httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote, quote_from_bytes

import feedparser
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from digest.store.db import SessionFactory, make_engine, make_session_factory
from digest.store.models import Digest
from digest.store.queries import load_view
from digest.web.app import create_app
from digest.web.locale import negotiate
from digest.web.reads import ReadCounts
from tests.archive import DATES, NOW, SITE_URL, TZ, Archive, build_archive, renderer

DAY = DATES[0]


@pytest.fixture
async def archive(sessions: SessionFactory) -> Archive:
    """Three built digests in a fresh database (SQLite and PostgreSQL)."""
    return await build_archive(sessions)


@asynccontextmanager
async def client(sessions: SessionFactory, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh app on ``sessions`` (the clock fixed just after the last window)."""
    settings: dict[str, Any] = {"default_locale": "zh", "page_size": 20} | options
    app = create_app(sessions, renderer(), site_url=SITE_URL, timezone=TZ, clock=lambda: NOW, **settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as c:
        yield c


def dates_in(html: str) -> list[str]:
    """The digest dates an index page links to, in order."""
    return [d.isoformat() for d in sorted(DATES, reverse=True) if f'href="/d/{d.isoformat()}' in html]


async def test_index_is_newest_first_paginated_and_filtered_by_layer(
    sessions: SessionFactory, archive: Archive
) -> None:
    async with client(sessions, page_size=2) as c:
        first, second = await c.get("/"), await c.get("/?page=2")
        assert first.status_code == second.status_code == 200
        assert first.text.index(f"/d/{DATES[0]}") < first.text.index(f"/d/{DATES[1]}")
        assert dates_in(first.text) == [DATES[0].isoformat(), DATES[1].isoformat()]
        assert dates_in(second.text) == [DATES[2].isoformat()]
        assert 'href="/?page=2"' in first.text and 'href="/"' in second.text
        assert (await c.get("/?page=3")).status_code == 404
        assert (await c.get("/?page=zero")).status_code == 400
        assert (await c.get("/?layer=nonsense")).status_code == 400
        for layer in ("distributed", "tensor_ir"):
            wanted = [d.isoformat() for d in DATES if layer in archive.layers[d]]
            page = await c.get(f"/?layer={layer}")
            assert page.status_code == 200 and dates_in(page.text) == wanted[:2]
            api = (await c.get(f"/api/digests?layer={layer}")).json()
            assert [d["date"] for d in api["digests"]] == wanted[:2] and api["total"] == len(wanted)
        listed = (await c.get("/api/digests?page=2")).json()
        assert (listed["page"], listed["pages"], listed["total"]) == (2, 2, 3)


async def test_digest_page_counts_a_browsers_reads(sessions: SessionFactory, archive: Archive) -> None:
    reads = ReadCounts(sessions, lambda: NOW)
    browser = {"user-agent": "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) Safari/605.1.15"}
    async with client(sessions, reads=reads) as c:
        counts = []
        for _ in range(3):
            page = await c.get(f"/d/{DAY}", headers=browser)
            assert page.status_code == 200 and page.headers["cache-control"] == "no-cache"
            counts.append(int(page.text.split('<span id="reads">')[1].split("<")[0]))
        assert counts == [1, 1, 1]  # one reader, within ten minutes
        assert (await c.head(f"/d/{DAY}")).status_code == 200
        for bad in ("2026-02-30", "20260929", "yesterday", "2020-01-01"):
            missing = await c.get(f"/d/{bad}")
            assert missing.status_code == 404 and "页面不存在" in missing.text
    await reads.flush()
    async with sessions() as session:
        stored = await session.scalar(select(Digest.read_count).where(Digest.date == DAY))
        others = (await session.scalars(select(Digest.read_count).where(Digest.date != DAY))).all()
    assert stored == 1 and set(others) == {0}


def test_language_negotiation_rules() -> None:
    assert negotiate("en", "zh", "zh") == ("en", True)
    assert negotiate("fr", "en;q=0.5", "zh") == ("en", False)
    assert negotiate(None, "en-US,en;q=0.9,zh-CN;q=0.8", "zh") == ("en", False)
    assert negotiate(None, "fr, zh;q=0.5, en;q=0.4", "en") == ("zh", False)
    assert negotiate(None, "zh;q=0, en;q=0.1", "zh") == ("en", False)
    assert negotiate(None, "de, *;q=0.5", "en") == ("en", False)
    assert negotiate(None, "de, fr", "zh") == ("zh", False)
    assert negotiate(None, "en;q=abc, ;;, zh-Hant-TW", "en") == ("zh", False)
    assert negotiate(None, None, "en") == ("en", False)


async def test_pages_speak_the_readers_language(sessions: SessionFactory, archive: Archive) -> None:
    async with client(sessions) as c:
        zh = await c.get(f"/d/{DAY}")
        en = await c.get(f"/d/{DAY}", headers={"accept-language": "en-GB,en;q=0.9,zh;q=0.5"})
        forced = await c.get(f"/d/{DAY}?lang=en", headers={"accept-language": "zh"})
    async with sessions() as session:
        view_en = await load_view(session, DAY, "en")
    assert "返回博客主页" in zh.text and "阅读" in zh.text and zh.headers["content-language"] == "zh-CN"
    assert 'id="comments"' not in zh.text and 'lang="zh-CN"' in zh.text  # no discussion: no label
    for page in (en, forced):
        assert page.headers["content-language"] == "en" and "Accept-Language" in page.headers["vary"]
        assert "Back to the archive" in page.text and "Reads" in page.text
        assert "今日概览" not in page.text and "为什么重要" not in page.text
        assert all(e.why_it_matters.split("；")[0][:40] in page.text.replace("&#39;", "'")
                   for e in view_en.events)
    assert 'href="/?lang=en"' in forced.text and f'href="/e/{archive.hostile_event}?lang=en"' in forced.text
    assert 'href="/?lang=en"' not in en.text
    async with client(sessions, default_locale="en") as c:
        assert "Key changes" in (await c.get(f"/d/{DAY}")).text
        assert "重点变化" in (await c.get(f"/d/{DAY}?lang=zh")).text


async def test_event_page_shows_breakdown_sources_and_digests(
    sessions: SessionFactory, archive: Archive
) -> None:
    event_id = archive.event_ids[DAY][0]
    async with client(sessions) as c:
        page = await c.get(f"/e/{event_id}?lang=en")
        detail = (await c.get(f"/api/events/{event_id}?lang=en")).json()
        for missing in ("/e/999999", "/e/99999999999999", "/e/abc", "/api/events/999999"):
            assert (await c.get(missing)).status_code == 404, missing
    assert page.status_code == 200
    assert round(sum(detail["score_breakdown"].values()), 1) == detail["score"]
    for component, points in detail["score_breakdown"].items():
        assert f'title="{component}"' in page.text and f"{points:.1f}" in page.text
    assert f'{detail["score"]:.1f}/100' in page.text
    assert detail["sources"] and all(s["url"] in page.text for s in detail["sources"])
    assert [d["date"] for d in detail["digests"]] == [DAY.isoformat()]
    assert f'href="/d/{DAY}?lang=en"' in page.text and "Shown in these digests" in page.text


def _check(value: Any, schema: dict[str, Any], spec: dict[str, Any], where: str = "$") -> None:
    """A tiny JSON Schema check: $ref, type, enum, required, properties, items."""
    if "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    kinds = schema.get("type", [])
    kinds = [kinds] if isinstance(kinds, str) else kinds
    python: dict[str, Any] = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
              "object": dict, "array": list, "null": type(None)}
    assert not kinds or any(isinstance(value, python[k]) for k in kinds), f"{where}: {value!r} not {kinds}"
    assert "enum" not in schema or value in schema["enum"], f"{where}: {value!r} not in enum"
    if isinstance(value, dict):
        missing = set(schema.get("required", [])) - set(value)
        assert not missing, f"{where}: missing {missing}"
        props = schema.get("properties", {})
        for key, item in value.items():
            sub = props.get(key, schema.get("additionalProperties"))
            if isinstance(sub, dict):
                _check(item, sub, spec, f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for n, item in enumerate(value):
            _check(item, schema["items"], spec, f"{where}[{n}]")


async def test_json_api_matches_its_openapi_description(sessions: SessionFactory, archive: Archive) -> None:
    async with client(sessions) as c:
        spec = (await c.get("/api/openapi.json")).json()
        calls = {
            "/api/digests": "/api/digests?lang=en",
            "/api/digests/{date}": f"/api/digests/{DAY}",
            "/api/events": "/api/events?days=30",
            "/api/events/{id}": f"/api/events/{archive.hostile_event}",
            "/healthz": "/healthz",
            "/api/search": "/api/search?q=triton", "/api/stats": "/api/stats",
        }
        assert set(spec["paths"]) == set(calls)
        for template, url in calls.items():
            answer = await c.get(url)
            assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
            schema = spec["paths"][template]["get"]["responses"]["200"]["content"]["application/json"]
            _check(answer.json(), schema["schema"], spec, url)
        error = await c.get("/api/events?layer=nope")
        _check(error.json(), {"$ref": "#/components/schemas/Error"}, spec)
        same = (await c.get(f"/api/digests/{DAY}?lang=en")).json()
    async with sessions() as session:
        assert same == renderer().as_json(await load_view(session, DAY, "en"))
    assert spec["openapi"].startswith("3.") and spec["servers"] == [{"url": SITE_URL}]


async def test_events_api_filters_and_validates(sessions: SessionFactory, archive: Archive) -> None:
    async with client(sessions) as c:
        async def ids(query: str) -> list[int]:
            answer = await c.get(f"/api/events?{query}")
            assert answer.status_code == 200, answer.text
            return [e["id"] for e in answer.json()["events"]]

        assert await ids("days=1") == list(archive.event_ids[DAY])
        assert await ids("days=3") == [i for d in DATES for i in archive.event_ids[d]]
        assert await ids("") == await ids("days=7")
        distributed = [i for d in DATES if "distributed" in archive.layers[d] for i in archive.event_ids[d]]
        assert await ids("days=30&layer=distributed") == distributed
        scores = {e["id"]: e["score"] for e in (await c.get("/api/events?days=30")).json()["events"]}
        cut = sorted(scores.values())[len(scores) // 2]
        assert set(await ids(f"days=30&min_score={cut}")) == {i for i, s in scores.items() if s >= cut}
        for bad in ("layer=nope", "days=0", "days=366", "days=-1", "days=two", "min_score=x",
                    "min_score=101", "min_score=nan", "lang=fr"):
            answer = await c.get(f"/api/events?{bad}")
            assert answer.status_code == 400, bad
            assert answer.headers["content-type"] == "application/json" and answer.json()["error"]
        assert (await c.get("/api/digests/2026-13-01")).status_code == 400
        assert (await c.get("/api/digests/2020-01-01")).json() == {"error": "no digest for 2020-01-01"}


async def test_events_api_says_what_each_event_page_says(sessions: SessionFactory, archive: Archive) -> None:
    async with client(sessions) as c:
        for lang in ("zh", "en"):
            listed = (await c.get(f"/api/events?days=30&lang={lang}")).json()["events"]
            assert [e["id"] for e in listed] == [i for d in DATES for i in archive.event_ids[d]]
            for shown in listed:  # its latest showing: the event's latest digest
                detail = (await c.get(f"/api/events/{shown['id']}?lang={lang}")).json()
                for key in ("title", "summary", "url", "score", "score_breakdown", "layers", "first_seen",
                            "page"):
                    assert shown[key] == detail[key], (lang, shown["id"], key)
                latest = detail["digests"][0]
                assert (shown["date"], shown["rank"]) == (latest["date"], latest["rank"])


async def test_atom_feed_parses(sessions: SessionFactory, archive: Archive) -> None:
    async with client(sessions) as c:
        answer = await c.get("/feed.xml?lang=en")
    assert answer.headers["content-type"].startswith("application/atom+xml")
    feed = feedparser.parse(answer.content)
    assert not feed.bozo, feed.get("bozo_exception")
    assert feed.feed.title == "Compiler Digest" and feed.feed.language == "en"
    assert [e.link for e in feed.entries] == [f"{SITE_URL}/d/{d}?lang=en" for d in DATES]
    for entry in feed.entries:
        assert entry.title and entry.summary and entry.updated_parsed
        assert f"{SITE_URL}/e/" in entry.content[0].value
    hostile = feed.entries[0].content[0].value
    assert "<script" not in hostile and "&lt;script&gt;" in hostile


async def test_security_headers_and_hostile_text(sessions: SessionFactory, archive: Archive) -> None:
    async with client(sessions) as c:
        pages = {path: await c.get(path) for path in (
            "/", f"/d/{DAY}", f"/e/{archive.hostile_event}", "/nope", "/api/digests", "/feed.xml",
            "/style.css", "/?layer=bad")}
    for path, answer in pages.items():
        csp = answer.headers["content-security-policy"]
        assert "script-src" not in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp, path
        assert answer.headers["x-content-type-options"] == "nosniff", path
        assert answer.headers["referrer-policy"] == "no-referrer", path
    for path in (f"/d/{DAY}", f"/e/{archive.hostile_event}"):
        body = pages[path].text
        assert "<script" not in body and "<img" not in body and "javascript:" not in body, path
        assert "&lt;script&gt;window.__pwned=" in body and "&lt;b&gt;Blog&lt;/b&gt;" in body, path
    assert "onerror=&#34;window.__pwned=2&#34;" in pages[f"/e/{archive.hostile_event}"].text


async def test_healthz(sessions: SessionFactory) -> None:
    async with client(sessions) as c:
        ok = await c.get("/healthz")
    assert (ok.status_code, ok.json()) == (200, {"status": "ok", "database": "ok", "last_run": None,
                                                 "next_run": None})
    engine = make_engine("postgresql+asyncpg://nobody:x@127.0.0.1:9/none", connect_args={"timeout": 2})
    try:
        async with client(make_session_factory(engine)) as c:
            down = await c.get("/healthz")
    finally:
        await engine.dispose()
    assert down.status_code == 503 and down.json()["status"] == "error"



# Every integer query parameter of every route, with the range it accepts.
INT_PARAMS = (("/", "page", 100_000), ("/api/digests", "page", 100_000), ("/api/events", "days", 365))


def assert_refused(answer: httpx.Response, path: str, name: str, high: int) -> None:
    """A 400 in the route's own format: JSON under /api/, the HTML error page elsewhere."""
    assert answer.status_code == 400, (path, name, answer.text[:200])
    message = f"{name} must be a whole number from 1 to {high}"
    if path.startswith("/api/"):
        assert answer.headers["content-type"] == "application/json" and answer.json() == {"error": message}
    else:
        assert answer.headers["content-type"].startswith("text/html") and message in answer.text
        assert "<!doctype html>" in answer.text and answer.headers["content-security-policy"]


@pytest.mark.parametrize(("path", "name", "high"), INT_PARAMS)
async def test_integer_parameters_take_ascii_digits_only(
    sessions: SessionFactory, archive: Archive, path: str, name: str, high: int
) -> None:
    async with client(sessions) as c:
        for bad in ("²", "1²", "٣", "１", "𝟗", "1_0", "+1", "-1", " 1", "1 ", "1.0", "1e2", "0x1", "0",
                    "\x00", str(high + 1), "9" * 5000):
            assert_refused(await c.get(path, params={name: bad}), path, name, high)
        for raw in ("%C2%B2", "%FF", "%00", "%EF%BC%91"):
            assert_refused(await c.get(f"{path}?{name}={raw}"), path, name, high)
        assert (await c.get(path, params={name: "1"})).status_code == 200
        assert (await c.get(path, params={name: "01"})).status_code == 200
        assert (await c.get(path, params={name: ""})).status_code == 200  # empty: the default


# Any text, any bytes, and digits mixed with other numerals ("²", "٣", "１": what str.isdigit() passes).
NUMERALS = st.text(st.one_of(st.sampled_from("0123456789"), st.characters(categories=("Nd", "No", "Nl"))),
                   min_size=1, max_size=12)
VALUES = st.one_of(st.text(max_size=40), st.binary(max_size=40), NUMERALS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(INT_PARAMS), value=VALUES)
async def test_no_integer_parameter_value_is_a_server_error(
    sqlite_sessions: SessionFactory, route: tuple[str, str, int], value: str | bytes
) -> None:
    path, name, high = route
    encoded = quote_from_bytes(value, safe="") if isinstance(value, bytes) else quote(value, safe="")
    async with client(sqlite_sessions) as c:
        answer = await c.get(f"{path}?{name}={encoded}")
    assert answer.status_code in (200, 400, 404), (path, name, value, answer.status_code)
    if answer.status_code == 400:
        assert_refused(answer, path, name, high)
