"""Link previews, robots.txt, the sitemap, per-layer feeds and the discussion links (digest.web.meta).

The web app over real SQLite (httpx's ASGI transport), the static export into a real folder,
and the pure helpers with hypothesis.
"""

from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import feedparser
import httpx
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import update

from digest.domain.layers import BY_ID
from digest.domain.status import ChannelName
from digest.store.db import SessionFactory
from digest.store.models import Delivery, Digest, Subscriber
from digest.store.queries import Appearance, EventDetail, SourceEntry
from digest.web.app import create_app
from digest.web.meta import Discussion, describe, robots_txt
from digest.web.pages import Chrome, Pages, StaticLinks
from digest.web.site import export_site
from tests.archive import DATES, NOW, SITE_URL, TZ, build_archive, renderer
from tests.conftest import build_event, build_view

DAY = DATES[0]
SITEMAP = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
HOSTILE = 'Fusion "quoted" <script>alert(1)</script> & \'more\' ><img src=x onerror=alert(2)>'
# A datetime= value the Nu Html Checker takes: a date, or a time with at most three fraction digits.
VALID_DATETIME = re.compile(r"\d{4}-\d\d-\d\d(T\d\d:\d\d(:\d\d(\.\d{1,3})?)?([+-]\d\d:\d\d|Z))?")


class Head(HTMLParser):
    """Every <meta> (by property or name), <link rel> and datetime= of a page, as a browser parses them."""

    def __init__(self) -> None:
        super().__init__()
        self.meta: dict[str, str] = {}
        self.links: list[dict[str, str]] = []
        self.datetimes: list[str] = []
        self.footer: list[dict[str, str]] = []
        self._in_footer = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "meta" and (key := found.get("property") or found.get("name")):
            self.meta[key] = found.get("content", "")
        if tag == "link":
            self.links.append(found)
        if "datetime" in found:
            self.datetimes.append(found["datetime"])
        self._in_footer = self._in_footer or (tag == "footer" and found.get("id") == "comments")
        if self._in_footer and tag == "a":
            self.footer.append(found)

    def handle_endtag(self, tag: str) -> None:
        if tag == "footer":
            self._in_footer = False


def head(html: str) -> Head:
    """The parsed page."""
    parsed = Head()
    parsed.feed(html)
    return parsed


@asynccontextmanager
async def client(sessions: SessionFactory, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh app on ``sessions`` (the clock fixed just after the last window)."""
    app = create_app(sessions, renderer(), site_url=SITE_URL, timezone=TZ, clock=lambda: NOW,
                     default_locale="zh", **options)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as c:
        yield c


async def test_digest_and_event_pages_carry_link_preview_tags(sqlite_sessions: SessionFactory) -> None:
    archive = await build_archive(sqlite_sessions)
    event = archive.event_ids[DAY][0]
    async with client(sqlite_sessions) as c:
        for path, kind in ((f"/d/{DAY}", "article"), (f"/e/{event}", "article"), ("/", "website")):
            for lang, site in (("zh", "编译器技术日报"), ("en", "Compiler Digest")):
                page = head((await c.get(f"{path}?lang={lang}")).text)
                meta = page.meta
                assert meta["og:url"] == f"{SITE_URL}{path}?lang={lang}"  # from DIGEST_SITE_URL
                assert meta["og:site_name"] == site and meta["og:type"] == kind
                assert meta["twitter:card"] == "summary" and "og:image" not in meta
                assert meta["og:title"] and meta["og:description"] == meta["description"]
                assert 0 < len(meta["description"]) <= 200 and "\n" not in meta["description"]
                feeds = [link for link in page.links if link.get("type") == "application/atom+xml"]
                assert feeds and feeds[0]["rel"] == "alternate" and feeds[0]["href"].startswith("/feed.xml")


def test_event_page_datetimes_have_at_most_milliseconds() -> None:
    seen = dt.datetime(2026, 12, 1, 14, 55, 36, 308345, tzinfo=dt.UTC)  # what the Nu checker refused
    event = EventDetail(7, "Title", "Summary.", "Why.", (), "extractive", None, 50.0, {"authority": 50.0},
                        ("runtime",), seen, (SourceEntry("arXiv", "Paper", "https://arxiv.org/abs/1", seen),),
                        (Appearance(DAY, "Day", 1, 50.0),))
    pages = Pages(renderer(), site_url=SITE_URL, timezone=TZ)
    found = head(pages.event(event, "en", Chrome(StaticLinks("../"), reads=False))).datetimes
    assert len(found) == 3 and all(VALID_DATETIME.fullmatch(value) for value in found), found


def test_hostile_title_is_attribute_escaped_in_og_title() -> None:
    view = build_view((build_event(1, title=HOSTILE),), title=HOSTILE, overview=f"{HOSTILE}\n\nmore")
    pages = Pages(renderer(), site_url=SITE_URL, timezone=TZ)
    html = pages.digest(view, Chrome(StaticLinks("../"), reads=False))
    preamble = html.split("</head>")[0]
    assert "<script" not in preamble and "<img" not in preamble
    assert '<meta property="og:title" content="Fusion &#34;quoted&#34; &lt;script&gt;alert(1)' in preamble
    meta = head(html).meta
    assert meta["og:title"] == HOSTILE == meta["twitter:title"]  # escaped on the way in, whole on the way out
    assert meta["og:description"] == describe(f"{HOSTILE}\n\nmore")
    assert meta["og:url"] == f"{SITE_URL}/d/{DAY}.html"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400), st.integers(min_value=10, max_value=250))
def test_describe_is_one_line_within_the_limit_and_a_prefix(text: str, limit: int) -> None:
    flat = " ".join(text.split())
    found = describe(text, limit)
    assert len(found) <= limit and "\n" not in found
    assert found == flat or (found.endswith("…") and flat.startswith(found[:-1]))


async def test_robots_names_the_sitemap_and_keeps_crawlers_off_private_pages(
    sqlite_sessions: SessionFactory,
) -> None:
    async with client(sqlite_sessions) as c:
        robots = await c.get("/robots.txt")
    assert robots.status_code == 200 and robots.headers["content-type"].startswith("text/plain")
    lines = robots.text.splitlines()
    assert lines[0] == "User-agent: *" and f"Sitemap: {SITE_URL}/sitemap.xml" in lines
    for private in ("/api/", "/unsubscribe", "/confirm", "/preferences"):
        assert f"Disallow: {private}" in lines
    assert robots.text == robots_txt(SITE_URL + "/")


def locs(xml: str) -> list[str]:
    """The URLs of a sitemap, in order."""
    return [loc.text or "" for loc in ET.fromstring(xml).iter(f"{SITEMAP}loc")]


async def hide_two(sessions: SessionFactory) -> None:
    """DATES[1] becomes a partial draft, DATES[2] is hidden (``digest delete``)."""
    async with sessions() as session, session.begin():
        await session.execute(update(Digest).where(Digest.date == DATES[1]).values(partial=True))
        await session.execute(update(Digest).where(Digest.date == DATES[2]).values(hidden_at=NOW))


async def test_sitemap_lists_exactly_the_listed_digests_and_their_events(
    sessions: SessionFactory,
) -> None:
    archive = await build_archive(sessions)
    async with client(sessions) as c:
        every = locs((await c.get("/sitemap.xml")).text)
        await hide_two(sessions)
        response = await c.get("/sitemap.xml")
    assert response.headers["content-type"].startswith("application/xml")
    assert [u for u in every if "/d/" in u] == [f"{SITE_URL}/d/{d}" for d in DATES]
    found = locs(response.text)
    assert found[0] == f"{SITE_URL}/"
    assert [u for u in found if "/d/" in u] == [f"{SITE_URL}/d/{DAY}"]
    shown_elsewhere = set(archive.event_ids[DATES[1]]) | set(archive.event_ids[DATES[2]])
    only_hidden = shown_elsewhere - set(archive.event_ids[DAY])
    assert {u for u in found if "/e/" in u} == {f"{SITE_URL}/e/{e}" for e in archive.event_ids[DAY]}
    assert only_hidden and not any(f"/e/{e}" in u for e in only_hidden for u in found)
    assert all("<lastmod>" in row for row in response.text.splitlines() if "<loc>" in row)


async def test_per_layer_feed_filters_and_refuses_unknown_layers(sqlite_sessions: SessionFactory) -> None:
    archive = await build_archive(sqlite_sessions)
    async with client(sqlite_sessions) as c:
        everything = feedparser.parse((await c.get("/feed.xml")).text)
        for layer in ("distributed", "tensor_ir"):
            response = await c.get(f"/feed.xml?layer={layer}&lang=en")
            assert response.status_code == 200
            feed = feedparser.parse(response.text)
            wanted = [f"{SITE_URL}/d/{d}?lang=en" for d in DATES if layer in archive.layers[d]]
            assert [e.link for e in feed.entries] == wanted and wanted
            assert feed.feed.title == f"Compiler Digest · {BY_ID[layer].label('en')}"
            self_link = next(link.href for link in feed.feed.links if link.rel == "self")
            assert self_link == f"{SITE_URL}/feed.xml?layer={layer}&lang=en"
        refused = await c.get("/feed.xml?layer=nonsense")
        index = head((await c.get("/?layer=distributed")).text)
    assert len(everything.entries) == len(DATES)
    assert refused.status_code == 400 and "unknown layer: nonsense" in refused.text
    hrefs = [link["href"] for link in index.links if link.get("type") == "application/atom+xml"]
    assert hrefs == ["/feed.xml", "/feed.xml?layer=distributed"]


async def add_discord_thread(sessions: SessionFactory, channel: str, thread: str | None) -> None:
    """A Discord channel subscriber and its delivery of DAY's digest (into ``thread``)."""
    async with sessions() as session, session.begin():
        digest_id = (await session.execute(Digest.__table__.select().where(Digest.date == DAY))).one().id
        sub = Subscriber(channel=ChannelName.DISCORD, address=channel, locale="zh", layers=[], min_score=0.0,
                         status="active", created_at=NOW, updated_at=NOW, confirmed_at=NOW)
        session.add(sub)
        await session.flush()
        session.add(Delivery(digest_id=digest_id, subscriber_id=sub.id, status="sent", planned_at=NOW,
                             thread_id=thread))


async def test_comments_link_to_the_days_discord_thread_and_telegram_group(
    sessions: SessionFactory,
) -> None:
    await build_archive(sessions)
    await add_discord_thread(sessions, "4242", None)  # pushed, but no thread stored (yet)
    talk = Discussion(discord_channel=4242, discord_guild=77, telegram_url="https://t.me/compiler_digest_chat")
    async with client(sessions, discussion=talk) as c:
        before = head((await c.get(f"/d/{DAY}")).text).footer
        async with sessions() as session, session.begin():
            await session.execute(update(Delivery).values(thread_id="9001"))
        await add_discord_thread(sessions, "5555", "1234")  # another channel's thread: not ours
        after = head((await c.get(f"/d/{DAY}")).text).footer
        other_day = head((await c.get(f"/d/{DATES[1]}")).text).footer
    assert [a["href"] for a in before] == ["https://t.me/compiler_digest_chat"]
    assert [a["href"] for a in after] == ["https://discord.com/channels/77/9001", "https://t.me/compiler_digest_chat"]
    assert [a["href"] for a in other_day] == ["https://t.me/compiler_digest_chat"]


async def test_no_discussion_configured_means_no_comments_label(sqlite_sessions: SessionFactory) -> None:
    await build_archive(sqlite_sessions)
    await add_discord_thread(sqlite_sessions, "4242", "9001")
    async with client(sqlite_sessions, discussion=Discussion(discord_channel=4242)) as c:  # no guild
        page = (await c.get(f"/d/{DAY}?lang=en")).text
    assert 'id="comments"' not in page and "Comments" not in page


async def test_static_export_has_the_tags_robots_sitemap_and_layer_feeds(
    sqlite_sessions: SessionFactory, tmp_path: Path,
) -> None:
    archive = await build_archive(sqlite_sessions)
    await hide_two(sqlite_sessions)
    out = tmp_path / "site"
    await export_site(sqlite_sessions, renderer(), out, locale="en", site_url=SITE_URL, timezone=TZ, now=NOW)
    meta = head((out / f"d/{DAY}.html").read_text()).meta
    assert meta["og:url"] == f"{SITE_URL}/d/{DAY}.html" and meta["twitter:card"] == "summary"
    event = head((out / f"e/{archive.event_ids[DAY][0]}.html").read_text()).meta
    assert event["og:url"] == f"{SITE_URL}/e/{archive.event_ids[DAY][0]}.html"
    assert f"Sitemap: {SITE_URL}/sitemap.xml" in (out / "robots.txt").read_text()
    found = locs((out / "sitemap.xml").read_text())
    assert [u for u in found if "/d/" in u] == [f"{SITE_URL}/d/{DAY}.html"]
    for layer in ("distributed", "tensor_ir"):
        feed = feedparser.parse((out / f"feed-{layer}.xml").read_text())
        wanted = [f"{SITE_URL}/d/{DAY}.html"] if layer in archive.layers[DAY] else []
        assert [e.link for e in feed.entries] == wanted


def test_sitemap_escapes_urls() -> None:
    from digest.web.meta import SitemapEntry, sitemap_xml

    xml = sitemap_xml([SitemapEntry("https://x.example/?a=1&b=<2>", dt.datetime(2026, 9, 29, 1, 2, 3, 456789,
                                                                                 tzinfo=dt.UTC))])
    assert locs(xml) == ["https://x.example/?a=1&b=<2>"]
    assert "<lastmod>2026-09-29T01:02:03+00:00</lastmod>" in xml


async def test_partial_and_hidden_digests_are_missing_by_date_for_readers(sessions: SessionFactory) -> None:
    """The web page, the JSON API and the chat command all treat a partial or hidden digest as absent."""
    from bot.commands import Chat, Commands

    async def nobody_manages() -> bool:
        return False

    await build_archive(sessions)
    await hide_two(sessions)
    async with client(sessions) as c:
        for date in DATES[1:]:
            assert (await c.get(f"/d/{date}")).status_code == 404
            assert (await c.get(f"/api/digests/{date}")).status_code == 404
        assert (await c.get(f"/api/digests/{DAY}")).status_code == 200
    commands = Commands(sessions, channel="telegram", clock=lambda: NOW)
    chat = Chat("telegram", "1001", user_locale="en-US")
    for date in DATES:
        reply = await commands.run(chat, "digest", [date.isoformat()], nobody_manages)
        assert reply.error is (date != DAY), date
