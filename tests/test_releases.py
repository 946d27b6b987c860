"""What a release changes, from its notes: version, breaking changes, deprecations, removals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from digest.analyze.releases import ITEM_CHARS, ReleaseNotes, release_notes, release_version
from digest.domain.writeups import EventInput, SourceText
from digest.write.extractive import extractive_event

TRITON = "https://github.com/triton-lang/triton/releases/tag/v3.4.0"
# Release notes as a GitHub releases.atom entry is stored today: its HTML flattened to one line.
FLAT = (
    "Highlights Gluon, the low-level tile language, is now documented. Breaking changes The "
    "triton.Config num_ctas argument was renamed to num_clusters. Python 3.9 is no longer supported. "
    "Deprecations tl.extra.cuda.libdevice is deprecated; use tl.math instead. Fixes Fixed a miscompile "
    "of tl.dot that used the deprecated MMAv2 path (#8123). Removed a spurious warning on Hopper. "
    "Full Changelog: v3.3.1...v3.4.0"
)
# The same kind of notes with their paragraphs kept (Markdown headings, list items).
PARAGRAPHS = "\n\n".join([
    "## What's Changed", "* Autotuner caches results across processes.",
    "## Breaking Changes", "* `tl.advance` now requires a block pointer.",
    "## Deprecated", "* The `num_warps` default of 4 is deprecated.",
    "## Removed", "* The legacy `triton.compile` signature.",
    "## Bug fixes", "* Removed a deprecated assertion that fired on AMD.",
])


@pytest.mark.parametrize(("title", "url", "version"), [
    ("Triton 3.4.0 release", TRITON, "v3.4.0"),
    ("LLVM 21.1.8", "https://github.com/llvm/llvm-project/releases/tag/llvmorg-21.1.8", "21.1.8"),
    ("Triton 3.6.0 release", None, "3.6.0"),
    ("v2.0.0-rc1", None, "v2.0.0-rc1"),
    ("Spring cleaning", "https://github.com/o/r/releases/tag/spring", None),
])
def test_the_version_comes_from_the_tag_else_the_title(title: str, url: str | None,
                                                       version: str | None) -> None:
    assert release_version(title, url) == version


def test_flattened_notes_give_their_breaking_changes_and_deprecations_but_never_fixes() -> None:
    notes = release_notes("Triton 3.4.0 release", FLAT, TRITON)
    assert notes == ReleaseNotes(
        version="v3.4.0",
        breaking=("The triton.Config num_ctas argument was renamed to num_clusters",
                  "Python 3.9 is no longer supported"),
        deprecated=("tl.extra.cuda.libdevice is deprecated; use tl.math instead",),
        removed=(),
    )
    assert notes.changes == 3


def test_notes_with_paragraphs_read_their_headings() -> None:
    notes = release_notes("Triton 3.5.0", PARAGRAPHS)
    assert notes.breaking == ("`tl.advance` now requires a block pointer",)
    assert notes.deprecated == ("The `num_warps` default of 4 is deprecated",)
    assert notes.removed == ("The legacy `triton.compile` signature",)


def test_sentences_outside_a_section_count_by_their_own_words() -> None:
    text = ("LLVM 22.1.0 Release. BREAKING: the C API drops LLVMGetGlobalContext. The legacy JIT is "
            "deprecated and will be removed in LLVM 23. Removed the legacy pass manager. "
            "Support for Python 3.8 has been dropped. Other changes Faster builds.")
    notes = release_notes("LLVM 22.1.0", text)
    assert notes.breaking == ("the C API drops LLVMGetGlobalContext",)
    assert notes.deprecated == ("The legacy JIT is deprecated and will be removed in LLVM 23",)
    assert notes.removed == ("Removed the legacy pass manager", "Support for Python 3.8 has been dropped")


def test_notes_without_changes_say_nothing_and_items_are_bounded() -> None:
    plain = release_notes("LLVM 21.1.8", "This is the final planned bug-fix release of the LLVM 21.x "
                          "series. It fixes a miscompile in the AArch64 SVE loop vectorizer.")
    assert plain == ReleaseNotes("21.1.8")
    long = release_notes("v1.0", "Breaking changes " + " ".join(f"renamed{n}" for n in range(40)) + ".")
    (item,) = long.breaking
    last = item.removesuffix("…").split()[-1]
    assert len(item) <= ITEM_CHARS and item.endswith("…")
    assert last in [f"renamed{n}" for n in range(40)], "cut inside a word"


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.text(alphabet=st.sampled_from(list("Breaking changes deprecated REMOVED: .\n#*`<>&x")),
               max_size=300))
def test_any_text_gives_bounded_items(text: str) -> None:
    notes = release_notes("t", text)
    items = notes.breaking + notes.deprecated + notes.removed
    assert all(len(i) <= ITEM_CHARS and "\n" not in i for i in items)


def _release(summary: str, url: str = TRITON) -> EventInput:
    source = SourceText("triton-lang/triton releases", url, "Triton 3.4.0 release", summary)
    return EventInput(1, "Triton 3.4.0 release", ("kernel_codegen",), 60.0, (source,))


def test_a_release_write_up_says_what_it_changes_in_each_language() -> None:
    zh, en = extractive_event(_release(FLAT), "zh"), extractive_event(_release(FLAT), "en")
    assert zh.summary.startswith(
        "Triton 3.4.0 正式发布。版本 v3.4.0：破坏性变更 2 项（The triton.Config num_ctas argument "
        "was renamed to num_clusters；Python 3.9 is no longer supported）；弃用 1 项（"
        "tl.extra.cuda.libdevice is deprecated; use tl.math instead）。原文摘录：")
    assert en.summary.startswith(
        "Triton 3.4.0 is released. Version v3.4.0: 2 breaking changes (The triton.Config num_ctas argument "
        "was renamed to num_clusters; Python 3.9 is no longer supported); 1 deprecation "
        "(tl.extra.cuda.libdevice is deprecated; use tl.math instead). From the source: ")
    assert "2 项破坏性变更需要下游先迁移再升级" in zh.why_it_matters
    assert "2 breaking changes need downstream migration" in en.why_it_matters
    assert "升级前核对：Triton 3.4.0 的 2 项破坏性变更" in zh.watch
    assert "Before upgrading: 2 breaking changes in Triton 3.4.0" in en.watch


def test_a_release_without_changes_says_so_and_a_paper_gets_no_release_line() -> None:
    quiet = extractive_event(_release("Highlights Gluon is now documented."), "zh")
    assert "版本 v3.4.0：版本说明中未见破坏性变更或弃用。" in quiet.summary
    assert "升级前核对" not in " ".join(quiet.watch)
    paper = extractive_event(_release(FLAT, url="https://arxiv.org/abs/2609.00001"), "en")
    assert "Version" not in paper.summary and "breaking change" not in paper.summary
