"""Benchmark: build a generated day of 5,000 entries from 30 sources.

    python bench/build.py [--entries 5000] [--sources 30]

Prints, for extractive mode: wall time and peak memory (RSS); for LLM mode
against a local OpenAI-compatible test server: LLM calls and tokens per
digest, against the baseline of one call per relevant entry with the same
write-up prompt, and what a rebuild costs. Targets: <= 0.25 x the baseline
tokens; a rebuild costs 0 tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import insert  # noqa: E402

from digest.analyze.classify import classify  # noqa: E402
from digest.analyze.taxonomy import load_taxonomy  # noqa: E402
from digest.build.pipeline import BuildOptions, build_digest  # noqa: E402
from digest.domain.items import Item  # noqa: E402
from digest.domain.window import window_for  # noqa: E402
from digest.store.db import SessionFactory, open_database  # noqa: E402
from digest.store.models import Entry, Source  # noqa: E402
from digest.write.llm import LLMClient  # noqa: E402
from digest.write.prompts import PROMPT_VERSION, event_message, event_system  # noqa: E402
from tests.fake_llm import FakeLLM, Reply, answer  # noqa: E402

DAY = dt.date(2026, 9, 29)
WINDOW = window_for(DAY, "Asia/Shanghai")
NOW = WINDOW.end + dt.timedelta(minutes=10)
KINDS = ("arxiv", "rss", "github-releases")


def _texts() -> list[dict[str, Any]]:
    lines = (ROOT / "tests" / "data" / "labelled.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _name(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(3)).title()


async def _populate(sessions: SessionFactory, entries: int, sources: int) -> None:
    rng = random.Random(42)
    texts = _texts()
    async with sessions.begin() as session:
        ids = []
        for n in range(sources):
            src = Source(key=f"src-{n:02d}", name=f"Source {n}", url=f"https://s{n}.example/feed",
                         kind=KINDS[n % 3], weight=round(0.4 + 0.5 * rng.random(), 2),
                         enabled=True, consecutive_failures=0)
            session.add(src)
            await session.flush()
            ids.append(src.id)
        rows = []
        span = (WINDOW.end - WINDOW.start).total_seconds()
        for n in range(entries):
            text = texts[n % len(texts)]
            when = WINDOW.start + dt.timedelta(seconds=rng.random() * span)
            name = _name(rng)
            rows.append({
                "source_id": ids[n % sources], "entry_key": f"e{n}",
                "url": f"https://example.org/{n}", "canonical_url": f"https://example.org/{n}",
                "title": f"{name}-{n}: {text['title']}",
                "summary": f"{name} {text['summary']}", "authors": [], "categories": [],
                "links": [], "published": when, "first_seen": when, "updated_at": when,
                "content_hash": f"h{n}", "arxiv_id": f"2609.{n:05d}" if n % 3 == 0 else None,
                "announce_type": "new" if n % 3 == 0 else None,
            })
        await session.execute(insert(Entry), rows)


def _respond(body: dict[str, Any]) -> Reply:
    """A well-behaved model: valid JSON, no figures of its own."""
    user = json.loads(body["messages"][-1]["content"])
    zh = "编辑" in body["messages"][0]["content"]
    if "items" in user:  # triage: a stand-in judgement
        return answer({"items": [{"id": i["id"], "relevant": "compil" in i["title"].lower()}
                                 for i in user["items"]]})
    if "event_title" in user:
        return answer({
            "title": user["event_title"],
            "summary": "该工作改进了编译流程中的关键环节。" if zh else "The work improves a compiler stage.",
            "why_it_matters": "它影响编译栈的性能。" if zh else "It matters for compiler performance.",
            "layers": user["layers"], "watch": [user["event_title"][:20]],
        })
    return answer({"title": "今日要闻" if zh else "Today", "overview": "概览。" if zh else "Overview.",
                   "watchlist": ["x"]})


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _extractive(url: str, entries: int, sources: int) -> None:
    async with open_database(url) as sessions:
        await _populate(sessions, entries, sources)
        before = _rss_mb()
        start = time.perf_counter()
        report = await build_digest(sessions, DAY, BuildOptions(), now=NOW)
        seconds = time.perf_counter() - start
    print(f"extractive: {report.entries} entries -> {report.events} events in {seconds:.2f} s; "
          f"peak RSS {_rss_mb():.0f} MiB (was {before:.0f} MiB before the build)")


async def _baseline_tokens(server: FakeLLM, sessions: SessionFactory) -> tuple[int, int]:
    """One call per relevant entry, same write-up prompt: calls and tokens."""
    taxonomy = load_taxonomy()
    client = LLMClient(api_key="sk-bench", base_url=server.base_url, model="baseline",
                       timeout=10, daily_tokens=10**9, sessions=sessions, day_start=WINDOW.start)
    from sqlalchemy import select

    async with sessions() as session:
        rows = (await session.execute(select(Entry, Source).join(Source))).all()
    calls = tokens = 0
    for entry, source in rows:
        item = Item(entry.id, source.key, source.name, source.weight, source.kind, entry.title,
                    entry.summary, entry.url)
        verdict = classify(item, taxonomy)
        if not verdict.relevant:
            continue
        user = event_message(entry.title, verdict.layers, [
            {"name": source.name, "title": entry.title, "summary": entry.summary, "url": entry.url}])
        result = await client.complete_json(PROMPT_VERSION + "-baseline", event_system("zh"), user)
        calls += 1
        tokens += result.prompt_tokens + result.completion_tokens if result else 0
    await client.aclose()
    return calls, tokens


async def _llm(url: str, entries: int, sources: int) -> None:
    with FakeLLM(default=_respond) as server:
        async with open_database(url) as sessions:
            await _populate(sessions, entries, sources)
            client = LLMClient(api_key="sk-bench", base_url=server.base_url, model="bench-model",
                               timeout=10, daily_tokens=10**9, sessions=sessions,
                               day_start=WINDOW.start)
            first = await build_digest(sessions, DAY, BuildOptions(), now=NOW, llm=client)
            calls = len(server.requests)
            rebuilt = await build_digest(sessions, DAY, BuildOptions(), now=NOW, llm=client,
                                         force=True)
            rebuild_calls = len(server.requests) - calls
            await client.aclose()
            base_calls, base_tokens = await _baseline_tokens(server, sessions)
    ratio = first.tokens / base_tokens if base_tokens else float("nan")
    print(f"llm: {calls} calls, {first.tokens} tokens per digest ({first.events} events, "
          f"mode {first.generation_mode})")
    print(f"baseline (one call per relevant entry): {base_calls} calls, {base_tokens} tokens")
    print(f"ratio to baseline: {ratio:.3f} x tokens (target <= 0.25)")
    print(f"rebuild (--force): {rebuild_calls} calls, {rebuilt.tokens} tokens (target 0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=5000)
    parser.add_argument("--sources", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_extractive(f"sqlite+aiosqlite:///{tmp}/x.db", args.entries, args.sources))
        asyncio.run(_llm(f"sqlite+aiosqlite:///{tmp}/l.db", args.entries, args.sources))


if __name__ == "__main__":
    main()
