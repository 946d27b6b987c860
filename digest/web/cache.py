"""Built pages, rendered once: a per-process cache of immutable bodies, and HTTP revalidation.

A page's key names everything it depends on, including a stamp of the stored data
(a digest's ``built_at``, a fingerprint of the archive), so a rebuild is a new key and
the old body just ages out of the LRU. Bodies are bytes and entries frozen: nothing a
request does changes what another one is served. A digest page's read count is not in
its body: :data:`READS_SLOT` stands there and :meth:`Cached.filled` puts the count in.
Responses carry a weak ETag and Last-Modified; a matching If-None-Match is a 304.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from email.utils import format_datetime, parsedate_to_datetime

from starlette.requests import Request
from starlette.responses import Response

READS_SLOT = b"<!--reads-->"  # markup the templates write, never text (autoescaped text has no "<")
HTML = "text/html; charset=utf-8"
JSON = "application/json"


@dataclass(frozen=True)
class Cached:
    """One rendered body, its media type, content hash and the time its data last changed."""

    body: bytes
    media_type: str
    modified: dt.datetime
    digest: str

    @classmethod
    def of(cls, body: str | bytes, media_type: str, modified: dt.datetime) -> Cached:
        """A cache entry for ``body`` (text is UTF-8 encoded)."""
        data = body.encode() if isinstance(body, str) else body
        return cls(data, media_type, modified, hashlib.blake2b(data, digest_size=12).hexdigest())

    def filled(self, reads: int) -> bytes:
        """The body with the read count in its slot."""
        return self.body.replace(READS_SLOT, str(reads).encode(), 1)


Make = Callable[[], Awaitable[Cached]]


class PageCache:
    """An LRU of rendered pages; ``renders`` counts the bodies it had to make."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self.renders = 0
        self._items: OrderedDict[Hashable, Cached] = OrderedDict()
        self._making: dict[Hashable, asyncio.Future[Cached]] = {}

    async def get(self, key: Hashable, make: Make) -> Cached:
        """The page cached under ``key``, made (and kept) when missing.

        Requests that miss the same key together wait for one render (a burst on a new
        page renders it once); a waiter that goes away does not cancel it for the others.
        """
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
            return found
        making = self._making.get(key)
        if making is None:
            making = self._making[key] = asyncio.ensure_future(self._make(key, make))
        return await asyncio.shield(making)

    async def _make(self, key: Hashable, make: Make) -> Cached:
        try:
            made = await make()
        finally:
            del self._making[key]
        self.renders += 1
        self._items[key] = made
        while len(self._items) > self.size:
            self._items.popitem(last=False)
        return made


def etag(page: Cached, extra: str = "") -> str:
    """The weak validator of ``page`` (weak: the same under any content encoding)."""
    return f'W/"{page.digest}{"-" + extra if extra else ""}"'


def not_modified(request: Request, tag: str, modified: dt.datetime) -> bool:
    """True when the client's copy is current: If-None-Match matches, or (without it) If-Modified-Since."""
    match = request.headers.get("if-none-match")
    if match is not None:
        tags = {t.strip().removeprefix("W/") for t in match.split(",")}
        return "*" in tags or tag.removeprefix("W/") in tags
    since = request.headers.get("if-modified-since")
    if since is None:
        return False
    try:
        return modified.replace(microsecond=0) <= parsedate_to_datetime(since)
    except (TypeError, ValueError):
        return False


def respond(request: Request, page: Cached, headers: Mapping[str, str], *,
            reads: int | None = None) -> Response:
    """``page`` (its read count filled in), or a 304 when the client's copy is current."""
    tag = etag(page, "" if reads is None else str(reads))
    sent = {**headers, "etag": tag, "last-modified": format_datetime(page.modified.astimezone(dt.UTC),
                                                                     usegmt=True)}
    if not_modified(request, tag, page.modified):
        return Response(status_code=304, headers=sent)
    body = page.body if reads is None else page.filled(reads)
    return Response(body, media_type=page.media_type, headers=sent)
