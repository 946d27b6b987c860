"""The five events of the two seed digests: their layers, and their order by score per day.

Each event is an item whose title is the seed's source title and whose summary
is an English abstract / post text in the style of the original source
(the seeds show Chinese paraphrases of those English sources).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from digest.analyze.classify import classify
from digest.analyze.score import score
from digest.analyze.taxonomy import Taxonomy
from digest.domain.items import Item

TORCH_PIM = (
    "Torch-PIM: Automated Profile-Guided PIM Offloading for PyTorch",
    "Processing-in-memory (PIM) architectures promise to relieve the memory bottleneck of tensor "
    "workloads, but deciding which operators to offload remains manual or is fixed before "
    "compilation. Prior frameworks select offloading candidates at the operator level before "
    "lowering, which hides the parallel structure exposed later in the pipeline. We present "
    "Torch-PIM, an automated profile-guided offloading framework for PyTorch built on progressive "
    "lowering through MLIR. Every parallel loop nest materialized during lowering becomes a "
    "candidate for host or PIM placement. Torch-PIM evaluates candidates in two stages, by amount "
    "of work and by memory boundedness, using data obtained from host-side profiling or from MLIR. "
    "On PIM configurations with 32 to 128 cores, Torch-PIM's offloading decisions achieve speedups "
    "of up to 8.6x, 2.9x, 4.4x, 5.1x and 3.6x over CPU-only execution for tensor operators, MLP, "
    "Attention, GPT-J-6B and LLaMA-7B, respectively.",
)
AREAL_TIK = (
    "AReaL-TIK: Stateful Agentic Optimization of Unified RL Kernels through an Optimization IR",
    "Reinforcement learning (RL) post-training of large language models spends much of its time in "
    "a few kernels, such as log-probability recomputation and attention, whose implementations "
    "must stay bitwise consistent between rollout and training. Agentic kernel optimization with "
    "LLMs is noisy and expensive to verify. Starting from a hand-tuned, bitwise-consistent unified "
    "RL kernel implementation, we present KernelBraid, which introduces an optimization IR that "
    "links implementations and modifications to numerical requirements, workload measurements and "
    "derivation history, so that LLM agents can perform stateful source-level search while "
    "retaining verified intermediate results. A modification is accepted only if it passes bitwise "
    "correctness checks and improves aggregate latency. On H20, the optimized kernels reach 1.10x "
    "the average end-to-end throughput of AReaL with log-probability recomputation across 12 "
    "training configurations; isolated layer profiling shows a 1.40x average phase-time speedup "
    "over 15 model-GPU pairs; and a unified-attention search reaches a 2.52x speedup using 7M LLM "
    "tokens. All 10 operators pass bitwise checks on A100, H20 and H200.",
)
F2ASM = (
    "Learning Exact NVIDIA SASS Encoders with $\\mathbb{F}_2$ Linear Algebra",
    "NVIDIA ships disassemblers for its SASS machine code but no assembler, which limits "
    "controlled binary rewriting, kernel patching and low-level performance research. We present "
    "F2Asm, which models a SASS instruction encoder as a vector-valued affine map over F2 and "
    "learns exact 128-bit encoders from pairs of disassembled instructions and raw CUBIN "
    "instruction words. Gaussian elimination over F2 incrementally builds a compact basis, detects "
    "inconsistencies and rejects inputs outside the learned span. Using 3,225 CUBINs, we train "
    "encoders for Hopper SM90/SM90a, Blackwell SM100 and Rubin SM107; disassemble-reassemble round "
    "trips reproduce the executable text sections exactly. Joint training yields shared encoders "
    "covering five Blackwell and three Rubin SM targets, and continued training with 1,504 new "
    "basis rows extends the Rubin encoder to 17,159 previously unsupported cuTile and GROMACS "
    "queries. F2Asm is the first open-source SASS assembler to support Rubin SM107.",
)
PYTORCH_CONF = (
    "Open Research, Tooling & Optimization at PyTorch Conference North America 2026",
    "PyTorch Conference North America 2026 brings a compiler and optimization track covering "
    "torch.compile, TorchInductor, Helion, vLLM and distributed training. On the torch.compile "
    "side, Dynamo will cut the cost of nested graph breaks from O(N^2) frame traces to O(N); a new "
    "C++ FakeTensor implementation gives a 30x speedup on aten.mm to shorten cold-start "
    "compilation; parameterized dynamic-shape CUDA Graphs reuse a single graph instead of "
    "re-recording per shape; and unbacked dynamic shapes target explicit graph capture workflows "
    "such as vLLM and torch.export. TorchInductor integrates AMD's FlyDSL, an MLIR-native GEMM "
    "backend. Helion adds CuteDSL and Pallas backends and uses LFBO and LLM-guided search to cut "
    "autotuning time. KernelAgent adds a hardware-guided multi-agent optimization layer and "
    "reports being 1.56x faster than default torch.compile while reaching 89% of H100 roofline. "
    "vLLM presents its Triton kernel strategy for Intel GPUs; FlexGEMM proposes writing GEMM "
    "epilogues as plain PyTorch functions fused into the store path; IBM Research's Helion Paged "
    "Attention backend reports up to 50% lower latency; and Meta introduces Precompile, an "
    "abstraction for distributed SPMD training that compiles once and reuses the artifact across "
    "ranks.",
)
SPLYCE = (
    "Splyce: SIMD Vectorization of Sparse Coiteration",
    "Sparse tensor contractions rely on coiteration loops that intersect the coordinates of "
    "several sparse operands. The data-dependent branches of sparse-sparse coiteration defeat "
    "standard loop vectorization, leaving modern superscalar processors underutilized. We present "
    "Splyce, an MLIR-based automatic vectorization framework for sparse coiteration. Splyce "
    "introduces a dual-path execution model that decouples coordinate intersection from pointer "
    "management, and uses selective predication to turn data-dependent branches into predictable "
    "dataflow. Eliminating unpredictable control flow exposes independent computations that can "
    "execute concurrently, improving instruction-level parallelism and functional-unit "
    "utilization without changing the sparse format or algorithm. On synthetic sparse tensor "
    "kernels, Splyce achieves speedups of 1.96x to 2.86x, and it delivers consistent speedups on "
    "most real-world irregular matrices from the SuiteSparse collection.",
)
# The seeds' own Chinese summaries, as readers saw them.
ZH = {
    "torch-pim": (
        "Torch-PIM 在 PyTorch 的 progressive "
        "lowering 管线之上引入 profile-guided 决策："
        "每个物化出的并行 loop nest 都进入 host 与 PIM 放置的候选空间，"
        "按工作量和 memory boundedness 两阶段评估，评估所需数据来自 "
        "host 端 profiling 或 MLIR，从而突破以往在 lowering "
        "之前固定算子候选集的限制。在 32 至 128 核的 PIM 配置下，相对 "
        "CPU-only 执行，其卸载决策在 tensor operators、MLP、"
        "Attention、GPT-J-6B 和 LLaMA-7B 上分别取得最高 "
        "8.6x、2.9x、4.4x、5.1x 和 3.6x 加速。"
    ),
    "areal-tik": (
        "KernelBraid 以 hand-tuned、"
        "bitwise-consistent 的统一 RL 内核实现为起点，提出 "
        "optimization IR 把实现与修改关联到数值要求、workload "
        "测量和推导历史，由 LLM agent "
        "在此之上进行有状态的源代码搜索并保留已验证的中间结果；修改只有在通过 "
        "bitwise 正确性检查且改善 aggregate latency 时才会被采纳。"
        "在 H20 上 12 个端到端训练配置的平均吞吐为 "
        "AReaL（log-probability recomputation）的 "
        "1.10x，隔离层 profiling 在 15 个 model-GPU 对上取得 "
        "1.40x 平均 phase time 加速，unified-attention "
        "搜索用 7M LLM tokens 取得 2.52x 加速，10 个算子在 "
        "A100/H20/H200 上均通过 bitwise 检查。"
    ),
    "f2asm": (
        "F2Asm 将 NVIDIA SASS 指令编码器建模为 F₂ 上的向量值仿射映射，"
        "从反汇编与原始 CUBIN 指令字配对中学习精确的 128 位编码器，用 F₂ "
        "上的高斯消元增量构建紧凑基、检测不一致并拒绝超出学习范围的输入。作者使用 "
        "3,225 个 CUBIN 训练 Hopper SM90/SM90a、"
        "Blackwell SM100 和 Rubin SM107 编码器，"
        "反汇编-重汇编往返测试中可执行文本段与原始完全一致；联合训练得到覆盖五个 "
        "Blackwell SM 目标与三个 Rubin SM 目标的共享编码器，"
        "持续训练以 1,504 个新增基行将 Rubin 编码器扩展到 17,159 "
        "个此前不支持的 cuTile/GROMACS 查询。"
    ),
    "pytorch-conf": (
        "PyTorch 博客提前公布了 PyTorch Conference North "
        "America 2026 的编译与优化专场安排，覆盖 torch.compile、"
        "TorchInductor、Helion、vLLM 与分布式训练等多条技术路线。"
        "torch.compile 方面，Dynamo 计划将嵌套 graph break "
        "的成本从 O(N²) 次 frame trace 降到 O(N) 次；新的 C++ "
        "FakeTensor 实现在 aten.mm 上带来 30 倍加速，"
        "用于缩短冷启动编译时间；参数化动态 shape CUDA Graph 复用单一图，"
        "免去逐 shape 重录制；unbacked dynamic shapes 则面向 "
        "vLLM 和 export 等显式图捕获工作流。TorchInductor 集成了 "
        "AMD 的 FlyDSL MLIR 原生 GEMM 后端；Helion 新增 "
        "CuteDSL 与 Pallas 后端，并以 LFBO 与 LLM 引导搜索压缩 "
        "autotuning 时间。KernelAgent 加入硬件引导的多智能体优化层，"
        "自称较默认 torch.compile 快 1.56 倍、达到 H100 "
        "roofline 的 89%；vLLM 公布 Intel GPU 的 Triton "
        "内核策略；FlexGEMM 提议用普通 PyTorch 函数编写 GEMM "
        "epilogue 并融合进 store path；IBM Research 的 "
        "Helion Paged Attention 后端报告延迟最高降 50%；Meta "
        "还提出了分布式 SPMD 训练的 Precompile 抽象，实现编译一次、跨 "
        "rank 复用。"
    ),
    "splyce": (
        "Splyce 是一个基于 MLIR 的自动向量化框架，"
        "专门解决稀疏张量收缩中稀疏-稀疏协同迭代循环难以标准向量化的问题。"
        "它提出双路径执行模型，将坐标求交与指针管理解耦，"
        "再通过选择性谓词把数据依赖分支转化为可预测的数据流，从而消除不可预测的控制流，"
        "暴露可并发执行的独立计算，提升指令级并行与功能单元利用率。在合成稀疏张量内核上，"
        "Splyce 报告了 1.96 至 2.86 倍的性能提升，并在 "
        "SuiteSparse 集合的多数真实不规则数据集上保持了稳定加速。"
    ),
}

ARXIV = ("arxiv-cs.pl", "arXiv cs.PL", 0.7, "arxiv")
PYTORCH = ("pytorch-blog", "PyTorch", 0.9, "rss")
SEEDS = {
    "torch-pim": (TORCH_PIM, ARXIV, ("tensor_ir", "optimization", "hardware_backend", "benchmark")),
    "areal-tik": (AREAL_TIK, ARXIV,
                  ("optimization", "kernel_codegen", "hardware_backend", "benchmark")),
    "f2asm": (F2ASM, ARXIV, ("kernel_codegen", "hardware_backend")),
    "pytorch-conf": (PYTORCH_CONF, PYTORCH, (
        "frontend", "graph_ir", "tensor_ir", "optimization", "kernel_codegen",
        "hardware_backend", "runtime", "distributed", "benchmark")),
    "splyce": (SPLYCE, ARXIV, ("tensor_ir", "optimization", "kernel_codegen")),
}
DAYS = {"000": ["torch-pim", "areal-tik", "f2asm"], "004": ["pytorch-conf", "splyce"]}


def seed_item(name: str, entry_id: int = 1, summary: str | None = None) -> Item:
    (title, text), (key, source, weight, kind), _ = SEEDS[name]
    return Item(entry_id, key, source, weight, kind, title, summary or text, None,
                announce_type="new" if kind == "arxiv" else None)


def _close_to_the_seed(layers: tuple[str, ...], seed: tuple[str, ...]) -> None:
    """No layer the seed's editor did not give, and at least three quarters of those given.

    The layers are chosen by the learned model (digest/analyze/layer_model.py),
    which follows the blind readers' guide; the seeds' editor tagged more
    generously (the PyTorch Conference programme: all nine layers).
    """
    assert set(layers) <= set(seed), f"{layers} has a layer the seed lacks: {seed}"
    assert len(layers) >= 0.75 * len(seed), f"{layers} misses more than a quarter of {seed}"


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_event_is_relevant_with_the_seed_layers(name: str, taxonomy: Taxonomy) -> None:
    verdict = classify(seed_item(name), taxonomy)
    assert verdict.relevant
    _close_to_the_seed(verdict.layers, SEEDS[name][2])
    rules = classify(seed_item(name), replace(taxonomy, layer_model=None))
    assert rules.layers == SEEDS[name][2], "the rules' own layers are the seed's"


def test_most_seed_events_get_exactly_the_seeds_layers(taxonomy: Taxonomy) -> None:
    exact = [name for name in SEEDS if classify(seed_item(name), taxonomy).layers == SEEDS[name][2]]
    assert len(exact) >= len(SEEDS) - 1, exact


@pytest.mark.parametrize("day", [pytest.param("000", marks=pytest.mark.xfail(strict=True, reason=(
    "known disagreement: F2Asm's 'first open-source' claim earns the full novelty (25 points) and puts it "
    "above Torch-PIM and AReaL-TIK, which the seed's editor ranked first; the expert ranking of "
    "tests/test_expert_order.py is what the score is tuned to"))), "004"])
def test_seed_day_orders_events_as_the_seed(day: str, taxonomy: Taxonomy) -> None:
    items = [seed_item(name, entry_id=i) for i, name in enumerate(DAYS[day])]
    scores = [score([item], classify(item, taxonomy)).score for item in items]
    assert scores == sorted(scores, reverse=True), dict(zip(DAYS[day], scores, strict=True))
    assert len(set(scores)) == len(scores)


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_chinese_summaries_give_the_same_layers(name: str, taxonomy: Taxonomy) -> None:
    verdict = classify(seed_item(name, summary=ZH[name]), taxonomy)
    assert verdict.relevant
    _close_to_the_seed(verdict.layers, SEEDS[name][2])


def test_seed_scores_land_in_a_plausible_band(taxonomy: Taxonomy) -> None:
    conf = seed_item("pytorch-conf")
    result = score([conf], classify(conf, taxonomy))
    assert 60 <= result.score <= 100
    assert result.breakdown["relevance"] == max(result.breakdown.values())  # breadth has diminishing returns
