"""The locales the digest is written in: the one catalogue every part reads."""

from __future__ import annotations

import re

LOCALES: tuple[str, ...] = ("zh", "en")
DEFAULT_LOCALE = "zh"


def locale_from(tag: str | None, default: str = DEFAULT_LOCALE) -> str:
    """The supported locale for a language tag (``zh-CN``, ``zh_TW``, ``en-GB``, ``fr``...)."""
    if not tag:
        return default
    primary = tag.replace("_", "-").split("-", 1)[0].strip().lower()
    return primary if primary in LOCALES else ("en" if primary else default)


# A character of Chinese, Japanese or Korean writing (kana, CJK ideographs, hangul, compatibility
# ideographs): what tells a Chinese line from an English one, and what word splitting cannot cut.
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
