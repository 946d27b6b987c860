"""A fake Telegram Bot API server on 127.0.0.1, for the real python-telegram-bot over real sockets.

It speaks the Bot API's wire format (``POST /bot<token>/<method>``, form
fields whose non-string values are JSON, ``{"ok": ..., "result": ...}``
answers) for the methods the bot uses, records every call, queues updates
for long polling, answers failures on demand, and enforces Telegram's
broadcast limits the way the real server does: at most 30 messages in any
1,000 ms window and one per second to one chat (20 per minute to a group),
answering 429 with ``retry_after`` past them and counting those 429s.
After ``setWebhook`` it posts each update to the webhook URL instead (one
thread, in order, with the ``X-Telegram-Bot-Api-Secret-Token`` header, as
Telegram does) and refuses ``getUpdates`` with 409 until ``deleteWebhook``.
Messages in HTML parse mode are checked like Telegram checks them: known
tags only, balanced, entities valid, at most 4096 UTF-16 units of text.
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import queue
import re
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

TOKEN = "123456:TEST-fake-token"
BOT_ID = 777000
RAW_FIELDS = {"text", "parse_mode", "callback_query_id", "language_code", "inline_message_id", "url",
              "secret_token"}
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_TAG = re.compile(r"""</?[a-zA-Z][a-zA-Z0-9-]*(\s+[a-zA-Z-]+(="[^"<>]*"|='[^'<>]*')?)*\s*>""")
TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre",
        "tg-spoiler", "span", "blockquote", "tg-emoji"}


@dataclass
class Call:
    """One request the server answered."""

    method: str
    params: dict[str, Any]
    at: float
    status: int = 0  # 0 while the call is being answered


@dataclass
class Posted:
    """One update the server posted to the webhook, and the HTTP status it got back (0: no answer)."""

    update_id: int
    status: int


@dataclass
class Failure:
    """A failure to answer on demand, ``times`` times, for one method (and chat)."""

    method: str
    chat_id: int | None
    status: int
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    times: int = 1


class _Checker(HTMLParser):
    """Checks Telegram HTML: known tags, balanced, and measures the visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in TAGS:
            self.error = self.error or f"unsupported start tag \"{tag}\""
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.error = self.error or f"unexpected end tag \"{tag}\""

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def check_html(text: str) -> str | None:
    """Telegram's complaint about ``text`` in HTML parse mode, or None."""
    for start in (i for i, char in enumerate(text) if char == "<"):
        if not _TAG.match(text, start):
            return f"Bad Request: can't parse entities: unexpected \"<\" at byte offset {start}"
    for raw in text.split("&")[1:]:
        name = raw.split(";", 1)[0]
        if ";" not in raw or (name not in ("amp", "lt", "gt", "quot") and not name.startswith("#")):
            return f"Bad Request: can't parse entities: unsupported entity \"&{name}\""
    checker = _Checker()
    checker.feed(text)
    checker.close()
    if checker.error or checker.stack:
        return f"Bad Request: can't parse entities: {checker.error or 'unclosed tag'}"
    visible = html.unescape("".join(checker.text)).strip()
    if not visible:
        return "Bad Request: message text is empty"
    if len(visible.encode("utf-16-le")) // 2 > 4096:
        return "Bad Request: message is too long"
    return None


class FakeTelegram:
    """The server and everything a test reads or injects; use it as a context manager."""

    def __init__(self, token: str = TOKEN, *, username: str = "digest_test_bot",
                 enforce_limits: bool = True, overall: int = 30, window: float = 1.0) -> None:
        self.token = token
        self.username = username
        self.enforce_limits = enforce_limits
        self.overall = overall
        self.window = window
        self.calls: list[Call] = []
        self.too_many = 0  # 429s answered for the broadcast limits
        self.failures: list[Failure] = []
        self.members: dict[tuple[int, int], str] = {}
        self.messages: dict[tuple[int, int], dict[str, Any]] = {}
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1)
        self._sent_times: deque[float] = deque()
        self._chat_times: dict[int, deque[float]] = {}
        self._cond = threading.Condition()
        self._closing = False
        self._server: ThreadingHTTPServer | None = None
        self.webhook: dict[str, Any] = {}  # the setWebhook parameters while a webhook is set
        self.posted: list[Posted] = []  # every update posted to the webhook, with its answer
        self._outbox: queue.Queue[dict[str, Any] | None] = queue.Queue()

    # -- lifecycle ------------------------------------------------------------

    def __enter__(self) -> FakeTelegram:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True,
                         name="fake-telegram").start()
        threading.Thread(target=self._post_updates, daemon=True, name="fake-telegram-webhook").start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._outbox.put(None)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def port(self) -> int:
        """The ephemeral port the server listens on."""
        assert self._server is not None, "start the server first (with ...)"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """What python-telegram-bot takes as ``base_url`` (it appends the token)."""
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        """What python-telegram-bot takes as ``base_file_url``."""
        return f"http://127.0.0.1:{self.port}/file/bot"

    # -- what tests inject ----------------------------------------------------

    def command(self, chat_id: int, text: str, *, user_id: int | None = None,
                chat_type: str | None = None, language_code: str = "en",
                sender_chat: dict[str, Any] | None = None) -> int:
        """Queue a text message; a leading ``/command`` gets its bot_command entity."""
        chat = self._chat(chat_id, chat_type)
        message = {"message_id": next(self._message_ids), "date": int(time.time()), "chat": chat,
                   "from": self._user(user_id or abs(chat_id), language_code), "text": text}
        if text.startswith("/"):
            word = text.split()[0]
            message["entities"] = [{"type": "bot_command", "offset": 0,
                                    "length": len(word.encode("utf-16-le")) // 2}]
        if sender_chat is not None:
            message["sender_chat"] = sender_chat
        return self._push({"message": message})

    def press(self, chat_id: int, message_id: int, data: str, *, user_id: int | None = None,
              chat_type: str | None = None, language_code: str = "en") -> int:
        """Queue a press on an inline button of a message the bot sent."""
        stored = self.messages.get((chat_id, message_id), {})
        message = {"message_id": message_id, "date": int(time.time()),
                   "chat": self._chat(chat_id, chat_type), "from": self.me(),
                   "text": stored.get("text", "…")}
        query = {"id": f"cb{next(self._update_ids)}", "chat_instance": str(chat_id), "data": data,
                 "from": self._user(user_id or abs(chat_id), language_code), "message": message}
        return self._push({"callback_query": query})

    def set_member(self, chat_id: int, user_id: int, status: str) -> None:
        """What getChatMember answers for this user in this chat (default: member)."""
        self.members[(chat_id, user_id)] = status

    def fail(self, method: str, status: int, description: str, *, chat_id: int | None = None,
             times: int = 1, **parameters: Any) -> None:
        """Answer the next ``times`` calls of ``method`` (to ``chat_id``) with this error."""
        self.failures.append(Failure(method, chat_id, status, description, parameters, times))

    # -- what tests read ------------------------------------------------------

    def calls_of(self, method: str) -> list[Call]:
        """Every call of ``method``, in order."""
        return [c for c in list(self.calls) if c.method == method]

    def sent(self, chat_id: int | None = None) -> list[dict[str, Any]]:
        """The accepted sendMessage calls (to ``chat_id``)."""
        return [c.params for c in self.calls_of("sendMessage")
                if c.status == 200 and (chat_id is None or c.params.get("chat_id") == chat_id)]

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Poll ``predicate`` until true, or fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; calls: {[c.method for c in self.calls][-20:]}")
            await asyncio.sleep(0.02)

    def me(self) -> dict[str, Any]:
        """The bot's User object."""
        return {"id": BOT_ID, "is_bot": True, "first_name": "Digest", "username": self.username,
                "can_join_groups": True, "can_read_all_group_messages": False,
                "supports_inline_queries": False}

    # -- internals ------------------------------------------------------------

    def _push(self, body: dict[str, Any]) -> int:
        with self._cond:
            update_id = next(self._update_ids)
            if self.webhook:
                self._outbox.put({"update_id": update_id, **body})
            else:
                self._updates.append({"update_id": update_id, **body})
            self._cond.notify_all()
        return update_id

    def _post_updates(self) -> None:
        """Post each queued update to the webhook, one at a time (Telegram retries; this fake does not)."""
        while (update := self._outbox.get()) is not None:
            hook = dict(self.webhook)
            headers = {"Content-Type": "application/json"}
            if hook.get("secret_token"):
                headers[SECRET_HEADER] = str(hook["secret_token"])
            request = urllib.request.Request(str(hook.get("url")), data=json.dumps(update).encode(),
                                             headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    status = int(answer.status)
            except urllib.error.HTTPError as exc:
                status = exc.code
            except (OSError, ValueError):
                status = 0
            self.posted.append(Posted(int(update["update_id"]), status))

    @staticmethod
    def _chat(chat_id: int, chat_type: str | None) -> dict[str, Any]:
        kind = chat_type or ("private" if chat_id > 0 else "group")
        if kind == "private":
            return {"id": chat_id, "type": kind, "first_name": f"user{chat_id}"}
        return {"id": chat_id, "type": kind, "title": f"group {chat_id}"}

    @staticmethod
    def _user(user_id: int, language_code: str) -> dict[str, Any]:
        return {"id": user_id, "is_bot": False, "first_name": f"user{user_id}",
                "language_code": language_code}

    def answer(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Dispatch one call; returns (HTTP status, JSON body)."""
        failure = self._take_failure(method, params.get("chat_id"))
        if failure is not None:
            return _error(failure.status, failure.description, failure.parameters)
        handler = getattr(self, "_m_" + method, None)
        if handler is None:
            return _error(404, "Not Found")
        result: tuple[int, dict[str, Any]] = handler(params)
        return result

    def _take_failure(self, method: str, chat_id: Any) -> Failure | None:
        with self._cond:
            for failure in self.failures:
                if failure.method == method and failure.chat_id in (None, chat_id):
                    failure.times -= 1
                    if failure.times <= 0:
                        self.failures.remove(failure)
                    return failure
        return None

    def _limited(self, chat_id: int) -> int | None:
        """Seconds to wait if one more message to ``chat_id`` breaks a limit, else None (and count it)."""
        now = time.monotonic()
        with self._cond:
            while self._sent_times and self._sent_times[0] <= now - self.window:
                self._sent_times.popleft()
            mine = self._chat_times.setdefault(chat_id, deque())
            while mine and mine[0] <= now - 60 * self.window:
                mine.popleft()
            recent = sum(1 for t in mine if t > now - self.window)
            group_full = chat_id < 0 and len(mine) >= 20
            if self.enforce_limits and (len(self._sent_times) >= self.overall or recent or group_full):
                self.too_many += 1
                return 1 if not group_full else max(1, int(mine[0] + 60 * self.window - now) + 1)
            self._sent_times.append(now)
            mine.append(now)
        return None

    def _m_getMe(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return _ok(self.me())

    def _m_getUpdates(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.webhook:
            return _error(409, "Conflict: can't use getUpdates method while webhook is active; "
                               "use deleteWebhook to delete the webhook first")
        offset = int(params.get("offset") or 0)
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        with self._cond:
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
            while not self._updates and not self._closing and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            return _ok(list(self._updates[: int(params.get("limit") or 100)]))

    def _m_sendMessage(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        chat_id = int(params["chat_id"])
        if params.get("parse_mode") == "HTML" and (problem := check_html(str(params["text"]))):
            return _error(400, problem)
        if (wait := self._limited(chat_id)) is not None:
            return _error(429, f"Too Many Requests: retry after {wait}", {"retry_after": wait})
        message = {"message_id": next(self._message_ids), "date": int(time.time()),
                   "chat": self._chat(chat_id, None), "from": self.me(), "text": params["text"]}
        self.messages[(chat_id, message["message_id"])] = {**params, **message}
        return _ok(message)

    def _m_editMessageText(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        key = (int(params["chat_id"]), int(params["message_id"]))
        if key not in self.messages:
            return _error(400, "Bad Request: message to edit not found")
        if params.get("parse_mode") == "HTML" and (problem := check_html(str(params["text"]))):
            return _error(400, problem)
        self.messages[key].update(params)
        return _ok({"message_id": key[1], "date": int(time.time()), "chat": self._chat(key[0], None),
                    "from": self.me(), "text": params["text"]})

    def _m_editMessageReplyMarkup(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        key = (int(params["chat_id"]), int(params["message_id"]))
        if key not in self.messages:
            return _error(400, "Bad Request: message to edit not found")
        self.messages[key]["reply_markup"] = params.get("reply_markup")
        return _ok({"message_id": key[1], "date": int(time.time()), "chat": self._chat(key[0], None),
                    "from": self.me(), "text": self.messages[key].get("text", "")})

    def _m_getChatMember(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        chat_id, user_id = int(params["chat_id"]), int(params["user_id"])
        status = self.members.get((chat_id, user_id), "member")
        member: dict[str, Any] = {"status": status, "user": self._user(user_id, "en")}
        if status == "creator":
            member["is_anonymous"] = False
        if status == "administrator":
            member.update(dict.fromkeys(
                ("can_be_edited", "is_anonymous", "can_manage_chat", "can_delete_messages",
                 "can_manage_video_chats", "can_restrict_members", "can_promote_members",
                 "can_change_info", "can_invite_users", "can_post_stories", "can_edit_stories",
                 "can_delete_stories"), False))
        return _ok(member)

    def _m_getWebhookInfo(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return _ok({"url": self.webhook.get("url", ""), "has_custom_certificate": False,
                    "pending_update_count": len(self._updates)})

    def _m_setWebhook(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        url, secret = str(params.get("url") or ""), str(params.get("secret_token") or "")
        if not url.startswith(("http://", "https://")):
            return _error(400, "Bad Request: bad webhook: an HTTPS URL must be provided for webhook")
        if secret and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", secret):
            return _error(400, "Bad Request: secret token contains unallowed characters")
        with self._cond:
            self.webhook = dict(params)
            for update in self._updates:  # what waited for a poll goes to the webhook now
                self._outbox.put(update)
            self._updates = []
        return _ok(True)

    def _m_deleteWebhook(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._cond:
            self.webhook = {}
        return _ok(True)

    def _m_answerCallbackQuery(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return _ok(True)

    _m_setMyCommands = _m_deleteMyCommands = _m_answerCallbackQuery
    _m_close = _m_logOut = _m_sendChatAction = _m_answerCallbackQuery


def _ok(result: Any) -> tuple[int, dict[str, Any]]:
    return 200, {"ok": True, "result": result}


def _error(status: int, description: str,
           parameters: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return status, body


def _decode(key: str, value: str) -> Any:
    """Form fields carry JSON for every non-string value (python-telegram-bot's RequestData)."""
    if key in RAW_FIELDS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeTelegram

    def do_POST(self) -> None:
        self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def do_GET(self) -> None:
        self._serve(b"")

    def _serve(self, body: bytes) -> None:
        prefix, _, method = self.path.partition("?")[0].lstrip("/").rpartition("/")
        params = {k: _decode(k, v) for k, v in parse_qsl(body.decode(), keep_blank_values=True)}
        call = Call(method, params, time.monotonic())
        self.fake.calls.append(call)  # on arrival: a long poll shows while it waits
        if prefix != f"bot{self.fake.token}":
            call.status, answer = _error(401, "Unauthorized")
        else:
            call.status, answer = self.fake.answer(method, params)
        self._reply(call.status, answer)

    def _reply(self, status: int, answer: dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a cancelled long poll)
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return
