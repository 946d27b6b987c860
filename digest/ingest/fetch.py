"""Getting a source's bytes: over HTTP (httpx) or from a local file.

HTTP: a conditional GET (If-None-Match / If-Modified-Since from the stored
validators), at most ``per_host`` requests at a time to one host, redirects
capped, the body streamed and aborted past ``max_bytes``, the whole attempt
(connect, headers and every byte of the body) bounded by ``timeout`` with
``asyncio.timeout`` so a slow drip cannot hold a source forever, and one retry
after ``retry_backoff`` seconds on a 5xx answer or a timeout. Every failure is
a :class:`FetchError` with a one-line reason and the HTTP status when there
was one. The ``Cache-Control: max-age`` of an answer (200 or 304) comes back
with it (:mod:`digest.ingest.due`). The HTTP client is made on the first HTTP
fetch, so a run of local or not-due sources never loads the TLS certificates.

A local file's validator is its modification time and size (as the ETag): an
unchanged file is a 304 without being read.

Time on the wire is kept by a :class:`Stopwatch` that runs only while a
request holds its per-host slot: four requests of 8 s each to one host,
one at a time, are 8 s each, not 8/16/24/32 s (nor the retry's backoff).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from digest import __version__
from digest.domain.errors import FetchError
from digest.ingest import due
from digest.ingest.sources import SourceSpec

USER_AGENT = f"compiler-digest/{__version__} (+https://github.com/compiler-digest)"
ACCEPT = (
    "application/rss+xml, application/atom+xml, application/feed+json, "
    "application/xml;q=0.9, text/xml;q=0.9, */*;q=0.5"
)


@dataclass(frozen=True)
class FetchOptions:
    """Limits and politeness for one fetch run."""

    concurrency: int = 8
    per_host: int = 2
    timeout: float = 30.0
    max_bytes: int = 10 * 1024 * 1024
    max_redirects: int = 5
    user_agent: str = USER_AGENT
    retry_backoff: float = 1.0
    due_floor: dt.timedelta = dt.timedelta(minutes=5)  # bounds on a feed's own max-age/ttl hint
    due_ceiling: dt.timedelta = dt.timedelta(hours=24)


@dataclass(frozen=True)
class Validators:
    """HTTP cache validators: what we send back on the next fetch."""

    etag: str | None = None
    last_modified: str | None = None

    def request_headers(self) -> dict[str, str]:
        """The conditional-GET headers for these validators."""
        headers = {}
        if self.etag:
            headers["If-None-Match"] = self.etag
        if self.last_modified:
            headers["If-Modified-Since"] = self.last_modified
        return headers


@dataclass(frozen=True)
class Download:
    """What one fetch brought back; ``body`` is None when the server said 304 (or a file is unchanged)."""

    body: bytes | None
    http_status: int | None
    url: str | None
    content_type: str | None = None
    validators: Validators = Validators()
    max_age: dt.timedelta | None = None

    @property
    def body_hash(self) -> str | None:
        """The SHA-256 of the body (hex), None when there is no body."""
        return None if self.body is None else hashlib.sha256(self.body).hexdigest()


class Stopwatch:
    """Seconds spent inside :meth:`running` blocks, on ``timer`` (a monotonic clock)."""

    def __init__(self, timer: Callable[[], float] = time.perf_counter) -> None:
        self.seconds = 0.0  # of the blocks that ended
        self._timer = timer
        self._since: float | None = None

    @contextmanager
    def running(self) -> Iterator[None]:
        """Count the time of the body (also when it raises); blocks do not nest."""
        self._since = self._timer()
        try:
            yield
        finally:
            self.seconds += self._timer() - self._since
            self._since = None

    def elapsed(self) -> float:
        """The seconds counted so far, the block now running included."""
        running = 0.0 if self._since is None else self._timer() - self._since
        return self.seconds + running


class _Transient(FetchError):
    """A failure worth one retry: a 5xx answer or a timeout."""


def make_client(
    options: FetchOptions, transport: httpx.AsyncBaseTransport | None
) -> httpx.AsyncClient:
    """The one HTTP client of a fetch run: project User-Agent, redirects capped."""
    return httpx.AsyncClient(
        transport=transport,
        follow_redirects=True,
        max_redirects=options.max_redirects,
        timeout=httpx.Timeout(options.timeout),
        headers={"User-Agent": options.user_agent, "Accept": ACCEPT},
    )


class Fetcher:
    """Fetches sources with one shared client (made on first use), per-host politeness, one retry."""

    def __init__(self, options: FetchOptions,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._options, self._transport = options, transport
        self._client: httpx.AsyncClient | None = None
        self._hosts: dict[str, asyncio.Semaphore] = {}

    async def __aenter__(self) -> Fetcher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.aclose()

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = make_client(self._options, self._transport)
        return self._client

    async def fetch(self, spec: SourceSpec, validators: Validators,
                    watch: Stopwatch | None = None) -> Download:
        """Fetch ``spec`` (local file or HTTP); raise :class:`FetchError` on failure.

        ``watch`` runs while the request is on the wire (after its per-host slot is free).
        """
        watch = watch or Stopwatch()
        if spec.is_local:
            with watch.running():
                return await read_local(spec, self._options.max_bytes, validators)
        try:
            return await self._attempt(spec, validators, watch)
        except _Transient:
            await asyncio.sleep(self._options.retry_backoff)
        try:
            return await self._attempt(spec, validators, watch)
        except _Transient as exc:
            raise FetchError(spec.key, spec.url, f"{exc.reason} (after 1 retry)",
                             exc.http_status) from exc

    def _host_slot(self, url: str) -> asyncio.Semaphore:
        host = (urlsplit(url).hostname or "").lower()
        if host not in self._hosts:
            self._hosts[host] = asyncio.Semaphore(self._options.per_host)
        return self._hosts[host]

    async def _attempt(self, spec: SourceSpec, validators: Validators, watch: Stopwatch) -> Download:
        timeout = self._options.timeout
        async with self._host_slot(spec.url):
            with watch.running():  # from here on the request is on the wire
                try:
                    async with asyncio.timeout(timeout):
                        return await self._get(spec, validators)
                except (TimeoutError, httpx.TimeoutException) as exc:
                    reason = f"timed out after {timeout:g} s for the whole fetch"
                    raise _Transient(spec.key, spec.url, reason) from exc
                except httpx.TooManyRedirects as exc:
                    reason = f"more than {self._options.max_redirects} redirects"
                    raise FetchError(spec.key, spec.url, reason) from exc
                except httpx.HTTPError as exc:
                    raise FetchError(spec.key, spec.url, _describe(exc)) from exc

    async def _get(self, spec: SourceSpec, validators: Validators) -> Download:
        headers = validators.request_headers()
        async with self._http().stream("GET", spec.url, headers=headers) as response:
            status = response.status_code
            max_age = due.max_age(response.headers.get("cache-control"))
            if status == 304:
                return Download(None, status, str(response.url), validators=_validators(response),
                                max_age=max_age)
            if status >= 400:
                error = _Transient if status >= 500 else FetchError
                raise error(spec.key, spec.url, f"HTTP {status} {response.reason_phrase}".strip(),
                            status)
            body = await self._read_capped(spec, response)
            return Download(body, status, str(response.url), response.headers.get("content-type"),
                            _validators(response), max_age)

    async def _read_capped(self, spec: SourceSpec, response: httpx.Response) -> bytes:
        cap = self._options.max_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise _too_big(spec, cap, response.status_code)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > cap:
                raise _too_big(spec, cap, response.status_code)
            chunks.append(chunk)
        return b"".join(chunks)


def _too_big(spec: SourceSpec, cap: int, status: int) -> FetchError:
    reason = f"body larger than the {cap}-byte cap (max_bytes); aborted"
    return FetchError(spec.key, spec.url, reason, status)


def _validators(response: httpx.Response) -> Validators:
    return Validators(response.headers.get("etag"), response.headers.get("last-modified"))


def _describe(exc: httpx.HTTPError) -> str:
    """A one-line reason for a transport error (refused, DNS, TLS, bad URL...)."""
    text = " ".join(str(exc).split())
    if isinstance(exc, httpx.ConnectError):
        return f"connection failed: {text or 'no details'}"[:300]
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


async def read_local(spec: SourceSpec, max_bytes: int,
                     validators: Validators = Validators()) -> Download:
    """Read a local source (``file://`` or a path), size-capped like an HTTP body.

    Unchanged since ``validators`` (same modification time and size): no body, not read.
    """
    path = spec.path
    try:
        stat = path.stat()
        if stat.st_size > max_bytes:
            reason = f"file larger than the {max_bytes}-byte cap (max_bytes)"
            raise FetchError(spec.key, spec.url, reason)
        stamp = Validators(etag=_file_stamp(stat))
        if validators.etag == stamp.etag:
            return Download(None, None, None, validators=stamp)
        body = await asyncio.to_thread(path.read_bytes)
    except OSError as exc:
        raise FetchError(spec.key, spec.url, f"cannot read {path}: {exc.strerror or exc}") from exc
    return Download(body, None, None, validators=stamp)


def _file_stamp(stat: os.stat_result) -> str:
    """A local file's validator: modification time (ns) and size."""
    return f"file:{stat.st_mtime_ns}-{stat.st_size}"
