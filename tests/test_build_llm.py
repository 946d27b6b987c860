"""A build in LLM mode: the real openai client against a local OpenAI-compatible server."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from digest.build import analyze
from digest.build.pipeline import BuildOptions, build_digest
from digest.domain.views import EventView
from digest.store.db import SessionFactory
from digest.store.models import Digest, DigestEvent, Event
from digest.store.queries import load_view
from digest.write import prompts
from digest.write.llm import LLMClient
from tests.builders import COMPILER_PAPERS, DAY, NOW, WINDOW, add_entry, add_source
from tests.fake_llm import FakeLLM, Reply, Seen, answer, server_error

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


# --- LLM triage of borderline events ------------------------------------------------------------

# Borderline by the rules (compiler evidence within the triage band of the threshold):
NCCL = ("Autotuning Collective Algorithms in NCCL",  # not relevant (autotuning only), but close
        "We autotune the all-reduce algorithm choice in NCCL for tensor parallel training on "
        "H100 GPUs.")
SHEETS = ("A Compiler for Spreadsheet Formulas",  # relevant ("compiler" alone), but weak
          "We present a compiler that turns spreadsheet formulas into scripts with static "
          "memory planning, for accountants.")  # the memory planning gives it a layer


def _is_triage(body: dict[str, Any]) -> bool:
    return bool(body["messages"][0]["content"] == prompts.TRIAGE_SYSTEM)


def _judging(relevant: Callable[[str], bool]) -> Callable[[dict[str, Any]], Reply]:
    """Triage by ``relevant(title)``; write-ups and the day as :func:`_respond`."""
    def respond(body: dict[str, Any]) -> Reply:
        if not _is_triage(body):
            return _respond(body)
        asked = json.loads(body["messages"][-1]["content"])["items"]
        return answer({"items": [{"id": row["id"], "relevant": relevant(row["title"])}
                                 for row in asked]})
    return respond


def _triage_requests(server: FakeLLM) -> list[Seen]:
    return [seen for seen in server.requests if _is_triage(seen.body)]


async def _borderline_day(sessions: SessionFactory) -> None:
    await _papers(sessions)
    blog = await add_source(sessions, "systems-blog", name="Systems Blog", weight=0.6)
    for n, (title, summary) in enumerate((NCCL, SHEETS)):
        await add_entry(sessions, blog, title, summary, WINDOW.start + dt.timedelta(hours=n + 5))


async def _titles(sessions: SessionFactory, locale: str = "en") -> dict[str, EventView]:
    async with sessions() as session:
        view = await load_view(session, DAY, locale)
    return {e.title: e for e in view.events}


async def test_triage_promotes_and_demotes_borderline_events_in_one_call(
    sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    await _borderline_day(sessions)
    llm_server.default = _judging(lambda title: "NCCL" in title)
    client = _client(llm_server, sessions)
    report = await build_digest(sessions, DAY, OPTIONS, now=NOW, llm=client)
    await client.aclose()
    assert len(_triage_requests(llm_server)) == 1
    asked = json.loads(_triage_requests(llm_server)[0].user)["items"]
    assert sorted(row["title"] for row in asked) == sorted([NCCL[0], SHEETS[0]])
    assert report.triage == {"asked": 2, "answered": 2, "promoted": 1, "demoted": 1}
    shown = await _titles(sessions)
    assert SHEETS[0] not in shown, "a borderline positive the model rejects disappears"
    nccl = shown[NCCL[0]]
    assert "distributed" in nccl.layers, "promoted with the layers its evidence reaches"
    assert nccl.score_breakdown["relevance"] > 0 and nccl.score_breakdown["breadth"] > 0
    assert round(sum(nccl.score_breakdown.values()), 1) == nccl.score
    async with sessions() as session:
        stats = (await session.scalars(select(Digest.stats))).one()
        sheets = (await session.scalars(select(Event).where(Event.title == SHEETS[0]))).one()
    assert stats["triage"] == report.triage
    assert (sheets.relevant, sheets.layers, sheets.score_breakdown["relevance"]) == (False, [], 0.0)

    requests = len(llm_server.requests)
    client = _client(llm_server, sessions)
    again = await build_digest(sessions, DAY, OPTIONS, now=NOW, llm=client, force=True)
    await client.aclose()
    assert len(llm_server.requests) == requests, "a rebuild is served from the cache"
    assert again.tokens == 0 and again.triage == report.triage
    assert await _titles(sessions) == shown


async def test_triage_failure_keeps_the_rules_verdicts(
    sqlite_sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    await _borderline_day(sqlite_sessions)
    llm_server.default = lambda body: server_error(500) if _is_triage(body) else _respond(body)
    client = _client(llm_server, sqlite_sessions)
    report = await build_digest(sqlite_sessions, DAY, OPTIONS, now=NOW, llm=client)
    await client.aclose()
    assert len(_triage_requests(llm_server)) == client.max_attempts
    assert report.created and report.triage == {"asked": 2, "answered": 0, "promoted": 0,
                                                "demoted": 0}
    assert report.llm["fallbacks"]["triage_server_error"] == 1
    shown = await _titles(sqlite_sessions)
    assert SHEETS[0] in shown and NCCL[0] not in shown
    assert shown[SHEETS[0]].written_by == MODEL, "the write-ups still come from the LLM"


async def test_triage_is_asked_with_no_transaction_open(
    sqlite_url: str, sqlite_sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    await _borderline_day(sqlite_sessions)
    path = make_url(sqlite_url).database
    writable: list[bool] = []

    def respond(body: dict[str, Any]) -> Reply:
        if _is_triage(body):  # would the database take a write now? (no waiting)
            conn = sqlite3.connect(str(path), timeout=0)
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.rollback()
                writable.append(True)
            except sqlite3.OperationalError:
                writable.append(False)
            finally:
                conn.close()
        return _judging(lambda title: "NCCL" in title)(body)

    llm_server.default = respond
    client = _client(llm_server, sqlite_sessions)
    report = await build_digest(sqlite_sessions, DAY, OPTIONS, now=NOW, llm=client)
    await client.aclose()
    assert writable == [True] and report.triage["promoted"] == 1


@pytest.mark.parametrize(("batch", "calls"), [(100, 1), (12, 3)])
async def test_many_borderline_events_take_one_call_per_batch(
    sqlite_sessions: SessionFactory, llm_server: FakeLLM, monkeypatch: pytest.MonkeyPatch,
    batch: int, calls: int,
) -> None:
    monkeypatch.setattr(analyze, "TRIAGE_BATCH", batch)
    blog = await add_source(sqlite_sessions, "systems-blog", name="Systems Blog", weight=0.6)
    for n in range(30):  # a distinct number in each title: distinct works
        title, summary = (NCCL, SHEETS)[n % 2]
        await add_entry(sqlite_sessions, blog, f"{title}, part {n + 1}", summary,
                        WINDOW.start + dt.timedelta(minutes=n + 1))
    llm_server.default = _judging(lambda title: "NCCL" in title)
    client = _client(llm_server, sqlite_sessions)
    report = await build_digest(sqlite_sessions, DAY, BuildOptions(), now=NOW, llm=client)
    await client.aclose()
    triaged = _triage_requests(llm_server)
    assert len(triaged) == calls
    assert sum(len(json.loads(seen.user)["items"]) for seen in triaged) == 30
    assert report.triage == {"asked": 30, "answered": 30, "promoted": 15, "demoted": 15}
    assert report.events == 12 and all("NCCL" in t for t in await _titles(sqlite_sessions, "zh"))


async def test_extractive_mode_never_triages(sqlite_sessions: SessionFactory,
                                             llm_server: FakeLLM) -> None:
    await _borderline_day(sqlite_sessions)
    report = await build_digest(sqlite_sessions, DAY, OPTIONS, now=NOW)
    assert llm_server.requests == []
    assert report.triage == {"asked": 0, "answered": 0, "promoted": 0, "demoted": 0}
    shown = await _titles(sqlite_sessions)
    assert SHEETS[0] in shown and NCCL[0] not in shown, "the rules decide"


# --- concurrent write-ups -------------------------------------------------------------------------


class _Timed:
    """Answers like :func:`_respond` after a pause, the SASS paper's slowest; records overlap."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.spans: list[tuple[str, bool, float, float]] = []  # (kind, zh, start, end)

    def __call__(self, body: dict[str, Any]) -> Reply:
        user = json.loads(body["messages"][-1]["content"])
        kind = "event" if "event_title" in user else "day"
        slow = kind == "event" and user["event_title"] == COMPILER_PAPERS[1][0]
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        start = time.monotonic()
        time.sleep(0.3 if slow else 0.1)
        with self.lock:
            self.running -= 1
            self.spans.append((kind, "编辑" in body["messages"][0]["content"], start,
                               time.monotonic()))
        return _respond(body)


async def test_event_writeups_run_concurrently_in_rank_order(
    sqlite_sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    await _papers(sqlite_sessions)
    timed = _Timed()
    llm_server.default = timed
    client = _client(llm_server, sqlite_sessions)
    report = await build_digest(sqlite_sessions, DAY, OPTIONS, now=NOW, llm=client)
    await client.aclose()
    assert len(llm_server.requests) == 8 and timed.most == OPTIONS.llm_concurrency
    for zh in (True, False):
        events = [end for kind, lang, _, end in timed.spans if kind == "event" and lang == zh]
        (day_start,) = [start for kind, lang, start, _ in timed.spans if kind == "day" and lang == zh]
        assert len(events) == 3 and day_start >= max(events), "the day follows its events"
    async with sqlite_sessions() as session:
        view = await load_view(session, DAY, "en")
        ranked = (await session.scalars(select(DigestEvent).order_by(DigestEvent.rank))).all()
    assert [e.score for e in view.events] == sorted((e.score for e in view.events), reverse=True)
    assert [e.id for e in view.events] == [d.event_id for d in ranked]
    written = [e for e in view.events if e.written_by == MODEL]
    assert len(written) == 2
    for event in written:  # each write-up belongs to its own event, whatever finished first
        assert event.watch == (event.title[:20],)
    assert report.llm["fallbacks"] == {"figures": 2}
