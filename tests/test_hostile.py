"""Hostile feed and LLM text, rendered to every format: nothing runs, nothing pings, limits hold."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from typing import Any

import pytest

from digest.domain.views import DigestView, EventView, SourceLink
from digest.domain.writeups import Brief, BriefItem
from digest.render.chat import strip_part_header
from digest.render.renderer import PREFERENCES_PLACEHOLDER, UNSUBSCRIBE_PLACEHOLDER, Renderer
from digest.render.safety import clean_text, discord_escape
from digest.render.split import TELEGRAM_LIMIT, discord_problems, telegram_text, utf16_len
from digest.render.wrap import MAX_LINE_OCTETS
from tests.telegram_html import check_telegram, parse, squash

SCRIPT = "<script>alert(1)</script>"
INVISIBLE = "\u200b\u200c\u200d\u200e\u200f\u2060\u061c"  # zero-width characters and bidi marks
TITLE = (f"{SCRIPT} [click](javascript:alert(1)) **bold** @everyone <@123> & < "
         f"\x1b[31m\u202egnp.exe \ud83d 编译器 😀 M{INVISIBLE}LIR")
MENTIONS = "<@!123> <@&456> <#789> @here @everyone </cmd:1> <t:1700000000:R>"
MARKDOWN = "[x](javascript:alert(3)) ```code``` ||spoiler|| ~~s~~ __u__\n> quote\n# heading\n- list\n1. one"
LONG = ("编译器把算子下沉到循环。" * 300 + "😀👍🏽👨\u200d👩\u200d👧🇨🇳" * 300
        + " Triton kernels & <fusion> beat 1.5x. " * 120)
BAD_URLS = ("javascript:alert(2)", "data:text/html;base64,PHNjcmlwdD4=", "JaVaScRiPt:alert(4)",
            "vbscript:x", "//evil.example/x", "https://ok.example/a b")
SITE = "https://digest.example"


def hostile_events(make_event: Callable[..., EventView]) -> tuple[EventView, ...]:
    """Three events with every kind of attack, long texts and characters that are hard to split."""
    bad_sources = tuple(SourceLink(f"src <b>{i}</b> @everyone", url) for i, url in enumerate(BAD_URLS))
    many = tuple(SourceLink(f"[name {i}](javascript:x) " + "长" * 40, f"https://s{i}.example/?a=1&b=<2>")
                 for i in range(60))
    return (
        make_event(1, title=TITLE, url="javascript:alert(1)", summary=LONG + MARKDOWN,
                   why_it_matters=MENTIONS + " " + MARKDOWN, layers=("frontend", "<b>bad</b>"),
                   sources=(*bad_sources, SourceLink('ok " & <fine>', "https://ok.example/?a=1&b=\"2\""))),
        make_event(2, title="😀" * 600, url="data:text/html,x", summary="😀" * 5000,
                   why_it_matters="字" * 10000, layers=(), sources=many),
        make_event(3, title="A" * 10000, summary="x" * 10000, why_it_matters=SCRIPT,
                   layers=("kernel_codegen",), written_by="@everyone <@1>"),
    )


BRIEF_MARK = "BRIEFMARK"


def hostile_briefs() -> tuple[Brief, ...]:
    """Roundups whose names, links and items attack every format (the 简讯 / Briefs entry)."""
    items = tuple(BriefItem(f"{BRIEF_MARK}{i} {text}", url) for i, (text, url) in enumerate([
        (SCRIPT, "javascript:alert(2)"), (MENTIONS, "data:text/html;base64,PHNjcmlwdD4="),
        (MARKDOWN, "https://ok.example/?a=1&b=<2>"), (TITLE, "//evil.example/x"),
        ("龍" * 5000, "https://ok.example/a b"), ("ж" * 3000, None)]))
    return (Brief(7, TITLE, f"{SCRIPT} @everyone <@123>", "JaVaScRiPt:alert(4)", "<b>src</b>",
                  ("kernel_codegen",), 50.0, items),
            Brief(8, "😀" * 600, "😀" * 600, "https://ok.example/weekly", MENTIONS, ("runtime",), 40.0,
                  (BriefItem(f"{BRIEF_MARK}9 {MENTIONS} " * 30, "vbscript:x"),)))


@pytest.fixture(params=["zh", "en"])
def view(request: pytest.FixtureRequest, make_view: Callable[..., DigestView],
         make_event: Callable[..., EventView]) -> DigestView:
    """The hostile digest in one locale."""
    return make_view(hostile_events(make_event), locale=request.param, title=TITLE,
                     overview=LONG, watchlist=(SCRIPT, "@everyone", "<@123>", MARKDOWN),
                     stats={"entries_by_source": {"<b>src</b>": 2}, "failed_sources": ["<i>x</i>"],
                            "late": 1}, briefs=hostile_briefs())


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    """One renderer for the module."""
    return Renderer(site_url=SITE)


class Audit(HTMLParser):
    """Every start tag and attribute of an HTML document."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    handle_startendtag = handle_starttag


def audit_html(document: str) -> None:
    """No script element, no event handler attribute, every link http(s) (or a mail placeholder)."""
    audit = Audit()
    audit.feed(document)
    audit.close()
    assert audit.tags, "parsed nothing"
    placeholders = {UNSUBSCRIBE_PLACEHOLDER, PREFERENCES_PLACEHOLDER}
    for tag, attrs in audit.tags:
        assert tag not in ("script", "iframe", "object", "embed"), tag
        for name, value in attrs:
            assert not name.startswith("on"), name
            if name in ("href", "src", "action", "formaction"):
                assert value and (value.startswith(("http://", "https://")) or value in placeholders), value


def no_bad_urls(text: str) -> None:
    """None of the dropped link targets shows up anywhere."""
    for url in ("javascript:alert(2)", "data:text/html", "JaVaScRiPt:", "vbscript:", "//evil.example"):
        assert url not in text, url
    assert "\x1b" not in text and "\u202e" not in text


def test_web_page_and_email_html(renderer: Renderer, view: DigestView) -> None:
    parts = renderer.email_parts(view)
    for document in (renderer.render(view, "html"), parts.html):
        audit_html(document)
        no_bad_urls(document)
        assert SCRIPT not in document and "&lt;script&gt;" in document


def test_markdown(renderer: Renderer, view: DigestView) -> None:
    md = renderer.render(view, "md")
    no_bad_urls(md)
    assert not re.search(r"(?<!\\)<script", md)
    assert not re.search(r"(?<!\\)\*\*bold", md)
    for target in re.findall(r"(?<!\\)\]\(([^)]*)\)", md):
        assert target.startswith(("http://", "https://")), target


def test_plain_text_and_email_text(renderer: Renderer, view: DigestView) -> None:
    text = renderer.render(view, "text")
    mail = renderer.email_parts(view)
    for body in (text, mail.text):
        no_bad_urls(body)
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f]", body)
    assert all(len(line.encode()) <= MAX_LINE_OCTETS for line in mail.text.split("\n"))
    assert "\n" not in mail.subject and "\r" not in mail.subject and len(mail.subject) <= 200
    assert squash(clean_text(LONG)) in squash(mail.text)


def test_telegram(renderer: Renderer, view: DigestView) -> None:
    messages = renderer.telegram(view)
    check_telegram(messages, messages, TELEGRAM_LIMIT - 1)
    for message in messages:
        no_bad_urls(message)
        assert "<script" not in message
        for tag, attrs in parse(message).tags:
            assert tag in ("b", "i", "a", "code", "blockquote")
            assert all(k == "href" and v and v.startswith(("http://", "https://")) for k, v in attrs.items())
    shown = squash("".join(telegram_text(strip_part_header(m)) for m in messages))
    for text in (LONG, "😀" * 5000, "字" * 10000, "x" * 10000, SCRIPT, MENTIONS):
        assert squash(clean_text(text)) in shown, "a long text lost something"
    assert squash(telegram_text(strip_part_header(messages[0]))).startswith(squash(SCRIPT))


def discord_texts(payload: dict[str, Any]) -> Iterator[str]:
    """Every text of a payload that Discord shows."""
    yield payload["content"]
    for embed in payload["embeds"]:
        yield embed.get("title", "")
        yield embed.get("description", "")
        yield embed.get("footer", {}).get("text", "")
        for field in embed.get("fields", []):
            yield field["name"]
            yield field["value"]


def test_discord(renderer: Renderer, view: DigestView) -> None:
    payloads = renderer.discord(view)
    for payload in payloads:
        assert not discord_problems(payload)
        assert payload["allowed_mentions"] == {"parse": []}
        for embed in payload["embeds"]:
            assert embed.get("url", "https://").startswith(("http://", "https://"))
        for text in discord_texts(payload):
            no_bad_urls(text)
            assert not re.search(r"@(everyone|here)", text), text[:200]
            assert not re.search(r"<[@#]|<t:|</[\w -]+:\d", text), text[:200]
            assert not re.search(r"(?<!\\)\*\*bold|(?<!\\)\|\|spoiler|(?<!\\)```", text)
            for target in re.findall(r"(?<!\\)\]\(([^)]*)\)", text):
                assert target.startswith(("http://", "https://")), target
    descriptions = squash("".join(e.get("description", "") for p in payloads for e in p["embeds"]))
    assert squash(discord_escape(LONG)) in descriptions
    assert squash(discord_escape("字" * 10000)) in descriptions


def test_limits_hold_for_huge_titles(renderer: Renderer, view: DigestView) -> None:
    for payload in renderer.discord(view):
        assert all(utf16_len(e.get("title", "")) <= 256 for e in payload["embeds"])
    assert max(len(line.encode()) for line in renderer.render(view, "text").split("\n")) < 40000


def test_json_drops_control_characters_and_bad_links(renderer: Renderer, view: DigestView) -> None:
    data = renderer.render(view, "json")
    data.encode("utf-8")  # no lone surrogate left
    assert "\\u001b" not in data and "\u202e" not in data and "javascript:alert(2)" not in data


def test_publisher_names_are_escaped_in_the_data_notes(
    renderer: Renderer, make_view: Callable[..., DigestView], make_event: Callable[..., EventView]
) -> None:
    """Source names come from a source file: the notes escape them in every format."""
    name = "Evil <Blog> & Co"
    evil = make_view(hostile_events(make_event), stats={"entries_by_publisher": {name: 2}, "entries": 2})
    last = renderer.telegram(evil)[-1]
    assert "Evil &lt;Blog&gt; &amp; Co" in last and name not in last
    email = renderer.email_parts(evil)
    assert name not in email.html and "Evil &lt;Blog&gt; &amp; Co" in email.html
    assert "Evil \\<Blog\\> & Co" in renderer.render(evil, "md")
    assert name in renderer.render(evil, "text")
    notes = renderer.discord(evil)[-1]["embeds"][-1]["description"]
    assert "Evil \\<Blog\\> & Co" in notes or "Evil <Blog> & Co" in notes


def test_zero_width_and_bidi_marks_never_reach_a_reader(renderer: Renderer, view: DigestView) -> None:
    """Only what we put in ourselves: Discord's mention breakers, the e-mail preheader padding."""
    mail = renderer.email_parts(view)
    outputs = {fmt: renderer.render(view, fmt) for fmt in ("html", "md", "text", "json")}
    padding = "\u034f\u200c&nbsp;"  # &#847;&zwnj;&nbsp; after the preheader (render_email.py)
    outputs |= {"email.html": mail.html.replace(padding, ""), "email.text": mail.text,
                "subject": mail.subject,
                "telegram": "".join(renderer.telegram(view))}
    for fmt, output in outputs.items():
        assert not any(mark in output for mark in INVISIBLE), fmt
        assert "MLIR" in output or fmt == "subject", fmt
    discord = "".join(t for p in renderer.discord(view) for t in discord_texts(p))
    assert not any(mark in discord for mark in INVISIBLE[1:]) and "MLIR" in discord


def test_hostile_briefs_reach_every_format_neutralised(renderer: Renderer, view: DigestView) -> None:
    """Every brief line is shown (one line, bounded) in every format, and none of its attacks works."""
    mail = renderer.email_parts(view)
    outputs = {fmt: renderer.render(view, fmt) for fmt in ("html", "md", "text", "json")}
    outputs |= {"email.html": mail.html, "email.text": mail.text,
                "telegram": "".join(renderer.telegram(view)),
                "discord": "".join(t for p in renderer.discord(view) for t in discord_texts(p))}
    for fmt, output in outputs.items():
        for n in (0, 1, 2, 3, 4, 5, 9):
            assert f"{BRIEF_MARK}{n}" in output, (fmt, n)
        no_bad_urls(output)
        assert "龍" * 201 not in output and "ж" * 201 not in output, f"{fmt}: a brief line is not bounded"
    for fmt in ("html", "email.html"):
        assert SCRIPT not in outputs[fmt]
    assert 'href="https://ok.example/?a=1&amp;b=&lt;2&gt;"' in outputs["html"]
    assert not re.search(r"(?<!\\)<script", outputs["md"])
