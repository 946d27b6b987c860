"""``digest serve`` as it runs: the real uvicorn server on 127.0.0.1, its bind check, its access log.

The CLI tests run ``python -m digest serve --web`` as a subprocess (a private
SQLite database and var folder under tmp) and read what it prints; the others
serve the app in this process through the same ``make_server``.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

import httpx

from digest.cli.web import make_server, run_web
from digest.config import load_settings
from digest.deliver.confirm_mail import one_shot
from digest.deliver.smtp import SmtpChannel, SmtpConfig
from digest.store.db import SessionFactory
from digest.web.app import create_app
from digest.web.subscribe import SubscriptionSetup
from tests.archive import SITE_URL, TZ, renderer
from tests.smtpserver import Faults, SMTPTestServer, smtp_server
from tests.webapp import IDENTITY, SECRET, Clock, token_in

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette

ROOT = Path(__file__).resolve().parent.parent
SERVING = re.compile(r"^digest: serving the web archive on (http://127\.0\.0\.1:(\d+)/)$")
WAIT = 60.0  # seconds a step may take at most before the test gives up (a hang guard, not a speed check)


def serve_env(tmp: Path) -> dict[str, str]:
    """The environment of a served subprocess: private database, var folder and mail outbox."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env |= {"DIGEST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'web.db'}",
            "DIGEST_VAR_DIR": str(tmp / "var"), "DIGEST_MAIL_OUTBOX": str(tmp / "outbox"),
            "DIGEST_SITE_URL": SITE_URL, "PYTHONUNBUFFERED": "1",
            "FORWARDED_ALLOW_IPS": "*"}  # uvicorn's own switch: it must not make the server trust anyone
    return env


def serve(tmp: Path, *args: str) -> subprocess.Popen[str]:
    """``python -m digest serve --web ARGS`` in ``tmp``, its output piped."""
    return subprocess.Popen([sys.executable, "-m", "digest", "serve", "--web", *args], cwd=tmp,
                            env=serve_env(tmp), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@dataclass
class Output:
    """Every line a stream printed, collected by a thread (so a full pipe never blocks the server)."""

    lines: list[str] = field(default_factory=list)
    fresh: queue.Queue[str | None] = field(default_factory=queue.Queue)

    def follow(self, stream: IO[str]) -> threading.Thread:
        def read() -> None:
            for line in stream:
                self.lines.append(line.rstrip("\n"))
                self.fresh.put(line.rstrip("\n"))
            self.fresh.put(None)

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        return thread

    def wait_for(self, pattern: re.Pattern[str]) -> re.Match[str]:
        while (line := self.fresh.get(timeout=WAIT)) is not None:
            if found := pattern.match(line):
                return found
        raise AssertionError("the server stopped before printing the line: " + "\n".join(self.lines))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@contextmanager
def serving(tmp: Path) -> Iterator[tuple[str, Output, Output]]:
    """``digest serve --web --port 0``: its URL once it says it serves, and its stdout and stderr.

    On leaving, SIGTERM (a graceful stop, as a service manager sends) and wait for the exit.
    """
    proc = serve(tmp, "--port", "0")
    out, err = Output(), Output()
    threads = [out.follow(proc.stdout), err.follow(proc.stderr)]  # type: ignore[arg-type]
    try:
        yield err.wait_for(SERVING)[1], out, err
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=WAIT)
        finally:
            proc.kill()
            for thread in threads:
                thread.join(timeout=WAIT)


def test_serve_on_a_taken_port_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = serve(tmp_path, "--port", str(port))
        stdout, stderr = done.communicate(timeout=WAIT)
    assert done.returncode == 1, stderr
    line = f"digest: error: cannot listen on 127.0.0.1:{port}: address already in use"
    assert stderr.splitlines() == [line]
    assert stdout == "" and not (tmp_path / "web.db").exists()  # checked before anything else happened


async def test_serve_says_it_serves_once_it_does_and_logs_no_token(tmp_path: Path) -> None:
    secrets = [f"SeCrEt{n}x" for n in range(6)]
    paths = [f"/preferences?token={secrets[0]}&lang=en", f"/unsubscribe?lang=zh&token={secrets[1]}",
             f"/confirm?token={secrets[2]}", f"/subscribe?form_token={secrets[3]}",
             f"/preferences?%74oken={secrets[4]}", f"/unsubscribe?x=%22&token={secrets[5]}"]
    with serving(tmp_path) as (base, out, err):
        async with httpx.AsyncClient(base_url=base) as c:
            assert (await c.get("/healthz")).json()["status"] == "ok"  # serving as soon as it says so
            for path in paths:
                answer = await c.get(path, headers={"x-forwarded-for": "198.51.100.9"})
                assert answer.status_code in (200, 400)
            form = await c.get("/subscribe")
            posted = await c.post("/subscribe", data={"address": "reader@example.org", "layers": ["runtime"],
                                                      "min_score": "0", "locale": "en",
                                                      "form_token": token_in(form.text)})
            assert posted.status_code == 200
    logged = out.text + err.text
    assert not any(secret in logged for secret in secrets), logged
    requests = [line for line in out.lines if '"GET /' in line]
    assert len(requests) == len(paths) + 2, out.text
    assert all(line.startswith("INFO:     127.0.0.1:") for line in requests)  # the peer, not the header
    assert '"GET /preferences?token=REDACTED&lang=en HTTP/1.1" 400' in out.text
    assert '"GET /unsubscribe?lang=zh&token=REDACTED HTTP/1.1" 400' in out.text
    assert '"GET /preferences?%74oken=REDACTED HTTP/1.1"' in out.text
    assert err.text.count("digest: serving the web archive") == 1
    [mail] = (tmp_path / "outbox").glob("*.eml")  # the confirmation mail, done before the server stopped
    assert b"To: reader@example.org" in mail.read_bytes()


def subscribe_app(sessions: SessionFactory, smtp: SMTPTestServer,
                  trusted_proxies: tuple[str, ...] = ()) -> Starlette:
    """The app with the subscription pages on a clock that stands still (the throttle windows never move)."""
    clock = Clock()
    config = SmtpConfig(host=smtp.host, port=smtp.port, tls="none", envelope_from="digest@example.org")
    setup = SubscriptionSetup(SECRET, IDENTITY, one_shot(lambda: SmtpChannel(config)))
    return create_app(sessions, renderer(), site_url=SITE_URL, default_locale="zh", timezone=TZ, clock=clock,
                      subscriptions=setup, trusted_proxies=trusted_proxies)


async def started(server: uvicorn.Server, task: asyncio.Task[None]) -> str:
    """The base URL of ``server`` once it accepts connections (``task`` runs it)."""
    for _ in range(int(WAIT / 0.02)):
        if server.started or task.done():
            break
        await asyncio.sleep(0.02)
    assert server.started, task.exception() if task.done() else "uvicorn did not start"
    return f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"


@asynccontextmanager
async def served(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """``app`` on the uvicorn server ``digest serve`` builds, on an ephemeral loopback port."""
    server = make_server(app, "127.0.0.1", 0)
    task = asyncio.create_task(server.serve())
    base = await started(server, task)
    try:
        async with httpx.AsyncClient(base_url=base) as client:
            yield client
    finally:
        server.should_exit = True
        await task


async def post_eleven(c: httpx.AsyncClient, prefix: str, forwarded: str) -> None:
    """Eleven subscribe POSTs (one over the per-client limit), each with its own X-Forwarded-For."""
    token = token_in((await c.get("/subscribe")).text)
    for n in range(11):
        data = {"address": f"{prefix}{n}@example.org", "layers": ["runtime"], "min_score": "0",
                "locale": "zh", "form_token": token}
        answer = await c.post("/subscribe", data=data, headers={"x-forwarded-for": forwarded.format(n=n)})
        assert answer.status_code == 200


async def test_the_server_believes_forwarded_for_only_from_trusted_proxies(
    sqlite_sessions: SessionFactory,
) -> None:
    with smtp_server() as smtp:
        async with served(subscribe_app(sqlite_sessions, smtp)) as c:  # default: no header is believed
            await post_eleven(c, "one", "198.51.100.{n}")
        assert len(smtp.received) == 10
        async with served(subscribe_app(sqlite_sessions, smtp, ("127.0.0.1",))) as c:
            await post_eleven(c, "many", "198.51.100.{n}")
        assert len(smtp.received) == 21


async def test_a_subscription_mail_still_goes_out_when_the_server_stops(tmp_path: Path) -> None:
    with smtp_server(Faults(delay=1.0)) as smtp:  # a mail takes a second: the stop comes while it is sent
        settings = load_settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'web.db'}",
                                 var_dir=tmp_path / "var", site_url=SITE_URL, timezone=TZ,
                                 smtp_host=smtp.host, smtp_port=smtp.port, smtp_tls="none")
        servers: list[uvicorn.Server] = []
        task = asyncio.create_task(run_web(settings, "127.0.0.1", 0, on_server=servers.append))
        while not servers:
            assert not task.done(), task.exception()
            await asyncio.sleep(0.02)
        async with httpx.AsyncClient(base_url=await started(servers[0], task)) as c:
            token = token_in((await c.get("/subscribe")).text)
            answer = await c.post("/subscribe", data={"address": "late@example.org", "layers": ["runtime"],
                                                      "min_score": "0", "locale": "zh", "form_token": token})
        assert answer.status_code == 200
        servers[0].should_exit = True
        await asyncio.wait_for(task, WAIT)
        assert [r.rcpt_tos for r in smtp.received] == [("late@example.org",)]
