"""A build in LLM mode: the real openai client against a local OpenAI-compatible server."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest

from digest.build import BuildOptions, build_digest
from digest.db import SessionFactory
from digest.llm import LLMClient
from digest.queries import load_view
from tests.builders import COMPILER_PAPERS, add_entry, add_source
from tests.fake_llm import FakeLLM, Reply, answer, server_error
from tests.test_build import DAY, NOW, WINDOW

MODEL = "fake-model"
OPTIONS = BuildOptions(locales=("zh", "en"))


def _respond(body: dict[str, Any]) -> Reply:
    """Answer like a careful model, except that it invents a figure for Splyce."""
    user = json.loads(body["messages"][-1]["content"])
    zh = "中" in body["messages"][0]["content"][:40] or "编辑" in body["messages"][0]["content"]
    if "event_title" in user:
        title = user["event_title"]
        invented = "Splyce" in title
        summary = ("该工作提出新的编译方法。" if zh else "The work proposes a compiler method.")
        if invented:
            summary += " 3.9x"
        layers = ["hardware_backend"] if "Torch-PIM" in title else user["layers"] + ["quantum_ir"]
        return answer({"title": title, "summary": summary,
                       "why_it_matters": "对编译栈有意义。" if zh else "It matters for compilers.",
                       "layers": layers, "watch": [title[:20]]})
    return answer({"title": "今日编译要闻" if zh else "Compiler news of the day",
                   "overview": "三项工作。" if zh else "Three pieces of work.",
                   "watchlist": ["Splyce"]})


@pytest.fixture
def llm_server() -> Iterator[FakeLLM]:
    with FakeLLM(default=_respond) as server:
        yield server


def _client(server: FakeLLM, sessions: SessionFactory) -> LLMClient:
    return LLMClient(api_key="sk-test", base_url=server.base_url, model=MODEL, timeout=5,
                     daily_tokens=100_000, sessions=sessions, day_start=WINDOW.end,
                     backoff=0.01)


async def _papers(sessions: SessionFactory) -> None:
    arxiv = await add_source(sessions, "arxiv-cs.pl", name="arXiv cs.PL", kind="arxiv", weight=0.7)
    for n, (title, summary) in enumerate(COMPILER_PAPERS):
        await add_entry(sessions, arxiv, title, summary, WINDOW.start + dt.timedelta(hours=n + 1),
                        arxiv_id=f"2609.0000{n}", announce_type="new")


async def test_llm_build_writes_checks_figures_and_caches(
    sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    await _papers(sessions)
    client = _client(llm_server, sessions)
    report = await build_digest(sessions, DAY, OPTIONS, now=NOW, llm=client)
    await client.aclose()
    # 3 events + 1 day, in 2 locales
    assert len(llm_server.requests) == 8
    assert report.tokens > 0 and report.generation_mode == "mixed"
    assert report.llm["fallbacks"] == {"figures": 2}
    async with sessions() as session:
        view = await load_view(session, DAY, "en")
    by = {e.title.split(":")[0]: e.written_by for e in view.events}
    assert by["Splyce"] == "extractive"
    assert {mode for name, mode in by.items() if name != "Splyce"} == {MODEL}
    assert all("quantum_ir" not in e.layers for e in view.events)
    pim = next(e for e in view.events if e.title.startswith("Torch-PIM"))
    assert pim.layers == ("hardware_backend",), "the model may refine the rules' layers"
    assert view.title == "Compiler news of the day" and view.day_mode == MODEL

    client = _client(llm_server, sessions)
    again = await build_digest(sessions, DAY, OPTIONS, now=NOW, llm=client, force=True)
    await client.aclose()
    assert len(llm_server.requests) == 8, "a rebuild is served from the cache"
    assert again.tokens == 0 and again.generation_mode == "mixed"


async def test_llm_failure_never_blocks_the_digest(
    sqlite_sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    await _papers(sqlite_sessions)
    llm_server.default = server_error(500)
    client = _client(llm_server, sqlite_sessions)
    report = await build_digest(sqlite_sessions, DAY, BuildOptions(), now=NOW, llm=client)
    await client.aclose()
    assert report.created and report.events == 3
    assert report.generation_mode == "extractive"
    assert sum(report.llm["fallbacks"].values()) == 4
