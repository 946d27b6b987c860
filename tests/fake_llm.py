"""A local OpenAI-compatible chat endpoint for tests: scripted replies over real HTTP.

``FakeLLM`` listens on 127.0.0.1 (an ephemeral port) and answers
``POST /v1/chat/completions`` with the next scripted :class:`Reply` (or the
default one): an answer with ``usage`` token counts, a 429 with
``retry-after``, a 5xx, a hang longer than the client's timeout, content that
is not JSON, a broken body. Every request is recorded with its arrival time.
The real ``openai`` client talks to it through ``base_url``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMPLETIONS = "/v1/chat/completions"


@dataclass
class Reply:
    """One scripted reply; ``body`` (raw bytes) overrides the generated one."""

    status: int = 200
    content: str | None = None
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def answer(data: object, *, prompt_tokens: int | None = None,
           completion_tokens: int | None = None) -> Reply:
    """A completion whose message content is ``data`` as JSON (or a string as is)."""
    content = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return Reply(content=content, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)


def rate_limited(retry_after: float | None = 0.2) -> Reply:
    """A 429, with a ``retry-after`` header in seconds unless None."""
    headers = {} if retry_after is None else {"retry-after": str(retry_after)}
    return Reply(status=429, headers=headers, body=_error("rate limit reached", "rate_limit"))


def server_error(status: int = 500) -> Reply:
    """A 5xx with an OpenAI-style error body."""
    return Reply(status=status, body=_error("internal error", "server_error"))


def client_error(status: int = 400) -> Reply:
    """A 4xx other than 429 (never worth retrying)."""
    return Reply(status=status, body=_error("bad request", "invalid_request_error"))


def hang(seconds: float) -> Reply:
    """Wait ``seconds`` before answering (longer than the client's timeout)."""
    return Reply(content="{}", delay=seconds)


def malformed() -> Reply:
    """A well-formed completion whose content is not JSON."""
    return Reply(content='{"title": "cut off', completion_tokens=7)


def broken_body() -> Reply:
    """A 200 whose HTTP body itself is not JSON."""
    return Reply(body=b'{"choices": [', headers={"content-type": "application/json"})


def _error(message: str, kind: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": None}}).encode()


@dataclass(frozen=True)
class Seen:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float

    @property
    def user(self) -> str:
        """The user message's text."""
        return str(self.body["messages"][-1]["content"])

    @property
    def system(self) -> str:
        """The system message's text."""
        return str(self.body["messages"][0]["content"])


Script = Reply | Callable[[dict[str, Any]], Reply]


class FakeLLM:
    """The server: ``script(...)`` queues replies; ``requests`` lists what came in."""

    def __init__(self, default: Script | None = None) -> None:
        self.default: Script = default or answer({"ok": True})
        self.requests: list[Seen] = []
        self._queue: deque[Script] = deque()
        self._lock = threading.Lock()
        self.closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """What the openai client takes as ``base_url``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def script(self, *replies: Script) -> None:
        """Queue replies for the next requests, in order."""
        with self._lock:
            self._queue.extend(replies)

    def next_reply(self, body: dict[str, Any], seen: Seen) -> Reply:
        """Record a request and pick its reply."""
        with self._lock:
            self.requests.append(seen)
            script = self._queue.popleft() if self._queue else self.default
        return script(body) if callable(script) else script

    def __enter__(self) -> FakeLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _completion(body: dict[str, Any], reply: Reply) -> bytes:
    content = reply.content or ""
    prompt = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
    usage = {
        "prompt_tokens": reply.prompt_tokens if reply.prompt_tokens is not None else prompt // 4 + 1,
        "completion_tokens": (reply.completion_tokens if reply.completion_tokens is not None
                              else len(content) // 4 + 1),
    }
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return json.dumps({
        "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": usage,
    }, ensure_ascii=False).encode()


def _handler_for(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            body = json.loads(raw or b"{}")
            seen = Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body,
                        time.monotonic())
            if self.path != COMPLETIONS:
                self._send(Reply(status=404, body=_error("no such route", "not_found")), body)
                return
            reply = fake.next_reply(body, seen)
            if reply.delay and fake.closing.wait(reply.delay):
                return
            self._send(reply, body)

        def _send(self, reply: Reply, body: dict[str, Any]) -> None:
            payload = reply.body if reply.body is not None else _completion(body, reply)
            try:
                self.send_response(reply.status)
                headers = {"content-type": "application/json", **reply.headers}
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
