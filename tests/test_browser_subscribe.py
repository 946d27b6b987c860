"""Subscribe → confirm → unsubscribe in a real headless browser (Debian's chromium via playwright).

Real uvicorn on 127.0.0.1 (``digest serve``'s own code path), mail through a real aiosmtpd
server (the app's email channel configured with DIGEST_SMTP_HOST/PORT), the confirmation link
read from that mail, and the unsubscribe link from a newsletter sent by a real publish.
Screenshots go to ``test-artifacts/browser/subscribe-*.png``.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select

from digest.cli.publish import runner
from digest.cli.web import run_web
from digest.config import Settings, load_settings
from digest.deliver.publish import PublishOptions
from digest.store.db import open_database
from digest.store.models import Subscriber
from tests.archive import DATES, TZ, Archive, build_archive
from tests.browser import ARTIFACTS, axe_violations, blocking, launch, require_axe, require_browser
from tests.smtpserver import SMTPTestServer, smtp_server

if TYPE_CHECKING:
    import uvicorn
    from playwright.async_api import Browser, Page, ViewportSize

pytestmark = pytest.mark.browser
PHONE: ViewportSize = {"width": 390, "height": 844}
DESKTOP: ViewportSize = {"width": 1280, "height": 900}
ADDRESS = "reader@example.org"
DAY = DATES[0]


@dataclass(frozen=True)
class Served:
    """The running site: its URL, its settings, its SMTP server and what the archive holds."""

    base: str
    settings: Settings
    smtp: SMTPTestServer
    archive: Archive


def _free_port() -> int:
    """A loopback port nobody listens on (the site URL in the mails must name the served port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    """The archive and the subscription pages on uvicorn; mail to a real aiosmtpd server."""
    require_browser()
    url = f"sqlite+aiosqlite:///{tmp_path / 'web.db'}"
    async with open_database(url) as sessions:
        archive = await build_archive(sessions)
    port = _free_port()
    with smtp_server() as smtp:
        settings = load_settings(database_url=url, var_dir=tmp_path / "var", site_url=f"http://127.0.0.1:{port}",
                                 timezone=TZ, locales=["zh", "en"], smtp_host=smtp.host, smtp_port=smtp.port,
                                 mail_from="编译器技术日报 <digest@example.org>", send_backoff=0.01)
        servers: list[uvicorn.Server] = []
        task = asyncio.create_task(run_web(settings, "127.0.0.1", port, on_server=servers.append))
        while not (servers and servers[0].started):
            assert not task.done(), task.exception()
            await asyncio.sleep(0.02)
        try:
            yield Served(f"http://127.0.0.1:{port}", settings, smtp, archive)
        finally:
            servers[0].should_exit = True
            await task


async def _mail(smtp: SMTPTestServer, to: str, count: int) -> EmailMessage:
    """The ``count``-th message the SMTP server accepted for ``to`` (waits up to 10 s)."""
    for _ in range(500):
        found = smtp.by_recipient().get(to, [])
        if len(found) >= count:
            return found[count - 1].message
        await asyncio.sleep(0.02)
    raise AssertionError(f"no message {count} for {to}")


def _text(mail: EmailMessage) -> str:
    part = mail.get_body(("plain",))
    assert part is not None
    return str(part.get_content())


async def _status(settings: Settings) -> str | None:
    async with open_database(settings.database_url) as sessions, sessions() as session:
        return await session.scalar(select(Subscriber.status).where(Subscriber.address == ADDRESS))


async def _shot(page: Page, name: str, *, schemes: tuple[str, ...] = ("light",)) -> None:
    """Full-page screenshots at the page's current width, one per colour scheme."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    width = "phone" if (page.viewport_size or PHONE)["width"] < 600 else "desktop"
    for scheme in schemes:
        await page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
        shot = ARTIFACTS / f"subscribe-{name}-{scheme}-{width}.png"
        await page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 5_000
    await page.emulate_media(color_scheme="light")


async def _submit(page: Page) -> None:
    async with page.expect_navigation():
        await page.click("form button[type=submit]")


async def _page(browser: Browser, dialogs: list[str], **options: Any) -> Page:
    page = await (await browser.new_context(**options)).new_page()

    async def dismiss(dialog: Any) -> None:
        dialogs.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", dismiss)
    return page


async def test_subscribe_confirm_and_unsubscribe_in_chromium(served: Served) -> None:
    from playwright.async_api import async_playwright

    dialogs: list[str] = []
    async with async_playwright() as p:
        browser = await launch(p)
        page = await _page(browser, dialogs, locale="zh-CN", viewport=PHONE)
        await _subscribe(page, served)
        mail = await _mail(served.smtp, ADDRESS, 1)
        assert mail["Subject"] == "Confirm your Compiler Digest subscription"  # the language chosen
        confirm = re.search(r"http://127\.0\.0\.1:\d+/confirm\?\S+", _text(mail))
        assert confirm and confirm[0].startswith(served.base)
        await page.goto(confirm[0])  # the link as mailed; lang=en rides it (the mail's language)
        assert await page.text_content("h1") == "Confirm your subscription"
        assert await _status(served.settings) == "pending"  # opening the link changed nothing
        await _shot(page, "confirm-en", schemes=("light", "dark"))
        await _submit(page)
        assert await page.text_content("h1") == "You are subscribed"
        assert await _status(served.settings) == "active"
        await _shot(page, "confirmed-en")
        await _preferences(page)
        await _unsubscribe(page, served)
        await _other_looks(browser, served, dialogs)
        assert await page.locator("script").count() == 0
        await browser.close()
    assert dialogs == []


async def _subscribe(page: Page, served: Served) -> None:
    """From the archive's footer link to the form; a refusal first, then a real submission."""
    await page.goto(served.base + "/")
    await page.click('a[href="/subscribe"]')
    await page.wait_for_url("**/subscribe")
    assert await page.locator('input[name="layers"]:checked').count() == 9
    await _shot(page, "form-zh", schemes=("light", "dark"))
    await page.fill("#address", ADDRESS)
    for box in await page.locator('input[name="layers"]').all():
        await box.uncheck()
    await _submit(page)
    assert await page.text_content("#layers-error") == "请至少选择一个层级。"
    assert await page.input_value("#address") == ADDRESS
    await _shot(page, "refused-zh")
    wanted = sorted(served.archive.layers[DAY])[:2]
    for layer in wanted:
        await page.check(f'input[name="layers"][value="{layer}"]')
    await page.fill("#min_score", "5")
    await page.check('input[name="locale"][value="en"]')
    await _submit(page)
    assert await page.text_content("h1") == "请查收邮件"
    await _shot(page, "sent-zh")


async def _preferences(page: Page) -> None:
    """The confirmed page links to the preferences; they show what was chosen."""
    await page.click("#preferences")
    await page.wait_for_url("**/preferences?**")
    assert await page.input_value("#min_score") == "5"
    assert await page.locator('input[name="layers"]:checked').count() == 2
    await _shot(page, "preferences-en")


async def _unsubscribe(page: Page, served: Served) -> None:
    """A real publish sends the newsletter; its List-Unsubscribe link, opened and clicked, unsubscribes."""
    async with runner(served.settings, PublishOptions()) as publisher:
        report = await publisher.publish(DAY, "zh")
    assert report.channels["email"].sent == 1
    newsletter = await _mail(served.smtp, ADDRESS, 2)
    assert newsletter["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    link = str(newsletter["List-Unsubscribe"]).strip("<>")
    assert link.startswith(served.base + "/unsubscribe?token=") and link in _text(newsletter)
    await page.goto(link)
    assert await page.text_content("h1") == "退订"  # the browser asks for Chinese; the link names no language
    assert await _status(served.settings) == "active"  # GET never unsubscribes
    await _shot(page, "unsubscribe-zh", schemes=("light", "dark"))
    await _submit(page)
    assert await page.text_content("h1") == "已退订"
    assert await _status(served.settings) == "unsubscribed"
    await _shot(page, "unsubscribed-zh")


async def _other_looks(browser: Browser, served: Served, dialogs: list[str]) -> None:
    """The form in English on a phone and in Chinese on a desktop, for the record."""
    page = await _page(browser, dialogs, locale="en-US", viewport=PHONE)
    await page.goto(served.base + "/subscribe")
    assert await page.text_content("h1") == "Subscribe by email"
    await _shot(page, "form-en", schemes=("light", "dark"))
    await page.set_viewport_size(DESKTOP)
    await page.goto(served.base + "/subscribe?lang=zh")
    await _shot(page, "form-zh")
    await page.context.close()


async def test_axe_finds_nothing_serious_on_the_subscribe_form(served: Served) -> None:
    """axe-core on /subscribe in zh and en, light and dark, blank and refused (field errors shown)."""
    from playwright.async_api import async_playwright

    require_axe()
    failures: list[str] = []
    async with async_playwright() as p:
        browser = await launch(p)
        for lang, accept in (("zh", "zh-CN"), ("en", "en-US")):
            page = await _page(browser, [], locale=accept, viewport=DESKTOP, bypass_csp=True)
            for scheme in ("light", "dark"):
                await page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
                await page.goto(served.base + "/subscribe")
                failures += await _axe(page, f"subscribe-{lang} {scheme}")
                await page.fill("#address", ADDRESS)
                for box in await page.locator('input[name="layers"]').all():
                    await box.uncheck()
                await _submit(page)  # refused: no layer chosen
                assert await page.locator("#layers-error").count() == 1
                failures += await _axe(page, f"subscribe-refused-{lang} {scheme}")
            await page.context.close()
        await browser.close()
    assert failures == []


async def _axe(page: Page, label: str) -> list[str]:
    dark = await page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    assert dark == label.endswith("dark"), label
    found = await axe_violations(page)
    print(f"axe {label}: {len(blocking(found))} serious/critical; all: {found}")
    return [f"{label}: {v}" for v in blocking(found)]
