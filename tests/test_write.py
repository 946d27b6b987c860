"""The writers: LLM write-ups (validated, figure-checked) over real HTTP, and the extractive writer."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from fake_llm import FakeLLM, answer
from hypothesis import given, settings
from hypothesis import strategies as st

from digest.domain.layers import LAYER_IDS
from digest.domain.status import WriteMode
from digest.domain.views import DigestView, EventView
from digest.domain.writeups import (
    EventInput,
    EventWriteup,
    SourceText,
    TriageAnswer,
    TriageQuestion,
    overall_mode,
)
from digest.store.db import SessionFactory
from digest.write import prompts
from digest.write.llm import LLMClient
from digest.write.writer import (
    WriteStats,
    extractive_day,
    extractive_event,
    llm_day,
    llm_event,
    llm_triage,
    triage_answers,
)

CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")
DATE = dt.date(2026, 9, 17)

ARXIV = SourceText(
    "arXiv", "https://arxiv.org/abs/2609.01234",
    "AReaL-TIK: Stateful Agentic Optimization of Unified RL Kernels through an Optimization IR",
    "arXiv:2609.01234v1 Announce Type: new Abstract: We present KernelBraid, which starts from "
    "hand-tuned, bitwise-consistent unified RL kernels, e.g. log-probability recomputation. Across "
    "12 end-to-end training configurations on H20 it reaches 1.10x the throughput of AReaL. "
    "Isolated-layer profiling shows a 1.40x mean phase-time speedup over 15 model-GPU pairs. The "
    "unified-attention search reaches 2.52x using 7M LLM tokens. All 10 operators pass bitwise "
    "checks on A100/H20/H200.",
)
KERNELBRAID = EventInput(
    7, "AReaL-TIK", ("optimization", "kernel_codegen", "hardware_backend", "benchmark"), 72.0, (ARXIV,)
)
SPLYCE = EventInput(8, "Splyce", ("tensor_ir", "optimization"), 67.8, (SourceText(
    "机器之心", None, "Splyce：稀疏协同迭代的 SIMD 向量化",
    "Splyce 是一个基于 MLIR 的自动向量化框架。它提出双路径执行模型！在合成内核上取得 1.96 至 2.86 倍"
    "加速。第四句不会出现。",
),))

ZH_ANSWER: dict[str, Any] = {
    "title": ARXIV.title,
    "summary": "KernelBraid 以统一 RL 内核为起点，提出 optimization IR。在 H20 上 12 个端到端训练配置的"
               "平均吞吐为 AReaL 的 1.10x，15 个 model-GPU 对上取得 1.40x 加速，unified-attention 搜索用"
               " 7M LLM tokens 取得 2.52x 加速，10 个算子在 A100/H20/H200 上均通过 bitwise 检查。",
    "why_it_matters": "把数值约束与测量结构化为证据，使 agent 能做增量优化；端到端收益相对保守。",
    "layers": ["kernel_codegen", "optimization", "benchmark"],
    "watch": ["KernelBraid", "AReaL"],
}
EN_ANSWER: dict[str, Any] = {
    **ZH_ANSWER,
    "summary": "KernelBraid reaches 2.52x on unified attention with 7M LLM tokens.",
    "why_it_matters": "It makes agentic kernel search reproducible; end-to-end gains are modest.",
}


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
async def client(fake: FakeLLM, sqlite_sessions: SessionFactory) -> AsyncIterator[LLMClient]:
    llm = LLMClient("test-key", fake.base_url, "fake-chat", 5.0, 100_000, sqlite_sessions,
                    dt.datetime(2026, 9, 16, tzinfo=dt.UTC), max_attempts=2, backoff=0.01)
    yield llm
    await llm.aclose()


# --- LLM event write-ups -------------------------------------------------------------------------

async def test_llm_event_returns_a_validated_writeup(fake: FakeLLM, client: LLMClient) -> None:
    fake.script(answer({**ZH_ANSWER, "extra": "ignored"}))
    got = await llm_event(client, KERNELBRAID, "zh")
    assert got == EventWriteup(ZH_ANSWER["title"], ZH_ANSWER["summary"], ZH_ANSWER["why_it_matters"],
                               ("KernelBraid", "AReaL"), KERNELBRAID.layers, "fake-chat")
    sent = fake.requests[0]
    assert sent.system == prompts.event_system("zh") and "中文" in sent.system
    payload = json.loads(sent.user)
    assert payload["layers"] == list(KERNELBRAID.layers)
    assert payload["sources"][0]["summary"].startswith("We present KernelBraid")  # cleaned


async def test_prompt_inputs_are_bounded(fake: FakeLLM, client: LLMClient) -> None:
    long = SourceText("Blog", "https://example.org/a", "T", "word " * 2000)
    await llm_event(client, EventInput(1, "T", (), 1.0, (long,) * 10), "en")
    sources = json.loads(fake.requests[0].user)["sources"]
    assert len(sources) == prompts.MAX_SOURCES
    assert all(len(s["summary"]) <= prompts.SUMMARY_LIMIT for s in sources)


@pytest.mark.parametrize("layers", [["kernel_codegen"], ["quantum_magic"], "kernel_codegen", None])
async def test_the_writeup_keeps_the_events_layers_whatever_the_writer_says(
    fake: FakeLLM, client: LLMClient, layers: object
) -> None:
    """Layers are the classifier's or the triage's (one decision), never the writer's."""
    fake.script(answer({**ZH_ANSWER, "layers": layers}))
    got = await llm_event(client, KERNELBRAID, "zh")
    assert got is not None and got.layers == KERNELBRAID.layers
    assert '"layers"' not in prompts.event_system("zh").split("只输出")[1]


@pytest.mark.parametrize("change", [
    {"title": None}, {"summary": 42}, {"why_it_matters": "  "},
    {"watch": "KernelBraid"}, {"watch": ["x"] * 9}, {"watch": ["x" * 81]}, {"summary": "长" * 1501},
    {"title": "t" * 201}, {"why_it_matters": "为" * 1001},
])
async def test_invalid_answers_fall_back(
    fake: FakeLLM, client: LLMClient, change: dict[str, Any]
) -> None:
    data = {k: v for k, v in {**ZH_ANSWER, **change}.items() if v is not None}
    fake.script(answer(data))
    stats = WriteStats()
    assert await llm_event(client, KERNELBRAID, "zh", stats=stats) is None
    assert client.failures == {"invalid": 1} and stats.fallbacks == {"invalid": 1}


async def test_a_figure_no_source_states_falls_back(
    fake: FakeLLM, client: LLMClient, caplog: pytest.LogCaptureFixture
) -> None:
    fake.script(answer({**ZH_ANSWER, "why_it_matters": "端到端训练吞吐提升 3.1x，值得关注。"}))
    stats = WriteStats()
    with caplog.at_level(logging.WARNING, logger="digest.write.writer"):
        assert await llm_event(client, KERNELBRAID, "zh", stats=stats) is None
    assert client.failures["figures"] == 1 and stats.figure_fallbacks == 1
    assert stats.as_dict()["fallbacks"] == {"figures": 1}
    assert "3.1x" in caplog.text


async def test_english_writeup_with_chinese_text_falls_back(fake: FakeLLM, client: LLMClient) -> None:
    fake.script(answer({**EN_ANSWER, "why_it_matters": "这很重要。"}))
    assert await llm_event(client, KERNELBRAID, "en") is None
    assert client.failures == {"language": 1}


async def test_english_writeup_may_keep_chinese_names_from_the_sources(
    fake: FakeLLM, client: LLMClient
) -> None:
    fake.script(answer({"title": "Splyce", "summary": "Reported by 机器之心: 1.96 to 2.86x on kernels.",
                        "why_it_matters": "Sparse coiteration vectorizes.", "layers": ["tensor_ir"],
                        "watch": []}))
    got = await llm_event(client, SPLYCE, "en")
    assert got is not None and got.watch == ()


async def test_chinese_writeup_without_chinese_falls_back(fake: FakeLLM, client: LLMClient) -> None:
    fake.script(answer(EN_ANSWER))
    assert await llm_event(client, KERNELBRAID, "zh") is None
    assert client.failures == {"language": 1}


async def test_stats_count_calls_cache_hits_and_tokens(fake: FakeLLM, client: LLMClient) -> None:
    fake.script(answer(ZH_ANSWER, prompt_tokens=300, completion_tokens=200))
    stats = WriteStats()
    first = await llm_event(client, KERNELBRAID, "zh", stats=stats)
    again = await llm_event(client, KERNELBRAID, "zh", stats=stats)
    assert first == again and first is not None
    assert (stats.calls, stats.cache_hits, stats.tokens) == (1, 1, 500)
    assert len(fake.requests) == 1


async def test_a_refused_budget_is_a_fallback_not_a_call(
    fake: FakeLLM, sqlite_sessions: SessionFactory
) -> None:
    poor = LLMClient("k", fake.base_url, "fake-chat", 5.0, 10, sqlite_sessions,
                     dt.datetime(2026, 9, 16, tzinfo=dt.UTC))
    stats = WriteStats()
    try:
        assert await llm_event(poor, KERNELBRAID, "zh", stats=stats) is None
    finally:
        await poor.aclose()
    assert stats.as_dict() == {"calls": 0, "cache_hits": 0, "tokens": 0,
                               "fallbacks": {"budget": 1}, "figure_fallbacks": 0}
    assert fake.requests == []


# --- LLM day and triage --------------------------------------------------------------------------

def _written() -> list[EventWriteup]:
    return [extractive_event(KERNELBRAID, "zh"), extractive_event(SPLYCE, "zh")]


async def test_llm_day_accepts_figures_from_the_writeups_and_the_date(
    fake: FakeLLM, client: LLMClient
) -> None:
    fake.script(answer({"title": "KernelBraid；Splyce",
                        "overview": "2026 年 9 月 17 日的 2 个事件：KernelBraid 达到 1.10x，"
                                    "Splyce 1.96 至 2.86 倍。",
                        "watchlist": ["KernelBraid", "Splyce"]}))
    day = await llm_day(client, _written(), "zh", DATE)
    assert day is not None and day.mode == "fake-chat" and day.watchlist == ("KernelBraid", "Splyce")
    payload = json.loads(fake.requests[0].user)
    assert payload["date"] == "2026-09-17" and len(payload["events"]) == 2


async def test_llm_day_with_an_invented_figure_falls_back(fake: FakeLLM, client: LLMClient) -> None:
    fake.script(answer({"title": "两项进展", "overview": "平均加速 4.2 倍。", "watchlist": []}))
    stats = WriteStats()
    assert await llm_day(client, _written(), "zh", DATE, stats=stats) is None
    assert stats.figure_fallbacks == 1


async def test_llm_day_without_events_asks_nothing(fake: FakeLLM, client: LLMClient) -> None:
    assert await llm_day(client, [], "zh", DATE) is None
    assert fake.requests == []


def _asked(*titles: str) -> list[TriageQuestion]:
    return [TriageQuestion(n, "paper", "arXiv cs.PL", title, f"About {title}.")
            for n, title in enumerate(titles, start=1)]


async def test_triage_keeps_only_the_ids_asked_and_the_known_layers(
    fake: FakeLLM, client: LLMClient
) -> None:
    fake.script(answer({"items": [
        {"id": 1, "relevant": True, "layers": ["tensor_ir", "quantum_ir", {"x": 1}, "tensor_ir"]},
        {"id": "2", "relevant": False, "layers": ["runtime"]}, {"id": 99, "relevant": True},
        {"id": 3, "relevant": "yes"}, {"id": True, "relevant": True}, "junk",
        {"id": 4, "relevant": True, "layers": "kernel_codegen"},
    ]}))
    got = await llm_triage(client, _asked("MLIR sparse", "Hiring", "Triton 3.4", "CUDA graphs"))
    assert got == {1: TriageAnswer(True, ("tensor_ir",)), 2: TriageAnswer(False, ()),
                   4: TriageAnswer(True, ())}
    sent = json.loads(fake.requests[0].user)["items"][0]
    assert sent == {"id": 1, "kind": "paper", "source": "arXiv cs.PL", "title": "MLIR sparse",
                    "text": "About MLIR sparse."}
    assert fake.requests[0].system == prompts.TRIAGE_SYSTEM


async def test_triage_without_items_list_is_a_failure(fake: FakeLLM, client: LLMClient) -> None:
    fake.script(answer({"relevant": [1]}))
    stats = WriteStats()
    assert await llm_triage(client, _asked("x"), stats=stats) is None
    assert stats.fallbacks == {"triage_invalid": 1}
    assert await llm_triage(client, []) == {}
    assert len(fake.requests) == 1


# --- extractive ----------------------------------------------------------------------------------

def test_extractive_event_zh_composes_chinese_from_facts_then_quotes() -> None:
    got = extractive_event(KERNELBRAID, "zh")
    assert got == extractive_event(KERNELBRAID, "zh")  # deterministic
    assert got.title == ARXIV.title and got.mode == "extractive" and got.kind == "paper"
    composed, quoted = got.summary.split("原文摘录：")
    assert composed == "arXiv 论文介绍 AReaL-TIK：吞吐达到 AReaL 的 1.10 倍；平均加速 1.40 倍。"
    assert quoted == (
        "We present KernelBraid, which starts from hand-tuned, bitwise-consistent unified RL kernels, "
        "e.g. log-probability recomputation. Across 12 end-to-end training configurations on H20 it "
        "reaches 1.10x the throughput of AReaL. Isolated-layer profiling shows a 1.40x mean phase-time "
        "speedup over 15 model-GPU pairs."
    )
    # why it matters: the layer's stake and how the figures stand, not the layer and source lines again
    assert got.why_it_matters == ("生成内核的质量直接决定算子在目标硬件上的效率。"
                                  "数字为来源自报，对比对象是 AReaL，复现前应核对原文配置。")
    assert "抽取式" not in got.why_it_matters and "来源报道" not in got.why_it_matters
    assert got.watch == ("AReaL-TIK", "待验证：AReaL-TIK 吞吐达到 AReaL 的 1.10 倍")
    assert got.layers == KERNELBRAID.layers


def test_each_event_gets_its_own_why_it_matters() -> None:
    runtime = EventInput(2, "GraphMorph", ("frontend", "runtime"), 60.0, (SourceText(
        "arXiv cs.DC", "https://arxiv.org/abs/2611.04055", "GraphMorph: Shape-Parametric CUDA Graphs",
        "CUDA Graphs remove CPU launch overhead in LLM serving. GraphMorph shortens engine start-up "
        "from 96 seconds to 21 seconds for Llama-3.1-70B on 8 H100 GPUs."),))
    release = EventInput(3, "Triton 3.6.0", ("kernel_codegen",), 50.0, (SourceText(
        "triton-lang/triton releases", "https://github.com/triton-lang/triton/releases/tag/v3.6.0",
        "Triton 3.6.0 release", "Gluon is now documented and supports warp specialization."),))
    whys = {extractive_event(e, "zh").why_it_matters for e in (KERNELBRAID, SPLYCE, runtime, release)}
    assert len(whys) == 4
    assert extractive_event(runtime, "zh").summary.startswith(
        "arXiv 论文介绍 GraphMorph：引擎启动时间从 96 秒降到 21 秒（Llama-3.1-70B on 8 H100 GPUs）。")
    assert extractive_event(release, "zh").summary.startswith("Triton 3.6.0 正式发布。")
    assert extractive_event(release, "en").summary.startswith("Triton 3.6.0 is released.")


def test_extractive_summary_keeps_angle_brackets_and_entities_as_text() -> None:
    """Stored summaries are plain text: ``std::vector<int>`` and ``&lt;`` are not markup to strip again."""
    text = "Lowering std::vector<int> and Span<T> to LLVM IR keeps the &lt;escape&gt; visible."
    event = EventInput(1, "Vectors <T>", ("kernel_codegen",), 50.0,
                       (SourceText("LLVM Blog", "https://blog.llvm.org/p", "Vectors <T>", text),))
    got = extractive_event(event, "en")
    assert got.summary.endswith(f"From the source: {text}") and got.title == "Vectors <T>"


def test_extractive_event_en_has_no_chinese() -> None:
    got = extractive_event(KERNELBRAID, "en")
    assert got.summary.startswith("An arXiv paper presents AReaL-TIK: 1.10x the throughput of AReaL; "
                                  "1.40x mean phase-time speedup. From the source: We present KernelBraid")
    assert got.why_it_matters == (
        "The quality of generated kernels decides how fast operators run on the target. The figures are "
        "the sources' own, measured against AReaL; check the original setup before relying on them."
    )
    assert not any(CJK.search(text) for text in (got.title, got.summary, got.why_it_matters, *got.watch))


def test_extractive_en_keeps_chinese_source_text_but_connects_in_english() -> None:
    got = extractive_event(SPLYCE, "en")
    assert got.summary == (
        "The 机器之心 blog presents Splyce: 1.96-2.86x speedup. From the source: "
        "Splyce 是一个基于 MLIR 的自动向量化框架。它提出双路径执行模型！"
        "在合成内核上取得 1.96 至 2.86 倍加速。"
    )
    assert not CJK.search(got.why_it_matters.replace("机器之心", ""))
    zh = extractive_event(SPLYCE, "zh").summary
    assert zh.startswith("机器之心 博客介绍 Splyce：加速 1.96 至 2.86 倍。")


def test_extractive_summary_is_capped_and_sentence_aware() -> None:
    long = " ".join(f"Sentence number {i} says something about MLIR passes." for i in range(40))
    event = EventInput(1, "T", (), 1.0, (SourceText("S", None, "Title", f"<p>{long}</p>"),))
    quoted = extractive_event(event, "en").summary.split("From the source: ")[1]
    assert quoted.count(".") == 3 and len(quoted) <= 600
    one = EventInput(1, "T", (), 1.0, (SourceText("S", None, "Title", "word " * 400),))
    quoted = extractive_event(one, "en").summary.split("From the source: ")[1]
    assert len(quoted) <= 600 and quoted.endswith("…")


def test_extractive_event_without_a_summary_says_so() -> None:
    bare = EventInput(3, "Triton 3.4", (), 5.0, (SourceText("GitHub", None, "Triton 3.4", "Triton 3.4"),))
    assert extractive_event(bare, "zh").summary.endswith("来源未提供摘要。")
    assert extractive_event(bare, "en").summary.endswith("The source gives no summary.")
    assert "尚未归入具体层级" in extractive_event(bare, "zh").why_it_matters


def test_extractive_day_zh_and_en() -> None:
    zh = extractive_day(_written(), "zh", DATE)
    assert zh.title == "AReaL-TIK；Splyce"  # short names, not the full English titles
    assert zh.overview == ("2026 年 9 月 17 日共 2 个事件（1 篇论文、1 篇博客）。变化集中在优化（2 个）、"
                           "张量级 IR（1 个）、内核生成（1 个），其中 1 个事件横跨三层以上。")
    assert zh.watchlist == ("AReaL-TIK", "Splyce", "待验证：AReaL-TIK 吞吐达到 AReaL 的 1.10 倍")
    assert zh == extractive_day(_written(), "zh", DATE) and zh.mode == "extractive"
    en = extractive_day([extractive_event(KERNELBRAID, "en")], "en", DATE)
    assert en.title == "AReaL-TIK"
    assert en.overview == ("September 17, 2026: 1 event (1 paper). Most movement in Optimization (1), "
                           "Kernel codegen (1) and Hardware back end (1); 1 span three layers or more.")
    assert not CJK.search(en.overview)


def test_the_overview_names_what_events_share_not_every_layer() -> None:
    layer_sets = [("kernel_codegen",), ("kernel_codegen", "runtime"), ("frontend",), ("benchmark",)]
    events = [EventWriteup(f"E{i}: x", f"Runs on H100 with Triton {i}.", "w", (f"E{i}",), layers,
                           "extractive", "paper") for i, layers in enumerate(layer_sets)]
    overview = extractive_day(events, "zh", DATE).overview
    assert "变化集中在内核生成（2 个）、前端（1 个）、运行时（1 个）。" in overview
    assert "基准测试" not in overview  # three layers at most, not the whole list
    assert overview.endswith("多个事件共同涉及 H100（4 个）、Triton（4 个）。")


def test_extractive_day_watchlist_puts_names_first_then_claims() -> None:
    events = [EventWriteup(f"E{i}", "s", "w", (f"T{i}", f"U{i}", "shared"), (), "extractive")
              for i in range(6)]
    assert extractive_day(events, "en", DATE).watchlist == (
        "T0", "T1", "T2", "T3", "U0", "shared", "U1", "U2")


def test_extractive_day_without_events() -> None:
    assert "无新事件" in extractive_day([], "zh", DATE).title
    assert extractive_day([], "en", DATE).title == "Compiler digest, September 17, 2026: no new events"


@pytest.mark.parametrize(("title", "name"), [
    ("PIMLower: Profile-Guided Operator Placement for Processing-in-Memory", "PIMLower"),
    ("Compile Once, Run on Every Rank: Precompile for Distributed torch.compile", "Precompile"),
    ("MLIR One-Shot Bufferize in 2026: What Changed and How to Migrate", "MLIR One-Shot Bufferize"),
    ("CUTLASS 4.3: Grouped GEMM Autotuning & Python Epilogue Fusion", "CUTLASS 4.3"),
    ("LLVM Weekly - #623, November 30th 2026", "LLVM Weekly #623"),
    ("Triton 3.6.0 release", "Triton 3.6.0"),
    ("TensorRT-LLM Speeds Up DeepSeek-R1 with Multi-Token Prediction", "TensorRT-LLM Speeds Up DeepSeek-R1"),
    ("Splyce：稀疏协同迭代的 SIMD 向量化", "Splyce"),
])
def test_short_names_for_the_day_title(title: str, name: str) -> None:
    from digest.domain.daytext import short_name

    assert short_name(title) == name


def test_key_figures_are_results_with_baselines_not_sizes_or_versions() -> None:
    from digest.write.extractive import key_figures

    assert key_figures("LLVM 21.1.8 Release: builds 2.5x faster, 30% smaller", "en") == [
        "2.5x faster", "30% smaller"]
    text = ("For a 70B-parameter model on 2,048 GPUs, cold start drops from 23 minutes to 2.8 minutes. "
            "Mixtral-8x7B runs 1.8x faster than eager mode on an Intel Arc B580. "
            "The FP8 GEMM reaches 1,450 TFLOPS on a B200.")
    assert key_figures(text, "zh") == ["冷启动从 23 分钟降到 2.8 分钟",
                                       "在 Intel Arc B580 上比 eager mode 快 1.8 倍",
                                       "在 B200 上达到 1,450 TFLOPS"]
    assert key_figures(text, "en") == [
        "cold start from 23 minutes to 2.8 minutes", "1.8x faster than eager mode on Intel Arc B580",
        "1,450 TFLOPS on B200"]
    assert not any(re.search(r"(?<![\d.])(?:70B|8x)", f) for f in key_figures(text, "en", most=9))


def test_watch_items_are_names_claims_and_releases_not_adjectives() -> None:
    from digest.write.extractive import key_terms

    title = "TritonTune: Transfer-Learned Cost Models for Autotuning NP-hard GSPMD-style Spaces"
    assert key_terms(title, "new capabilities.The TensorRT-LLM back end and torch.compile", most=9) == [
        "TritonTune", "TensorRT-LLM", "torch.compile"]
    weekly = EventInput(9, "LLVM Weekly", ("kernel_codegen",), 50.0, (SourceText(
        "LLVM Weekly", "http://llvmweekly.org/issue/623", "LLVM Weekly - #623, November 30th 2026",
        "Welcome to the six hundred and twenty-third issue of LLVM Weekly. News and mailing lists The "
        "branch for LLVM 22.x has been created and release candidates are expected every two weeks."),))
    got = extractive_event(weekly, "zh")
    assert got.watch[:2] == ("LLVM Weekly #623", "后续：LLVM 22.x 的 release candidate")
    assert "原文摘录：The branch for LLVM 22.x" in got.summary  # no greeting, no flattened heading
    assert got.kind == "roundup"


def _view(event_modes: list[str], day_mode: str) -> DigestView:
    events = tuple(EventView(n, n + 1, f"E{n}", None, 1.0, {}, (), (), "s", "w", (), mode)
                   for n, mode in enumerate(event_modes))
    moment = dt.datetime(2026, 9, 17, tzinfo=dt.UTC)
    return DigestView(DATE, "en", "t", "o", (), day_mode, moment, moment, events)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["extractive", "deepseek-chat", "gpt-x"]), max_size=5),
       st.sampled_from(["extractive", "deepseek-chat"]))
def test_one_generation_mode_rule_for_the_build_and_the_view(events: list[str], day: str) -> None:
    modes = [*events, day]
    expected = modes[0] if len(set(modes)) == 1 else "mixed"
    assert overall_mode(modes) == expected == _view(events, day).generation_mode
    assert overall_mode([]) == WriteMode.EXTRACTIVE == "extractive"


# --- extractive summaries: the lead, the results, no boilerplate; the body excerpt

from digest.write.extractive import body_excerpt, lead, with_excerpt  # noqa: E402

_BLOG = (
    "By Sofia Mendes and Li Wei. "
    "Introduction We compiled the whole model with torch.compile and CUDA graphs. "
    "The team met in Berlin. We also refactored the test suite. "
    "Compile time fell from 38 minutes to 6 minutes, and decoding reached 1,450 TFLOPS, 1.8x over "
    "eager mode. "
    "The post Faster decoding appeared first on PyTorch."
)


def test_lead_keeps_the_lead_and_the_results_without_byline_footer_or_heading() -> None:
    text = lead(_BLOG, limit=400, most=2)
    assert text == ("We compiled the whole model with torch.compile and CUDA graphs. "
                    "Compile time fell from 38 minutes to 6 minutes, and decoding reached "
                    "1,450 TFLOPS, 1.8x over eager mode.")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["Short one.", "We beat it by 2.5x over eager.", "Results",
                                 "Another plain sentence here.", "By Ann Lee.", "It ran 3% faster!"]),
                min_size=1, max_size=12), st.integers(min_value=40, max_value=300))
def test_lead_never_cuts_a_sentence(parts: list[str], limit: int) -> None:
    text = lead(" ".join(parts), limit=limit)
    kept = [p for p in parts if p not in ("Results", "By Ann Lee.")]
    assert len(text) <= limit
    if text and kept and len(kept[0]) <= limit:
        assert text.startswith(kept[0]) and all(s in parts for s in re.split(r"(?<=[.!?]) ", text))


def test_body_excerpt_prefers_the_paragraphs_with_results_and_stays_small() -> None:
    body = "\n\n".join(["Why we did it, at length. " * 20, "Results",
                        "Inference is 2.1x faster than the eager baseline.",
                        "Thanks to everyone who helped.",
                        "The post X appeared first on PyTorch."])
    excerpt = body_excerpt(body, limit=200)
    assert excerpt == "Inference is 2.1x faster than the eager baseline. Thanks to everyone who helped."
    assert with_excerpt("A teaser.", body, 200) == f"A teaser. {excerpt}"
    assert with_excerpt("A teaser.", "", 200) == "A teaser."


def test_the_writers_get_the_summary_and_a_small_excerpt_of_the_body() -> None:
    from digest.build.event_store import EventRecord
    from digest.domain.items import Item

    body = "Background at length. " * 10 + "\n\nThe new kernels are 3.2x faster than cuBLAS."
    entry = Item(1, "blog", "Blog", 0.5, "rss", "Kernels", "A teaser.", None, body=body)
    record = EventRecord(1, "Kernels", None, True, 0.5, {}, ("kernel_codegen",), False, [entry])
    (source,) = record.as_input().sources
    assert source.summary.startswith("A teaser. ")
    assert "3.2x faster than cuBLAS." in source.summary and len(source.summary) < 1300


def test_an_arxiv_paper_cross_listed_three_times_is_one_source() -> None:
    from digest.build.event_store import EventRecord
    from digest.domain.items import Item
    from digest.write.extractive import extractive_event

    listings = [Item(n, f"arxiv-cs.{cat}", f"arXiv cs.{cat.upper()}", 0.7, "arxiv", "Splyce",
                     "We vectorise sparse co-iteration.", "https://arxiv.org/abs/2409.01234",
                     arxiv_id="2409.01234") for n, cat in enumerate(("pl", "lg", "ar"), 1)]
    blog = Item(4, "blog", "A blog", 0.5, "rss", "Splyce explained", "On Splyce.",
                "https://blog.example/splyce")
    record = EventRecord(1, "Splyce", None, True, 0.5, {}, ("optimization",), False, [*listings, blog])
    event = record.as_input()
    assert [s.url for s in event.sources] == ["https://arxiv.org/abs/2409.01234",
                                              "https://blog.example/splyce"]
    why = extractive_event(event, "en").why_it_matters
    assert why.endswith("Reported by an arXiv paper and the A blog alike.")


def test_flattened_headings_bylines_and_travel_chatter_are_dropped() -> None:
    gsoc = ("By Sofia Mendes This summer I worked on the SLP vectorizer's cost model. The problem The SLP "
            "vectorizer costed shuffles separately. What landed A unified shuffle-cost query. On the LLVM "
            "test suite this gives a 1.2% geomean improvement on Neoverse V2.")
    assert lead(gsoc, most=4) == (
        "This summer I worked on the SLP vectorizer's cost model. The SLP vectorizer costed shuffles "
        "separately. A unified shuffle-cost query. On the LLVM test suite this gives a 1.2% geomean "
        "improvement on Neoverse V2.")
    carts = ("Hello everyone! I'm Rafael, a PhD candidate at the University of Delaware. I recently flew "
             "from Philadelphia to Las Vegas to attend the CGO conference. CARTS combines MLIR with LLVM "
             "to compile task graphs for distributed HPC.capabilities.The runtime schedules data blocks.")
    assert lead(carts) == ("CARTS combines MLIR with LLVM to compile task graphs for distributed "
                           "HPC.capabilities. The runtime schedules data blocks.")
    assert lead("Compared to A100 the kernel is 2x faster on B200.") == (
        "Compared to A100 the kernel is 2x faster on B200.")  # prose, not a heading


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=12)
                     | st.sampled_from([*LAYER_IDS, "quantum_ir"]),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.sampled_from(["id", "relevant", "layers", "note"]), inner,
                                       max_size=4),
                     max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(_JSON, max_size=8), asked=st.sets(st.integers(0, 5), max_size=4))
def test_a_triage_answer_is_never_more_than_verdicts_on_the_ids_asked(
    rows: list[object], asked: set[int]
) -> None:
    """Whatever JSON the model returns: verdicts on asked ids, known layers, none if not relevant."""
    got = triage_answers(rows, asked)
    assert set(got) <= asked
    for verdict in got.values():
        assert isinstance(verdict.relevant, bool) and set(verdict.layers) <= set(LAYER_IDS)
        assert verdict.relevant or verdict.layers == ()
