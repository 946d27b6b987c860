"""Every output format of a fixed digest: golden files, email parts, Telegram and Discord shapes.

``pytest --regen-golden`` rewrites tests/golden/ from the current output; review the diff.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from digest.domain.views import DigestView, EventView, SourceLink
from digest.domain.writeups import Brief, BriefItem
from digest.render.chat import LAYER_COLOURS
from digest.render.renderer import PREFERENCES_PLACEHOLDER, UNSUBSCRIBE_PLACEHOLDER, Renderer, personalise
from digest.render.split import TELEGRAM_LIMIT, discord_problems, telegram_length, telegram_text
from digest.render.wrap import text_width

GOLDEN = Path(__file__).parent / "golden"
SITE = "https://digest.example"
GOLDEN_FILES = ("digest.md", "digest.txt", "digest.html", "digest.json", "email.html", "email.txt",
                "email.meta.json", "telegram.json", "discord.json")

ZH = {
    "title": "编译器自动化三线推进：PGO 驱动的 PIM 卸载、<RL> 内核优化与 F₂ 学习的 SASS 编码器",
    "overview": "本期三个事件分别落在编译优化管线的不同层次。Torch-PIM 把 profile-guided optimization "
                "用在 progressive lowering 物化的 loop nest 上；KernelBraid 引入 optimization IR；"
                "F2Asm 以 F₂ 线性代数学习精确的 NVIDIA SASS 编码器。",
    "events": [
        ("Torch-PIM: Automated Profile-Guided PIM Offloading for PyTorch",
         "Torch-PIM 在 PyTorch 的 progressive lowering 管线之上引入 profile-guided 决策，"
         "在 32 至 128 核的 PIM 配置下取得最高 8.6x 加速。",
         "把卸载决策推迟到 lowering 之后，能让编译器看到更细粒度的并行结构 & 真实 profiling 数据。"),
        ("AReaL-TIK: <script>alert(1)</script> Stateful Agentic Optimization",
         "\n\n".join(["KernelBraid 以 hand-tuned、bitwise-consistent 的统一 RL 内核实现为起点，"
                      "提出 optimization IR 把实现与修改关联到数值要求、workload 测量和推导历史。"
                      "修改只有在通过 bitwise 正确性检查且改善 aggregate latency 时才会被采纳。" * 4] * 8),
         "@everyone 请看：<@123> 的 agentic 代码优化常见痛点是搜索噪声大、验证成本高。"),
        ("Learning Exact NVIDIA SASS Encoders with $\\mathbb{F}_2$ Linear Algebra 😀",
         "F2Asm 将 NVIDIA SASS 指令编码器建模为 F₂ 上的向量值仿射映射，"
         "[点我](javascript:alert(1)) **粗体**。",
         "NVIDIA 长期只提供 SASS 反汇编器而没有公开汇编器。"),
    ],
    "watch": ("Torch-PIM", "SASS 汇编器", "<b>Rubin</b> SM107"),
}
EN = {
    "title": "Compiler automation on three fronts: PGO-driven PIM offloading & <RL> kernel search",
    "overview": "Three events land on different layers of the compiler stack. Torch-PIM applies "
                "profile-guided optimization to loop nests; KernelBraid adds an optimization IR for agents.",
    "events": [
        ("Torch-PIM: Automated Profile-Guided PIM Offloading for PyTorch",
         "Torch-PIM adds profile-guided decisions on top of PyTorch's progressive lowering and reaches "
         "up to 8.6x speedup on 32 to 128 PIM cores.",
         "Deferring offloading until after lowering exposes finer-grained parallel structure."),
        ("AReaL-TIK: <script>alert(1)</script> Stateful Agentic Optimization",
         "\n\n".join(["KernelBraid starts from hand-tuned, bitwise-consistent unified RL kernels and "
                      "proposes an optimization IR that links code changes to numeric requirements, "
                      "workload measurements and derivation history. " * 3] * 6),
         "@everyone look: <@123> agentic code optimization suffers from noisy search."),
    ],
    "watch": ("Torch-PIM", "**KernelBraid**"),
}
LAYERS = [("tensor_ir", "optimization", "hardware_backend"), ("optimization", "kernel_codegen"),
          ("kernel_codegen", "hardware_backend")]
BRIEF = Brief(
    event_id=106, title="LLVM Weekly - #623, November 30th 2026", name="LLVM Weekly #623",
    url="https://llvmweekly.org/issue/623", source="LLVM Weekly", layers=("tensor_ir", "kernel_codegen"),
    score=57.6, items=(
        BriefItem("The branch for LLVM 22.x has been created and release candidates are expected every "
                  "two weeks."),
        BriefItem("An RFC proposes moving the MLIR sparse_tensor dialect's co-iteration lowering onto "
                  "the vector dialect.", "https://discourse.llvm.org/t/rfc-sparse-co-iteration/8812"),
        BriefItem("Clang now diagnoses std::vector<T> *misuse* & [more](javascript:x).",
                  "javascript:alert(1)"),
    ))


def fixed_view(locale: str, make_view: Callable[..., DigestView],
               make_event: Callable[..., EventView]) -> DigestView:
    """The golden digest in ``locale`` (en is a filtered reader's view)."""
    text = ZH if locale == "zh" else EN
    events = tuple(
        make_event(n, title=title, summary=summary, why_it_matters=why, layers=LAYERS[n - 1],
                   score=[76.5, 72.0, 61.55][n - 1], url=f"https://arxiv.org/abs/2609.0{n}",
                   score_breakdown={"authority": 30.0, "relevance": 25.0,
                                    "breadth": [21.5, 17.0, 6.55][n - 1]},
                   sources=(SourceLink("arXiv cs.PL", f"https://arxiv.org/abs/2609.0{n}"),
                            SourceLink("evil", "javascript:alert(1)")),
                   written_by="deepseek-chat" if n != 3 else "extractive", updated=n == 2)
        for n, (title, summary, why) in enumerate(text["events"], 1)
    )
    return make_view(events, locale=locale, title=text["title"], overview=text["overview"],
                     watchlist=text["watch"], filtered=locale == "en", briefs=(BRIEF,),
                     stats={"entries_by_source": {"arxiv": 3, "nvidia": 2},
                            "failed_sources": ["pytorch-blog"], "late": 1, "entries": 5})


def outputs(renderer: Renderer, view: DigestView) -> dict[str, str]:
    """Every format of ``view``, as the golden files hold them."""
    parts = renderer.email_parts(view)
    meta = {"subject": parts.subject, "preheader": parts.preheader}
    dump = lambda data: json.dumps(data, ensure_ascii=False, indent=2) + "\n"  # noqa: E731
    return {"digest.md": renderer.render(view, "md"), "digest.txt": renderer.render(view, "text"),
            "digest.html": renderer.render(view, "html"), "digest.json": renderer.render(view, "json"),
            "email.html": parts.html, "email.txt": parts.text, "email.meta.json": dump(meta),
            "telegram.json": dump(renderer.telegram(view)), "discord.json": dump(renderer.discord(view))}


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    """One renderer with a public-looking site URL."""
    return Renderer(site_url=SITE)


@pytest.fixture(params=["zh", "en"])
def view(request: pytest.FixtureRequest, make_view: Callable[..., DigestView],
         make_event: Callable[..., EventView]) -> DigestView:
    """The fixed digest in each locale."""
    return fixed_view(request.param, make_view, make_event)


def test_golden_files(renderer: Renderer, view: DigestView, regen_golden: bool) -> None:
    folder = GOLDEN / view.locale
    rendered = outputs(renderer, view)
    assert set(rendered) == set(GOLDEN_FILES)
    if regen_golden:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in rendered.items():
            (folder / name).write_text(text, encoding="utf-8")
    for name, text in rendered.items():
        expected = (folder / name).read_text(encoding="utf-8")
        assert text == expected, f"{view.locale}/{name} differs; run pytest --regen-golden and review"


def test_email_placeholders_survive_inlining_and_are_personalised(renderer: Renderer,
                                                                    view: DigestView) -> None:
    parts = renderer.email_parts(view)
    for body in (parts.html, parts.text):
        assert body.count(UNSUBSCRIBE_PLACEHOLDER) >= 1 and body.count(PREFERENCES_PLACEHOLDER) >= 1
    unsubscribe, preferences = "https://d.example/u?t=a&s=1", "https://d.example/p?t=b&s=2"
    mine = personalise(parts, unsubscribe, preferences)
    assert 'href="https://d.example/u?t=a&amp;s=1"' in mine.html
    assert 'href="https://d.example/p?t=b&amp;s=2"' in mine.html
    assert f"\n{unsubscribe}\n" in mine.text and f"\n{preferences}\n" in mine.text
    assert "__DIGEST_" not in mine.html + mine.text
    assert (mine.subject, mine.preheader) == (parts.subject, parts.preheader)
    for bad in ("javascript:alert(1)", "https://x.example/a b", "https://x.example/\r\nBcc: x"):
        with pytest.raises(ValueError):
            personalise(parts, bad, preferences)


def test_email_html_is_inlined_responsive_and_dark(renderer: Renderer, view: DigestView) -> None:
    page = renderer.email_parts(view).html
    style = re.search(r"<style>(.*?)</style>", page, re.S)
    assert style and "prefers-color-scheme: dark" in style.group(1) and "max-width: 620px" in style.group(1)
    assert '<td class="px"' in page and 'style="' in page.split("<body", 1)[1]
    assert 'role="presentation"' in page and 'name="color-scheme"' in page
    preheader = re.search(r'<div class="preheader" style="display:none;[^"]*">([^<]*)', page)
    assert preheader and preheader.group(1).startswith(view.overview[:20])
    assert f'href="{SITE}/d/2026-09-29"' in page and f'href="{SITE}/e/101"' in page


def test_email_text_and_subject(renderer: Renderer, view: DigestView,
                                make_view: Callable[..., DigestView]) -> None:
    parts = renderer.email_parts(view)
    for line in parts.text.split("\n"):
        assert text_width(line) <= 78 or re.fullmatch(r"\s*(https?://\S+|__DIGEST_[A-Z_]+__)", line), line
    assert f"\n{SITE}/d/2026-09-29\n" in parts.text
    assert not re.search(r"^\s*javascript:", parts.text, re.M), "a dropped link was printed"
    brand = {"zh": "编译器技术日报 2026-09-29：", "en": "Compiler Digest 2026-09-29: "}[view.locale]
    assert parts.subject == brand + view.title and len(parts.preheader) <= 100
    odd = renderer.email_parts(make_view(view.events, title="Line one\r\nBcc: x@y " + "长" * 400))
    assert "\n" not in odd.subject and "\r" not in odd.subject and len(odd.subject) == 200
    assert odd.subject.startswith("编译器技术日报 2026-09-29：Line one Bcc: x@y")
    assert odd.subject.endswith("…")


def test_telegram_messages(renderer: Renderer, view: DigestView) -> None:
    messages = renderer.telegram(view)
    # zh: the second event is too long for one message and is cut at a paragraph break;
    # en: it fits, so the cuts fall between events.
    assert len(messages) == 3
    brand = "编译器技术日报" if view.locale == "zh" else "Compiler Digest"
    headers = [f"<i>{brand} 2026-09-29 · {n}/3</i>\n\n" for n in (1, 2, 3)]
    assert all(m.startswith(h) for m, h in zip(messages, headers, strict=True))
    messages = [m.removeprefix(h) for m, h in zip(messages, headers, strict=True)]
    assert messages[1].startswith("<b>2. ")
    assert view.locale == "en" or telegram_text(messages[1]).endswith("采纳。")
    assert all(telegram_length(m) < TELEGRAM_LIMIT for m in messages)
    t_overview = "今日概览" if view.locale == "zh" else "Overview"
    t_notes = "数据与生成说明" if view.locale == "zh" else "Data and generation notes"
    assert messages[0].startswith(f'<b><a href="{SITE}/d/2026-09-29">') and t_overview in messages[0]
    assert t_notes in messages[-1] and t_notes not in messages[0]
    assert "<b>76.5</b>/100" in messages[0] and f'<a href="{SITE}/e/101">' in messages[0]
    layers = "张量级 IR · 优化 · 硬件后端" if view.locale == "zh" else "Tensor IR · Optimization"
    assert layers in messages[0]
    assert "&lt;script&gt;" in "".join(messages) and 'href="javascript' not in "".join(messages)


def test_discord_payloads(renderer: Renderer, view: DigestView) -> None:
    payloads = renderer.discord(view)
    assert all(not discord_problems(p) and p["allowed_mentions"] == {"parse": []} for p in payloads)
    embeds = [e for p in payloads for e in p["embeds"]]
    events = [e for e in embeds if "title" in e]
    assert len(events) == len(view.events)
    # one more embed for the briefs, and the second event continues in zh
    assert len(embeds) == len(view.events) + 1 + (2 if view.locale == "zh" else 1), "a continuation in zh"
    heading = "**简讯**" if view.locale == "zh" else "**Briefs**"
    briefs = [e["description"] for e in embeds if e["description"].startswith(heading)]
    assert len(briefs) == 1 and "[LLVM Weekly #623](https://llvmweekly.org/issue/623)" in briefs[0]
    assert [e["color"] for e in events] == [LAYER_COLOURS[x.layers[0]] for x in view.events]
    assert events[0]["url"] == "https://arxiv.org/abs/2609.01" and events[0]["title"].startswith("1. Torch")
    fields = {f["name"]: f["value"] for f in events[0]["fields"]}
    assert f"[76.5/100]({SITE}/e/101)" in fields.values()
    text = "".join(e["description"] for e in embeds)
    assert "@\u200beveryone" in text and "<\u200b@123>" in text and "@everyone" not in text
    assert payloads[0]["content"].startswith("**") and f"<{SITE}/d/2026-09-29>" in payloads[0]["content"]


def test_unknown_format_is_refused(renderer: Renderer, view: DigestView) -> None:
    with pytest.raises(ValueError, match="unknown format"):
        renderer.render(view, "pdf")


@pytest.mark.parametrize("fmt", ["telegram", "discord"])
def test_preview_prints_exactly_what_would_be_sent(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    make_view: Callable[..., DigestView], make_event: Callable[..., EventView],
) -> None:
    from digest.cli import main as cli
    from digest.store import queries

    view = fixed_view("zh", make_view, make_event)

    async def stored(session: Any, date: Any, locale: str) -> DigestView:
        return view

    monkeypatch.setattr(queries, "load_view", stored)
    monkeypatch.setenv("DIGEST_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'p.db'}")
    monkeypatch.setenv("DIGEST_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("DIGEST_SITE_URL", SITE)
    assert cli.main(["preview", "--date", "2026-09-29", "--format", fmt]) == 0
    sent = json.loads(capsys.readouterr().out)
    renderer = Renderer(site_url=SITE)
    assert sent == (renderer.telegram(view) if fmt == "telegram" else renderer.discord(view))


def test_every_part_of_a_split_telegram_digest_names_the_digest_and_its_place(
        renderer: Renderer, view: DigestView) -> None:
    from digest.render.chat import strip_part_header

    messages = renderer.telegram(view)
    assert len(messages) > 1 and all(telegram_length(m) < TELEGRAM_LIMIT for m in messages)
    heads = [telegram_text(m).split("\n")[0] for m in messages]
    brand = "编译器技术日报" if view.locale == "zh" else "Compiler Digest"
    assert heads == [f"{brand} 2026-09-29 · {n}/{len(messages)}" for n in range(1, len(messages) + 1)]
    stripped = [strip_part_header(m) for m in messages]
    assert stripped[0].startswith("<b><a href=")
    assert all(f"· {n}/" not in text for n, text in enumerate(stripped, 1))


def test_a_digest_that_fits_one_telegram_message_has_no_part_header(
        renderer: Renderer, make_view: Callable[..., DigestView],
        make_event: Callable[..., EventView]) -> None:
    (message,) = renderer.telegram(make_view((make_event(1),)))
    assert "1/1" not in message and not message.startswith("<i>")


# --- the bundled sample day, built extractively end to end --------------------------------------------

SHANGHAI = dt.timezone(dt.timedelta(hours=8))
SAMPLE_DAY = dt.date(2026, 12, 1)
# The 2026-12-01 (GSoC report, Precompile, LLVM Weekly) and, written 20 h earlier,
# a 2026-12-01 that holds the Triton 3.6.0 release.
SAMPLE_NOWS = {"": dt.datetime(2026, 12, 2, 3, 50, tzinfo=SHANGHAI),
               "-release": dt.datetime(2026, 12, 1, 8, 5, tzinfo=SHANGHAI)}


@pytest.mark.parametrize(("locale", "variant"), [("zh", ""), ("en", ""), ("zh", "-release")])
def test_sample_day_golden(locale: str, variant: str, tmp_path: Path, regen_golden: bool) -> None:
    """The samples' 2026-12-01, fetched from files and built with no model: the extractive digest as a
    reader gets it (write-ups, briefs, release lines). Event ids are masked: they are storage order."""
    now = SAMPLE_NOWS[variant]
    from digest.build.pipeline import BuildOptions, build_digest
    from digest.ingest.fetch import FetchOptions
    from digest.ingest.pipeline import fetch_sources
    from digest.ingest.samples import write_samples
    from digest.ingest.sources import load_sources
    from digest.store.db import open_database
    from digest.store.queries import load_view

    async def build() -> DigestView:
        sources = write_samples(tmp_path / "samples", now)
        async with open_database(f"sqlite+aiosqlite:///{tmp_path / 'd.db'}") as sessions:
            await fetch_sources(sessions, load_sources(sources), FetchOptions(concurrency=1), now=now)
            await build_digest(sessions, SAMPLE_DAY, BuildOptions(locales=(locale,)), now=now)
            async with sessions() as session:
                return await load_view(session, SAMPLE_DAY, locale)

    view = asyncio.run(build())
    text = re.sub(r"/e/\d+\)", "/e/N)", Renderer(site_url=SITE).render(view, "md"))
    golden = GOLDEN / "samples" / f"{SAMPLE_DAY}{variant}.{locale}.md"
    if regen_golden:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert not any("Weekly" in e.title for e in view.events), "a roundup is never a main event"
    if variant:
        assert "版本 v3.6.0：版本说明中未见破坏性变更或弃用。" in text
    else:
        assert [b.name for b in view.briefs] == ["LLVM Weekly #623"]
    assert text == golden.read_text(encoding="utf-8"), "run pytest --regen-golden and review"


def test_quoted_english_on_a_chinese_page_is_marked_as_english() -> None:
    from digest.render.i18n import part_lang
    assert part_lang("Learning Exact NVIDIA SASS Encoders", "zh") == "en"
    assert part_lang("Triton 3.2 发布：新增 warp specialization", "zh") is None, "mixed: the page's"
    assert part_lang("v3.2.0", "zh") is None and part_lang("2026-12-01", "zh") is None
    assert part_lang("Learning Exact NVIDIA SASS Encoders", "en") is None
