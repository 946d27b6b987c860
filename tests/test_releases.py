"""What a release changes, from its notes: version, breaking changes, deprecations, removals."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from digest.analyze.classify import classify, classify_items, is_borderline, relevance_distance
from digest.analyze.releases import ITEM_CHARS, ReleaseNotes, is_fix_release, release_notes, release_version
from digest.analyze.taxonomy import load_taxonomy
from digest.domain.items import Item
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


FIXES_ONLY = ("Bug fixes\n\n- Fix a crash in the loop vectorizer on AArch64.\n"
              "- Fixed a miscompile of i128 shifts.")


@pytest.mark.parametrize(("title", "text", "url", "fixes_only"), [
    ("Numba 0.61.2", FIXES_ONLY, None, True),
    ("llvmlite v0.41.1", "Resolved a build failure with LLVM 14.", None, True),
    ("Warp 1.7.2", FIXES_ONLY, "https://github.com/NVIDIA/warp/releases/tag/v1.7.2", True),
    ("Numba 0.61.0", FIXES_ONLY, None, False),  # not a patch version
    ("Numba 0.61.10", FIXES_ONLY, None, True),
    ("Futhark 0.25.36", "### Added\n\n- Fusion of map nests with scatter.", None, False),
    ("Emscripten 6.0.7", FIXES_ONLY + "\n- Added support for wasm64 exceptions.", None, False),
    ("CUTLASS 3.5.1", "- New CuTe layouts for Hopper.\n- Fix a typo.", None, False),
    ("Binaryen 2.0.1", "Improved inlining heuristics.", None, False),
    ("Release 2024.10.3", FIXES_ONLY, None, True),
    ("No version here", FIXES_ONLY, None, False),
    # prose notes of projects that number every release x.y.z: what a sentence brings counts
    ("ISPC v1.1.4", "There are two major bugfixes for Windows in this release. This release features "
     "a new experimental scalar target.", None, False),
    ("ISPC v1.1.3", "With this release, the language now supports \"switch\" statements.", None, False),
    ("ISPC v1.8.2", "An update with several important stability fixes and an experimental AVX512 "
     "support.", None, False),
    ("V 0.1.20", "- JavaScript backend! - Hundreds of C warnings were fixed.", None, False),
    ("V 0.1.21", "- none keyword for options. - Solaris support.", None, False),
    ("Emscripten 3.1.72", "- The MEMORY64 setting is no longer experimental.", None, False),
    # a keep-a-changelog "Changed" or "Added" section lists changes, whatever their words
    ("ponyc 0.58.7", "Fixed\n\n- Fix bug in ASIO shutdown (PR #4548)\n\nChanged\n\n- Recycle actor "
     "heap chunks after GC instead of returning to pool (PR #4531)", None, False),
    ("ponyc 0.54.1", "Fixed\n\n- Fix bug in HeapToStack optimization pass (PR #4341)\n\nChanged\n\n"
     "- LLVM 15 (PR #4327)", None, False),
    # GitHub's generated "What's Changed" lists every pull request, fixes included
    ("Gleam v1.11.1", "What's Changed - Fix the formatter on empty pipes - Fixed a crash in the "
     "language server", None, True),
    # ... but never a fix that names one, nor a sentence under the fixes
    ("ISPC v1.9.2", "Fixed a crash in the new AVX512 target.", None, True),
    ("ponyc 0.58.9", "Fixed - Fix a hang when the new backend is missing", None, True),
    ("Crystal 1.16.3", "Bug fixes\n\n- The new keyword parser no longer loops on empty input.", None, True),
])
def test_a_patch_release_that_adds_nothing_only_fixes(title: str, text: str, url: str | None,
                                                      fixes_only: bool) -> None:
    assert is_fix_release(title, text, url) is fixes_only


@given(st.text(alphabet=st.sampled_from(list("Fixed Changed Added new target backend! -*\n.:#x")),
               max_size=300))
def test_any_notes_give_a_verdict_and_an_added_item_is_never_fix_only(text: str) -> None:
    """Notes from a feed are untrusted: any text is read without error, and a list item under
    "Added" always makes the release more than fixes."""
    assert isinstance(is_fix_release("Tool 1.2.3", text), bool)
    assert not is_fix_release("Tool 1.2.3", f"{text}\n\nAdded\n\n- A vectorised scatter lowering")


def test_a_fix_only_release_is_not_news_but_a_release_that_adds_is() -> None:
    taxonomy = load_taxonomy()
    assert taxonomy.fix_release > 0

    def release(version: str, notes: str) -> Item:
        return Item(1, "gh-numba", "Numba", 0.8, "github-releases", f"Numba {version}", notes,
                    f"https://github.com/numba/numba/releases/tag/{version}",
                    repo="numba/numba", tag=version)

    compiler_fixes = ("Bug fixes\n\n- Fix the LLVM code generation of parfors loops in the "
                      "CUDA target compiler.\n- Fix a JIT compilation crash on AArch64.")
    fixes = classify(release("0.61.2", compiler_fixes), taxonomy)
    assert not fixes.relevant and fixes.totals["fix_release"] == 1.0
    assert relevance_distance(fixes.totals, taxonomy) == -taxonomy.fix_release
    assert is_borderline(fixes, taxonomy), "a second opinion (LLM triage) may still read the notes"
    off = classify(release("0.61.2", compiler_fixes), replace(taxonomy, fix_release=0.0))
    assert off.relevant, "the same notes are compiler news when the rule is off"
    adds = classify(release("0.61.3", compiler_fixes + "\n- Added support for LLVM 20 in the JIT."),
                    taxonomy)
    assert adds.relevant and "fix_release" not in adds.totals
    minor = classify(release("0.62.0", compiler_fixes), taxonomy)
    assert minor.relevant, "a minor or major release is judged by its evidence alone"
    post = Item(2, "numba-blog", "Numba blog", 0.8, "rss", "Numba 0.61.2 fixes parfors codegen",
                compiler_fixes, "https://numba.example/blog/0-61-2")
    assert classify_items([release("0.61.2", compiler_fixes), post], taxonomy).relevant, (
        "an event with a post about the release is not a bare fix release")


def test_a_patch_release_that_changes_an_api_is_not_fix_only() -> None:
    notes = ("Changes: jax.jit now forwards compiler_options to XLA. Deprecations: "
             "jax.tree_util.register_keypaths has been removed.")
    assert not is_fix_release("JAX v0.6.1", notes)
    assert is_fix_release("JAX v0.6.1", "Changes: jax.jit no longer crashes on empty pytrees.")
