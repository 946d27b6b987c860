"""A build in LLM mode: the real openai client against a local OpenAI-compatible server."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from digest.analyze.taxonomy import load_taxonomy
from digest.build import triage
from digest.build.pipeline import FALLBACK_NOTES, BuildOptions, build_digest
from digest.domain.views import EventView
from digest.render.renderer import FORMATS, Renderer
from digest.store.db import SessionFactory
from digest.store.models import Digest, DigestEvent, Event
from digest.store.queries import load_view
from digest.write import prompts
from digest.write.llm import LLMClient
from tests.builders import COMPILER_PAPERS, DAY, NOW, WINDOW, add_entry, add_source
from tests.fake_llm import FakeLLM, Reply, Seen, answer, server_error

MODEL = "fake-model"
OPTIONS = BuildOptions(locales=("zh", "en"))
BORDERLINE = replace(OPTIONS, llm_triage="borderline")  # the triage asks about borderline events only
# The triage tests run on the rules alone: NCCL and SHEETS are borderline by the rules' band
# (tests/test_learned.py checks what borderline means with the shipped relevance model).
RULES = replace(load_taxonomy(), model=None)


def _respond(body: dict[str, Any]) -> Reply:
    """Answer like a careful model, except that it invents a figure for Splyce.

    The triage finds every entry relevant and leaves the layers to the rules.
    """
    if _is_triage(body):
        return _confirming(body)
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


def _confirming(body: dict[str, Any]) -> Reply:
    """A triage answer that finds every entry relevant and leaves the layers to the rules."""
    asked = json.loads(body["messages"][-1]["content"])["items"]
    return answer({"items": [{"id": row["id"], "relevant": True, "layers": []} for row in asked]})


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
    # the triage, then 3 events + 1 day, in 2 locales
    assert len(llm_server.requests) == 9
    assert report.tokens > 0 and report.generation_mode == "mixed"
    assert report.llm["fallbacks"] == {"figures": 2}
    async with sessions() as session:
        view = await load_view(session, DAY, "en")
    by = {e.title.split(":")[0]: e.written_by for e in view.events}
    assert by["Splyce"] == "extractive"
    assert {mode for name, mode in by.items() if name != "Splyce"} == {MODEL}
    async with sessions() as session:
        stored = {e.title: tuple(e.layers) for e in (await session.scalars(select(Event))).all()}
    assert all(e.layers == stored[e.title] for e in view.events), (
        "the layers shown are the event's (the triage confirmed the rules'), not the writer's")
    assert view.title == "Compiler news of the day" and view.day_mode == MODEL

    client = _client(llm_server, sessions)
    again = await build_digest(sessions, DAY, OPTIONS, now=NOW, llm=client, force=True)
    await client.aclose()
    assert len(llm_server.requests) == 9, "a rebuild is served from the cache"
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
    assert report.llm["fallbacks"] == {"server_error": 4, "triage_server_error": 1}


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
    report = await build_digest(sessions, DAY, BORDERLINE, now=NOW, llm=client, taxonomy=RULES)
    await client.aclose()
    assert len(_triage_requests(llm_server)) == 1
    asked = json.loads(_triage_requests(llm_server)[0].user)["items"]
    assert sorted(row["title"] for row in asked) == sorted([NCCL[0], SHEETS[0]])
    assert report.triage == {"asked": 2, "answered": 2, "promoted": 1, "demoted": 1,
                             "relayered": 0}
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
    again = await build_digest(sessions, DAY, BORDERLINE, now=NOW, llm=client, taxonomy=RULES, force=True)
    await client.aclose()
    assert len(llm_server.requests) == requests, "a rebuild is served from the cache"
    assert again.tokens == 0 and again.triage == report.triage
    assert await _titles(sessions) == shown


async def test_by_default_the_triage_judges_every_event_with_its_text_and_its_layers_stand(
    sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    await _borderline_day(sessions)
    named = {"Torch-PIM": ["tensor_ir", "hardware_backend", "quantum_ir"], "NCCL": ["distributed"]}

    def respond(body: dict[str, Any]) -> Reply:
        if not _is_triage(body):
            return _respond(body)
        asked = json.loads(body["messages"][-1]["content"])["items"]
        return answer({"items": [
            {"id": row["id"], "relevant": "Spreadsheet" not in row["title"],
             "layers": next((v for k, v in named.items() if k in row["title"]), [])}
            for row in asked]})

    llm_server.default = respond
    client = _client(llm_server, sessions)
    report = await build_digest(sessions, DAY, OPTIONS, now=NOW, llm=client, taxonomy=RULES)
    await client.aclose()
    (asked,) = [json.loads(seen.user)["items"] for seen in _triage_requests(llm_server)]
    assert sorted(row["title"] for row in asked) == sorted([*(t for t, _ in COMPILER_PAPERS),
                                                           NCCL[0], SHEETS[0]])
    pim = next(row for row in asked if row["title"].startswith("Torch-PIM"))
    assert (pim["kind"], pim["source"]) == ("paper", "arXiv cs.PL")
    assert pim["text"].startswith("Torch-PIM applies profile-guided optimization")
    assert report.triage == {"asked": 5, "answered": 5, "promoted": 1, "demoted": 1,
                             "relayered": 1}
    async with sessions() as session:
        stored = {e.title: e for e in (await session.scalars(select(Event))).all()}
    assert stored[COMPILER_PAPERS[2][0]].layers == ["tensor_ir", "hardware_backend"], (
        "the model's known layers replace the rules' (an unknown id is dropped)")
    assert stored[NCCL[0]].relevant and stored[NCCL[0]].layers == ["distributed"]
    assert not stored[SHEETS[0]].relevant and stored[SHEETS[0]].layers == []
    splyce = stored[COMPILER_PAPERS[0][0]]
    assert splyce.relevant and splyce.layers, "no layers named: the rules' stand"
    written = {json.loads(seen.user)["event_title"]: json.loads(seen.user)["layers"]
               for seen in llm_server.requests if "event_title" in seen.user}
    assert written[COMPILER_PAPERS[2][0]] == ["tensor_ir", "hardware_backend"], (
        "the write-up is asked with the judged layers")


@pytest.mark.parametrize("limit", [0, 2])
async def test_the_triage_asks_about_the_rules_news_first_up_to_its_limit(
    sqlite_sessions: SessionFactory, llm_server: FakeLLM, limit: int
) -> None:
    await _borderline_day(sqlite_sessions)
    client = _client(llm_server, sqlite_sessions)
    report = await build_digest(sqlite_sessions, DAY, replace(OPTIONS, llm_triage_limit=limit),
                                now=NOW, llm=client, taxonomy=RULES)
    await client.aclose()
    asked = [row["title"] for seen in _triage_requests(llm_server)
             for row in json.loads(seen.user)["items"]]
    assert len(asked) == limit and report.triage["asked"] == limit
    async with sqlite_sessions() as session:
        news = {e.title for e in (await session.scalars(select(Event))).all() if e.relevant}
    assert set(asked) <= news and NCCL[0] not in asked, "the rules' news first"


def test_the_triage_limit_is_one_number_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    from digest.config import load_settings

    monkeypatch.delenv("DIGEST_LLM_TRIAGE_LIMIT", raising=False)
    assert load_settings().llm_triage_limit == triage.TRIAGE_LIMIT == BuildOptions().llm_triage_limit
    assert load_settings().llm_triage == BuildOptions().llm_triage == "all"


async def test_triage_failure_keeps_the_rules_verdicts(
    sqlite_sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    await _borderline_day(sqlite_sessions)
    llm_server.default = lambda body: server_error(500) if _is_triage(body) else _respond(body)
    client = _client(llm_server, sqlite_sessions)
    report = await build_digest(sqlite_sessions, DAY, BORDERLINE, now=NOW, llm=client, taxonomy=RULES)
    await client.aclose()
    assert len(_triage_requests(llm_server)) == client.max_attempts
    assert report.created and report.triage == {"asked": 2, "answered": 0, "promoted": 0,
                                                "demoted": 0, "relayered": 0}
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
    report = await build_digest(sqlite_sessions, DAY, BORDERLINE, now=NOW, llm=client, taxonomy=RULES)
    await client.aclose()
    assert writable == [True] and report.triage["promoted"] == 1


@pytest.mark.parametrize(("batch", "calls"), [(100, 1), (12, 3)])
async def test_many_borderline_events_take_one_call_per_batch(
    sqlite_sessions: SessionFactory, llm_server: FakeLLM, monkeypatch: pytest.MonkeyPatch,
    batch: int, calls: int,
) -> None:
    monkeypatch.setattr(triage, "TRIAGE_BATCH", batch)
    blog = await add_source(sqlite_sessions, "systems-blog", name="Systems Blog", weight=0.6)
    for n in range(30):  # a distinct number in each title: distinct works
        title, summary = (NCCL, SHEETS)[n % 2]
        await add_entry(sqlite_sessions, blog, f"{title}, part {n + 1}", summary,
                        WINDOW.start + dt.timedelta(minutes=n + 1))
    llm_server.default = _judging(lambda title: "NCCL" in title)
    client = _client(llm_server, sqlite_sessions)
    report = await build_digest(sqlite_sessions, DAY, BuildOptions(llm_triage="borderline"),
                                now=NOW, llm=client, taxonomy=RULES)
    await client.aclose()
    triaged = _triage_requests(llm_server)
    assert len(triaged) == calls
    assert sum(len(json.loads(seen.user)["items"]) for seen in triaged) == 30
    assert report.triage == {"asked": 30, "answered": 30, "promoted": 15, "demoted": 15,
                             "relayered": 0}
    assert report.events == 12 and all("NCCL" in t for t in await _titles(sqlite_sessions, "zh"))


async def test_extractive_mode_never_triages(sqlite_sessions: SessionFactory,
                                             llm_server: FakeLLM) -> None:
    await _borderline_day(sqlite_sessions)
    report = await build_digest(sqlite_sessions, DAY, OPTIONS, now=NOW)
    assert llm_server.requests == []
    assert report.triage == {"asked": 0, "answered": 0, "promoted": 0, "demoted": 0,
                             "relayered": 0}
    shown = await _titles(sqlite_sessions)
    assert SHEETS[0] in shown and NCCL[0] not in shown, "the rules decide"


# --- concurrent write-ups -------------------------------------------------------------------------


class _Timed:
    """Answers like :func:`_respond`; the event requests wait until ``parties`` are in flight at once.

    A barrier, not a pause: it proves the overlap without depending on how fast anything runs
    (fewer requests at a time than ``parties`` break it after a generous timeout).
    """

    def __init__(self, parties: int) -> None:
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.barrier = threading.Barrier(parties, timeout=20)
        self.spans: list[tuple[str, bool, float, float]] = []  # (kind, zh, start, end)

    def __call__(self, body: dict[str, Any]) -> Reply:
        if _is_triage(body):
            return _confirming(body)
        user = json.loads(body["messages"][-1]["content"])
        kind = "event" if "event_title" in user else "day"
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        start = time.monotonic()
        if kind == "event":
            self.barrier.wait()
        with self.lock:
            self.running -= 1
            self.spans.append((kind, "编辑" in body["messages"][0]["content"], start,
                               time.monotonic()))
        return _respond(body)


async def test_event_writeups_run_concurrently_in_rank_order(
    sqlite_sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    await _papers(sqlite_sessions)
    timed = _Timed(parties=6)  # 3 events in 2 locales, all at once (llm_concurrency is 6)
    assert OPTIONS.llm_concurrency >= 6
    llm_server.default = timed
    client = _client(llm_server, sqlite_sessions)
    report = await build_digest(sqlite_sessions, DAY, OPTIONS, now=NOW, llm=client)
    await client.aclose()
    assert len(llm_server.requests) == 9 and timed.most == 6
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


# --- every shown event written by the LLM, with its body (issue #13, "LLM mode") -----------------

# Fourteen distinct compiler papers (more than the 12 shown), each with its own name and result.
_WORKS = [
    ("KernelBraid", "agentic search for Triton attention kernels", "Triton"),
    ("TileForge", "tiling heuristics for MLIR linalg on AMD GPUs", "MLIR"),
    ("FuseNet", "operator fusion in the XLA HLO graph for TPUs", "XLA"),
    ("VecLift", "LLVM loop vectorization of gather loads on AVX-512", "LLVM"),
    ("QuantLower", "lowering int4 quantized matmuls to CUDA kernels", "CUDA"),
    ("ShapeShift", "dynamic shape specialization in torch.compile graphs", "torch.compile"),
    ("RegAlloc9", "register allocation for NVIDIA SASS with integer programming", "SASS"),
    ("PolyTune", "polyhedral schedules for TVM tensor programs", "TVM"),
    ("MemPlan", "static memory planning for MLIR bufferization", "MLIR"),
    ("WarpSpec", "warp specialization for Hopper GEMM kernels in CUTLASS", "CUTLASS"),
    ("SparseGen", "code generation for sparse tensor algebra in MLIR", "MLIR"),
    ("GraphCap", "CUDA graph capture for LLM serving runtimes", "CUDA"),
    ("AutoPipe", "software pipelining of Triton loops for Blackwell", "Triton"),
    ("CostNet", "learned cost models for the LLVM inliner", "LLVM"),
]


def _careful(body: dict[str, Any]) -> Reply:
    """A model that states no figure: every event write-up passes; the day too (the triage confirms)."""
    if _is_triage(body):
        return _confirming(body)
    user = json.loads(body["messages"][-1]["content"])
    zh = "编辑" in body["messages"][0]["content"]
    if "event_title" in user:
        return answer({"title": user["event_title"],
                       "summary": "该工作提出新的编译方法。" if zh else "The work proposes a method.",
                       "why_it_matters": "对编译栈有意义。" if zh else "It matters for compilers.",
                       "layers": user["layers"], "watch": [user["event_title"][:20]]})
    return answer({"title": "今日编译要闻" if zh else "Compiler news", "overview": "多项工作。"
                   if zh else "Several works.", "watchlist": ["KernelBraid"]})


async def _fourteen_papers(sessions: SessionFactory, bodies: dict[str, str] | None = None) -> None:
    arxiv = await add_source(sessions, "arxiv-cs.pl", name="arXiv cs.PL", kind="arxiv", weight=0.7)
    for n, (name, what, stack) in enumerate(_WORKS):
        title = f"{name}: {what[0].upper()}{what[1:]}"
        summary = (f"We present {name}, a compiler technique for {what}. {name} is built on {stack} "
                   f"and generates kernels for GPUs, reaching {n + 2}.{n}x speedup over the "
                   f"vendor library on {n + 20} benchmarks.")
        await add_entry(sessions, arxiv, title, summary, WINDOW.start + dt.timedelta(minutes=20 * n + 1),
                        arxiv_id=f"2609.001{n:02d}", announce_type="new",
                        url=f"https://arxiv.org/abs/2609.001{n:02d}",
                        body=(bodies or {}).get(name, ""))


def _event_requests(server: FakeLLM) -> list[dict[str, Any]]:
    return [json.loads(seen.user) for seen in server.requests if "event_title" in seen.user]


class _Counting:
    """Answers like :func:`_careful`, counting the requests in flight at once (no waiting)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = self.most = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            return _careful(body)
        finally:
            with self.lock:
                self.running -= 1


def test_the_llm_writes_every_shown_event_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from digest.config import load_settings

    for name in ("DIGEST_LLM_TOP_EVENTS", "DIGEST_MAX_EVENTS"):
        monkeypatch.delenv(name, raising=False)
    assert load_settings().llm_top_events == 12
    monkeypatch.setenv("DIGEST_MAX_EVENTS", "20")
    assert load_settings().llm_top_events == 20, "it follows DIGEST_MAX_EVENTS"
    monkeypatch.setenv("DIGEST_LLM_TOP_EVENTS", "3")
    assert load_settings().llm_top_events == 3, "unless it is set"
    assert BuildOptions().llm_top_events == BuildOptions().max_events


async def test_all_twelve_shown_events_are_written_one_request_each_a_few_at_a_time(
    sqlite_sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    await _fourteen_papers(sqlite_sessions)
    counting = _Counting()
    llm_server.default = counting
    client = _client(llm_server, sqlite_sessions)
    report = await build_digest(sqlite_sessions, DAY, BuildOptions(), now=NOW, llm=client)
    await client.aclose()
    assert report.events == 12 and report.generation_mode == MODEL
    assert len(_event_requests(llm_server)) == 12 and len(llm_server.requests) == 14, (
        "one request per shown event and one for the day: nothing asked twice, nothing unshown")
    assert 1 <= counting.most <= BuildOptions().llm_concurrency
    assert report.llm["calls"] == 14 and report.llm["fallbacks"] == {}
    async with sqlite_sessions() as session:
        view = await load_view(session, DAY, "zh")
    assert [e.written_by for e in view.events] == [MODEL] * 12
    assert all(e.summary == "该工作提出新的编译方法。" for e in view.events), "no note on any"

    client = _client(llm_server, sqlite_sessions)
    again = await build_digest(sqlite_sessions, DAY, BuildOptions(), now=NOW, llm=client, force=True)
    await client.aclose()
    assert len(llm_server.requests) == 14 and again.tokens == 0, "a rebuild costs nothing"


_OPENING = ("KernelBraid searches the space of Triton attention kernels with an agent that "
            "proposes, compiles and benchmarks candidates.")
_FILLER = ("This section walks through the design of the search loop, how candidates are "
           "proposed and compiled, and how the benchmark harness keeps measurements stable.")
_RESULTS = ("On H100, the kernels KernelBraid found run 2.52x faster than FlashAttention-2 on "
            "unified attention, and tuning takes 38 minutes instead of 6 hours.")


def _long_body() -> str:
    """About 18,000 characters (ingest keeps 20,000): the opening, filler, the results, filler."""
    filler = [f"{_FILLER} Part {chr(65 + n % 26)}." for n in range(110)]
    return "\n\n".join([_OPENING, *filler[:70], _RESULTS, *filler[70:]])


async def test_the_body_excerpt_reaches_the_prompt(
    sqlite_sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    body = _long_body()
    assert 15_000 < len(body) <= 20_000 and body.index(_RESULTS) > len(body) // 2
    await _fourteen_papers(sqlite_sessions, {"KernelBraid": body})
    llm_server.default = _careful
    client = _client(llm_server, sqlite_sessions)
    await build_digest(sqlite_sessions, DAY, BuildOptions(), now=NOW, llm=client)
    await client.aclose()
    asked = [u for u in _event_requests(llm_server) if u["event_title"].startswith("KernelBraid")]
    (source,) = asked[0]["sources"]
    text = source["summary"]
    assert text.startswith("We present KernelBraid"), "the feed summary first"
    assert _OPENING in text and _RESULTS in text, "the opening and the results paragraph"
    assert len(text) <= prompts.SUMMARY_LIMIT
    others = [u for u in _event_requests(llm_server) if not u["event_title"].startswith("KernelBraid")]
    assert len(others) == 11
    assert all(len(u["sources"][0]["summary"]) < 400 for u in others), "no body, no excerpt"


def _inventing(name: str) -> Callable[[dict[str, Any]], Reply]:
    """:func:`_careful`, except that the write-up of ``name`` states a figure no source has."""
    def respond(body: dict[str, Any]) -> Reply:
        reply = _careful(body)
        user = json.loads(body["messages"][-1]["content"])
        if user.get("event_title", "").startswith(name):
            data = json.loads(reply.content or "{}")
            return answer({**data, "summary": data["summary"] + " 9.75x"})
        return reply
    return respond


async def test_a_failed_figure_check_marks_that_one_event_in_its_language(
    sqlite_sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    await _fourteen_papers(sqlite_sessions)
    llm_server.default = _inventing("TileForge")
    client = _client(llm_server, sqlite_sessions)
    report = await build_digest(sqlite_sessions, DAY, OPTIONS, now=NOW, llm=client)
    await client.aclose()
    assert report.llm["fallbacks"] == {"figures": 2} and report.generation_mode == "mixed"
    for locale in ("zh", "en"):
        async with sqlite_sessions() as session:
            view = await load_view(session, DAY, locale)
        by = {e.title.split(":")[0]: e for e in view.events}
        assert len(by) == 12
        tile = by.pop("TileForge")
        note = FALLBACK_NOTES[locale]["figures"]
        assert tile.written_by == "extractive" and tile.summary.startswith(note)
        assert all(e.written_by == MODEL and not e.summary.startswith("(")
                   and not e.summary.startswith("（") for e in by.values())
    async with sqlite_sessions() as session:
        zh = {e.title.split(":")[0]: e for e in (await load_view(session, DAY, "zh")).events}
    assert "论文" in zh["TileForge"].summary, "the zh fallback is the Chinese extractive composition"
    async with sqlite_sessions() as session:
        view = await load_view(session, DAY, "zh")
    renderer = Renderer()
    shown = {fmt: renderer.render(view, fmt) for fmt in FORMATS if fmt != "email"}
    mail = renderer.email_parts(view)
    shown |= {"email html": mail.html, "email text": mail.text}
    note = FALLBACK_NOTES["zh"]["figures"]
    assert {fmt: text.count(note) for fmt, text in shown.items()} == dict.fromkeys(shown, 1)


async def test_events_the_llm_could_not_write_are_marked(
    sqlite_sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    await _fourteen_papers(sqlite_sessions)

    def failing(body: dict[str, Any]) -> Reply:
        user = json.loads(body["messages"][-1]["content"])
        if user.get("event_title", "").startswith("FuseNet"):
            return server_error(500)
        return _careful(body)

    llm_server.default = failing
    client = _client(llm_server, sqlite_sessions)
    options = BuildOptions(llm_top_events=10)  # an operator's choice: the last two are not asked
    report = await build_digest(sqlite_sessions, DAY, options, now=NOW, llm=client)
    await client.aclose()
    assert report.llm["fallbacks"] == {"server_error": 1}
    async with sqlite_sessions() as session:
        view = await load_view(session, DAY, "zh")
    other = FALLBACK_NOTES["zh"]["other"]
    marked = [e.title.split(":")[0] for e in view.events if e.summary.startswith(other)]
    assert marked == ["FuseNet", *[e.title.split(":")[0] for e in view.events[10:]]]
    assert all(e.written_by == "extractive" for e in view.events if e.summary.startswith(other))
    assert len({e.rank for e in view.events[10:]}) == 2


async def test_without_a_model_no_event_carries_a_note(sqlite_sessions: SessionFactory) -> None:
    await _fourteen_papers(sqlite_sessions)
    await build_digest(sqlite_sessions, DAY, BuildOptions(), now=NOW)
    async with sqlite_sessions() as session:
        view = await load_view(session, DAY, "zh")
    notes = [n for locale in FALLBACK_NOTES.values() for n in locale.values()]
    assert len(view.events) == 12 and not any(e.summary.startswith(tuple(notes)) for e in view.events)


async def test_past_the_budget_the_rest_are_marked_and_nothing_is_overspent(
    sqlite_sessions: SessionFactory, llm_server: FakeLLM
) -> None:
    await _fourteen_papers(sqlite_sessions)
    llm_server.default = _careful
    client = LLMClient(api_key="sk-test", base_url=llm_server.base_url, model=MODEL, timeout=5,
                       daily_tokens=6000, sessions=sqlite_sessions, day_start=WINDOW.end,
                       backoff=0.01)
    report = await build_digest(sqlite_sessions, DAY, BuildOptions(), now=NOW, llm=client)
    spent = await client.spent_today()
    await client.aclose()
    assert spent <= 6000
    async with sqlite_sessions() as session:
        view = await load_view(session, DAY, "zh")
    written = sum(e.written_by == MODEL for e in view.events)
    marked = sum(e.summary.startswith(FALLBACK_NOTES["zh"]["other"]) for e in view.events)
    assert 0 < written < 12 and written + marked == 12
    assert report.llm["fallbacks"]["budget"] >= 12 - written
