"""Chat command logic shared by the bots: parse arguments, call the core, return plain replies.

A platform adapter turns a chat message into ``Commands.run(chat, name, args,
can_manage)`` (or a button press into ``Commands.press``) and the
:class:`Reply` back into its own markup: replies are lines of :class:`Span`
(text, style, link) and rows of :class:`Button`, never HTML or Markdown, so
each adapter escapes untrusted text in one place. ``Reply.digest`` carries a
filtered :class:`~digest.domain.views.DigestView` for the adapter's renderer.

Whether the sender may change the chat's subscription (a group
administrator) costs the platform a request, so it is asked lazily through
``can_manage`` and only by the commands and buttons that change something.
Button actions carry their whole state (``L:4`` toggles layer 4), so no
keyboard state is kept anywhere.

A chat whose stored filter no longer reads (a layer id that is gone, garbage
in the row) is answered ``filter_broken`` wherever the filter is used
(/settings, /digest, the settings buttons); the commands that do not use it
still work, and /subscribe with layers or a layer toggle writes a good one.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from bot.texts import COVERS, DESCRIBE, TEXTS, locale_from
from digest.domain.clock import system_now
from digest.domain.errors import BuildError, SubscriptionError
from digest.domain.layers import BY_ID, LAYER_IDS, LAYERS
from digest.domain.locales import LOCALES
from digest.domain.status import SubscriberStatus
from digest.domain.views import DigestView, filter_view
from digest.render.i18n import component_label, labels
from digest.render.safety import one_line
from digest.store.db import SessionFactory
from digest.store.queries import event_detail, latest_digest_date, list_digests, load_view, recent_events
from digest.store.search import QueryError, search
from digest.subscribe.subscriptions import (
    SubscriberView,
    find_by_address,
    set_preferences,
    subscribe,
    unsubscribe,
)
from digest.subscribe.validation import validate_min_score

log = logging.getLogger(__name__)
Permission = Callable[[], Awaitable[bool]]
MIN_SCORES = (0, 30, 50, 70)
MAX_DAYS = 30


@dataclass(frozen=True)
class Span:
    """A run of text: plain, bold (``b``), italic (``i``) or code, optionally an http(s) link."""

    text: str
    style: str = ""
    url: str | None = None


Line = tuple[Span, ...]


@dataclass(frozen=True)
class Button:
    """An inline button: its label and the action it sends back (at most 64 bytes)."""

    label: str
    action: str


@dataclass(frozen=True)
class Reply:
    """What the bot answers: lines, buttons, a digest to render, or a short notice for a press."""

    lines: tuple[Line, ...] = ()
    buttons: tuple[tuple[Button, ...], ...] = ()
    digest: DigestView | None = None
    notice: str | None = None
    alert: bool = False
    error: bool = False  # a refusal or bad input: Discord answers it ephemeral (only the sender sees it)


@dataclass(frozen=True)
class Chat:
    """Where a command came from: the subscription address and the sender's language."""

    channel: str
    address: str
    is_group: bool = False
    user_locale: str | None = None


@dataclass(frozen=True)
class Request:
    """One command as a handler sees it: the chat, its arguments, locale and subscription."""

    chat: Chat
    args: list[str]
    locale: str
    sub: SubscriberView | None
    can_manage: Permission
    broken: bool = False  # the chat's stored filter no longer reads (see ``readable``)

    @property
    def unreadable(self) -> bool:
        """The chat's filter is in force (an active row, or one that cannot be read) and does not read."""
        return self.broken and (self.sub is None or self.sub.status == SubscriberStatus.ACTIVE)


@dataclass
class ArgError(Exception):
    """Bad arguments: a text key and its fields, answered in the chat's locale."""

    key: str
    fields: dict[str, str] = field(default_factory=dict)


def plain(text: str) -> Line:
    """A line of plain text."""
    return (Span(text),)


def say(locale: str, key: str, **fields: object) -> Reply:
    """A one-line reply from the text catalogue."""
    return Reply(lines=(plain(TEXTS[locale][key].format(**fields)),))


def refuse(locale: str, key: str, **fields: object) -> Reply:
    """A one-line error reply from the text catalogue (bad input, no permission, nothing found)."""
    return Reply(lines=(plain(TEXTS[locale][key].format(**fields)),), error=True)


def readable(sub: SubscriberView) -> bool:
    """Whether a stored filter still reads: a known layer at least and a score in 0..100.

    Validation never stores an empty filter, so an empty ``layers`` in the view is a row whose
    ids are all gone (the view drops unknown ids) or were never a list of ids at all.
    """
    score = sub.min_score
    return (bool(sub.layers) and isinstance(score, int | float) and math.isfinite(score)
            and 0 <= score <= 100)


# -- argument parsing (pure) --------------------------------------------------

def parse_subscribe(args: Sequence[str]) -> tuple[list[str] | None, float | None]:
    """``[layer ...] [min=N]`` → (layers or None, min score or None); ``all`` means every layer."""
    layers: list[str] = []
    minimum: float | None = None
    for token in (t for arg in args for t in arg.replace(",", " ").split()):
        low = token.lower()
        if low.startswith(("min=", "min:")):
            minimum = _score(low[4:])
        elif low == "all":
            layers.extend(LAYER_IDS)
        else:
            layers.append(low)
    unknown = [lid for lid in layers if lid not in BY_ID]
    if unknown:
        raise ArgError("unknown_layers", {"bad": ", ".join(unknown), "valid": ", ".join(LAYER_IDS)})
    return ([lid for lid in LAYER_IDS if lid in layers] or None), minimum


def _score(text: str) -> float:
    """A minimum score by the one rule of every input (:func:`validate_min_score`)."""
    try:
        return validate_min_score(float(text))
    except (ValueError, SubscriptionError):
        raise ArgError("bad_min") from None


def parse_recent(args: Sequence[str]) -> tuple[str | None, int]:
    """``[layer] [days]`` in any order → (layer or None, days; default 3)."""
    layer, days = None, 3
    for token in args:
        if token.isdigit():
            days = int(token)
        elif token.lower() in BY_ID:
            layer = token.lower()
        else:
            raise ArgError("unknown_layers", {"bad": token, "valid": ", ".join(LAYER_IDS)})
    if not 1 <= days <= MAX_DAYS:
        raise ArgError("recent_usage", {"max": str(MAX_DAYS)})
    return layer, days


def parse_date(args: Sequence[str]) -> dt.date | None:
    """``[YYYY-MM-DD]`` → the date, or None for the latest digest."""
    if not args:
        return None
    try:
        return dt.date.fromisoformat(args[0])
    except ValueError:
        raise ArgError("digest_usage") from None


def parse_event_id(args: Sequence[str]) -> int:
    """``<id>`` (a leading ``#`` allowed) → the event id."""
    text = args[0].lstrip("#") if args else ""
    if not text.isdigit():
        raise ArgError("event_usage")
    return int(text)


# -- the commands -------------------------------------------------------------

class Commands:
    """The command set over the core; one per process, shared by every chat."""

    NAMES = ("start", "help", "subscribe", "unsubscribe", "settings", "recent", "digest", "event",
             "layers", "search")

    def __init__(self, sessions: SessionFactory, *, channel: str,
                 clock: Callable[[], dt.datetime] = system_now, recent_limit: int = 10) -> None:
        self.sessions = sessions
        self.channel = channel
        self.clock = clock
        self.recent_limit = recent_limit

    async def run(self, chat: Chat, name: str, args: Sequence[str], can_manage: Permission) -> Reply:
        """Answer one command (an unknown name gets the help)."""
        sub, broken = await self._subscriber(chat)
        locale = sub.locale if sub is not None else locale_from(chat.user_locale)
        handler = getattr(self, f"_cmd_{name}", None) if name in self.NAMES else None
        try:
            if handler is None:
                return self.help(locale)
            reply: Reply = await handler(Request(chat, list(args), locale, sub, can_manage, broken))
            return reply
        except ArgError as exc:
            return refuse(locale, exc.key, **exc.fields)
        except SubscriptionError as exc:
            return Reply(lines=(plain(exc.detail),), error=True)

    async def built_dates(self, prefix: str = "", limit: int = 25) -> list[str]:
        """The newest built digest dates starting with ``prefix`` (a date option's autocomplete)."""
        async with self.sessions() as session:
            page = await list_digests(session, "en", per_page=100)
        return [d for d in (item.date.isoformat() for item in page.items) if d.startswith(prefix)][:limit]

    async def _subscriber(self, chat: Chat) -> tuple[SubscriberView | None, bool]:
        """The chat's subscriber (None when there is none or its row cannot be read) and whether its
        stored filter no longer reads."""
        try:
            async with self.sessions() as session:
                sub = await find_by_address(session, chat.channel, chat.address)
        except (TypeError, ValueError) as exc:  # a stored value the core's view cannot even hold
            log.warning("%s chat: its subscriber row does not read (%s); answering filter_broken",
                        chat.channel, type(exc).__name__)
            return None, True
        if sub is not None and not readable(sub):
            log.warning("%s subscriber %d: its stored filter does not read; answering filter_broken",
                        chat.channel, sub.id)
            return sub, True
        return sub, False

    # help and layers

    def help(self, locale: str) -> Reply:
        """What the bot does, the commands and the layers."""
        text = TEXTS[locale]
        lines: list[Line] = [plain(text["intro"]), (), (Span(text["commands"], "b"),)]
        lines += [(Span(f"/{name}", "code"), Span(" — " + desc))
                  for name, desc in command_descriptions(locale)]
        lines += [(), (Span(text["layers_title"], "b"),)]
        lines += [(Span(layer.id, "code"), Span(" " + layer.label(locale))) for layer in LAYERS]
        return Reply(lines=tuple(lines))

    async def _cmd_start(self, req: Request) -> Reply:
        return self.help(req.locale)

    _cmd_help = _cmd_start

    async def _cmd_layers(self, req: Request) -> Reply:
        covers = COVERS.get(req.locale, {})
        lines = [(Span(layer.label(req.locale), "b"), Span(" "), Span(layer.id, "code"),
                  Span(" — " + covers.get(layer.id, layer.covers))) for layer in LAYERS]
        return Reply(lines=(plain(TEXTS[req.locale]["layers_intro"]), *lines))

    # subscription

    async def _cmd_subscribe(self, req: Request) -> Reply:
        layers, minimum = parse_subscribe(req.args)
        if not await req.can_manage():
            return refuse(req.locale, "admins_only")
        if req.broken and layers is None:  # keeping the stored layers would keep what does not read
            return refuse(req.locale, "filter_broken")
        async with self.sessions.begin() as session:
            view, _ = await subscribe(
                session, req.chat.channel, req.chat.address, layers=layers, min_score=minimum,
                locale=None if req.sub is not None else req.locale, confirmed=True, now=self.clock())
        if req.args:
            return self.settings_reply(view, TEXTS[view.locale]["subscribed"], buttons=False)
        text = TEXTS[view.locale]
        return self.layer_keyboard(view, text["subscribed"] + " " + text["choose"])

    async def _cmd_unsubscribe(self, req: Request) -> Reply:
        if req.sub is None and req.broken:
            return refuse(req.locale, "filter_broken")
        if req.sub is None or req.sub.status != SubscriberStatus.ACTIVE:
            return say(req.locale, "not_subscribed")
        if not await req.can_manage():
            return refuse(req.locale, "admins_only")
        async with self.sessions.begin() as session:
            await unsubscribe(session, req.sub.id, self.clock())
        return say(req.locale, "unsubscribed")

    async def _cmd_settings(self, req: Request) -> Reply:
        if req.unreadable:
            return refuse(req.locale, "filter_broken")
        if req.sub is None or req.sub.status != SubscriberStatus.ACTIVE:
            return say(req.locale, "not_subscribed")
        return self.settings_reply(req.sub, TEXTS[req.locale]["settings_title"])

    def settings_reply(self, sub: SubscriberView, title: str, *, buttons: bool = True) -> Reply:
        """The chat's filter, language and minimum score, with buttons to change them."""
        text, locale = TEXTS[sub.locale], sub.locale
        names = ", ".join(BY_ID[lid].label(locale) for lid in sub.layers)
        lines = (plain(title), (Span(text["filter"] + labels(locale)["colon"], "b"), Span(names)),
                 (Span(text["min"] + labels(locale)["colon"], "b"), Span(f"{sub.min_score:g}")),
                 (Span(text["locale"] + labels(locale)["colon"], "b"), Span(text["locale_name"])))
        if not buttons:
            return Reply(lines=(*lines, plain(text["change_hint"])))
        rows = ((Button(text["change_layers"], "S:layers"),),
                tuple(Button(_mark(loc == locale) + TEXTS[loc]["locale_name"], f"S:loc:{loc}")
                      for loc in LOCALES),
                tuple(Button(_mark(sub.min_score == n) + f"≥{n}", f"S:min:{n}") for n in MIN_SCORES))
        return Reply(lines=lines, buttons=rows)

    def layer_keyboard(self, sub: SubscriberView, title: str) -> Reply:
        """Nine toggles (ticked = subscribed), All and Done."""
        chosen, locale = set(sub.layers), sub.locale
        toggles = [Button(_tick(lid in chosen) + layer.label(locale), f"L:{n}")
                   for n, (lid, layer) in enumerate(zip(LAYER_IDS, LAYERS, strict=True))]
        rows = [tuple(toggles[i:i + 3]) for i in range(0, len(toggles), 3)]
        rows.append((Button(TEXTS[locale]["all"], "L:all"), Button(TEXTS[locale]["done"], "L:done")))
        return Reply(lines=(plain(title),), buttons=tuple(rows))

    async def press(self, chat: Chat, action: str, can_manage: Permission) -> Reply:
        """Answer a button press; every button changes the subscription, so only a manager may."""
        sub, broken = await self._subscriber(chat)
        locale = sub.locale if sub is not None else locale_from(chat.user_locale)
        if not await can_manage():
            return Reply(notice=TEXTS[locale]["admins_only"], alert=True)
        kind, _, arg = action.partition(":")
        repairs = kind == "L" and arg != "done"  # a layer toggle writes a whole new, valid filter
        if broken and (sub is None or not repairs):
            return Reply(notice=TEXTS[locale]["filter_broken"], alert=True)
        if sub is None or sub.status != SubscriberStatus.ACTIVE:
            return Reply(notice=TEXTS[locale]["not_subscribed"], alert=True)
        if kind == "L":
            return await self._press_layer(sub, arg)
        if kind == "S":
            return await self._press_setting(sub, arg)
        return Reply(notice=TEXTS[locale]["expired"], alert=True)

    async def _press_layer(self, sub: SubscriberView, arg: str) -> Reply:
        text = TEXTS[sub.locale]
        if arg == "done":
            return self.settings_reply(sub, text["saved"], buttons=False)
        if arg == "all":
            layers = list(LAYER_IDS)
        elif arg.isdigit() and int(arg) < len(LAYER_IDS):
            flipped = LAYER_IDS[int(arg)]
            layers = [lid for lid in LAYER_IDS if (lid in sub.layers) != (lid == flipped)]
        else:
            return Reply(notice=text["expired"], alert=True)
        if not layers:
            return Reply(notice=text["keep_one"], alert=True)
        view = await self._save(sub, layers=layers)
        return self.layer_keyboard(view, text["choose"])

    async def _press_setting(self, sub: SubscriberView, arg: str) -> Reply:
        text = TEXTS[sub.locale]
        what, _, value = arg.partition(":")
        if what == "layers":
            return self.layer_keyboard(sub, text["choose"])
        if what == "loc" and value in LOCALES:
            view = await self._save(sub, locale=value)
        elif what == "min" and value.isdigit() and int(value) in MIN_SCORES:
            view = await self._save(sub, min_score=float(value))
        else:
            return Reply(notice=text["expired"], alert=True)
        return self.settings_reply(view, TEXTS[view.locale]["saved"])

    async def _save(self, sub: SubscriberView, *, layers: list[str] | None = None,
                    min_score: float | None = None, locale: str | None = None) -> SubscriberView:
        async with self.sessions.begin() as session:
            return await set_preferences(session, sub.id, layers, min_score, locale, self.clock())

    # queries

    async def _cmd_recent(self, req: Request) -> Reply:
        layer, days = parse_recent(req.args)
        since = self.clock() - dt.timedelta(days=days)
        async with self.sessions() as session:
            best = await recent_events(session, req.locale, since=since, layer=layer,
                                         limit=self.recent_limit, order="score")
        locale = req.locale
        where = f" · {BY_ID[layer].label(locale)}" if layer else ""
        if not best:
            return say(locale, "recent_none", days=days, where=where)
        lines: list[Line] = [(Span(TEXTS[locale]["recent_title"].format(days=days, where=where), "b"),)]
        for n, event in enumerate(best, 1):
            about = f" · {_layer_names(event.layers, locale)} · {event.date.isoformat()} · "
            lines += [(), (Span(f"{n}. "), Span(one_line(event.title, 200), "b", event.url)),
                      (Span(f"{event.score:.1f}", "b"), Span(about), Span(f"/event {event.id}", "code"))]
        return Reply(lines=tuple(lines))

    async def _cmd_digest(self, req: Request) -> Reply:
        date = parse_date(req.args)
        async with self.sessions() as session:
            date = date or await latest_digest_date(session)
            if date is None:
                return say(req.locale, "no_digest")
            try:
                view = await load_view(session, date, req.locale, listed_only=True)
            except BuildError:
                return refuse(req.locale, "no_digest_for", date=date.isoformat())
        if req.unreadable:
            return refuse(req.locale, "filter_broken")
        if req.sub is not None and req.sub.status == SubscriberStatus.ACTIVE:
            view = filter_view(view, req.sub.layers, req.sub.min_score)
        return Reply(digest=view)

    async def _cmd_event(self, req: Request) -> Reply:
        event_id = parse_event_id(req.args)
        async with self.sessions() as session:
            found = await event_detail(session, event_id, req.locale)
        if found is None:
            return refuse(req.locale, "no_event", id=event_id)
        t, colon = labels(req.locale), labels(req.locale)["colon"]
        lines: list[Line] = [
            (Span(f"#{found.id} "), Span(one_line(found.title, 300), "b", found.url)),
            (Span(t["score"] + colon), Span(f"{found.score:.1f}", "b"), Span("/100")),
            (Span(t["layers"] + colon), Span(_layer_names(found.layers, req.locale))),
            (Span(t["breakdown"] + colon, "b"),),
            *[plain(f"• {component_label(name, req.locale)}{colon}{points:.1f}")
              for name, points in found.score_breakdown.items()],
            (), plain(one_line(found.summary, 1500)),
            (Span(t["why"] + colon, "b"), Span(one_line(found.why_it_matters, 800))), (),
            (Span(t["sources"] + colon, "b"),),
            *[(Span(f"• {one_line(s.name, 80)} — "), Span(one_line(s.title, 200), url=s.url))
              for s in found.sources],
        ]
        return Reply(lines=tuple(lines))

    async def _cmd_search(self, req: Request) -> Reply:
        words = " ".join(req.args)
        async with self.sessions() as session:
            try:
                hits = await search(session, words, locale=req.locale, limit=self.recent_limit)
            except QueryError:
                raise ArgError("search_usage") from None
        quoted = one_line(words, 80)
        if not hits:
            return say(req.locale, "search_none", q=quoted)
        lines: list[Line] = [(Span(TEXTS[req.locale]["search_title"].format(q=quoted), "b"),)]
        for n, hit in enumerate(hits, 1):
            more = f"/event {hit.id}" if hit.date is None else f"/digest {hit.date.isoformat()}"
            lines += [(), (Span(f"{n}. "), Span(one_line(hit.title, 200), "b")),
                      plain(one_line(hit.snippet, 300)), (Span(more, "code"),)]
        return Reply(lines=tuple(lines))


def command_descriptions(locale: str) -> list[tuple[str, str]]:
    """(command, description) in ``locale``, for help texts and the platform's command menu."""
    return [(name, DESCRIBE[locale][name]) for name in Commands.NAMES]


def _layer_names(layers: Sequence[str], locale: str) -> str:
    return " · ".join(BY_ID[lid].label(locale) if lid in BY_ID else lid for lid in layers)


def _tick(on: bool) -> str:
    return "✅ " if on else "▫️ "


def _mark(on: bool) -> str:
    return "✓ " if on else ""
