"""A local fake Discord: the REST routes the bot and the push channel use, and a websocket gateway.

One aiohttp server on 127.0.0.1 (a random port) in the test's own event loop::

    async with FakeDiscord() as fake:
        base, gateway = fake.api_base, fake.gateway_url   # http://127.0.0.1:P/api/v10, ws://127.0.0.1:P/gateway
        await fake.interact("recent", {"days": 3}, channel=fake.text_channel)

REST answers are JSON with ``Content-Type: application/json`` (discord.py parses
nothing else); a 429 carries ``Via`` (without it discord.py takes it for a
Cloudflare ban). ``script[channel]`` gives the next answers to message posts of
one channel, in turn (``(status, body)``). With ``enforce`` the server keeps
Discord's limits: ``global_limit`` requests per second overall and
``channel_limit`` messages per 5 s to one channel (real time), with
X-RateLimit-* headers per channel bucket and 429s when they are broken.
The gateway speaks JSON: HELLO, READY, GUILD_CREATE (one guild with a text
channel, a forum channel), heartbeat ACKs and the INTERACTION_CREATE events a
test sends. It compresses as the client asks in the URL (``compress=``,
recorded in ``compression``): ``zlib-stream`` is one zlib stream per
connection, each frame ending in a sync flush, as Discord sends it; with no
ask, or ``plain``, or an ask it cannot answer (``zstd-stream``), frames are
uncompressed text, which discord.py always accepts. ``shards`` is what
``GET /gateway/bot`` advises; each IDENTIFY (``identifies``) may name its
shard ``[i, n]``, and the guild goes to the shard that owns it,
``(guild_id >> 22) % n``, as its interactions do.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import zlib
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

TOKEN = "fake-discord-token"
APP_ID = 900
BOT_ID = 901
GUILD_ID = (1 << 22) | 1000  # on shard 1 of 2: (id >> 22) % 2
TEXT, DM, FORUM = 0, 1, 15
JSON_TYPE = "application/json"
MANAGE_CHANNELS = 1 << 4
SEND = (1 << 10) | (1 << 11)  # view channel, send messages


@dataclass
class Sent:
    """One message the fake accepted: where it went, its payload, and the thread it is in (if any)."""

    channel: int
    payload: dict[str, Any]
    id: int


@dataclass
class FakeDiscord:
    enforce: bool = False
    global_limit: int = 50
    channel_limit: int = 5
    channel_period: float = 5.0
    clock: Any = time.monotonic
    channels: dict[int, dict[str, Any]] = field(default_factory=dict)
    messages: list[Sent] = field(default_factory=list)
    threads: dict[int, dict[str, Any]] = field(default_factory=dict)
    callbacks: list[dict[str, Any]] = field(default_factory=list)
    followups: list[dict[str, Any]] = field(default_factory=list)
    commands: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    script: dict[int, list[tuple[int, dict[str, Any]]]] = field(default_factory=dict)
    thread_script: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # posts into any thread
    requests: list[tuple[str, str]] = field(default_factory=list)
    too_many: int = 0
    token: str = TOKEN
    shards: int = 1  # what GET /gateway/bot advises
    plain: bool = False  # text frames even when the client asks for zlib-stream
    compression: list[str | None] = field(default_factory=list)  # each connection's compress= ask
    identifies: list[dict[str, Any]] = field(default_factory=list)  # each IDENTIFY's d (token removed)
    zlib_frames: int = 0  # gateway frames sent zlib-compressed

    def __post_init__(self) -> None:
        self._ids = itertools.count(120_000_000_000_005_000)  # snowflake-sized: the core wants 17-20 digits
        self._global: deque[float] = deque()
        self._per_channel: dict[int, deque[float]] = defaultdict(deque)
        self._sockets: list[web.WebSocketResponse] = []
        self._shard_of: dict[web.WebSocketResponse, int] = {}
        self._zlib: dict[web.WebSocketResponse, Any] = {}  # a connection's zlib stream, when it asked
        self._seq: dict[web.WebSocketResponse, int] = {}
        self._dms: dict[int, int] = {}
        self._changed = asyncio.Condition()
        self.text_channel = self.add_channel(TEXT, name="compilers")
        self.forum_channel = self.add_channel(FORUM, name="digests")
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        self._runner = web.AppRunner(app, access_log=None)
        self.port = 0

    def add_channel(self, kind: int, *, name: str = "chan", guild: bool = True) -> int:
        """A channel of ``kind`` (0 text, 1 DM, 15 forum); its id."""
        cid = next(self._ids)
        self.channels[cid] = {"id": str(cid), "type": kind, "name": name,
                              **({"guild_id": str(GUILD_ID), "position": 0, "permission_overwrites": []}
                                 if guild else {})}
        return cid

    def dm_with(self, user_id: int) -> int:
        """The DM channel with ``user_id`` (opened on first use, as Discord does)."""
        found = self._dms.get(user_id)
        if found is None:
            found = self._dms[user_id] = self.add_channel(DM, name=f"dm-{user_id}", guild=False)
        return found

    async def __aenter__(self) -> FakeDiscord:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for ws in list(self._sockets):
            await ws.close()
        await self._runner.cleanup()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    def sent_to(self, channel: int) -> list[dict[str, Any]]:
        return [m.payload for m in self.messages if m.channel == channel]

    # -- REST --------------------------------------------------------------

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        self.requests.append((request.method, path))
        if not path.startswith(("interactions/", "webhooks/")) and \
                request.headers.get("Authorization") != f"Bot {self.token}":
            return reply(401, {"message": "401: Unauthorized", "code": 0})
        if self.enforce and (limited := self._global_limited()) is not None:
            return limited
        body = await request.json() if request.can_read_body else {}
        answer = await self._route(request.method, path.split("/"), body)
        async with self._changed:
            self._changed.notify_all()
        return answer

    def _global_limited(self) -> web.Response | None:
        now = self.clock()
        while self._global and self._global[0] <= now - 1.0:
            self._global.popleft()
        if len(self._global) >= self.global_limit:
            self.too_many += 1
            return reply(429, {"message": "You are being rate limited.", "global": True,
                               "retry_after": round(self._global[0] + 1.0 - now, 3)},
                         {"X-RateLimit-Global": "true", "X-RateLimit-Scope": "global", "Via": "1.1 google"})
        self._global.append(now)
        return None

    async def _route(self, method: str, parts: list[str], body: dict[str, Any]) -> web.Response:
        match method, parts:
            case "GET", ["users", "@me"]:
                return reply(200, user(BOT_ID, "digest-bot", bot=True))
            case "GET", ["oauth2", "applications", "@me"]:
                return reply(200, application())
            case "GET", ["gateway", "bot"]:
                return reply(200, {"url": self.gateway_url, "shards": self.shards, "session_start_limit": {
                    "total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": 1}})
            case "PUT", ["applications", _, "commands"]:
                return self._commands("global", body)
            case "PUT", ["applications", _, "guilds", gid, "commands"]:
                return self._commands(gid, body)
            case "POST", ["interactions", iid, _, "callback"]:
                self.callbacks.append(body)
                return reply(200, {"interaction": {"id": iid, "type": 2}})
            case "POST", ["webhooks", _, _]:
                self.followups.append(body)
                return reply(200, message_json(next(self._ids), 0, body))
            case "POST", ["users", "@me", "channels"]:
                return reply(200, self.channels[self.dm_with(int(body["recipient_id"]))])
            case "GET", ["channels", cid]:
                found = self.channels.get(int(cid)) or self.threads.get(int(cid))
                return reply(200, found) if found else unknown_channel()
            case "POST", ["channels", cid, "messages"]:
                return self._post(int(cid), body)
            case "POST", ["channels", cid, "threads"]:
                return self._forum_post(int(cid), body)
            case "POST", ["channels", cid, "messages", mid, "threads"]:
                return self._thread_from(int(cid), int(mid), body)
        return reply(404, {"message": f"no route {method} {'/'.join(parts)}", "code": 0})

    def _commands(self, where: str, body: Any) -> web.Response:
        self.commands[where] = list(body)
        return reply(200, [{**c, "id": str(next(self._ids)), "application_id": str(APP_ID), "version": "1"}
                           for c in body])

    def _post(self, cid: int, body: dict[str, Any]) -> web.Response:
        queued = self.thread_script if cid in self.threads and self.thread_script else self.script.get(cid)
        if queued:
            status, data = queued.pop(0)
            return reply(status, data, {"Via": "1.1 google"} if status == 429 else None)
        if cid not in self.channels and cid not in self.threads:
            return unknown_channel()
        if self.channels.get(cid, {}).get("type") == FORUM:
            return reply(400, {"message": "Cannot send messages in a non-text channel", "code": 50008})
        if self.enforce and (limited := self._channel_limited(cid)) is not None:
            return limited
        return self._accept(cid, body)

    def _channel_limited(self, cid: int) -> web.Response | None:
        now, log = self.clock(), self._per_channel[cid]
        while log and log[0] <= now - self.channel_period:
            log.popleft()
        if len(log) >= self.channel_limit:
            self.too_many += 1
            return reply(429, {"message": "You are being rate limited.", "global": False,
                               "retry_after": round(log[0] + self.channel_period - now, 3)},
                         {"Via": "1.1 google", "X-RateLimit-Scope": "user",
                          **self._bucket(cid, 0, log[0] + self.channel_period - now)})
        log.append(now)
        return None

    def _bucket(self, cid: int, remaining: int, reset_after: float) -> dict[str, str]:
        return {"X-RateLimit-Bucket": f"messages-{cid}", "X-RateLimit-Limit": str(self.channel_limit),
                "X-RateLimit-Remaining": str(remaining), "X-RateLimit-Reset-After": f"{reset_after:.3f}"}

    def _accept(self, cid: int, body: dict[str, Any]) -> web.Response:
        mid = next(self._ids)
        self.messages.append(Sent(cid, body, mid))
        headers = None
        if self.enforce:
            log = self._per_channel[cid]
            reset = log[0] + self.channel_period - self.clock()
            headers = self._bucket(cid, self.channel_limit - len(log), reset)
        return reply(200, message_json(mid, cid, body), headers)

    def _thread_from(self, cid: int, mid: int, body: dict[str, Any]) -> web.Response:
        channel = self.channels.get(cid)
        if channel is None:
            return unknown_channel()
        if channel["type"] == DM:
            return reply(400, {"message": "Cannot execute action on this channel type", "code": 50024})
        return reply(201, self._thread(cid, str(body.get("name", ""))))

    def _forum_post(self, cid: int, body: dict[str, Any]) -> web.Response:
        if self.channels.get(cid, {}).get("type") != FORUM:
            return unknown_channel()
        thread = self._thread(cid, str(body.get("name", "")))
        self._accept(int(thread["id"]), dict(body.get("message", {})))
        return reply(201, thread)

    def add_thread(self, parent: int, name: str = "talk") -> int:
        """A thread under ``parent`` (as a member would start one); its id."""
        return int(self._thread(parent, name)["id"])

    def _thread(self, parent: int, name: str) -> dict[str, Any]:
        tid = next(self._ids)
        self.threads[tid] = {"id": str(tid), "type": 11, "name": name, "parent_id": str(parent),
                             "guild_id": str(GUILD_ID), "owner_id": str(BOT_ID), "message_count": 0,
                             "member_count": 1, "thread_metadata": {
                                 "archived": False, "auto_archive_duration": 1440, "locked": False,
                                 "archive_timestamp": "2026-09-29T00:00:00+00:00"}}
        return self.threads[tid]

    # -- gateway -------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        asked = request.query.get("compress")
        self.compression.append(asked)
        if asked == "zlib-stream" and not self.plain:
            self._zlib[ws] = zlib.compressobj()
        self._sockets.append(ws)
        await self._send(ws, {"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None})
        try:
            async for frame in ws:
                if frame.type == WSMsgType.TEXT:
                    await self._on_frame(ws, json.loads(frame.data))
        finally:
            self._sockets.remove(ws)
        return ws

    async def _send(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        """One gateway frame: zlib-stream bytes ending in a sync flush, or a text frame."""
        text = json.dumps(frame)
        stream = self._zlib.get(ws)
        if stream is None:
            await ws.send_str(text)
        else:
            await ws.send_bytes(stream.compress(text.encode()) + stream.flush(zlib.Z_SYNC_FLUSH))
            self.zlib_frames += 1

    def shard_of(self, guild_id: int, count: int) -> int:
        """The shard that carries a guild's events (Discord's rule)."""
        return (guild_id >> 22) % count

    async def _on_frame(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        if frame["op"] == 1:
            await self._send(ws, {"op": 11, "d": None, "s": None, "t": None})
        elif frame["op"] == 2:
            identify = {k: v for k, v in dict(frame["d"]).items() if k != "token"}
            self.identifies.append(identify)
            shard, count = identify.get("shard", [0, 1])
            self._shard_of[ws] = shard
            mine = self.shard_of(GUILD_ID, count) == shard
            sharded = {"shard": [shard, count]} if "shard" in identify else {}
            await self._dispatch(ws, "READY", {
                "v": 10, "user": user(BOT_ID, "digest-bot", bot=True), **sharded,
                "session_id": f"s{len(self.identifies)}", "resume_gateway_url": self.gateway_url,
                "guilds": [{"id": str(GUILD_ID), "unavailable": True}] if mine else [],
                "application": {"id": str(APP_ID), "flags": 0}})
            if mine:
                await self._dispatch(ws, "GUILD_CREATE", self._guild())

    def _guild(self) -> dict[str, Any]:
        channels = [c for c in self.channels.values() if c.get("guild_id")]
        return {"id": str(GUILD_ID), "name": "Compilers", "owner_id": "1", "icon": None, "roles": [
            {"id": str(GUILD_ID), "name": "@everyone", "permissions": str(SEND), "position": 0, "color": 0,
             "hoist": False, "managed": False, "mentionable": False}],
            "channels": channels, "threads": [], "members": [], "member_count": 2, "emojis": [],
            "stickers": [], "features": [], "unavailable": False, "large": False, "preferred_locale": "en-US"}

    async def _dispatch(self, ws: web.WebSocketResponse, event: str, data: dict[str, Any]) -> None:
        self._seq[ws] = self._seq.get(ws, 0) + 1
        await self._send(ws, {"op": 0, "t": event, "s": self._seq[ws], "d": data})

    def _socket_for(self, dm: bool) -> web.WebSocketResponse:
        """The newest connection of the shard that carries the guild (DMs: shard 0)."""
        count = max((int(i.get("shard", [0, 1])[1]) for i in self.identifies), default=1)
        wanted = 0 if dm else self.shard_of(GUILD_ID, count)
        return next(ws for ws in reversed(self._sockets) if self._shard_of.get(ws, 0) == wanted)

    async def interact(self, name: str, options: dict[str, Any] | None = None, *, channel: int,
                       permissions: int = SEND | MANAGE_CHANNELS, locale: str = "en-US",
                       dm: bool = False, kind: int = 2, wait: bool = True) -> dict[str, Any]:
        """Send an INTERACTION_CREATE for ``/name options``; return the bot's callback body."""
        iid = next(self._ids)
        data = interaction(iid, name, options or {}, channel=self.channels.get(channel)
                           or self.threads[channel], permissions=permissions, locale=locale, dm=dm, kind=kind)
        before = len(self.callbacks)
        await self._dispatch(self._socket_for(dm), "INTERACTION_CREATE", data)
        if not wait:
            return {}
        await self.until(lambda: len(self.callbacks) > before)
        return self.callbacks[before]

    async def until(self, predicate: Any, timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` holds (the fake notifies after every request)."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)

    async def connected(self) -> None:
        async with self._changed:
            self._changed.notify_all()
        while not self._sockets:
            await asyncio.sleep(0.01)


def reply(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    # body= (not text=): aiohttp would add "; charset=utf-8", and discord.py parses exactly application/json
    return web.Response(status=status, body=json.dumps(body).encode(), headers={"Content-Type": JSON_TYPE,
                                                                              **(headers or {})})


def unknown_channel() -> web.Response:
    return reply(404, {"message": "Unknown Channel", "code": 10003})


def user(uid: int, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {"id": str(uid), "username": name, "discriminator": "0", "global_name": name, "avatar": None,
            "bot": bot}


def application() -> dict[str, Any]:
    return {"id": str(APP_ID), "name": "digest", "description": "", "icon": None, "bot_public": True,
            "bot_require_code_grant": False, "owner": user(1, "owner"), "verify_key": "00", "flags": 0}


def message_json(mid: int, cid: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(mid), "channel_id": str(cid), "type": 0, "content": body.get("content", ""),
            "embeds": body.get("embeds", []), "author": user(BOT_ID, "digest-bot", bot=True),
            "attachments": [], "mentions": [], "mention_roles": [], "mention_everyone": False,
            "pinned": False,
            "tts": False, "timestamp": "2026-09-29T00:00:00+00:00", "edited_timestamp": None, "flags": 0,
            "components": []}


def interaction(iid: int, name: str, options: dict[str, Any], *, channel: dict[str, Any], permissions: int,
                locale: str, dm: bool, kind: int) -> dict[str, Any]:
    """An application command (``kind`` 2) or autocomplete (4) interaction, from a guild member or a DM."""
    opts = [{"name": k, "type": 4 if isinstance(v, int) else 3, "value": v,
             **({"focused": True} if kind == 4 and n == 0 else {})}
            for n, (k, v) in enumerate(options.items())]
    data: dict[str, Any] = {
        "id": str(iid), "application_id": str(APP_ID), "type": kind, "token": f"tok{iid}", "version": 1,
        "data": {"id": "1", "name": name, "type": 1, "options": opts},
        "channel_id": channel["id"], "channel": channel, "locale": locale, "app_permissions": str(SEND),
        "entitlements": [], "authorizing_integration_owners": {}, "context": 1 if dm else 0,
        "attachment_size_limit": 10 << 20,
    }
    member_user = user(77, "member")
    if dm:
        data["user"] = member_user
    else:
        data.update(guild_id=str(GUILD_ID), guild_locale="en-US", member={
            "user": member_user, "roles": [], "permissions": str(permissions),
            "joined_at": "2026-01-01T00:00:00+00:00",
            "deaf": False, "mute": False, "flags": 0})
    return data
