"""``digest serve`` with both chat bots: one real process against the local fake Telegram and Discord.

The service's catch-up publishes the day, its report goes to the admin chat and
the admin channel (through the same push channels as the digest), both bots
answer a command while the service runs, and SIGTERM stops all of it with exit 0.
The fakes speak the platforms' wire formats over 127.0.0.1; the service is the
real ``python -m digest serve`` with the real python-telegram-bot and discord.py.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from tests import fake_discord, fake_telegram
from tests.fake_discord import FakeDiscord
from tests.fake_telegram import FakeTelegram
from tests.smtpserver import Faults, smtp_server
from tests.test_serve import WAIT
from tests.test_service import ADMIN, DAY, NOW, SECRETS, Served, _add_reader, _env, _rows

ADMIN_CHAT = -100_777_000_123  # a Telegram supergroup the operator reads
READER_CHAT = 4242  # a Telegram user who asks the bot something


async def _until(check: Any, what: str) -> None:
    """Poll ``check()`` without blocking the loop (the fake Discord runs in it); fail after WAIT s."""
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        await asyncio.sleep(0.05)


async def test_serve_runs_both_bots_and_sends_the_admin_report_to_each_chat(tmp_path: Path) -> None:
    await _add_reader(tmp_path)
    async with FakeDiscord() as discord:
        admin_channel = discord.text_channel
        faults = Faults(password=SECRETS["DIGEST_SMTP_PASSWORD"])
        with FakeTelegram() as telegram, smtp_server(faults) as smtp:
            env = _env(tmp_path, smtp, NOW,
                       DIGEST_TELEGRAM_TOKEN=fake_telegram.TOKEN, DIGEST_TELEGRAM_API_BASE=telegram.base_url,
                       DIGEST_DISCORD_TOKEN=fake_discord.TOKEN, DIGEST_DISCORD_API_BASE=discord.api_base,
                       DIGEST_DISCORD_GATEWAY=discord.gateway_url,
                       DIGEST_ADMIN_TELEGRAM_CHAT=str(ADMIN_CHAT),
                       DIGEST_ADMIN_DISCORD_CHANNEL=str(admin_channel))
            served = Served(tmp_path, env)
            try:
                await asyncio.to_thread(served.started)
                await _until(lambda: telegram.sent(ADMIN_CHAT) and discord.sent_to(admin_channel)
                             and smtp.by_recipient().get(ADMIN), "the admin copies on all three channels")
                await _until(lambda: telegram.calls_of("getUpdates"), "the Telegram bot to poll")
                telegram.command(READER_CHAT, "/layers", chat_type="private")
                await _until(lambda: telegram.sent(READER_CHAT), "the Telegram bot's answer")
                await _until(lambda: discord._sockets, "the Discord bot to connect to the gateway")
                answer = await discord.interact("layers", channel=discord.text_channel)
            finally:
                code = await asyncio.to_thread(served.stop)
    assert code == 0, served.err.text
    tg_report = telegram.sent(ADMIN_CHAT)
    assert len(tg_report) == 1 and f"catch-up run of {DAY.isoformat()}: ok" in tg_report[0]["text"]
    assert tg_report[0]["text"].startswith("<pre>") and tg_report[0]["parse_mode"] == "HTML"
    dc_report = discord.sent_to(admin_channel)
    assert len(dc_report) == 1 and f"catch-up run of {DAY.isoformat()}: ok" in dc_report[0]["content"]
    assert dc_report[0]["allowed_mentions"] == {"parse": []}, "an admin copy never pings anybody"
    assert "runtime" in telegram.sent(READER_CHAT)[0]["text"], "/layers lists the layer ids"
    assert "runtime" in str(answer["data"]), "/layers in Discord lists the layer ids"
    assert _rows(tmp_path, "SELECT date, trigger, ok FROM run_report") == [(DAY.isoformat(), "catch-up", 1)]
    assert _rows(tmp_path, "SELECT count(*) FROM run_lock") == [(0,)]
    assert "stopped:" not in served.err.text, "no part of the service died on the way"
