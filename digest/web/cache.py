"""Built pages, rendered once: a per-process cache of immutable bodies, and HTTP revalidation.

A page's key names everything it depends on, including a stamp of the stored data
(a digest's ``built_at``, a fingerprint of the archive), so a rebuild is a new key and
the old body just ages out of the LRU. Bodies are bytes and entries frozen: nothing a
request does changes what another one is served. A digest page's read count is not in
its body: :data:`READS_SLOT` stands there and :meth:`Cached.filled` puts the count in.
Responses carry a weak ETag and Last-Modified; a matching If-None-Match is a 304.

A body of a kilobyte or more is gzipped once, when it is made (:class:`Gzipped`): the text
before the read count's slot and the text after it are compressed separately, so a
request only splices its count in between as a stored deflate block and sums the CRC.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import struct
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from email.utils import format_datetime, parsedate_to_datetime

from starlette.requests import Request
from starlette.responses import Response

READS_SLOT = b"<!--reads-->"  # markup the templates write, never text (autoescaped text has no "<")
HTML = "text/html; charset=utf-8"
JSON = "application/json"
GZIP_OVER = 1024  # bytes: smaller bodies gain too little to pay for compressing
GZIP_LEVEL = 6
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, no mtime, OS unknown


def _deflate(data: bytes, flush: int) -> bytes:
    """Raw deflate blocks of ``data`` that refer to nothing outside it (a fresh compressor)."""
    packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush(flush)


def _stored(data: bytes) -> bytes:
    """``data`` as non-final stored deflate blocks (each starts on the byte boundary a sync flush left)."""
    return b"".join(b"\x00" + struct.pack("<HH", len(chunk), len(chunk) ^ 0xFFFF) + chunk
                    for chunk in (data[n:n + 0xFFFF] for n in range(0, len(data), 0xFFFF)))


@dataclass(frozen=True)
class Gzipped:
    """A body's gzip member, compressed once, with the read count's slot left open.

    ``head``: the gzip header and the text before the slot, ended by a sync flush;
    ``tail``: the text after it, compressed on its own and final. Neither refers to the
    other's text, so any count fits between them as a stored block.
    """

    head: bytes
    tail: bytes
    rest: bytes  # the text after the slot (its CRC is summed per request)
    crc: int  # CRC-32 of the text before the slot
    before: int  # its length
    slot: bool

    @classmethod
    def of(cls, body: bytes) -> Gzipped:
        """Compress ``body`` (split at :data:`READS_SLOT`, when it has one)."""
        before, slot, rest = body.partition(READS_SLOT)
        if not slot:
            return cls(_GZIP_HEADER + _deflate(body, zlib.Z_FINISH) + struct.pack(
                "<II", zlib.crc32(body), len(body) & 0xFFFFFFFF), b"", b"", 0, 0, False)
        return cls(_GZIP_HEADER + _deflate(before, zlib.Z_SYNC_FLUSH), _deflate(rest, zlib.Z_FINISH),
                   rest, zlib.crc32(before), len(before), True)

    def member(self, fill: bytes) -> bytes:
        """The whole gzip member with ``fill`` in the slot (without a slot: the same bytes every time)."""
        if not self.slot:
            return self.head
        crc = zlib.crc32(self.rest, zlib.crc32(fill, self.crc))
        size = (self.before + len(fill) + len(self.rest)) & 0xFFFFFFFF
        return b"".join((self.head, _stored(fill), self.tail, struct.pack("<II", crc, size)))


@dataclass(frozen=True)
class Cached:
    """One rendered body, its media type, content hash and the time its data last changed.

    ``zipped``: its gzip member, made by :class:`PageCache` for a body of :data:`GZIP_OVER` bytes or more.
    """

    body: bytes
    media_type: str
    modified: dt.datetime
    digest: str
    zipped: Gzipped | None = None

    @classmethod
    def of(cls, body: str | bytes, media_type: str, modified: dt.datetime) -> Cached:
        """A cache entry for ``body`` (text is UTF-8 encoded)."""
        data = body.encode() if isinstance(body, str) else body
        return cls(data, media_type, modified, hashlib.blake2b(data, digest_size=12).hexdigest())

    def filled(self, reads: int) -> bytes:
        """The body with the read count in its slot."""
        return self.body.replace(READS_SLOT, str(reads).encode(), 1)

    def compressed(self) -> Cached:
        """This entry with its gzip member (unchanged when the body is too small to gain)."""
        # the margin: any count in the slot still leaves the plain body over the middleware's floor
        if len(self.body) < GZIP_OVER + len(READS_SLOT):
            return self
        return replace(self, zipped=Gzipped.of(self.body))


Make = Callable[[], Awaitable[Cached]]


class PageCache:
    """An LRU of rendered pages; ``renders`` counts the bodies it made, ``compressions`` their gzips.

    Answers to open-ended queries (``/api/events`` with any ``days`` and ``min_score``) are kept
    in an LRU of their own (``query_size``), so a client cycling through values evicts only
    other answers of that kind, never the archive's pages.
    """

    def __init__(self, size: int = 512, query_size: int = 128) -> None:
        self.size = size
        self.query_size = query_size
        self.renders = 0
        self.compressions = 0
        self._items: OrderedDict[Hashable, Cached] = OrderedDict()
        self._queries: OrderedDict[Hashable, Cached] = OrderedDict()
        self._making: dict[Hashable, asyncio.Future[Cached]] = {}

    async def get(self, key: Hashable, make: Make, *, query: bool = False) -> Cached:
        """The page cached under ``key`` (in the queries' LRU with ``query``), made when missing.

        Requests that miss the same key together wait for one render (a burst on a new
        page renders it once); a waiter that goes away does not cancel it for the others.
        """
        items = self._queries if query else self._items
        found = items.get(key)
        if found is not None:
            items.move_to_end(key)
            return found
        making = self._making.get(key)
        if making is None:
            making = self._making[key] = asyncio.ensure_future(self._make(key, make, query))
        return await asyncio.shield(making)

    async def _make(self, key: Hashable, make: Make, query: bool) -> Cached:
        try:
            made = (await make()).compressed()
        finally:
            del self._making[key]
        self.renders += 1
        self.compressions += made.zipped is not None
        items, size = (self._queries, self.query_size) if query else (self._items, self.size)
        items[key] = made
        while len(items) > size:
            items.popitem(last=False)
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


def accepts_gzip(request: Request) -> bool:
    """Whether Accept-Encoding allows gzip (named or ``*``, with a q-value above 0)."""
    allowed: dict[str, bool] = {}
    for item in request.headers.get("accept-encoding", "").split(","):
        name, *params = (part.strip() for part in item.split(";"))
        q = next((p.partition("=")[2].strip() for p in params if p.lower().startswith("q=")), "1")
        try:
            allowed[name.lower()] = float(q) > 0
        except ValueError:
            allowed[name.lower()] = False
    return allowed.get("gzip", allowed.get("x-gzip", allowed.get("*", False)))


def _vary(headers: Mapping[str, str], name: str) -> str:
    """The Vary value of ``headers`` with ``name`` added."""
    found = headers.get("vary")
    return f"{found}, {name}" if found else name


def respond(request: Request, page: Cached, headers: Mapping[str, str], *,
            reads: int | None = None) -> Response:
    """``page`` (its read count filled in), gzipped from the cache when the client accepts it, or a 304.

    A plain body of a kilobyte or more gets ``Vary: Accept-Encoding`` from the app's gzip
    middleware, which leaves a response that already has a Content-Encoding alone.
    """
    tag = etag(page, "" if reads is None else str(reads))
    sent = {**headers, "etag": tag, "last-modified": format_datetime(page.modified.astimezone(dt.UTC),
                                                                     usegmt=True)}
    if not_modified(request, tag, page.modified):
        if page.zipped is not None:
            sent["vary"] = _vary(sent, "Accept-Encoding")
        return Response(status_code=304, headers=sent)
    if page.zipped is not None and accepts_gzip(request):
        fill = READS_SLOT if reads is None else str(reads).encode()
        sent.update({"vary": _vary(sent, "Accept-Encoding"), "content-encoding": "gzip"})
        return Response(page.zipped.member(fill), media_type=page.media_type, headers=sent)
    body = page.body if reads is None else page.filled(reads)
    return Response(body, media_type=page.media_type, headers=sent)
