"""Hard-wrap plain text for the email text part. Pure, no I/O.

Lines are filled to ``width`` display columns (a CJK or emoji character counts
two, anything else one, so a line holds at most ``width`` characters). Latin
text breaks at spaces; CJK text may break between any two characters, except
that closing punctuation never starts a line and opening punctuation never
ends one. A word longer than a line is broken hard. A line holding only a URL
(or a link placeholder) is never wrapped, so links stay clickable; callers keep
URLs under :data:`MAX_URL_OCTETS`. The result never has a line over
:data:`MAX_LINE_OCTETS` (RFC 5322's 998), so the part may even go as 8bit.
"""

from __future__ import annotations

import re
import unicodedata

MAX_LINE_OCTETS = 998
MAX_URL_OCTETS = 900
_NO_LINE_START = set("，。、；：！？）》」』】〉’”,.;:!?)]}…%·")
_NO_LINE_END = set("（《「『【〈‘“([{")
_URL_LINE = re.compile(r"^\s*(https?://\S+|__DIGEST_[A-Z_]+__)\s*$")
_RUNS = re.compile(r"(\s+)|([!-~]+)|.", re.S)  # spaces, printable ASCII runs, any other character
_PREFIX = re.compile(r"^(\s*)((?:[-*•]|\d+[.)])\s+)?")


def char_width(char: str) -> int:
    """Display columns of one character: 2 for wide (CJK, most emoji), else 1."""
    if char < "\u1100":  # nothing below Hangul Jamo is wide
        return 1
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def text_width(text: str) -> int:
    """Display columns of ``text``."""
    return len(text) if text.isascii() else sum(map(char_width, text))


def _tokens(text: str) -> list[tuple[str, bool, int]]:
    """Unbreakable runs, each with whether a space came before it and its width."""
    tokens: list[tuple[str, bool, int]] = []
    buf: list[str] = []
    buf_width, buf_space, space, glue = 0, False, False, False
    for match in _RUNS.finditer(text):
        run = match.group(0)
        if match.group(1):
            space, glue = True, False
            continue
        w = len(run) if match.group(2) else char_width(run)
        if buf and not space and (glue or run[0] in _NO_LINE_START or buf[-1][-1] in _NO_LINE_END):
            buf.append(run)
            buf_width += w
        else:
            if buf:
                tokens.append(("".join(buf), buf_space, buf_width))
            buf, buf_width, buf_space = [run], w, space
        glue, space = (w == len(run)) and run[-1] not in _NO_LINE_END, False
    if buf:
        tokens.append(("".join(buf), buf_space, buf_width))
    return tokens


def _hard_break(token: str, width: int) -> list[tuple[str, int]]:
    pieces: list[tuple[str, int]] = []
    current, used = "", 0
    for char in token:
        w = char_width(char)
        if current and used + w > width:
            pieces.append((current, used))
            current, used = "", 0
        current, used = current + char, used + w
    return [*pieces, (current, used)] if current else pieces


def wrap_line(line: str, width: int = 78) -> list[str]:
    """Wrap one logical line, keeping its indent and hanging any bullet or number."""
    if _URL_LINE.match(line) or text_width(line) <= width:
        return [line.rstrip()]
    match = _PREFIX.match(line)
    assert match is not None  # the pattern matches the empty string
    first = match.group(0)
    indent = text_width(first)
    room = max(width - indent, 20)
    lines: list[str] = []
    current, used = [first], indent
    for token, spaced, token_width in _tokens(line[match.end():]):
        pieces = _hard_break(token, room) if token_width > room else [(token, token_width)]
        for piece, w in pieces:
            gap = 1 if spaced and used > indent else 0
            if used + gap + w > width and used > indent:
                lines.append("".join(current).rstrip())
                current, used, gap = [" " * indent], indent, 0
            current += [" "] * gap + [piece]
            used, spaced = used + gap + w, False
    if used > indent:
        lines.append("".join(current).rstrip())
    return lines


def wrap_text(text: str, width: int = 78) -> str:
    """Wrap every line of ``text``; no line exceeds MAX_LINE_OCTETS octets."""
    out: list[str] = []
    for line in text.split("\n"):
        for wrapped in wrap_line(line, width):
            out.extend(_octet_safe(wrapped))
    return "\n".join(out)


def _octet_safe(line: str) -> list[str]:
    """Last resort: cut a line at character boundaries so none passes MAX_LINE_OCTETS."""
    if len(line.encode()) <= MAX_LINE_OCTETS:
        return [line]
    pieces, current = [], ""
    for char in line:
        if len((current + char).encode()) > MAX_LINE_OCTETS:
            pieces.append(current)
            current = ""
        current += char
    return [*pieces, current]
