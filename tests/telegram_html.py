"""Telegram's view of Bot API HTML, for tests: parse a message, check a split's limits and losses."""

from __future__ import annotations

import re
import unicodedata
from html.parser import HTMLParser

from digest.render.split import TELEGRAM_LIMIT, utf16_len

TELEGRAM_TAGS = {"b", "i", "u", "s", "a", "code", "pre", "blockquote", "tg-spoiler", "span"}
GLUE = re.compile("^[\u200d\ufe0e\ufe0f\u20e3\U0001f3fb-\U0001f3ff]")


class Visible(HTMLParser):
    """Telegram's view of a message: the text, the tags seen, and whether they balance."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.balanced = True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack.append(tag)
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.balanced = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(fragment: str) -> Visible:
    """Parse one Telegram message as a browser would."""
    parser = Visible()
    parser.feed(fragment)
    parser.close()
    parser.balanced = parser.balanced and not parser.stack
    return parser


def visible(fragment: str) -> str:
    """The visible text of a fragment."""
    return "".join(parse(fragment).text)


def squash(text: str) -> str:
    """Text without any whitespace (what a split may drop)."""
    return "".join(text.split())


def check_telegram(parts: list[str], blocks: list[str], budget: int) -> None:
    """Every limit and the no-loss promise of :func:`split_telegram`."""
    for part in parts:
        seen = parse(part)
        text = "".join(seen.text)
        assert utf16_len(text) <= budget < TELEGRAM_LIMIT + 1, (utf16_len(text), part[:200])
        assert seen.balanced, part[-300:]
        assert {t for t, _ in seen.tags} <= TELEGRAM_TAGS
        assert not re.search(r"&(?!(?:amp|lt|gt|quot|#\d+|#x[0-9a-fA-F]+);)", part), "broken entity"
        assert not GLUE.match(text.lstrip()) and not unicodedata.combining(text.lstrip()[:1] or "a")
        assert not text.rstrip().endswith("\u200d")
        text.encode("utf-16")  # no lone surrogate
    assert squash("".join(visible(p) for p in parts)) == squash("".join(visible(b) for b in blocks))
