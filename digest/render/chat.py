"""Chat formats: Telegram HTML messages and Discord payloads, split to the platforms' limits.

Telegram blocks come from the macros of ``templates/telegram.html.j2``
(autoescaped); Discord embeds are built here from Discord-escaped text
(``digest.safety.discord_escape``), since they are JSON, not markup.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING, Any

from digest.domain.views import EventView
from digest.render.safety import ZWSP, clean_text, discord_escape, discord_url, neutralise_mentions, safe_url
from digest.render.split import (
    DISCORD_CONTENT,
    DISCORD_DESCRIPTION,
    DISCORD_FIELD_VALUE,
    DISCORD_TITLE,
    DISCORD_TOTAL,
    TELEGRAM_BUDGET,
    embed_length,
    pack,
    pack_discord,
    split_plain,
    split_telegram,
    telegram_length,
    utf16_len,
)

if TYPE_CHECKING:
    from jinja2 import Environment

# One colour per layer, by the event's first layer (Discord's own palette where it has one).
LAYER_COLOURS: dict[str, int] = {
    "frontend": 0x5865F2, "graph_ir": 0x57F287, "tensor_ir": 0x1ABC9C,
    "optimization": 0xFEE75C, "kernel_codegen": 0xED4245, "hardware_backend": 0x9B59B6,
    "runtime": 0x3498DB, "distributed": 0xE67E22, "benchmark": 0xEB459E,
}
OTHER_COLOUR = 0x99AAB5
NOTES_COLOUR = 0x4F545C


def telegram_messages(env: Environment, c: dict[str, Any]) -> list[str]:
    """The digest as Telegram messages: header first, one block per event, notes last.

    When it takes more than one message, each starts with a one-line part header
    (brand, date, "2/3"), so a reader who sees only one knows where it belongs.
    """
    macros = env.get_template("telegram.html.j2").module
    blocks = [str(macros.header(c))]  # type: ignore[attr-defined]
    blocks += [str(macros.event(c, e, n)) for n, e in enumerate(c["view"].events, 1)]  # type: ignore[attr-defined]
    blocks += [str(macros.briefs(c)), str(macros.watch(c)), str(macros.notes(c))]  # type: ignore[attr-defined]
    parts = split_telegram(blocks)
    if len(parts) == 1:
        return parts
    reserve = telegram_length(part_header(c, 999, 999)) + 2  # the header and the blank line after it
    parts = split_telegram(blocks, TELEGRAM_BUDGET - reserve)
    return [f"{part_header(c, n, len(parts))}\n\n{part}" for n, part in enumerate(parts, 1)]


_PART_HEADER = re.compile(r"\A<i>[^<]* \d{4}-\d{2}-\d{2} · \d+/\d+</i>\n\n")


def strip_part_header(message: str) -> str:
    """A message without its part header (to read a split digest's text as one piece)."""
    return _PART_HEADER.sub("", message, count=1)


def part_header(c: dict[str, Any], n: int, total: int) -> str:
    """``<i>编译器技术日报 2026-12-01 · 2/3</i>``: the line that starts each part of a split digest."""
    return f"<i>{html.escape(c['t']['site_name'])} {c['view'].date.isoformat()} · {n}/{total}</i>"


def discord_payloads(c: dict[str, Any]) -> list[dict[str, Any]]:
    """The digest as Discord payloads: header as content, an embed per event, notes last."""
    view = c["view"]
    embeds = [embed for n, e in enumerate(view.events, 1) for embed in event_embeds(c, e, n)]
    embeds += briefs_embeds(c)
    embeds += notes_embeds(c)
    return pack_discord(split_plain(_header(c), DISCORD_CONTENT), embeds)


def fit(text: object, limit: int) -> str:
    """``text`` on one line, Discord-escaped, cut (before escaping, with an ellipsis) to fit ``limit``."""
    raw = " ".join(clean_text(text).split())
    escaped = discord_escape(raw)
    keep = len(raw)
    while utf16_len(escaped) > limit:
        keep = min(keep - 1, keep * limit // utf16_len(escaped))
        escaped = discord_escape(raw[:keep].rstrip()) + "…"
    return escaped


def _header(c: dict[str, Any]) -> str:
    view, t = c["view"], c["t"]
    lines = [f"**{fit(view.title, DISCORD_TITLE)}**"]
    if c["digest_url"]:
        lines.append(f"<{c['digest_url']}>")
    if view.filtered:
        lines.append(f"*{discord_escape(t['filtered'])}*")
    return "\n".join(lines) + f"\n\n**{t['overview']}**\n{discord_escape(view.overview)}"


def _colour(e: EventView) -> int:
    return LAYER_COLOURS.get(e.layers[0], OTHER_COLOUR) if e.layers else OTHER_COLOUR


def _link(name: str, url: str | None) -> str:
    return f"[{name}]({discord_url(url)})" if url else name


def _joined(items: list[str], limit: int, sep: str = " · ") -> str:
    """Items joined by ``sep`` while they fit in ``limit``, then a count of the rest."""
    kept: list[str] = []
    for i, item in enumerate(items):
        tail = f"{sep}… +{len(items) - i - 1}" if i < len(items) - 1 else ""
        if utf16_len(sep.join([*kept, item]) + tail) > limit:
            return sep.join([*kept, f"… +{len(items) - i}"])
        kept.append(item)
    return sep.join(kept)


def _event_fields(c: dict[str, Any], e: EventView) -> list[dict[str, Any]]:
    t, page = c["t"], c["event_url"](e)
    layers = [fit(c["layer_label"](lid), 100) for lid in e.layers]
    sources = [_link(fit(s.name, 200), safe_url(s.url)) for s in e.sources]
    score = _link(f"{e.score:.1f}/100", page)
    return [
        {"name": t["layers"], "value": _joined(layers, DISCORD_FIELD_VALUE) or "-", "inline": True},
        {"name": t["score"], "value": score, "inline": True},
        {"name": t["sources"], "value": _joined(sources, DISCORD_FIELD_VALUE) or "-", "inline": False},
    ]


def _paragraphs(parts: list[tuple[str, str]], budget: int) -> list[str]:
    """Description chunks from (label, escaped text) paragraphs; a label stays with its text."""
    pieces: list[str] = []
    for label, text in parts:
        cut = split_plain(text, budget - utf16_len(label)) or [""]
        pieces += [label + cut[0], *cut[1:]]
    return pack([p for p in pieces if p.strip()], budget, utf16_len)


def event_embeds(c: dict[str, Any], e: EventView, n: int) -> list[dict[str, Any]]:
    """One embed per event; a description too long for one continues in more embeds."""
    t = c["t"]
    rank = f"{n}. "
    first: dict[str, Any] = {"title": rank + fit(e.title, DISCORD_TITLE - len(rank)), "color": _colour(e)}
    url = safe_url(e.url) or c["event_url"](e)
    if url:
        first["url"] = url
    last = {"fields": _event_fields(c, e),
            "footer": {"text": neutralise_mentions(f"{t['written_by']}{t['colon']}{e.written_by}")}}
    budget = min(DISCORD_DESCRIPTION, DISCORD_TOTAL - embed_length(first) - embed_length(last))
    why = f"**{t['why']}**{t['colon']}"
    chunks = _paragraphs([("", discord_escape(e.summary)), (why, discord_escape(e.why_it_matters))],
                         budget) or [ZWSP]
    embeds = [{"description": chunk, "color": first["color"]} for chunk in chunks]
    embeds[0] = {**first, **embeds[0]}
    embeds[-1] = {**embeds[-1], **last}
    return embeds


def briefs_embeds(c: dict[str, Any]) -> list[dict[str, Any]]:
    """The briefs (roundups' items) as one embed, continued in more when long; none without briefs."""
    view, t = c["view"], c["t"]
    if not view.briefs:
        return []
    sections = [(f"**{discord_escape(t['briefs'])}**", "")]
    for b in view.briefs:
        name = fit(b.name, 200)
        head = _link(name, safe_url(b.url)) + discord_escape(t["brief_quoted"])
        lines = [f"• {_link(fit(i.text, 300), safe_url(i.url))}" for i in b.items]
        sections.append((f"**{head}**\n", "\n".join(lines)))
    return [{"description": chunk, "color": NOTES_COLOUR}
            for chunk in _paragraphs(sections, DISCORD_DESCRIPTION)]


def notes_embeds(c: dict[str, Any]) -> list[dict[str, Any]]:
    """The watch list and the data notes, as the last embed(s)."""
    view, t = c["view"], c["t"]
    colon = t["colon"]
    watch = [f"• {discord_escape(w)}" for w in view.watchlist]
    notes = [
        f"• {t['window']}{colon}{c['window_start']} {t['window_to']} {c['window_end']}",
        f"• {t['mode']}{colon}{discord_escape(c['mode_line'])}",
        f"• {t['caution']}",
        *([f"• {discord_escape(c['extractive_note'])}"] if c["extractive_note"] else []),
        f"• {t['raw']}{colon}" + discord_escape(c["raw_line"]),
    ]
    if view.stats.get("failed_sources"):
        notes.append(f"• {t['failed']}{colon}{discord_escape(', '.join(view.stats['failed_sources']))}")
    if view.stats.get("late"):
        notes.append(f"• {t['late']}{colon}{int(view.stats['late'])}")
    if c["digest_url"]:
        notes.append(f"[{t['web']}]({discord_url(c['digest_url'])})")
    sections = ([(f"**{t['watch']}**\n", "\n".join(watch))] if watch else [])
    sections.append((f"**{t['notes']}**\n", "\n".join(notes)))
    return [{"description": chunk, "color": NOTES_COLOUR}
            for chunk in _paragraphs(sections, DISCORD_DESCRIPTION)]
