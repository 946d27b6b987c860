"""Localised labels for every output (events and scores are language-neutral)."""

from __future__ import annotations

import re

from digest.domain.locales import CJK

LABELS: dict[str, dict[str, str]] = {
    "zh": {
        "overview": "今日概览",
        "events": "重点变化",
        "briefs": "简讯",
        "brief_quoted": "（原文要点）",
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
        "extractive_all": "本期为抽取式写作（未用模型）：每条的中文句子由程序根据来源中的事实"
                          "（类型、项目、数字及其对比基线）组成，其后为原文摘录。",
        "extractive_some": "其中 {n} 条为抽取式写作（未用模型）：中文句子由程序根据来源中的事实组成，"
                           "其后为原文摘录。",
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
        "subscribe_link": "邮件订阅",
    },
    "en": {
        "overview": "Overview",
        "events": "Key changes",
        "briefs": "Briefs",
        "brief_quoted": " (items as written)",
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
        "extractive_all": "Written extractively (no model): each write-up's first sentence is composed from "
                          "the sources' facts (kind, project, figures with their baselines), then quoted.",
        "extractive_some": "{n} of the write-ups are extractive (no model): composed from the sources' "
                           "facts, then quoted.",
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
        "subscribe_link": "Subscribe by email",
    },
}

# The subscription pages (digest.web_subscribe); the error texts are keyed by the form's error codes.
SUBSCRIBE_LABELS: dict[str, dict[str, str]] = {
    "zh": {
        "sub_title": "邮件订阅",
        "sub_intro": "每天早上八点，把编译器技术日报发到你的邮箱。只收你关心的层级，随时可以退订。",
        "address": "邮箱地址",
        "layers_legend": "关注的层级",
        "layers_hint": "至少选一项；只会收到涉及这些层级的事件。",
        "min_score": "最低评分",
        "min_score_hint": "0–100，只收到评分不低于它的事件；0 表示全部。",
        "locale_legend": "邮件语言",
        "submit": "订阅",
        "double_opt_in": "提交后我们会发一封确认邮件，确认之后才开始发送。",
        "err_summary": "请修改下面标出的内容。",
        "err_address": "请输入有效的邮箱地址。",
        "err_layers": "请至少选择一个层级。",
        "err_min_score": "最低评分须是 0 到 100 之间的数字。",
        "err_locale": "请选择邮件语言。",
        "err_form": "表单已过期，请再提交一次。",
        "check_title": "请查收邮件",
        "check_body": "如果 {address} 能收信，一封邮件正在路上。"
                      "打开其中的链接即可完成订阅，链接 3 天内有效。",
        "check_hint": "没有收到？看看垃圾邮件文件夹，或者过一会儿再试。",
        "confirm_title": "确认订阅",
        "confirm_body": "确认以 {address} 订阅编译器技术日报？",
        "confirm_button": "确认订阅",
        "confirmed_title": "订阅成功",
        "confirmed_body": "{address} 会从下一期开始收到日报。",
        "manage": "修改订阅偏好",
        "invalid_title": "链接无效",
        "invalid_body": "这个链接无效，或者已经不能再用了。",
        "expired_title": "链接已过期",
        "expired_body": "确认链接 3 天内有效，这个已经过期。重新订阅一次，我们会再发一封确认邮件。",
        "subscribe_again": "重新订阅",
        "forbidden_title": "无法提交",
        "forbidden_body": "这个表单只能从本站提交。",
        "unsub_title": "退订",
        "unsub_body": "不再向 {address} 发送编译器技术日报？",
        "unsub_button": "退订",
        "unsubscribed_title": "已退订",
        "unsubscribed_body": "{address} 不会再收到日报。",
        "resubscribe": "改主意了？重新订阅",
        "prefs_title": "订阅偏好",
        "prefs_intro": "{address} 的订阅设置。",
        "save": "保存",
        "saved": "已保存。",
        "prefs_inactive": "这个地址目前不会收到日报。保存偏好不会恢复订阅；要重新订阅，请使用订阅表单。",
        "prefs_pending": "这个地址还没有确认订阅：请先打开确认邮件中的链接。",
        "unsubscribe_here": "退订",
    },
    "en": {
        "sub_title": "Subscribe by email",
        "sub_intro": "The Compiler Digest in your inbox every morning at 08:00. Only the layers you care "
                     "about; unsubscribe at any time.",
        "address": "Email address",
        "layers_legend": "Layers",
        "layers_hint": "Choose at least one; you get the events that touch them.",
        "min_score": "Minimum score",
        "min_score_hint": "0–100: only events scoring at least this; 0 means all.",
        "locale_legend": "Language",
        "submit": "Subscribe",
        "double_opt_in": "We send a confirmation email first; nothing else goes out until you confirm.",
        "err_summary": "Please correct what is marked below.",
        "err_address": "Enter a valid email address.",
        "err_layers": "Choose at least one layer.",
        "err_min_score": "The minimum score must be a number from 0 to 100.",
        "err_locale": "Choose a language.",
        "err_form": "This form has expired; please send it again.",
        "check_title": "Check your inbox",
        "check_body": "If {address} can receive mail, a message is on its way. Open its link to finish "
                      "subscribing; the link works for 3 days.",
        "check_hint": "Nothing there? Look in the spam folder, or try again later.",
        "confirm_title": "Confirm your subscription",
        "confirm_body": "Send the Compiler Digest to {address}?",
        "confirm_button": "Confirm subscription",
        "confirmed_title": "You are subscribed",
        "confirmed_body": "{address} gets the digest from the next issue on.",
        "manage": "Change preferences",
        "invalid_title": "Invalid link",
        "invalid_body": "This link is not valid, or can no longer be used.",
        "expired_title": "Link expired",
        "expired_body": "Confirmation links work for 3 days and this one has expired. Subscribe again "
                        "and we will send a new one.",
        "subscribe_again": "Subscribe again",
        "forbidden_title": "Not sent",
        "forbidden_body": "This form can only be sent from this site.",
        "unsub_title": "Unsubscribe",
        "unsub_body": "Stop sending the Compiler Digest to {address}?",
        "unsub_button": "Unsubscribe",
        "unsubscribed_title": "Unsubscribed",
        "unsubscribed_body": "{address} will not get the digest any more.",
        "resubscribe": "Changed your mind? Subscribe again",
        "prefs_title": "Preferences",
        "prefs_intro": "What {address} receives.",
        "save": "Save",
        "saved": "Saved.",
        "prefs_inactive": "This address gets no digest now. Saving preferences does not subscribe it "
                          "again; use the subscribe form for that.",
        "prefs_pending": "This address has not confirmed yet: open the link in the confirmation email first.",
        "unsubscribe_here": "Unsubscribe",
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


def subscribe_labels(locale: str) -> dict[str, str]:
    """The subscription pages' labels of ``locale`` (English for anything unknown)."""
    return SUBSCRIBE_LABELS.get(locale, SUBSCRIBE_LABELS["en"])


_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")


def part_lang(text: str, page_locale: str) -> str | None:
    """The language of a quoted part when it is not the page's: ``en`` for English on a zh page.

    A source's title or a roundup's line is quoted as written; WCAG's "language of parts" wants
    it marked, so a screen reader reads it in English. Mixed text keeps the page's language.
    """
    if page_locale == "en" or CJK.search(text) or not _LATIN_WORD.search(text):
        return None
    return "en"
