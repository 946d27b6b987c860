"""The reader's locale on every page: ``?lang=``, else Accept-Language (q-values), else the default.

Shared by the archive pages (:mod:`digest.web.app`) and the subscription pages
(:mod:`digest.web.subscribe`), so neither imports the other for it.
"""

from __future__ import annotations

import re

from digest.domain.locales import LOCALES

_LANG_ITEM = re.compile(r"^\s*([A-Za-z]{1,8}|\*)(?:-[A-Za-z0-9]{1,8})*\s*(?:;\s*q\s*=\s*([0-9.]+))?\s*$")


def negotiate(query_lang: str | None, accept: str | None, default: str) -> tuple[str, bool]:
    """The page's locale and whether the reader chose it explicitly (``?lang=``)."""
    if query_lang in LOCALES:
        return str(query_lang), True
    for tag in _ranked_tags(accept):
        if tag in LOCALES or tag == "*":
            return (tag if tag in LOCALES else default), False
    return default, False


def _ranked_tags(accept: str | None) -> list[str]:
    """The primary tags of an Accept-Language header with q > 0, best first (ties in header order)."""
    ranked: list[tuple[float, int, str]] = []
    for n, item in enumerate((accept or "").split(",")):
        match = _LANG_ITEM.match(item)
        if not match:
            continue
        try:
            q = float(match.group(2)) if match.group(2) else 1.0
        except ValueError:
            continue
        ranked.append((-q, n, match.group(1).lower()))
    return [tag for neg_q, _, tag in sorted(ranked) if neg_q < 0]


def content_language(locale: str) -> str:
    """The Content-Language header of a page in ``locale``."""
    return "zh-CN" if locale == "zh" else "en"
