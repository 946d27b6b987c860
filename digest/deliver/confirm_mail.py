"""The subscribe form's mails: the confirmation link, or a notice for an address already subscribed.

The headers are written by the newsletter's own writer (``headers.header_block``:
no header is folded by the email package, the address must pass the mailer's
strict check, free text is encoded by us), so nothing typed into the form can
add a header; ``email.message.EmailMessage`` builds only the MIME body:
multipart/alternative text + HTML, both quoted-printable (no line over 76
octets). A UTF-8 subject in the subscriber's language, From
``DIGEST_MAIL_FROM``, Date, and a Message-ID derived from what the mail
carries (a re-send of the same mail keeps it; the next mail gets another).
Every value put in comes from the service (a validated address, our own
signed links), and the HTML escapes it.

They go out through the same email channel as the newsletters
(``bootstrap.email_channel``): SMTP when ``DIGEST_SMTP_HOST`` is set, else the
file outbox. :func:`one_shot` opens a channel per mail and closes it, so the
web process keeps no idle SMTP connection between form posts.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
from collections.abc import Awaitable, Callable

from digest.deliver.channels import Message, PushChannel, SendResult
from digest.deliver.headers import header_block, mime_alternative
from digest.deliver.mailer import MailIdentity

CONFIRM, ALREADY = "confirm", "already"
SendMail = Callable[[Message], Awaitable[SendResult]]

TEXTS: dict[str, dict[str, dict[str, str]]] = {
    "zh": {
        CONFIRM: {
            "subject": "请确认订阅编译器技术日报",
            "lead": "有人（希望是你）用 {address} 订阅了编译器技术日报。"
                    "打开下面的链接，在页面上点“确认订阅”即可完成：",
            "action": "确认订阅",
            "after": "链接 3 天内有效。如果不是你本人操作，忽略这封邮件即可：不确认就不会收到任何日报。",
        },
        ALREADY: {
            "subject": "你已订阅编译器技术日报",
            "lead": "有人（希望是你）又用 {address} 提交了订阅表单。这个地址已经订阅，不需要再做什么。"
                    "想改关注的层级或最低评分，可以打开订阅偏好：",
            "action": "修改订阅偏好",
            "after": "不想再收到日报？退订：{unsubscribe}",
        },
        "": {"hello": "你好！", "copy": "按钮打不开时，复制这个链接到浏览器：", "sign": "—— 编译器技术日报"},
    },
    "en": {
        CONFIRM: {
            "subject": "Confirm your Compiler Digest subscription",
            "lead": "Someone (hopefully you) asked to send the Compiler Digest to {address}. "
                    "Open the link below and press “Confirm” on the page:",
            "action": "Confirm subscription",
            "after": "The link works for 3 days. If it wasn't you, ignore this email: "
                     "without a confirmation you will receive nothing.",
        },
        ALREADY: {
            "subject": "You are already subscribed to the Compiler Digest",
            "lead": "Someone (hopefully you) sent the subscribe form again for {address}. This address is "
                    "already subscribed; there is nothing to do. To change its layers or minimum score:",
            "action": "Change preferences",
            "after": "Had enough? Unsubscribe: {unsubscribe}",
        },
        "": {"hello": "Hello,", "copy": "If the button does not work, copy this link into your browser:",
             "sign": "— Compiler Digest"},
    },
}

_HTML = """<!doctype html>
<html lang="{lang}"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>{subject}</title></head>
<body style="margin:0;padding:24px 16px;background:#fcfcfa;color:#2b2f36;font-size:16px;line-height:1.7;
font-family:-apple-system,BlinkMacSystemFont,'Segoe UI','Helvetica Neue',Arial,'PingFang SC',
'Noto Sans CJK SC','Microsoft YaHei',sans-serif">
<div style="max-width:34rem;margin:0 auto">
<p>{hello}</p>
<p>{lead}</p>
<p style="margin:1.4rem 0"><a href="{link}" style="display:inline-block;padding:10px 22px;background:#1a5aa6;
color:#ffffff;text-decoration:none;border-radius:6px;font-weight:600">{action}</a></p>
<p style="color:#667080;font-size:14px">{copy}<br><span style="word-break:break-all">{link}</span></p>
<p>{after}</p>
<p style="color:#667080;font-size:14px;margin-top:2rem">{sign}<br>
<a href="{site}" style="color:#1a5aa6">{site}</a></p>
</div></body></html>
"""


def _words(kind: str, locale: str, address: str, unsubscribe: str) -> dict[str, str]:
    """The mail's sentences in ``locale`` (English for anything unknown), values filled in."""
    texts = TEXTS.get(locale, TEXTS["en"])
    words = texts[""] | texts[kind]
    return {k: v.format(address=address, unsubscribe=unsubscribe) for k, v in words.items()}


def _text(words: dict[str, str], link: str, site: str) -> str:
    return (f"{words['hello']}\n\n{words['lead']}\n\n{link}\n\n{words['after']}\n\n"
            f"{words['sign']}\n{site}\n")


def _html(words: dict[str, str], link: str, site: str, locale: str, unsubscribe: str) -> str:
    safe = {k: html.escape(v) for k, v in words.items()}
    if unsubscribe:
        url = html.escape(unsubscribe)
        safe["after"] = safe["after"].replace(url, f'<a href="{url}" style="color:#1a5aa6">{url}</a>')
    return _HTML.format(lang="zh-CN" if locale == "zh" else "en", link=html.escape(link),
                        site=html.escape(site), **safe)


def mail_id(kind: str, subscriber_id: int, link: str, now: dt.datetime, domain: str) -> str:
    """The Message-ID: the same for the same mail (kind, subscriber, link, time), else another."""
    digest = hashlib.sha256(f"{kind}\n{subscriber_id}\n{link}\n{now.isoformat()}".encode()).hexdigest()
    return f"<{kind}-{subscriber_id}-{digest[:20]}@{domain}>"


def compose(kind: str, identity: MailIdentity, *, to: str, locale: str, link: str, site_url: str,
            now: dt.datetime, unsubscribe: str = "", mid: str) -> bytes:
    """The whole message (RFC 5322 bytes): ``link`` is the button (confirm, or preferences)."""
    words = _words(kind, locale, to, unsubscribe)
    head = header_block(identity.from_words(), to=to, subject=words["subject"], date=now, mid=mid,
                        extra=[("Auto-Submitted", "auto-generated")])
    return head + mime_alternative(_text(words, link, site_url),
                                   _html(words, link, site_url, locale, unsubscribe))


def confirm_message(identity: MailIdentity, subscriber_id: int, to: str, locale: str, *,
                    confirm_url: str, site_url: str, now: dt.datetime) -> Message:
    """The confirmation mail: one button to ``confirm_url``."""
    mid = mail_id(CONFIRM, subscriber_id, confirm_url, now, identity.domain)
    data = compose(CONFIRM, identity, to=to, locale=locale, link=confirm_url, site_url=site_url,
                   now=now, mid=mid)
    return Message(0, subscriber_id, to, (data,), mid)


def notice_message(identity: MailIdentity, subscriber_id: int, to: str, locale: str, *,
                   preferences_url: str, unsubscribe_url: str, site_url: str, now: dt.datetime) -> Message:
    """The notice for an address already active: its preferences and unsubscribe links."""
    mid = mail_id(ALREADY, subscriber_id, preferences_url, now, identity.domain)
    data = compose(ALREADY, identity, to=to, locale=locale, link=preferences_url, site_url=site_url,
                   now=now, unsubscribe=unsubscribe_url, mid=mid)
    return Message(0, subscriber_id, to, (data,), mid)


def one_shot(factory: Callable[[], PushChannel]) -> SendMail:
    """A sender that opens a channel for each mail and closes it afterwards."""

    async def send(message: Message) -> SendResult:
        channel = factory()
        try:
            return await channel.send(message)
        finally:
            await channel.aclose()

    return send
