"""What the bots say, in every locale of :mod:`digest.domain.locales` (the digest's own labels
live in :mod:`digest.render.i18n`)."""

from __future__ import annotations

from digest.domain import locales

CHAT_DEFAULT_LOCALE = "en"  # a chat user whose client sends no (or another) language reads English


def locale_from(language_code: str | None) -> str:
    """A chat platform's user language (``zh-hans``, ``en-US``...) → its locale, else English."""
    return locales.locale_from(language_code, default=CHAT_DEFAULT_LOCALE)


TEXTS: dict[str, dict[str, str]] = {
    "en": {
        "intro": "I send a daily digest of compiler-technology news (ML compilers, MLIR/LLVM, "
                 "torch.compile, Triton, TVM/XLA, kernel code generation, hardware back ends), "
                 "filtered to the layers you choose. Ask for recent events at any time.",
        "commands": "Commands",
        "layers_title": "Layers",
        "layers_intro": "Each event is tagged with the compiler-stack layers it touches:",
        "subscribed": "Subscribed.",
        "saved": "Saved.",
        "settings_title": "This chat's subscription:",
        "not_subscribed": "This chat is not subscribed. Send /subscribe to start.",
        "unsubscribed": "Unsubscribed. Send /subscribe to come back.",
        "admins_only": "Only a group administrator can change this group's subscription.",
        "unknown_layers": "Unknown layer(s): {bad}. Valid layers: {valid}.",
        "bad_min": "min= takes a score from 0 to 100, e.g. min=40.",
        "choose": "Tap a layer to add or remove it, then Done.",
        "change_hint": "Change it with /settings or /subscribe.",
        "done": "Done",
        "all": "All layers",
        "keep_one": "Keep at least one layer (or /unsubscribe).",
        "expired": "This button has expired; send /settings again.",
        "filter": "Layers",
        "min": "Minimum score",
        "locale": "Language",
        "locale_name": "English",
        "change_layers": "Change layers",
        "recent_title": "Events of the last {days} days{where}, best first",
        "recent_none": "No events in the last {days} days{where}.",
        "recent_usage": "Usage: /recent [layer] [days], with days from 1 to {max}.",
        "digest_usage": "Usage: /digest [YYYY-MM-DD]",
        "no_digest": "No digest has been built yet.",
        "no_digest_for": "There is no digest for {date}.",
        "event_usage": "Usage: /event <id> (/recent shows the ids).",
        "no_event": "No digest has shown an event #{id}.",
        "search_usage": "Usage: /search <words> (up to 200 characters).",
        "search_none": "Nothing matches “{q}”.",
        "search_title": "Results for “{q}”",
        "error": "Something went wrong on our side; please try again later.",
        "filter_broken": "This chat's stored filter can no longer be read (a layer it names no longer "
                         "exists, or the record is damaged). Choose the layers again: "
                         "/subscribe <layers> or /subscribe all.",
    },
    "zh": {
        "intro": "我每天推送编译器技术日报（机器学习编译器、MLIR/LLVM、torch.compile、Triton、"
                 "TVM/XLA、内核生成、硬件后端），按你选择的层级筛选；也可以随时查询最近的事件。",
        "commands": "命令",
        "layers_title": "层级",
        "layers_intro": "每个事件都标注了它涉及的编译栈层级：",
        "subscribed": "已订阅。",
        "saved": "已保存。",
        "settings_title": "本聊天的订阅：",
        "not_subscribed": "本聊天尚未订阅，发送 /subscribe 开始订阅。",
        "unsubscribed": "已退订。发送 /subscribe 可重新订阅。",
        "admins_only": "只有群管理员可以修改本群的订阅。",
        "unknown_layers": "未知层级：{bad}。可用层级：{valid}。",
        "bad_min": "min= 需要 0 到 100 之间的分数，例如 min=40。",
        "choose": "点击层级以添加或移除，完成后点“完成”。",
        "change_hint": "可用 /settings 或 /subscribe 修改。",
        "done": "完成",
        "all": "全部层级",
        "keep_one": "至少保留一个层级（或发送 /unsubscribe 退订）。",
        "expired": "此按钮已失效，请重新发送 /settings。",
        "filter": "层级",
        "min": "最低评分",
        "locale": "语言",
        "locale_name": "中文",
        "change_layers": "修改层级",
        "recent_title": "最近 {days} 天的事件{where}（按评分排序）",
        "recent_none": "最近 {days} 天没有事件{where}。",
        "recent_usage": "用法：/recent [层级] [天数]，天数为 1 到 {max}。",
        "digest_usage": "用法：/digest [YYYY-MM-DD]",
        "no_digest": "还没有生成任何日报。",
        "no_digest_for": "{date} 没有日报。",
        "event_usage": "用法：/event <编号>（/recent 会显示编号）。",
        "no_event": "没有日报收录过编号为 #{id} 的事件。",
        "search_usage": "用法：/search <关键词>（最多 200 个字符）。",
        "search_none": "没有找到与“{q}”匹配的结果。",
        "search_title": "“{q}”的搜索结果",
        "error": "出了点问题，请稍后再试。",
        "filter_broken": "本聊天保存的筛选条件已无法读取（其中的层级已不存在，或记录已损坏）。"
                         "请重新选择层级：/subscribe <层级> 或 /subscribe all。",
    },
}

DESCRIBE: dict[str, dict[str, str]] = {
    "en": {
        "start": "What this bot does", "help": "Commands and layers",
        "subscribe": "Subscribe this chat: /subscribe [layer ...] [min=N]",
        "unsubscribe": "Stop the daily digest", "settings": "Layers, language, minimum score",
        "recent": "Recent events: /recent [layer] [days]",
        "digest": "A day's digest: /digest [YYYY-MM-DD]",
        "event": "One event with its score and sources: /event <id>",
        "layers": "What each layer covers",
        "search": "Search events and digests: /search <words>",
    },
    "zh": {
        "start": "机器人简介", "help": "命令与层级",
        "subscribe": "订阅本聊天：/subscribe [层级 ...] [min=N]",
        "unsubscribe": "停止接收日报", "settings": "层级、语言、最低评分",
        "recent": "最近事件：/recent [层级] [天数]",
        "digest": "某天的日报：/digest [YYYY-MM-DD]",
        "event": "单个事件的评分与来源：/event <编号>",
        "layers": "各层级涵盖的内容",
        "search": "搜索事件与日报：/search <关键词>",
    },
}

COVERS: dict[str, dict[str, str]] = {
    "zh": {
        "frontend": "框架前端、追踪与图捕获（Dynamo、JAX tracing）、内核 DSL 语法",
        "graph_ir": "图级 IR 与 pass：FX、StableHLO、Relax、ONNX 改写、图融合",
        "tensor_ir": "循环/张量级 IR：MLIR linalg/affine/sparse_tensor、TIR、Halide、多面体",
        "optimization": "pass、自动调优、代价模型、搜索、PGO",
        "kernel_codegen": "CUDA/PTX/SASS、Triton 内核、CUTLASS、LLVM 代码生成、向量化",
        "hardware_backend": "具体目标硬件：GPU、TPU、NPU、PIM、FPGA",
        "runtime": "运行时、内存、CUDA graphs、推理服务引擎",
        "distributed": "多设备并行、集合通信、切分",
        "benchmark": "新基准、重要的性能评测",
    },
}

# Discord application commands: names and descriptions, localised for zh-CN/zh-TW (English is the
# default). Keys are ``command`` or ``command.option``; option values stay the layer ids.
DISCORD_DESCRIBE: dict[str, dict[str, str]] = {
    "en": {
        "subscribe": "Subscribe this channel to the daily digest",
        "subscribe.layers": "Layers, comma-separated (e.g. runtime,kernel_codegen); all when empty",
        "subscribe.min_score": "Only events scoring at least this (0-100)",
        "unsubscribe": "Stop the daily digest in this channel",
        "settings": "This channel's layers and minimum score",
        "recent": "The best events of the last days",
        "recent.layer": "Only this layer",
        "recent.days": "How many days back (1-30)",
        "digest": "A day's digest",
        "digest.date": "The day, YYYY-MM-DD (the latest when empty)",
        "event": "One event with its score breakdown and every source",
        "event.id": "The event's number (/recent shows it)",
        "layers": "What each layer covers",
        "search": "Search the archive's events and digests",
        "search.words": "Words to find (English or Chinese)",
    },
    "zh": {
        "subscribe": "为本频道订阅编译器日报",
        "subscribe.layers": "层级，用逗号分隔（如 runtime,kernel_codegen）；留空为全部",
        "subscribe.min_score": "只推送评分不低于此值的事件（0-100）",
        "unsubscribe": "停止在本频道推送日报",
        "settings": "本频道的层级与最低评分",
        "recent": "最近几天评分最高的事件",
        "recent.layer": "只看此层级",
        "recent.days": "往前几天（1-30）",
        "digest": "某天的日报",
        "digest.date": "日期 YYYY-MM-DD（留空为最新）",
        "event": "单个事件：评分明细与全部来源",
        "event.id": "事件编号（/recent 会显示）",
        "layers": "各层级涵盖的内容",
        "search": "搜索往期事件与日报",
        "search.words": "关键词（中文或英文）",
    },
}

DISCORD_NAMES: dict[str, dict[str, str]] = {
    "zh": {"subscribe": "订阅", "unsubscribe": "退订", "settings": "设置", "recent": "最近", "digest": "日报",
           "event": "事件", "layers": "层级", "subscribe.layers": "层级", "subscribe.min_score": "最低评分",
           "recent.layer": "层级", "recent.days": "天数", "digest.date": "日期", "event.id": "编号",
           "search": "搜索", "search.words": "关键词"},
}
