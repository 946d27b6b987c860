"""Split rendered messages to each platform's limits. Pure: no I/O, no templates.

Telegram counts a message's length after entity parsing (tags removed,
entities decoded) in UTF-16 code units, and allows 4096; we fill messages to
:data:`TELEGRAM_BUDGET`. A message is packed from blocks (the header, one
block per event, the watch list, the data notes) joined by a blank line, so
cuts fall between events; a block that does not fit alone is cut, in order of
preference, at a paragraph break, a line break, a sentence end, a space, and
as a last resort between two characters -- never inside a tag or an entity,
never inside a surrogate pair, never before a combining mark, joiner, variation
selector or skin tone nor inside a flag (unless one such cluster alone is
longer than the budget). A break is preferred only when it leaves the part at
least half full. The tags open at a cut are closed before it and reopened
after it. Whitespace at a cut is dropped; no other character is lost.

Discord limits are counted in UTF-16 code units too (never fewer than
characters). Plain text is cut by the same rules, never between a backslash
and the character it escapes; embeds are packed at most 10 and 6000
characters to a message.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

TELEGRAM_LIMIT = 4096
# Kept below the limit so a message never depends on counting exactly as Telegram does.
TELEGRAM_BUDGET = 4000
DISCORD_CONTENT = 2000
DISCORD_TITLE = 256
DISCORD_DESCRIPTION = 4096
DISCORD_FIELD_NAME = 256
DISCORD_FIELD_VALUE = 1024
DISCORD_FIELDS = 25
DISCORD_FOOTER = 2048
DISCORD_EMBEDS = 10
DISCORD_TOTAL = 6000

_SEP = "\n\n"
_HTML_ATOM = re.compile(r"<[^>]*>|&(?:#\d+|#[xX][0-9a-fA-F]+|[A-Za-z]+);|[\s\S]")
_PLAIN_ATOM = re.compile(r"\\[\s\S]|[\s\S]")
_TAG = re.compile(r"<[^>]*>")
_TAG_NAME = re.compile(r"</?\s*([A-Za-z][A-Za-z0-9-]*)")
_SENTENCE_END = set(".!?;。！？；…")
_WIDE_END = set("。！？；…")
_GLUE_AFTER = {"\u200d"}  # a zero-width joiner binds to what follows
_GLUE_BEFORE = {"\u200d", "\ufe0e", "\ufe0f", "\u20e3"}


class Atom(NamedTuple):
    """The smallest piece a splitter may move: a tag, an entity or a character."""

    raw: str
    text: str  # what the reader sees ("" for a tag)
    size: int  # how much it counts towards the limit
    tag: str | None = None
    closing: bool = False


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units (what Telegram and JavaScript count)."""
    return len(text.encode("utf-16-le")) // 2


def telegram_text(fragment: str) -> str:
    """The text Telegram shows for a Bot API HTML fragment (tags removed, entities decoded)."""
    return html.unescape(_TAG.sub("", fragment))


def telegram_length(fragment: str) -> int:
    """The length Telegram checks against 4096."""
    return utf16_len(telegram_text(fragment))


def html_atoms(fragment: str) -> list[Atom]:
    """Tags, entities and characters of a Bot API HTML fragment."""
    atoms = []
    for match in _HTML_ATOM.finditer(fragment):
        raw = match.group(0)
        if raw.startswith("<") and len(raw) > 1:
            name = _TAG_NAME.match(raw)
            atoms.append(Atom(raw, "", 0, name.group(1).lower() if name else "", raw.startswith("</")))
        else:
            text = html.unescape(raw) if raw.startswith("&") else raw
            atoms.append(Atom(raw, text, _units(text)))
    return atoms


def plain_atoms(text: str) -> list[Atom]:
    """Characters of plain text, keeping a backslash escape with its character."""
    return [Atom(m.group(0), m.group(0), _units(m.group(0))) for m in _PLAIN_ATOM.finditer(text)]


def _units(text: str) -> int:
    if len(text) == 1:
        return 2 if ord(text) > 0xFFFF else 1
    return utf16_len(text)


def _rank(prev2: str, prev: str, nxt: str) -> int:
    """How good a cut between ``prev`` and ``nxt`` is: 5 best, 0 worst, -1 forbidden."""
    if nxt in _GLUE_BEFORE or prev in _GLUE_AFTER or (nxt and _is_mark(nxt)):
        return -1
    if prev == "\n":
        return 5 if prev2 == "\n" else 4
    if prev[-1:] in _SENTENCE_END and (nxt.isspace() or prev[-1:] in _WIDE_END):
        return 3
    if prev.isspace() or nxt.isspace():
        return 2
    return 0


def _is_mark(char: str) -> bool:
    """A combining mark or an emoji skin tone: it belongs to the character before it."""
    return unicodedata.category(char[-1]) in ("Mn", "Me") or "\U0001f3fb" <= char <= "\U0001f3ff"


def _is_flag_half(char: str) -> bool:
    return "\U0001f1e6" <= char <= "\U0001f1ff"


def _cut_index(atoms: Sequence[Atom], start: int, budget: int) -> int:
    """Where to cut so the part from ``start`` holds at most ``budget``; prefers good breaks past half.

    When no allowed break fits (a run of joined emoji longer than the budget),
    the cut falls at the last character boundary that fits.
    """
    best: tuple[int, int] = (-100, start)
    last = start
    used, prev2, prev, flags = 0, "", "", 0  # flags: regional indicators just before the cut
    for i in range(start, len(atoms)):
        atom = atoms[i]
        if atom.tag is not None:
            continue
        if used:
            last = i
            rank = -1 if flags % 2 and _is_flag_half(atom.text) else _rank(prev2, prev, atom.text)
            if rank >= 0:
                best = max(best, (rank if used * 2 >= budget else rank - 10, i))
        used += atom.size
        if used > budget:
            break
        prev2, prev = prev, atom.text
        flags = flags + 1 if _is_flag_half(prev) else 0
    if best[1] > start:
        return best[1]
    if last > start:
        return last
    return next(i + 1 for i in range(start, len(atoms)) if atoms[i].tag is None)  # one character


def _settle(atoms: Sequence[Atom], cut: int) -> int:
    """Move a cut so opening tags start the next part and closing tags end this one."""
    while atoms[cut - 1].tag is not None and not atoms[cut - 1].closing:
        cut -= 1
    while cut < len(atoms) and atoms[cut].tag is not None and atoms[cut].closing:
        cut += 1
    return cut


def _open_tags(atoms: Sequence[Atom]) -> list[Atom]:
    stack: list[Atom] = []
    for atom in atoms:
        if atom.tag is None:
            continue
        if not atom.closing:
            stack.append(atom)
        elif stack and stack[-1].tag == atom.tag:
            stack.pop()
    return stack


def _is_space(atom: Atom) -> bool:
    return atom.tag is None and atom.text.isspace()


def split_atoms(atoms: Sequence[Atom], budget: int) -> list[str]:
    """Cut ``atoms`` into parts of at most ``budget`` each, closing and reopening tags at cuts."""
    parts: list[str] = []
    start, remaining, reopen = 0, sum(a.size for a in atoms), list[Atom]()
    while remaining > budget:
        cut = _settle(atoms, _cut_index(atoms, start, budget))
        end = cut
        while end > start and _is_space(atoms[end - 1]):
            end -= 1
        left = [*reopen, *atoms[start:end]]
        reopen = _open_tags(left)
        if any(a.tag is None and not a.text.isspace() for a in left):
            parts.append("".join(a.raw for a in left) + "".join(f"</{a.tag}>" for a in reversed(reopen)))
        while cut < len(atoms) and _is_space(atoms[cut]):
            cut += 1
        remaining -= sum(a.size for a in atoms[start:cut])
        start = cut
    if any(a.tag is None and not a.text.isspace() for a in atoms[start:]):
        parts.append("".join(a.raw for a in [*reopen, *atoms[start:]]))
    return parts


def pack(pieces: Sequence[str], budget: int, measure: Callable[[str], int], sep: str = _SEP) -> list[str]:
    """Join pieces with ``sep`` into as few chunks of at most ``budget`` as order allows."""
    chunks: list[str] = []
    current, used, gap = "", 0, measure(sep)
    for piece in pieces:
        size = measure(piece)
        if current and used + gap + size <= budget:
            current, used = current + sep + piece, used + gap + size
            continue
        if current:
            chunks.append(current)
        current, used = piece, size
    if current:
        chunks.append(current)
    return chunks


def split_telegram(blocks: Sequence[str], budget: int = TELEGRAM_BUDGET) -> list[str]:
    """Telegram messages from HTML blocks: packed whole where they fit, cut where one is too long."""
    pieces: list[str] = []
    for block in (b.strip() for b in blocks):
        if block:
            too_long = telegram_length(block) > budget
            pieces.extend(split_atoms(html_atoms(block), budget) if too_long else [block])
    return pack(pieces, budget, telegram_length)


def split_plain(text: str, budget: int) -> list[str]:
    """Plain (Discord-escaped) text cut into parts of at most ``budget`` UTF-16 units."""
    if utf16_len(text) <= budget:
        return [text] if text.strip() else []
    return split_atoms(plain_atoms(text), budget)


def embed_length(embed: dict[str, Any]) -> int:
    """What Discord counts towards 6000: title, description, fields, footer and author."""
    texts = [embed.get("title", ""), embed.get("description", ""),
             embed.get("footer", {}).get("text", ""), embed.get("author", {}).get("name", "")]
    for field in embed.get("fields", []):
        texts += [field["name"], field["value"]]
    return sum(utf16_len(t) for t in texts)


def pack_discord(contents: Sequence[str], embeds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Message payloads: content chunks first, then embeds, at most 10 and 6000 per message."""
    messages = [_payload(c) for c in contents] or [_payload("")]
    used = 0
    for embed in embeds:
        size, last = embed_length(embed), messages[-1]
        if len(last["embeds"]) >= DISCORD_EMBEDS or used + size > DISCORD_TOTAL:
            messages.append(_payload(""))
            last, used = messages[-1], 0
        last["embeds"].append(embed)
        used += size
    return [m for m in messages if m["content"] or m["embeds"]]


def _payload(content: str) -> dict[str, Any]:
    return {"content": content, "embeds": [], "allowed_mentions": {"parse": []}}


def discord_problems(payload: dict[str, Any]) -> list[str]:
    """Every Discord limit a payload breaks (empty when it may be posted)."""
    problems = []
    if utf16_len(payload.get("content", "")) > DISCORD_CONTENT:
        problems.append("content over 2000")
    embeds = payload.get("embeds", [])
    if len(embeds) > DISCORD_EMBEDS:
        problems.append("more than 10 embeds")
    if sum(embed_length(e) for e in embeds) > DISCORD_TOTAL:
        problems.append("embeds over 6000 in total")
    for embed in embeds:
        problems += _embed_problems(embed)
    return problems


def _embed_problems(embed: dict[str, Any]) -> list[str]:
    limits = [("title", embed.get("title", ""), DISCORD_TITLE),
              ("description", embed.get("description", ""), DISCORD_DESCRIPTION),
              ("footer", embed.get("footer", {}).get("text", ""), DISCORD_FOOTER)]
    fields = embed.get("fields", [])
    for field in fields:
        limits += [("field name", field["name"], DISCORD_FIELD_NAME),
                   ("field value", field["value"], DISCORD_FIELD_VALUE)]
    problems = [f"{what} over {limit}" for what, text, limit in limits if utf16_len(text) > limit]
    return problems + (["more than 25 fields"] if len(fields) > DISCORD_FIELDS else [])
