"""SMTP delivery through aiosmtplib: a small pool of reused connections, a rate, and a verdict per send.

Verdicts (``digest.channels.Outcome``), as the outbox acts on them:

| where it failed                         | verdict   | what follows                        |
|-----------------------------------------|-----------|-------------------------------------|
| 5xx at RCPT TO (this mailbox)           | PERMANENT | subscriber bounced, row failed      |
| any 4xx; dropped connection; timeout    | TRANSIENT | retried with backoff, then later    |
| 5xx at DATA (the server refused *this*  | BUG       | row failed loudly, subscriber stays |
| message: too long a line, content)      |           |                                     |
| authentication; 5xx at connect, EHLO,   | FATAL     | the run stops, nobody is marked     |
| STARTTLS or MAIL FROM; TLS certificate; |           |                                     |
| ``CONNECT_LIMIT`` connects in a row fail|           |                                     |

A connection that saw an error is dropped; the next send opens a new one.
Recipients are ASCII addresses only (``headers.sendable_address``, as the
subscribe form and the composer require): no SMTPUTF8, so an internationalised
mailbox name is PERMANENT before any connection, whatever the server offers.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass

import aiosmtplib

from digest.deliver.channels import Message, Outcome, SendResult
from digest.deliver.headers import sendable_address
from digest.domain.ratelimit import Clock, Rate, SharedLimiter, Sleep, per_second
from digest.domain.status import ChannelName

BUCKET = "smtp"  # the shared rate bucket's key (messages per second over every worker)
CONNECT_LIMIT = 5  # consecutive failed connects before the server counts as unreachable (FATAL)


@dataclass(frozen=True)
class SmtpConfig:
    """Where and how to send."""

    host: str
    port: int = 587
    user: str | None = None
    password: str | None = None
    tls: str = "auto"  # auto (STARTTLS when offered) | starttls | ssl | none
    timeout: float = 60.0
    concurrency: int = 4
    rate: float = 0.0  # messages per second over all connections; 0 = unlimited
    envelope_from: str = "digest@localhost"

    @property
    def where(self) -> str:
        return f"smtp {self.host}:{self.port}"


class SessionRefused(Exception):
    """The server refused the session itself (FATAL) or could not be reached now (TRANSIENT)."""

    def __init__(self, outcome: Outcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome


def _reply(exc: aiosmtplib.SMTPResponseException) -> str:
    return f"{exc.code} {' '.join(str(exc.message).split())}"[:300]


def connect_verdict(exc: BaseException) -> Outcome:
    """What a failure while opening a session means."""
    if isinstance(exc, aiosmtplib.SMTPAuthenticationError | aiosmtplib.SMTPNotSupported | ssl.SSLError):
        return Outcome.FATAL
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return Outcome.FATAL if exc.code >= 500 else Outcome.TRANSIENT
    if isinstance(exc, OSError | asyncio.TimeoutError | aiosmtplib.SMTPServerDisconnected):
        return Outcome.TRANSIENT
    return Outcome.FATAL


def send_verdict(exc: BaseException) -> tuple[Outcome, str, bool]:
    """(verdict, reason, keep the connection) for a failure during one mail transaction."""
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        first = exc.recipients[0]
        return (Outcome.PERMANENT if first.code >= 500 else Outcome.TRANSIENT,
                f"RCPT TO refused: {_reply(first)}", True)
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        keep = exc.code != 421
        if exc.code < 500:
            return Outcome.TRANSIENT, _reply(exc), keep
        if isinstance(exc, aiosmtplib.SMTPSenderRefused):
            return Outcome.FATAL, f"MAIL FROM refused: {_reply(exc)}", False
        return Outcome.BUG, f"message refused: {_reply(exc)}", keep
    if isinstance(exc, ValueError):
        return Outcome.PERMANENT, f"unusable address: {exc}", True
    return Outcome.TRANSIENT, f"connection lost: {type(exc).__name__}: {exc}"[:300], False


class SmtpChannel:
    """The email channel over SMTP: reused connections, ``concurrency`` at most, ``rate`` msgs/s."""

    name: str = ChannelName.EMAIL

    def __init__(self, config: SmtpConfig, *, clock: Clock = time.monotonic,
                 sleep: Sleep = asyncio.sleep) -> None:
        self.config = config
        self.concurrency = config.concurrency
        self._idle: list[aiosmtplib.SMTP] = []
        self._slots = asyncio.Semaphore(config.concurrency)
        self._rate = per_second(config.rate, clock=clock, sleep=sleep)
        self._shared: SharedLimiter | None = None
        self._connect_failures = 0

    def share_limits(self, shared: SharedLimiter) -> None:
        """Keep ``rate`` with every worker (bucket ``smtp``) instead of in this process."""
        self._shared = shared

    async def _pace(self) -> None:
        """Wait for the rate: the shared bucket when there is one, else this process's limiter."""
        if self._shared is not None and self.config.rate > 0:
            await self._shared.acquire(Rate(BUCKET, self.config.rate))
        else:
            await self._rate.acquire()

    def _client(self) -> aiosmtplib.SMTP:
        tls = self.config.tls
        return aiosmtplib.SMTP(
            hostname=self.config.host, port=self.config.port, username=self.config.user,
            password=self.config.password, timeout=self.config.timeout, use_tls=tls == "ssl",
            start_tls={"auto": None, "starttls": True}.get(tls, False),
        )

    async def _connect(self) -> aiosmtplib.SMTP:
        client = self._client()
        try:
            await client.connect()
        except Exception as exc:
            self._connect_failures += 1
            verdict = connect_verdict(exc)
            if verdict is Outcome.TRANSIENT and self._connect_failures >= CONNECT_LIMIT:
                verdict = Outcome.FATAL
            detail = _reply(exc) if isinstance(exc, aiosmtplib.SMTPResponseException) else str(exc)
            raise SessionRefused(verdict, f"{self.config.where}: cannot open a session: "
                                          f"{type(exc).__name__}: {detail}"[:400]) from exc
        self._connect_failures = 0
        return client

    async def send(self, message: Message) -> SendResult:
        """Send the one RFC 5322 part of ``message`` to its address."""
        if not sendable_address(message.address):  # what the composer and the subscribe form require
            return SendResult(Outcome.PERMANENT, message.start_part,
                              f"{self.config.where}: unusable address {message.address[:80]!r}: only ASCII "
                              "addresses are sent to (no SMTPUTF8), and none holding '=?'")
        async with self._slots:
            await self._pace()
            try:
                client = self._idle.pop() if self._idle else await self._connect()
            except SessionRefused as exc:
                return SendResult(exc.outcome, message.start_part, str(exc))
            result, keep = await self._transaction(client, message)
            if keep and client.is_connected:
                self._idle.append(client)
            else:
                client.close()
            return result

    async def _transaction(self, client: aiosmtplib.SMTP, message: Message) -> tuple[SendResult, bool]:
        try:
            _, answer = await client.sendmail(self.config.envelope_from, [message.address], message.parts[0])
        except (TimeoutError, aiosmtplib.SMTPException, OSError, ValueError) as exc:
            verdict, reason, keep = send_verdict(exc)
            return SendResult(verdict, message.start_part, f"{self.config.where}: {reason}"), keep
        said = " ".join(str(answer).split())[:200]  # the server's words: one line, bounded
        return SendResult(Outcome.SENT, len(message.parts), detail=f"{self.config.where}: {said}"), True

    async def aclose(self) -> None:
        """Say QUIT on every idle connection."""
        idle, self._idle = self._idle, []
        for client in idle:
            try:
                await asyncio.wait_for(client.quit(), timeout=5)
            except (TimeoutError, aiosmtplib.SMTPException, OSError):
                client.close()
