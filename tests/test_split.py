"""Splitting to platform limits, checked over many generated inputs (seeded, so reproducible)."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from digest.render.safety import discord_escape
from digest.render.split import (
    TELEGRAM_BUDGET,
    TELEGRAM_LIMIT,
    discord_problems,
    embed_length,
    pack_discord,
    split_plain,
    split_telegram,
    utf16_len,
)
from digest.render.wrap import MAX_LINE_OCTETS, text_width, wrap_text
from tests.telegram_html import check_telegram, squash, visible

WORDS = ["MLIR", "Triton", "kernel", "lowering", "x86", "PTX", "a", "of", "the", "fusion"]
CJK = "编译器自动化三线推进驱动的卸载内核优化与代数学习编码器"
EMOJI = ["😀", "👍🏽", "👨\u200d👩\u200d👧", "🇨🇳", "1\ufe0f\u20e3", "e\u0301", "𝔽", "❤\ufe0f"]
ENTITIES = ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;", "&#x1F600;"]
PUNCT = ["。", "！", "？", ". ", "! ", "; ", "，", ", ", " ", " ", "\n", "\n\n"]


def _atom(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.35:
        return rng.choice(WORDS) + " "
    if kind < 0.6:
        return "".join(rng.choice(CJK) for _ in range(rng.randint(1, 12)))
    if kind < 0.72:
        return rng.choice(EMOJI)
    if kind < 0.82:
        return rng.choice(ENTITIES)
    return rng.choice(PUNCT)


def gen_fragment(rng: random.Random, size: int, depth: int = 0) -> str:
    """Random well-formed Bot API HTML of about ``size`` visible characters."""
    out: list[str] = []
    length = 0
    while length < size:
        if depth < 2 and rng.random() < 0.08:
            tag = rng.choice(["b", "i", "code", "blockquote", "a"])
            inner = gen_fragment(rng, rng.randint(1, max(2, size // 4)), depth + 1)
            head = '<a href="https://example.org/?a=1&amp;b=&quot;2&quot;">' if tag == "a" else f"<{tag}>"
            out.append(f"{head}{inner}</{tag}>")
        else:
            out.append(_atom(rng))
        length += len(out[-1])
    return "".join(out)


@pytest.mark.parametrize("seed", range(6))
def test_telegram_split_keeps_limits_and_loses_nothing(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(10):
        sizes = [rng.choice([20, 300, 1500, 5000, 12000]) for _ in range(rng.randint(1, 6))]
        blocks = [gen_fragment(rng, size) for size in sizes]
        budget = rng.choice([TELEGRAM_BUDGET, TELEGRAM_BUDGET, 120, 37])
        check_telegram(split_telegram(blocks, budget), blocks, budget)


def test_telegram_default_budget_is_under_4096() -> None:
    blocks = [("<b>" + "字" * 3000 + "</b>\n\n" + "😀" * 2500), "tail"]
    parts = split_telegram(blocks)
    assert len(parts) >= 3
    check_telegram(parts, blocks, TELEGRAM_LIMIT - 1)


def test_telegram_prefers_paragraphs_then_sentences() -> None:
    para = "One sentence here. Another one there. " * 30
    block = f"{para}\n\n{para}"
    first = split_telegram([block], budget=len(para) + 10)[0]
    assert visible(first).strip() == para.strip()
    sentences = split_telegram(["Alpha beta gamma. " * 10], budget=60)
    assert all(visible(p).strip().endswith(".") for p in sentences)


def test_telegram_blocks_pack_whole_when_they_fit() -> None:
    blocks = ["<b>head</b>", "event one", "event two", "<i>notes</i>"]
    assert split_telegram(blocks) == ["<b>head</b>\n\nevent one\n\nevent two\n\n<i>notes</i>"]
    parts = split_telegram(["h" * 30, "e" * 30, "n" * 30], budget=64)
    assert parts == ["h" * 30 + "\n\n" + "e" * 30, "n" * 30]


def test_telegram_reopens_tags_across_a_cut() -> None:
    link = '<a href="https://x.org/?a=1&amp;b=2">' + "word " * 40 + "</a>"
    parts = split_telegram([f"<b>{link}</b>"], budget=64)
    assert len(parts) > 2
    for part in parts:
        assert part.startswith('<b><a href="https://x.org/?a=1&amp;b=2">') and part.endswith("</a></b>")


def test_telegram_never_cuts_an_entity_or_a_pair() -> None:
    for budget in range(5, 40):
        block = "&amp;😀&lt;" * 30
        parts = split_telegram([block], budget)
        check_telegram(parts, [block], budget)
        assert all(p.count("&") == p.count(";") for p in parts)


def test_joined_emoji_stay_whole_even_when_only_a_hard_cut_fits() -> None:
    for budget in (37, 38, 101):
        flags = split_telegram(["🇨🇳" * 500], budget)
        assert all(visible(p) == "🇨🇳" * (len(visible(p)) // 2) for p in flags)
        family = split_telegram(["👨\u200d👩\u200d👧" * 300], budget)
        assert all(visible(p).startswith("👨") and visible(p).endswith("👧") for p in family)
        check_telegram(flags + family, ["🇨🇳" * 500, "👨\u200d👩\u200d👧" * 300], budget)


def test_plain_split_keeps_escapes_whole() -> None:
    rng = random.Random(7)
    for _ in range(200):
        raw = "".join(rng.choice(["*", "_", "[x](y)", "字", "😀", " ", "word", ". ", "\n", "@everyone"])
                      for _ in range(rng.randint(1, 600)))
        text, budget = discord_escape(raw), rng.choice([30, 100, 1024, 4096])
        parts = split_plain(text, budget)
        assert all(utf16_len(p) <= budget for p in parts)
        assert all(re.fullmatch(r"(?:\\[\s\S]|[^\\])*", p) for p in parts), "an escape was cut"
        assert squash("".join(parts)) == squash(text)


def _embed(rng: random.Random, n: int) -> dict[str, Any]:
    return {"title": f"{n}", "description": "d" * rng.randint(1, 4096),
            "fields": [{"name": "f", "value": "v" * rng.randint(1, 1024)}], "footer": {"text": "x"}}


def test_discord_packing_respects_every_limit() -> None:
    rng = random.Random(3)
    for _ in range(50):
        embeds = [_embed(rng, n) for n in range(rng.randint(0, 30))]
        payloads = pack_discord(["c" * rng.randint(0, 2000)], embeds)
        assert all(not discord_problems(p) for p in payloads)
        assert [e for p in payloads for e in p["embeds"]] == embeds
        assert all(p["allowed_mentions"] == {"parse": []} for p in payloads)
    assert embed_length({"title": "ab", "fields": [{"name": "c", "value": "d"}]}) == 4


def test_wrap_keeps_lines_short_urls_whole_and_words() -> None:
    rng = random.Random(11)
    url = "https://example.org/" + "p" * 150
    for _ in range(200):
        line = "".join(rng.choice([*WORDS, " ", " ", "字字字", "，", "😀", "x" * 120, "   • "])
                       for _ in range(rng.randint(1, 80)))
        text = f"{line}\n{url}\n  {line}"
        out = wrap_text(text)
        for wrapped in out.split("\n"):
            assert len(wrapped.encode()) <= MAX_LINE_OCTETS
            assert wrapped.strip() == url or text_width(wrapped) <= 78, wrapped
        assert url in out.split("\n")
        assert squash(out) == squash(text)
    assert max(len(x.encode()) for x in wrap_text("\u0301" * 5000).split("\n")) <= MAX_LINE_OCTETS
