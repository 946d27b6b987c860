"""A real SMTP server for tests: aiosmtpd on 127.0.0.1 (ephemeral port) with fault injection.

The server runs in its own thread (aiosmtpd's ``Controller``) and records every
accepted message: envelope, raw bytes and the parsed message. Faults, set on
``server.faults`` before or during a test:

- ``refuse``: mailboxes answered ``550`` at RCPT TO (a permanent refusal);
- ``defer_first``: mailboxes whose first DATA gets ``451`` (a transient refusal);
- ``drop_first``: mailboxes whose first DATA drops the connection before answering;
- ``cut_first``: mailboxes whose first DATA is cut off in the middle: the server
  reads ``cut_after`` lines of the message, then drops the connection (no answer);
- ``password``: AUTH required; any other password gets ``535``;
- ``delay``: seconds spent on each message before answering (slow mode).

aiosmtpd refuses any line over 998 octets (RFC 5322), as strict servers do.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import warnings
from collections import Counter
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session


@dataclass(frozen=True)
class Received:
    """One accepted message."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    data: bytes

    @property
    def message(self) -> EmailMessage:
        """The message parsed with the modern policy."""
        parsed = message_from_bytes(self.data, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed

    @property
    def message_id(self) -> str:
        """The Message-ID header."""
        return str(self.message["Message-ID"])


@dataclass
class Faults:
    """What the server does wrong, on purpose."""

    refuse: set[str] = field(default_factory=set)
    defer_first: set[str] = field(default_factory=set)
    drop_first: set[str] = field(default_factory=set)
    cut_first: set[str] = field(default_factory=set)
    cut_after: int = 5  # lines of the message read before a cut
    password: str | None = None
    delay: float = 0.0


class RecordingHandler:
    """An aiosmtpd handler that records accepted messages and injects faults."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.received: list[Received] = []
        self.data_attempts: Counter[str] = Counter()
        self.cut: Counter[str] = Counter()  # transfers cut off mid-DATA, per mailbox
        self.connections = 0
        self.lock = threading.Lock()

    async def handle_RCPT(self, server: SMTPServer, session: Session, envelope: Envelope,
                          address: str, rcpt_options: list[str]) -> str:
        if address in self.faults.refuse:
            return f"550 5.1.1 <{address}>: mailbox unavailable"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        if self.faults.delay:
            await asyncio.sleep(self.faults.delay)
        rcpt = envelope.rcpt_tos[0]
        with self.lock:
            self.data_attempts[rcpt] += 1
            first = self.data_attempts[rcpt] == 1
        if first and rcpt in self.faults.defer_first:
            return "451 4.3.0 try again later"
        if first and rcpt in self.faults.drop_first:
            assert server.transport is not None
            server.transport.abort()
            return "421 4.4.2 connection dropped"
        content = envelope.original_content or envelope.content
        assert isinstance(content, bytes)
        with self.lock:
            self.received.append(Received(str(envelope.mail_from), tuple(envelope.rcpt_tos), content))
        return "250 Message accepted for delivery"

    def cut_now(self, rcpt: str) -> bool:
        """True (once per mailbox) when this DATA of ``rcpt`` is to be cut off in the middle."""
        with self.lock:
            if rcpt not in self.faults.cut_first or self.cut[rcpt]:
                return False
            self.cut[rcpt] += 1
            self.data_attempts[rcpt] += 1
            return True

    def authenticate(self, server: SMTPServer, session: Session, envelope: Envelope,
                     mechanism: str, auth_data: Any) -> AuthResult:
        """Accept only the configured password."""
        ok = isinstance(auth_data, LoginPassword) and auth_data.password.decode() == self.faults.password
        return AuthResult(success=ok, handled=False)


class _FaultySMTP(SMTPServer):
    """aiosmtpd's server, able to drop a connection in the middle of a message (``cut_first``)."""

    async def smtp_DATA(self, arg: str) -> None:
        handler = self.event_handler
        envelope = self.envelope
        if (isinstance(handler, RecordingHandler) and envelope is not None and envelope.rcpt_tos
                and not arg and handler.cut_now(envelope.rcpt_tos[0])):
            await self.push("354 End data with <CR><LF>.<CR><LF>")
            for _ in range(handler.faults.cut_after):
                await self._reader.readuntil(b"\r\n")
            assert self.transport is not None
            self.transport.abort()
            return
        await super().smtp_DATA(arg)


class _EphemeralController(Controller):
    """A Controller bound to a port the OS picks (no race between picking and binding)."""

    def __init__(self, handler: RecordingHandler, **kwargs: Any) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        super().__init__(handler, hostname="127.0.0.1", port=self._sock.getsockname()[1], **kwargs)

    def _create_server(self) -> Awaitable[asyncio.AbstractServer]:
        return self.loop.create_server(self._factory_invoker, sock=self._sock)

    def factory(self) -> SMTPServer:
        handler: RecordingHandler = self.handler
        handler.connections += 1
        with warnings.catch_warnings():  # AUTH without TLS is what a loopback test wants
            warnings.simplefilter("ignore")
            return _FaultySMTP(self.handler, **self.SMTP_kwargs)


class SMTPTestServer:
    """The running server: its port, what it received, its faults."""

    def __init__(self, faults: Faults | None = None) -> None:
        self.faults = faults or Faults()
        self.handler = RecordingHandler(self.faults)
        self.controller = _EphemeralController(
            self.handler, auth_require_tls=False, authenticator=self.handler.authenticate,
            auth_required=self.faults.password is not None, decode_data=False,
        )

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        return int(self.controller.port)

    @property
    def received(self) -> list[Received]:
        """A snapshot of the accepted messages, in order."""
        with self.handler.lock:
            return list(self.handler.received)

    def by_recipient(self) -> dict[str, list[Received]]:
        """Accepted messages grouped by recipient."""
        found: dict[str, list[Received]] = {}
        for item in self.received:
            for rcpt in item.rcpt_tos:
                found.setdefault(rcpt, []).append(item)
        return found

    def start(self) -> None:
        self.controller.start()
        self.handler.connections = 0  # the controller's own readiness probe is not a client

    def stop(self) -> None:
        self.controller.stop()


@contextmanager
def smtp_server(faults: Faults | None = None) -> Iterator[SMTPTestServer]:
    """Start a server for the block; stop it afterwards."""
    server = SMTPTestServer(faults)
    server.start()
    try:
        yield server
    finally:
        server.stop()
