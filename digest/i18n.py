"""Localised labels for every output (events and scores are language-neutral)."""

from __future__ import annotations

LABELS: dict[str, dict[str, str]] = {
    "zh": {
        "overview": "今日概览",
        "events": "重点变化",
        "why": "为什么重要",
        "layers": "涉及层级",
        "sources": "来源",
        "source_n": "原始来源 {n}",
        "score": "事件评分",
        "breakdown": "评分构成",
        "watch": "值得继续观察",
        "notes": "数据与生成说明",
        "window": "采集窗口",
        "window_to": "至",
        "mode": "生成模式",
        "caution": "文章由程序根据一手来源生成；性能结论应以链接中的原始配置为准。",
        "raw": "原始条目",
        "raw_item": "{name} {n} 条",
        "list_sep": "，",
        "failed": "采集失败的来源",
        "late": "迟到条目（上一窗口已发布后才出现）",
        "back": "返回博客主页",
        "reads": "阅读",
        "comments": "评论",
        "updated": "有更新",
        "none": "本期没有符合条件的事件。",
        "written_by": "撰写方式",
        "filtered": "已按订阅偏好筛选",
        "colon": "：",
    },
    "en": {
        "overview": "Overview",
        "events": "Key changes",
        "why": "Why it matters",
        "layers": "Layers",
        "sources": "Sources",
        "source_n": "Source {n}",
        "score": "Event score",
        "breakdown": "Score breakdown",
        "watch": "Worth watching",
        "notes": "Data and generation notes",
        "window": "Collection window",
        "window_to": "to",
        "mode": "Generation mode",
        "caution": "Written by a program from primary sources; check performance claims "
                   "against the original configurations linked.",
        "raw": "Raw entries",
        "raw_item": "{name} {n}",
        "list_sep": ", ",
        "failed": "Sources that failed",
        "late": "Late entries (first seen after their window was published)",
        "back": "Back to the archive",
        "reads": "Reads",
        "comments": "Comments",
        "updated": "updated",
        "none": "Nothing in this issue matches.",
        "written_by": "Written by",
        "filtered": "Filtered to your preferences",
        "colon": ": ",
    },
}

COMPONENTS: dict[str, dict[str, str]] = {
    "zh": {
        "authority": "来源权威", "relevance": "相关性", "breadth": "层级广度",
        "quantitative": "量化证据", "novelty": "新颖性", "corroboration": "多源印证",
        "prerelease": "预发布",
    },
    "en": {
        "authority": "authority", "relevance": "relevance", "breadth": "breadth",
        "quantitative": "quantitative evidence", "novelty": "novelty",
        "corroboration": "corroboration", "prerelease": "pre-release",
    },
}


def labels(locale: str) -> dict[str, str]:
    """The labels of ``locale`` (English for anything unknown)."""
    return LABELS.get(locale, LABELS["en"])


def component_label(name: str, locale: str) -> str:
    """The display name of a score component."""
    return COMPONENTS.get(locale, COMPONENTS["en"]).get(name, name)
