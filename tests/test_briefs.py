"""Roundups as one 简讯 / Briefs entry: their items, bounded, linked, stored, filtered and built."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable

from sqlalchemy import select

from digest.build.pipeline import BuildOptions, build_digest
from digest.domain.daytext import clip_line
from digest.domain.items import Item
from digest.domain.views import DigestView, EventView, filter_view
from digest.domain.writeups import Brief, BriefItem, briefs_of
from digest.render.renderer import Renderer
from digest.store.db import SessionFactory
from digest.store.models import DigestEvent, Event
from digest.store.queries import load_view
from digest.store.search import search
from digest.write.extractive import (
    BRIEF_CHARS,
    BRIEF_ITEMS,
    bounded_briefs,
    brief_of,
    roundup_items,
)
from tests.builders import COMPILER_PAPERS, DAY, NOW, WINDOW, add_entry, add_source

# LLVM Weekly #623 as the sample feed stores it: the HTML description flattened to one line.
WEEKLY = (
    "Welcome to the six hundred and twenty-third issue of LLVM Weekly, a weekly newsletter covering "
    "developments in LLVM, Clang, and related projects. News and mailing lists The branch for LLVM 22.x "
    "has been created and release candidates are expected every two weeks. An RFC proposes moving the "
    "MLIR sparse_tensor dialect's co-iteration lowering onto the vector dialect. LLVM commits The AMDGPU "
    "back end gained scheduling models for gfx1250. The RISC-V back end now supports the Zvfbfa "
    "extension. MLIR commits The XeGPU dialect gained a layout propagation pass."
)
WEEKLY_ITEMS = [
    "The branch for LLVM 22.x has been created and release candidates are expected every two weeks.",
    "An RFC proposes moving the MLIR sparse_tensor dialect's co-iteration lowering onto the vector dialect.",
    "The AMDGPU back end gained scheduling models for gfx1250.",
    "The RISC-V back end now supports the Zvfbfa extension.",
    "The XeGPU dialect gained a layout propagation pass.",
]
RFC = "https://discourse.llvm.org/t/rfc-sparse-tensor-co-iteration-lowering-onto-vector/88120"


def test_a_flattened_roundup_gives_its_items_without_greeting_or_headings() -> None:
    items = roundup_items(WEEKLY, "", ["http://llvmweekly.org/issue/623", RFC])
    assert [i.text for i in items] == WEEKLY_ITEMS
    assert [i.url for i in items] == [None, RFC, None, None, None], "a link only where its words match"


def test_list_items_in_a_body_take_their_commit_and_pull_request_links() -> None:
    body = "\n\n".join([
        "Welcome to the 624th issue of LLVM Weekly.",
        "LLVM commits",
        "Clang now diagnoses dangling references to temporaries in more cases. 8d5e4f2a.",
        "The MLIR linalg dialect gained a pack operation for tiled layouts (#12345). It is used by IREE.",
        "A new pass hoists loop-invariant vector loads out of unrolled loops [commit].",
        "ok",
    ])
    links = ("https://github.com/llvm/llvm-project/commit/8d5e4f2a9c0b1d2e3f405162738495a6b7c8d9e0",
             "https://github.com/llvm/llvm-project/pull/12345", "https://github.com/llvm/llvm-project/pull/9")
    items = roundup_items("ignored when the body has paragraphs", body, links)
    assert items == (
        BriefItem("Clang now diagnoses dangling references to temporaries in more cases.", links[0]),
        BriefItem("The MLIR linalg dialect gained a pack operation for tiled layouts.", links[1]),
        BriefItem("A new pass hoists loop-invariant vector loads out of unrolled loops.", None),
    )


def test_items_are_bounded_one_line_each_and_never_cut_mid_word() -> None:
    words = " ".join(f"word{n}" for n in range(60))
    body = "\n\n".join([f"Item {n} says {words}\nacross lines." for n in range(20)])
    items = roundup_items("", body, ())
    assert len(items) == BRIEF_ITEMS
    for item in items:
        assert len(item.text) <= BRIEF_CHARS and "\n" not in item.text and item.text.endswith("…")
        kept = item.text.removesuffix("…").split()
        assert kept[-1] in words.split(), "cut inside a word"
    assert clip_line("short line", 160) == "short line"
    assert clip_line("编" * 300, 160) == "编" * 159 + "…"


def _item(n: int, title: str, summary: str, *, url: str, links: tuple[str, ...] = ()) -> Item:
    return Item(entry_id=n, source_key="llvm-weekly", source_name="LLVM Weekly", source_weight=0.7,
                kind="rss", title=title, summary=summary, url=url, links=links)


def test_a_roundup_event_becomes_one_brief_and_briefs_share_a_bound() -> None:
    weekly = _item(1, "LLVM Weekly - #623, November 30th 2026", WEEKLY, url="http://llvmweekly.org/issue/623",
                   links=("http://llvmweekly.org/issue/623", RFC))
    brief = brief_of(5, [weekly], ("tensor_ir",), 57.6)
    assert (brief.name, brief.url, brief.source, brief.layers) == (
        "LLVM Weekly #623", "http://llvmweekly.org/issue/623", "LLVM Weekly", ("tensor_ir",))
    assert [i.text for i in brief.items] == WEEKLY_ITEMS
    other = Brief(6, "This week in MLIR", "This week in MLIR", None, "MLIR", ("tensor_ir",), 40.0,
                  tuple(BriefItem(f"Item number {n} of the week.") for n in range(8)))
    shared = bounded_briefs([brief, other])
    assert [len(b.items) for b in shared] == [4, 4] and sum(len(b.items) for b in shared) == BRIEF_ITEMS
    assert [len(b.items) for b in bounded_briefs([brief, replace_items(other, 1)])] == [5, 1]
    this_week = brief_of(6, [_item(2, "This week in compilers: MLIR and Triton", WEEKLY, url="https://w.example/1")],
                         (), 40.0)
    assert this_week.name == "This week in compilers: MLIR and Triton"


def replace_items(brief: Brief, n: int) -> Brief:
    return Brief(brief.event_id, brief.title, brief.name, brief.url, brief.source, brief.layers,
                 brief.score, brief.items[:n])


def test_stored_briefs_round_trip_and_malformed_ones_are_skipped() -> None:
    brief = Brief(5, "LLVM Weekly - #623", "LLVM Weekly #623", None, "LLVM Weekly", ("runtime",), 50.0,
                  (BriefItem("The AMDGPU back end gained scheduling models.", "https://x.example/a"),))
    empty = {**brief.as_dict(), "items": []}
    stored = json.loads(json.dumps([brief.as_dict(), {"event_id": "x"}, "junk", empty]))
    assert briefs_of(stored) == (brief,)
    assert briefs_of(None) == () and briefs_of({"a": 1}) == ()


def test_the_filter_keeps_briefs_by_layers_and_score(make_view: Callable[..., DigestView],
                                                     make_event: Callable[..., EventView]) -> None:
    brief = Brief(9, "LLVM Weekly - #623", "LLVM Weekly #623", None, "LLVM Weekly", ("tensor_ir",), 50.0,
                  (BriefItem("The XeGPU dialect gained a layout propagation pass."),))
    view = make_view((make_event(1, layers=("kernel_codegen",), score=80.0),), briefs=(brief,))
    assert filter_view(view, ["kernel_codegen", "tensor_ir"]) is view
    kept = filter_view(view, ["tensor_ir"])
    assert kept.briefs == (brief,) and kept.events == () and "LLVM Weekly #623" in kept.overview
    gone = filter_view(view, None, 60.0)
    assert gone.briefs == () and len(gone.events) == 1 and "LLVM Weekly" not in gone.overview


async def test_a_built_digest_shows_the_roundup_as_briefs_not_as_an_event(sessions: SessionFactory) -> None:
    arxiv = await add_source(sessions, "arxiv-cs.pl", name="arXiv cs.PL", kind="arxiv", weight=0.7)
    for n, (title, summary) in enumerate(COMPILER_PAPERS):
        await add_entry(sessions, arxiv, title, summary, WINDOW.start + dt.timedelta(hours=n + 1),
                        arxiv_id=f"2609.0000{n}", arxiv_version=1, announce_type="new",
                        url=f"https://arxiv.org/abs/2609.0000{n}")
    weekly = await add_source(sessions, "llvm-weekly", name="LLVM Weekly", weight=0.9)
    await add_entry(sessions, weekly, "LLVM Weekly - #623, September 28th 2026", WEEKLY,
                    WINDOW.start + dt.timedelta(hours=6), url="http://llvmweekly.org/issue/623",
                    links=["http://llvmweekly.org/issue/623", RFC])
    report = await build_digest(sessions, DAY, BuildOptions(locales=("zh", "en"), max_events=2), now=NOW)
    assert report.events == 2, "the roundup takes no main-event slot"
    async with sessions() as session:
        shown = (await session.scalars(select(Event.title).join(DigestEvent))).all()
        zh, en = await load_view(session, DAY, "zh"), await load_view(session, DAY, "en")
    assert not any("Weekly" in title for title in shown)
    assert len(zh.events) == 2 and "Weekly" not in zh.title and "Weekly" not in en.title
    assert [b.name for b in zh.briefs] == ["LLVM Weekly #623"]
    assert [i.text for i in zh.briefs[0].items] == WEEKLY_ITEMS
    assert "简讯" in zh.overview and "In brief" in en.overview
    preview = json.loads(Renderer().render(en, "json"))
    assert preview["briefs"][0]["items"][1] == {"text": WEEKLY_ITEMS[1], "url": RFC}
    assert [e["title"] for e in preview["events"]] == [e.title for e in en.events]
    again = await build_digest(sessions, DAY, BuildOptions(locales=("zh", "en"), max_events=2),
                               now=NOW + dt.timedelta(hours=1), force=True)
    async with sessions() as session:
        assert (await load_view(session, DAY, "zh")).briefs == zh.briefs and again.events == 2
        word = max(WEEKLY_ITEMS[1].split(), key=len).strip(".,;:")  # a word of one brief line only
        hits = await search(session, word, locale="en")
    assert [(h.kind, h.id) for h in hits] == [("digest", report.digest_id)], "a brief is found in its digest"
