"""Benchmark: the Discord push channel against a fake that enforces Discord's limits.

2,000 subscribed channels (``--channels``), each sent ``--parts`` messages,
through :class:`bot.discord_push.DiscordChannel` against tests/fake_discord.py
with ``enforce``: 50 requests per second overall and 5 messages per 5 s to one
channel, 429s when either is broken. Prints requests/s, messages/s, the 429s
and the time to the last message. Target: >= 45 requests/s and no 429 after
the first bucket discovery. Real time (a benchmark, not a test): about 90 s.

    .venv/bin/python -m bench.discord_push [--channels 2000] [--parts 2] [--threads]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bot.discord_push import DiscordChannel, make_client
from digest.deliver.channels import Message, Outcome
from tests.fake_discord import TEXT, TOKEN, FakeDiscord


def messages(channels: list[int], parts: int) -> list[Message]:
    payload = {"content": "**Compiler digest 2026-09-29**", "embeds": [{"title": "one event"}]}
    return [Message(n, n, f"channel:{cid}", (payload,) * parts) for n, cid in enumerate(channels, 1)]


async def push(fake: FakeDiscord, todo: list[Message], threads: bool) -> tuple[float, int, int]:
    """Send every message with the channel's own concurrency; (seconds, sent, 429s)."""
    channel = DiscordChannel(make_client(TOKEN, fake.api_base), threads=threads)
    gate = asyncio.Semaphore(channel.concurrency)

    async def one(message: Message) -> bool:
        async with gate:
            return (await channel.send(message)).outcome is Outcome.SENT

    started = time.monotonic()
    try:
        done = await asyncio.gather(*(one(m) for m in todo))
    finally:
        await channel.aclose()
    return time.monotonic() - started, sum(done), channel.rate_limited


async def main(args: argparse.Namespace) -> None:
    async with FakeDiscord(enforce=True) as fake:
        channels = [fake.add_channel(TEXT, name=f"c{n}") for n in range(args.channels)]
        seconds, sent, limited = await push(fake, messages(channels, args.parts), args.threads)
        requests = sum(1 for method, _ in fake.requests if method == "POST")
        print(f"channels: {args.channels}, parts: {args.parts}, threads: {args.threads}")
        print(f"deliveries sent: {sent}/{args.channels}; messages: {len(fake.messages)}; "
              f"requests: {requests}")
        print(f"time to the last message: {seconds:.1f} s")
        print(f"requests/s: {requests / seconds:.1f}; messages/s: {len(fake.messages) / seconds:.1f}")
        print(f"429s received: {limited} (the fake answered {fake.too_many})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=2000)
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--threads", action="store_true", help="a thread per channel (one more request)")
    asyncio.run(main(parser.parse_args()))
