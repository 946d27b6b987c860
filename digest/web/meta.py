"""What the archive tells machines about itself (link previews, robots.txt, the sitemap) and
where readers discuss a digest (:class:`Discussion`).

A digest or event link pasted in a chat unfurls from the page's ``description`` and
OpenGraph/Twitter tags (:class:`Preview`, rendered by ``base.html.j2``); crawlers read
``robots.txt`` and ``sitemap.xml`` (listed digests and the events they showed only:
partial and hidden digests stay out, by :func:`digest.store.queries.listed`).
Shared by the web app (:class:`MetaRoutes`) and the static export; the only I/O is
:func:`sitemap_entries` and :func:`discussion_thread`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol
from xml.sax.saxutils import escape

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from digest.domain.status import ChannelName
from digest.store.db import SessionFactory
from digest.store.models import Delivery, Digest, DigestEvent, Subscriber
from digest.store.queries import listed

DESCRIPTION_CHARS = 200  # chat previews show two or three lines; search engines cut near 160
_SPACE = re.compile(r"\s+")
# Pages for one reader only (link tokens, forms, machine JSON): no crawler has business there.
PRIVATE = ("/api/", "/confirm", "/unsubscribe", "/preferences", "/subscribe", "/search")


@dataclass(frozen=True)
class Preview:
    """One page's link-preview card: what og:/twitter: tags and the meta description say."""

    title: str
    description: str
    url: str  # absolute, on the site URL
    type: str = "article"  # OpenGraph: "article" for a digest or an event, "website" for the index


@dataclass(frozen=True)
class SitemapEntry:
    """One URL of the sitemap and when it last changed."""

    url: str
    lastmod: dt.datetime | None = None


def describe(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """``text`` on one line and at most ``limit`` characters, cut at a space when there is one."""
    flat = _SPACE.sub(" ", text).strip()
    if len(flat) <= limit:
        return flat
    cut = flat[:limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,.;:，。；：") + "…"


def robots_txt(site_url: str, sitemap: str = "/sitemap.xml") -> str:
    """Everything public may be crawled; the private pages may not; where the sitemap is."""
    lines = ["User-agent: *", "Allow: /", *(f"Disallow: {p}" for p in PRIVATE),
             "", f"Sitemap: {site_url.rstrip('/')}{sitemap}"]
    return "\n".join(lines) + "\n"


def sitemap_xml(entries: Iterable[SitemapEntry]) -> str:
    """A sitemaps.org urlset; every URL escaped, ``lastmod`` in whole seconds (W3C datetime)."""
    rows = []
    for entry in entries:
        mod = "" if entry.lastmod is None else \
            f"<lastmod>{entry.lastmod.astimezone(dt.UTC).isoformat(timespec='seconds')}</lastmod>"
        rows.append(f"<url><loc>{escape(entry.url)}</loc>{mod}</url>")
    return ('<?xml version="1.0" encoding="utf-8"?>\n'
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            + "".join(row + "\n" for row in rows) + "</urlset>\n")


@dataclass(frozen=True)
class Listed:
    """What the sitemap needs from the store: each listed digest's date and build, each event shown."""

    digests: tuple[tuple[dt.date, dt.datetime], ...]
    events: tuple[tuple[int, dt.datetime], ...]


async def sitemap_entries(session: AsyncSession) -> Listed:
    """The listed digests (newest first) and the events they showed, with when each last changed."""
    digests = (await session.execute(
        select(Digest.date, Digest.built_at).where(listed()).order_by(Digest.date.desc()))).all()
    events = (await session.execute(
        select(DigestEvent.event_id, func.max(Digest.built_at))
        .join(Digest, Digest.id == DigestEvent.digest_id).where(listed())
        .group_by(DigestEvent.event_id).order_by(DigestEvent.event_id))).all()
    return Listed(tuple((d, b) for d, b in digests), tuple((e, b) for e, b in events))


class Addresses(Protocol):
    """The part of :class:`digest.web.pages.Links` a sitemap needs (absolute links)."""

    def index(self, page: int = 1, layer: str | None = None) -> str:
        """The archive index."""
        ...

    def digest(self, date: dt.date) -> str:
        """A digest page."""
        ...

    def event(self, event_id: int) -> str:
        """An event page."""
        ...


def sitemap(found: Listed, links: Addresses) -> str:
    """The sitemap of the archive: the index, every listed digest and every event they showed."""
    newest = found.digests[0][1] if found.digests else None
    return sitemap_xml([SitemapEntry(links.index(), newest),
                        *(SitemapEntry(links.digest(date), built) for date, built in found.digests),
                        *(SitemapEntry(links.event(event_id), built) for event_id, built in found.events)])


class MetaRoutes:
    """``/robots.txt`` and ``/sitemap.xml`` on the web app (absolute links on the site URL)."""

    def __init__(self, sessions: SessionFactory, links: Addresses, site_url: str) -> None:
        self.sessions = sessions
        self.links = links
        self.site_url = site_url

    async def robots(self, request: Request) -> Response:
        """``/robots.txt``."""
        return Response(robots_txt(self.site_url), media_type="text/plain; charset=utf-8",
                        headers={"cache-control": "max-age=86400"})

    async def sitemap(self, request: Request) -> Response:
        """``/sitemap.xml``: listed digests and their events only."""
        async with self.sessions() as session:
            found = await sitemap_entries(session)
        return Response(sitemap(found, self.links), media_type="application/xml; charset=utf-8",
                        headers={"cache-control": "max-age=3600"})

    def routes(self) -> list[Route]:
        """The two routes."""
        return [Route("/robots.txt", self.robots), Route("/sitemap.xml", self.sitemap)]


DISCORD_WEB = "https://discord.com/channels"


async def discussion_thread(session: AsyncSession, date: dt.date, channel: str) -> str | None:
    """The Discord thread the push of ``date``'s digest to ``channel`` went into, if one is stored."""
    return await session.scalar(
        select(Delivery.thread_id)
        .join(Digest, Digest.id == Delivery.digest_id)
        .join(Subscriber, Subscriber.id == Delivery.subscriber_id)
        .where(Digest.date == date, listed(), Subscriber.channel == ChannelName.DISCORD,
               Subscriber.address == channel, Delivery.thread_id.is_not(None))
        .order_by(Delivery.id.desc()).limit(1))


@dataclass(frozen=True)
class Discussion:
    """Where a digest is discussed: its day's thread in a Discord channel, a Telegram group.

    Discord needs the guild (a thread's web link names it) and the channel the digests are
    pushed to; a day without a stored thread has no Discord link. Nothing set: no links at all,
    and the digest page shows no "Comments" label.
    """

    discord_channel: int | None = None
    discord_guild: int | None = None
    telegram_url: str | None = None

    async def links(self, sessions: SessionFactory, date: dt.date) -> tuple[tuple[str, str], ...]:
        """(name, url) of each place the digest of ``date`` is discussed (asks the store only for Discord)."""
        found: list[tuple[str, str]] = []
        if self.discord_channel and self.discord_guild:
            async with sessions() as session:
                thread = await discussion_thread(session, date, str(self.discord_channel))
            if thread:
                found.append(("Discord", f"{DISCORD_WEB}/{self.discord_guild}/{thread}"))
        if self.telegram_url:
            found.append(("Telegram", self.telegram_url))
        return tuple(found)
