"""The figure rule: which numbers a write-up states, and which the sources support."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from digest.analyze.classify import classify
from digest.analyze.figures import extract_figures, unsupported_figures
from digest.analyze.taxonomy import figures, load_taxonomy
from tests.items import blog_item

# Phrases from the seeds' sources, as the check sees them.
SOURCE = (
    "Using 3,225 CUBINs we train encoders for Hopper SM90/SM90a and Rubin SM107; the "
    "unified-attention search reaches 2.52× with 7M LLM tokens; KernelAgent is 1.56x faster than "
    "default torch.compile and reaches 89% of the H100 roofline; speedups of 1.96-2.86x; "
    "128-bit instruction words; PyTorch v2.5.1 in 2026."
)


def _values(text: str) -> list[tuple[str, str]]:
    return [(str(f.value), f.kind) for f in extract_figures(text)]


def test_units_and_separators_are_normalised() -> None:
    assert _values("3,225 个、2.52x、2.52 x、2.52×、1.56 倍、89%、８９％") == [
        ("3225", ""), ("2.52", "ratio"), ("2.52", "ratio"), ("2.52", "ratio"),
        ("1.56", "ratio"), ("89", "percent"), ("89", "percent"),
    ]


def test_magnitudes_scale_across_languages() -> None:
    (seven_m,), (seven_m_zh,) = extract_figures("7M tokens"), extract_figures("700 万 tokens")
    assert seven_m.value == seven_m_zh.value == Decimal(7_000_000)
    assert [str(f.value) for f in extract_figures("16 GB, 3.2GHz, 6B params")] == ["16", "3.2", "6000000000"]


def test_a_number_longer_than_decimals_precision_is_kept_exact_and_never_raises() -> None:
    """A feed entry of "1" and 28 zeros crashed the classifier (decimal.InvalidOperation),
    found by tests/test_news_veto.py's property test; a longer one was rounded."""
    long = "1" + "0" * 28
    assert _values(f"{long} tokens") == [(long, "")]
    digits = "1234567890" * 5
    assert _values(f"{digits} billion, {digits}x") == [(digits + "0" * 9, ""), (digits, "ratio")]
    assert unsupported_figures(f"up to {digits}x faster", f"it is up to {digits}x faster") == []
    item = blog_item("A compiler", f"The MLIR compiler emits {long} kernels.")
    assert classify(item, load_taxonomy()).relevant


def test_names_are_not_figures_in_a_writeup_but_count_in_sources() -> None:
    assert extract_figures("A100/H20/SM107 与 F2Asm、fp16、O(N²)") == []
    assert {str(f.value) for f in extract_figures("H100 v2.5", names_too=True)} == {"100", "2.5"}


def test_a_range_gives_its_kind_to_the_low_end() -> None:
    assert _values("1.96 至 2.86 倍") == [("1.96", "ratio"), ("2.86", "ratio")]
    assert _values("10-20%") == [("10", "percent"), ("20", "percent")]


def test_full_width_comma_never_joins_numbers() -> None:
    assert _values("分别为 100，200") == [("100", ""), ("200", "")]


def test_versions_compare_as_text() -> None:
    assert _values("PyTorch 2.5.1") == [("2.5.1", "version")]
    assert unsupported_figures(["PyTorch 2.5.1"], [SOURCE]) == []
    assert unsupported_figures(["PyTorch 2.6.0"], [SOURCE]) == ["2.6.0"]


@pytest.mark.parametrize("claim", [
    "使用 3225 个 CUBIN", "2.52 倍加速", "用了 7M LLM tokens", "700 万 tokens", "达到 89% roofline",
    "快 1.56 倍", "1.96 至 2.86 倍", "128 位编码", "2026 年", "A100 与 H200 上",
    "三个目标", "前 3 个事件与 10 个算子",
])
def test_supported_or_exempt_claims_pass(claim: str) -> None:
    assert unsupported_figures([claim], [SOURCE]) == []


@pytest.mark.parametrize(("claim", "missing"), [
    ("最高 3.1x 加速", "3.1x"),
    ("2.5x 加速", "2.5x"),  # rounding is not stating
    ("提升 52%", "52%"),  # arithmetic from 1.52x is not stating
    ("89x faster", "89x"),  # a percentage is not a ratio
    ("2025 年发布", "2025"),  # years are checked
    ("11 个配置", "11"),
    ("7B tokens", "7B"),  # 7M is not 7B
])
def test_unsupported_claims_are_reported(claim: str, missing: str) -> None:
    assert unsupported_figures([claim], [SOURCE]) == [missing]


def test_allowed_texts_count_as_sources() -> None:
    assert unsupported_figures(["2026 年 9 月 17 日的 12 个事件"], [], ["2026-09-17", "12"]) == []


def test_several_texts_report_each_missing_figure_once() -> None:
    assert unsupported_figures(["3.1x", "又是 3.1x，还有 42%"], [SOURCE]) == ["3.1x", "42%"]


def test_a_range_low_end_takes_the_kind_but_not_the_unit() -> None:
    low, high = extract_figures("1.96 至 2.86 倍")
    assert (low.kind, low.unit, high.kind, high.unit) == ("ratio", "", "ratio", "倍")
    assert (low.compact, high.compact) == ("1.96x", "2.86x")
    assert figures("1.96 至 2.86 倍") == ["2.86x"], "the classifier counts a range once"


_PIECES = st.sampled_from(["1", "2.5", "12,500", "3", "0", " ", "  ", "x", "X", "×", "倍", "%", "percent",
                           " times", " H100", " GPUs", "4", "_", ".", ",", "，", "至", "-", "v", "a", "１"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=12).map("".join))
def test_the_classifier_reads_figures_through_the_one_extractor(text: str) -> None:
    stated = {f.compact for f in extract_figures(text) if f.kind in ("ratio", "percent")}
    assert set(figures(text)) <= stated


# --- results: figures with what they measure and their baselines ----------------------------------

from digest.analyze.figures import Result, results  # noqa: E402

# Sentences of the kind the sample feeds and real posts carry.
PRECOMPILE = ("For a 70B-parameter model on 2,048 GPUs, cold start drops from 23 minutes to 2.8 minutes. "
              "Precompile also removed the compile-time collective hangs we saw in 7% of large "
              "production jobs.")


def _shown(text: str) -> list[tuple[str, str, str, str]]:
    return [(r.kind, r.before, r.value, r.baseline or r.where) for r in results(text)]


def test_a_change_keeps_its_before_value_and_what_changed() -> None:
    (result,) = results(PRECOMPILE)  # "7% of jobs" is a share, "70B" a model size: not results
    assert result == Result("change", "2.8 minutes", before="23 minutes", metric="cold start",
                            direction="down")
    assert _shown("Cold start: 23 -> 2.8 minutes on 2,048 GPUs.") == [
        ("change", "23 minutes", "2.8 minutes", "2,048 GPUs")]
    (mfu,) = [r for r in results("ShardFlow raises MFU from 38.2% to 46.9% over the XLA SPMD partitioner.")]
    assert (mfu.metric, mfu.direction, mfu.baseline) == ("MFU", "up", "XLA SPMD partitioner")


def test_ratios_against_a_named_baseline() -> None:
    assert _shown("With max-autotune, Mixtral-8x7B inference runs 1.8x faster than eager mode on an "
                  "Intel Arc B580.") == [("ratio", "", "1.8x", "eager mode")]
    assert _shown("MoE layers are up to 1.35x faster on B200 than CUTLASS 4.2.") == [
        ("ratio", "", "1.35x", "CUTLASS 4.2")]
    (gain, *more) = results("PIMLower achieves up to 6.2x speedup on GEMV-dominated kernels, 3.1x on "
                            "attention "
                            "and 2.4x end to end on OPT-6.7B decoding relative to CPU-only execution.")
    assert (gain.value, gain.where, gain.qualifier, gain.baseline) == (
        "6.2x", "GEMV-dominated kernels", "up to", "CPU-only execution")
    assert [(r.value, r.where, r.baseline) for r in more] == [
        ("3.1x", "attention", "CPU-only execution"), ("2.4x", "OPT-6.7B decoding", "CPU-only execution")]


def test_by_within_and_absolute_results() -> None:
    assert [(r.kind, r.metric, r.value, r.direction) for r in results(
        "GraphMorph cuts the memory held by captured graphs by 8.3x and reduces p99 time per output "
        "token by 17%.")] == [("by", "memory held by captured graphs", "8.3x", "down"),
                              ("by", "p99 time per output token", "17%", "down")]
    assert _shown("The FP8 GEMM reaches 1,450 TFLOPS on a B200, within 3% of the hand-tuned C++ kernel.") == [
        ("absolute", "", "1,450 TFLOPS", "B200"), ("within", "", "3%", "hand-tuned C++ kernel")]


def test_bounds_shares_sizes_and_names_are_not_results() -> None:
    assert results("It keeps the slowdown below 2% and fails in 9% of tasks at 10% block density.") == []
    assert results("Mixtral-8x7B and a 70B model on 8 H100 GPUs with 3,225 CUBINs.") == []
    assert [f.kind for f in extract_figures("Mixtral-8x7B")] == [""]  # "8x" glued to "7B" is a name
