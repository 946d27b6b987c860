"""Property-based tests (hypothesis) of chat-command arguments and of Telegram message splitting.

Whatever a chat member types, the argument parsers give a valid value or an
``ArgError`` (a localised usage reply), never another exception; whatever a
digest holds, the Telegram parts stay within the limit, keep their tags
balanced, never split an entity or a character, and lose nothing.
"""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.commands import MAX_DAYS, ArgError, parse_date, parse_event_id, parse_recent, parse_subscribe
from digest.domain.layers import LAYER_IDS
from digest.render.split import TELEGRAM_BUDGET, split_telegram
from tests.telegram_html import check_telegram

# What people type: layer ids in any case, "all", min=/min: with anything after it, digits,
# dates, '#', commas, and anything at all (hostile text, control characters, other scripts).
_TOKEN = st.one_of(
    st.sampled_from([*LAYER_IDS, *(x.upper() for x in LAYER_IDS), "all", "ALL", "min=", "#", ","]),
    st.builds(lambda s: f"min={s}", st.one_of(st.floats(allow_nan=True), st.integers(-500, 500),
                                              st.text(max_size=6))),
    st.integers(-5, 500).map(str),
    st.dates().map(dt.date.isoformat),
    st.text(max_size=20),
)
ARGS = st.lists(_TOKEN, max_size=6)
PROPERTY = settings(max_examples=300, deadline=None)


@PROPERTY
@given(args=ARGS)
def test_subscribe_arguments_are_a_valid_filter_or_a_usage_reply(args: list[str]) -> None:
    try:
        layers, minimum = parse_subscribe(args)
    except ArgError as refused:
        assert refused.key in {"unknown_layers", "bad_min"}
        return
    assert layers is None or (layers and set(layers) <= set(LAYER_IDS) and layers == sorted(
        layers, key=LAYER_IDS.index)), "known ids, in the taxonomy's order, never empty"
    assert minimum is None or 0 <= minimum <= 100


@PROPERTY
@given(args=ARGS)
def test_recent_arguments_are_a_layer_and_a_day_count_or_a_usage_reply(args: list[str]) -> None:
    try:
        layer, days = parse_recent(args)
    except ArgError as refused:
        assert refused.key in {"unknown_layers", "recent_usage"}
        return
    assert layer is None or layer in LAYER_IDS
    assert 1 <= days <= MAX_DAYS


@PROPERTY
@given(args=ARGS)
def test_digest_and_event_arguments_parse_or_refuse(args: list[str]) -> None:
    try:
        date = parse_date(args)
        assert date is None or isinstance(date, dt.date)
    except ArgError as refused:
        assert refused.key == "digest_usage"
    try:
        assert parse_event_id(args) >= 0
    except ArgError as refused:
        assert refused.key == "event_usage"


# -- splitting -------------------------------------------------------------------

_TEXT = st.one_of(
    st.sampled_from(["MLIR ", "Triton", "kernel ", "lowering. ", "编译器", "内核优化。", "！", "\n", "\n\n",
                     "😀", "👍🏽", "👨\u200d👩\u200d👧", "🇨🇳", "1\ufe0f\u20e3", "e\u0301", "𝔽",
                     "&amp;", "&lt;", "&gt;", "&quot;", "&#39;", "&#x1F600;"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=30).map(
        lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")),
)
_FRAGMENT = st.recursive(
    st.lists(_TEXT, min_size=1, max_size=40).map("".join),
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["b", "i", "u", "s", "code"]), inner).map(
            lambda t: f"<{t[0]}>{t[1]}</{t[0]}>"),
        inner.map(lambda s: f'<a href="https://example.org/?a=1&amp;b=2">{s}</a>'),
        st.lists(inner, min_size=2, max_size=4).map("".join),
    ),
    max_leaves=12,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks=st.lists(_FRAGMENT, min_size=1, max_size=5),
       budget=st.sampled_from([TELEGRAM_BUDGET, 400, 120, 37]))
def test_telegram_parts_keep_the_limit_tags_and_entities_and_lose_nothing(blocks: list[str],
                                                                          budget: int) -> None:
    check_telegram(split_telegram(blocks, budget), blocks, budget)


@pytest.mark.parametrize("repeat", [200, 2000])
def test_a_block_far_over_the_limit_is_split_whole(repeat: int) -> None:
    block = "<b>" + "内核优化 &amp; lowering. 😀 " * repeat + "</b>"
    check_telegram(split_telegram([block]), [block], TELEGRAM_BUDGET)
