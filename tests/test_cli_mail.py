"""``digest mail test`` and ``publish --to``: a real message through the mail transport, and where it went.

Every command runs as a user runs it (``python -m digest`` in a subprocess); SMTP is
the aiosmtpd server of tests/smtpserver.py on 127.0.0.1, the outbox a real folder.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
import subprocess
import sys
from email import message_from_bytes, policy
from pathlib import Path

import pytest

from digest.domain.window import latest_closed
from tests.smtpserver import Faults, smtp_server

NOW = dt.datetime(2026, 12, 5, 3, 0, tzinfo=dt.UTC)  # as tests/test_cli.py: the samples' window is closed


def digest(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m digest ARGS`` in ``tmp`` with a private database and outbox, plus ``env``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    clean |= {"DIGEST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'mail.db'}", "DIGEST_NOW": NOW.isoformat(),
              "DIGEST_MAIL_OUTBOX": str(tmp / "outbox"), "DIGEST_VAR_DIR": str(tmp / "var"), **env}
    return subprocess.run([sys.executable, "-m", "digest", *args], capture_output=True, text=True,
                          env=clean, cwd=tmp, timeout=120)


def smtp_env(port: int) -> dict[str, str]:
    return {"DIGEST_SMTP_HOST": "127.0.0.1", "DIGEST_SMTP_PORT": str(port), "DIGEST_SMTP_TLS": "none"}


def test_without_smtp_the_message_is_an_eml_whose_path_is_printed(tmp_path: Path) -> None:
    out = digest(tmp_path, "mail", "test", "--to", "ops@example.org")
    assert out.returncode == 0, out.stderr
    written = re.fullmatch(r"written to (\S+\.eml) \(no DIGEST_SMTP_HOST: the file outbox\)\n", out.stdout)
    assert written, out.stdout
    path = Path(written[1])
    assert path.parent == tmp_path / "outbox"
    message = message_from_bytes(path.read_bytes(), policy=policy.default)
    assert message["To"] == "ops@example.org" and "test message" in message["Subject"]
    assert "digest mail test" in message.get_body(("plain",)).get_content()  # type: ignore[union-attr]


def test_smtp_delivers_end_to_end_and_names_the_server(tmp_path: Path) -> None:
    with smtp_server() as server:
        out = digest(tmp_path, "mail", "test", "--to", "ops@example.org", **smtp_env(server.port))
        received = server.received
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"sent to ops@example.org via smtp 127.0.0.1:{server.port}: ")
    assert "Message accepted for delivery" in out.stdout, "the server's own answer (aiosmtpd's words)"
    assert [r.rcpt_tos for r in received] == [("ops@example.org",)]
    assert received[0].message_id in out.stdout
    assert not (tmp_path / "outbox").exists()


def test_a_refused_recipient_is_one_line_with_the_servers_reason(tmp_path: Path) -> None:
    with smtp_server(Faults(refuse={"gone@example.org"})) as server:
        out = digest(tmp_path, "mail", "test", "--to", "gone@example.org", **smtp_env(server.port))
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "550" in out.stderr and "gone@example.org" in out.stderr


def test_a_wrong_password_is_one_line(tmp_path: Path) -> None:
    with smtp_server(Faults(password="right")) as server:
        out = digest(tmp_path, "mail", "test", "--to", "ops@example.org", **smtp_env(server.port),
                     DIGEST_SMTP_USER="digest", DIGEST_SMTP_PASSWORD="wrong")
        assert server.received == []
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "535" in out.stderr and "wrong" not in out.stderr


def test_no_server_listening_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on once it is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = digest(tmp_path, "mail", "test", "--to", "ops@example.org", **smtp_env(port))
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in out.stderr


@pytest.mark.parametrize("address", ["not-an-address", "a@b@example.org",
                                     "ops@example.org\r\nBcc: x@evil.org", "ünï@example.org"])
def test_a_bad_address_is_a_usage_error(tmp_path: Path, address: str) -> None:
    out = digest(tmp_path, "mail", "test", "--to", address)
    assert out.returncode == 2
    assert out.stderr.startswith("digest: --to: ") and out.stderr.count("\n") == 1
    assert not (tmp_path / "outbox").exists()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The bundled samples fetched and the latest closed window built and published (no subscriber)."""
    tmp = tmp_path_factory.mktemp("publish")
    samples = digest(tmp, "samples", "--out", str(tmp / "samples"))
    assert samples.returncode == 0, samples.stderr
    sources = Path(samples.stdout.strip())
    run = digest(tmp, "run", DIGEST_SOURCES=str(sources))
    assert run.returncode == 0, run.stderr
    return tmp, sources, latest_closed(NOW, "Asia/Shanghai").isoformat()


def test_publish_to_prints_the_path_of_the_check_copy(built: tuple[Path, Path, str]) -> None:
    tmp, sources, date = built
    out = digest(tmp, "publish", "--date", date, "--to", "me@example.org", DIGEST_SOURCES=str(sources))
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("check copy"))
    found = re.fullmatch(r"check copy to me@example.org written to (\S+\.eml)", line)
    assert found, line
    path = Path(found[1])
    assert path.parent == tmp / "outbox" and path.name.startswith(f"digest-{date}-check-")
    assert message_from_bytes(path.read_bytes(), policy=policy.default)["To"] == "me@example.org"


def test_publish_to_over_smtp_names_the_server(built: tuple[Path, Path, str]) -> None:
    tmp, sources, date = built
    with smtp_server() as server:
        out = digest(tmp, "publish", "--date", date, "--to", "me@example.org", DIGEST_SOURCES=str(sources),
                     **smtp_env(server.port))
        received = server.received
    assert out.returncode == 0, out.stderr
    assert f"check copy to me@example.org sent via smtp 127.0.0.1:{server.port}" in out.stdout
    assert [r.rcpt_tos for r in received] == [("me@example.org",)]
