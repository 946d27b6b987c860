"""The compiler-stack layer taxonomy: fixed ids, display labels per locale."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    """One layer of the compiler stack."""

    id: str
    zh: str
    en: str
    covers: str

    def label(self, locale: str) -> str:
        """The display label in ``locale`` (English for anything but zh)."""
        return self.zh if locale == "zh" else self.en


LAYERS: tuple[Layer, ...] = (
    Layer("frontend", "前端", "Frontend",
          "framework front ends, tracing and graph capture (Dynamo, JAX tracing), kernel DSL syntax"),
    Layer("graph_ir", "图级 IR", "Graph IR",
          "graph-level IRs and passes: FX, StableHLO, Relax, ONNX rewriting, graph fusion"),
    Layer("tensor_ir", "张量级 IR", "Tensor IR",
          "loop/tensor IRs: MLIR linalg/affine/sparse_tensor, TIR, Halide, polyhedral"),
    Layer("optimization", "优化", "Optimization",
          "passes, autotuning, cost models, search, PGO"),
    Layer("kernel_codegen", "内核生成", "Kernel codegen",
          "CUDA/PTX/SASS, Triton kernels, CUTLASS, LLVM codegen, vectorization"),
    Layer("hardware_backend", "硬件后端", "Hardware back end",
          "specific targets: GPU, TPU, NPU, PIM, FPGA"),
    Layer("runtime", "运行时", "Runtime", "runtimes, memory, CUDA graphs, serving engines"),
    Layer("distributed", "分布式", "Distributed", "multi-device parallelism, collectives, sharding"),
    Layer("benchmark", "基准测试", "Benchmark",
          "new benchmarks, substantial performance evaluations"),
)

LAYER_IDS: tuple[str, ...] = tuple(layer.id for layer in LAYERS)
BY_ID: dict[str, Layer] = {layer.id: layer for layer in LAYERS}


def parse_layers(text: str) -> list[str]:
    """Parse a comma- or space-separated list of layer ids; raise ValueError naming bad ones."""
    wanted = [part for part in text.replace(",", " ").split() if part]
    unknown = [part for part in wanted if part not in BY_ID]
    if unknown:
        raise ValueError(
            f"unknown layer(s) {', '.join(unknown)}; valid: {', '.join(LAYER_IDS)}"
        )
    if not wanted:
        raise ValueError(f"no layers given; valid: {', '.join(LAYER_IDS)}")
    return [lid for lid in LAYER_IDS if lid in wanted]


def stored_layers(value: object) -> tuple[str, ...] | None:
    """The layer ids of a stored filter in ``LAYER_IDS`` order; None when it is not a list of known ids.

    Stored rows are read back from JSON, so a damaged or hand-edited row may hold
    anything: the caller decides what an unreadable filter means (planning leaves
    that subscriber out, the chat commands say so).
    """
    if not isinstance(value, list | tuple) or not all(isinstance(x, str) for x in value):
        return None
    if any(x not in BY_ID for x in value):
        return None
    return tuple(lid for lid in LAYER_IDS if lid in value)
