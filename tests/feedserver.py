"""A real HTTP server on 127.0.0.1 for ingestion tests (``http.server`` in a thread).

Each path serves a queue of :class:`Reply` objects (the last one repeats), so
a test can script "500, then 200". A reply can carry an ETag/Last-Modified
(and then answers 304 to a matching If-None-Match / If-Modified-Since), drip
its body slowly, stream a huge body without holding it in memory (``padding``:
10 GB costs nothing until someone reads it), hang without answering
(``hang``: released when the server stops), or redirect. Every request is
recorded with its headers, and the body bytes written to each path are
counted (``sent``), so a test can see that a client stopped reading.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer."""

    body: bytes = b""
    status: int = 200
    content_type: str | None = "application/xml"
    headers: dict[str, str] = field(default_factory=dict)
    etag: str | None = None
    last_modified: str | None = None
    drip_delay: float = 0.0  # seconds between chunks of ``drip_chunk`` bytes
    drip_chunk: int = 16
    padding: int = 0  # extra bytes streamed after ``body`` (huge bodies)
    content_length: bool = True  # send Content-Length (False: read until close)
    hang: float = 0.0  # seconds to wait before answering anything (ended early by the server's stop)


@dataclass
class Request:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]


class FeedServer:
    """Serve scripted replies on 127.0.0.1 at an ephemeral port."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.sent: Counter[str] = Counter()  # body bytes written per path
        self.closing = threading.Event()
        self._routes: dict[str, list[Reply]] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> FeedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def url(self, path: str) -> str:
        """The absolute URL of ``path`` on this server."""
        return self.base + path

    def serve(self, path: str, *replies: Reply) -> str:
        """Script ``path`` to answer ``replies`` in turn (the last repeats); return its URL."""
        with self._lock:
            self._routes[path] = list(replies)
        return self.url(path)

    def requests_to(self, path: str) -> list[Request]:
        """The recorded requests for ``path``, oldest first."""
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def _next_reply(self, request: Request) -> Reply | None:
        with self._lock:
            self.requests.append(request)
            queue = self._routes.get(request.path)
            if not queue:
                return None
            return queue.pop(0) if len(queue) > 1 else queue[0]


def _handler_for(server: FeedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self) -> None:
            request = Request("GET", self.path, {k.lower(): v for k, v in self.headers.items()})
            reply = server._next_reply(request)
            if reply is None:
                self.send_error(404, "no such route")
                return
            if reply.hang and server.closing.wait(reply.hang):
                return
            if _not_modified(reply, request.headers):
                self.send_response(304)
                self._validators(reply)
                self.end_headers()
                return
            self._send(reply)

        def _validators(self, reply: Reply) -> None:
            if reply.etag:
                self.send_header("ETag", reply.etag)
            if reply.last_modified:
                self.send_header("Last-Modified", reply.last_modified)

        def _send(self, reply: Reply) -> None:
            self.send_response(reply.status)
            if reply.content_type:
                self.send_header("Content-Type", reply.content_type)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self._validators(reply)
            if reply.content_length:
                self.send_header("Content-Length", str(len(reply.body) + reply.padding))
            self.end_headers()
            try:
                for chunk in _chunks(reply):
                    if server.closing.is_set():
                        return
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    with server._lock:
                        server.sent[self.path] += len(chunk)
                    if reply.drip_delay:
                        time.sleep(reply.drip_delay)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (size cap, timeout): expected

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _not_modified(reply: Reply, headers: dict[str, str]) -> bool:
    if reply.etag and headers.get("if-none-match") == reply.etag:
        return True
    return bool(reply.last_modified and headers.get("if-modified-since") == reply.last_modified)


def _chunks(reply: Reply) -> Iterator[bytes]:
    size = reply.drip_chunk if reply.drip_delay else 64 * 1024
    for start in range(0, len(reply.body), size):
        yield reply.body[start:start + size]
    block = b" " * size
    remaining = reply.padding
    while remaining > 0:
        yield block[:remaining]
        remaining -= size
