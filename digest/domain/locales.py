"""The locales the digest is written in: the one catalogue every part reads."""

from __future__ import annotations

LOCALES: tuple[str, ...] = ("zh", "en")
DEFAULT_LOCALE = "zh"


def locale_from(tag: str | None, default: str = DEFAULT_LOCALE) -> str:
    """The supported locale for a language tag (``zh-CN``, ``zh_TW``, ``en-GB``, ``fr``...)."""
    if not tag:
        return default
    primary = tag.replace("_", "-").split("-", 1)[0].strip().lower()
    return primary if primary in LOCALES else ("en" if primary else default)
