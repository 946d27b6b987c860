"""``digest bot telegram`` as an operator runs it: one line, never a traceback, when the API is away."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

TOKEN = "123456:ABC-secret-token-value"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    base.update(DIGEST_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'bot.db'}",
                DIGEST_VAR_DIR=str(tmp_path / "var"), **env)
    return subprocess.run([sys.executable, "-m", "digest", "bot", "telegram"], cwd=tmp_path, env=base,
                          capture_output=True, text=True, timeout=120)


def test_an_unreachable_bot_api_is_one_line_and_exit_1(tmp_path: Path) -> None:
    api = f"http://127.0.0.1:{_closed_port()}/bot"
    done = _run(tmp_path, DIGEST_TELEGRAM_TOKEN=TOKEN, DIGEST_TELEGRAM_API_BASE=api)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert len(lines) == 1 and "cannot reach the Telegram Bot API" in lines[0], done.stderr
    assert TOKEN not in done.stderr and "secret-token" not in done.stderr


def test_a_missing_token_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    done = _run(tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "digest: error: DIGEST_TELEGRAM_TOKEN is not set (the token @BotFather gave the bot)"]
