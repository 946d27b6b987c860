"""The web archive in a real headless browser (Debian's chromium via playwright) over real uvicorn.

Screenshots go to ``test-artifacts/browser/``: zh and en, light and dark, phone and desktop.
axe-core checks every page in both locales and both colour schemes (0 serious or critical).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.archive import DATES, SITE_URL, Archive, served_archive
from tests.browser import ARTIFACTS, axe_violations, blocking, launch, require_axe, require_browser

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page, ViewportSize

pytestmark = pytest.mark.browser
DAY = DATES[0]
PHONE: ViewportSize = {"width": 390, "height": 844}
DESKTOP: ViewportSize = {"width": 1280, "height": 900}
TAGS_JS = """Object.fromEntries([...document.querySelectorAll('meta[property], meta[name]')]
  .map(m => [m.getAttribute('property') || m.name, m.content]))"""


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, Archive]]:
    """The archive, served by ``digest serve --web``'s own code path on an ephemeral loopback port."""
    require_browser()
    async with served_archive(tmp_path) as site:
        yield site


async def _page(browser: Browser, dialogs: list[str], **options: Any) -> Page:
    context = await browser.new_context(**options)
    page = await context.new_page()

    async def dismiss(dialog: Any) -> None:
        dialogs.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", dismiss)
    return page


async def _reads(page: Page) -> int:
    return int((await page.text_content("#reads") or "").strip())


async def test_reader_browses_and_feed_scripts_never_run(served: tuple[str, Archive]) -> None:
    from playwright.async_api import async_playwright

    base, archive = served
    dialogs: list[str] = []
    async with async_playwright() as p:
        browser = await launch(p)
        page = await _page(browser, dialogs, locale="zh-CN", viewport=DESKTOP)
        await page.goto(base + "/")
        assert await page.text_content("h1") == "编译器技术日报"
        await page.click(f'a[href="/d/{DAY}"]')
        await page.wait_for_url(f"**/d/{DAY}")
        first = await _reads(page)
        hostile = page.locator(f"#event-{archive.hostile_event} p").first
        assert "<script>window.__pwned=3</script>" in await hostile.inner_text()
        await page.reload()
        assert await _reads(page) == first  # a repeat within ten minutes is not another read
        assert await page.evaluate("typeof window.__pwned") == "undefined"
        await page.click(f'a[href="/e/{archive.hostile_event}"]')
        await page.wait_for_url(f"**/e/{archive.hostile_event}")
        sources = await page.locator("ol.sources").inner_text()
        assert '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">' in sources
        assert await page.locator("table.breakdown-table tbody tr").count() >= 1
        assert await page.evaluate("typeof window.__pwned") == "undefined"
        assert await page.locator("main img, main script").count() == 0
        await page.click("nav.chrome a")
        await page.wait_for_url(base + "/")
        await page.go_back()
        await _screenshots(browser, base, archive, dialogs)
        await browser.close()
    assert dialogs == []


async def _screenshots(browser: Browser, base: str, archive: Archive, dialogs: list[str]) -> None:
    """The pages in zh and en (by Accept-Language), light and dark, phone and desktop."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    paths = {"digest": f"/d/{DAY}", "index": "/", "event": f"/e/{archive.event_ids[DAY][0]}"}
    looks = [(scheme, device) for scheme in ("light", "dark") for device in ("phone", "desktop")]
    for lang, accept in (("zh", "zh-CN"), ("en", "en-US")):
        page = await _page(browser, dialogs, locale=accept)
        for name, path in paths.items():
            await page.goto(base + path)
            assert await page.evaluate("document.documentElement.lang") == ("zh-CN" if lang == "zh" else "en")
            # Every look for the digest page; two for the others (one of each scheme and width).
            for scheme, device in looks if name == "digest" else looks[1:3]:
                await page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
                await page.set_viewport_size(PHONE if device == "phone" else DESKTOP)
                shot = ARTIFACTS / f"{name}-{lang}-{scheme}-{device}.png"
                await page.screenshot(path=str(shot), full_page=True)
                assert shot.stat().st_size > 10_000
        assert await page.evaluate("typeof window.__pwned") == "undefined"
        await page.context.close()


async def check_axe(page: Page, url: str, label: str) -> list[str]:
    """Load ``url`` in both colour schemes; print axe's findings; the blocking ones, described."""
    failures = []
    for scheme in ("light", "dark"):
        await page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
        await page.goto(url)
        dark = await page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
        assert dark == (scheme == "dark")
        found = await axe_violations(page)
        print(f"axe {label} {scheme}: {len(blocking(found))} serious/critical; all: {found}")
        failures += [f"{label} {scheme}: {v}" for v in blocking(found)]
    return failures


async def test_axe_finds_nothing_serious_on_archive_pages(served: tuple[str, Archive]) -> None:
    from playwright.async_api import async_playwright

    require_axe()
    base, archive = served
    paths = {"index": "/", "digest": f"/d/{DAY}", "event": f"/e/{archive.hostile_event}",
             "search": "/search?q=triton", "stats": "/stats"}
    failures: list[str] = []
    async with async_playwright() as p:
        browser = await launch(p)
        for lang, accept in (("zh", "zh-CN"), ("en", "en-US")):
            page = await _page(browser, [], locale=accept, viewport=DESKTOP, bypass_csp=True)
            for name, path in paths.items():
                failures += await check_axe(page, base + path, f"{name}-{lang}")
            await page.context.close()
        await browser.close()
    assert failures == []


async def test_link_preview_tags_in_the_browser(served: tuple[str, Archive]) -> None:
    from playwright.async_api import async_playwright

    base, archive = served
    async with async_playwright() as p:
        browser = await launch(p)
        page = await _page(browser, [], locale="en-US")
        for path in (f"/d/{DAY}", f"/e/{archive.event_ids[DAY][0]}"):
            await page.goto(base + path)
            tags = await page.evaluate(TAGS_JS)
            assert tags["og:url"] == SITE_URL + path and tags["og:site_name"] == "Compiler Digest"
            assert tags["og:title"] == await page.text_content("h1") == await page.title()
            assert tags["og:description"] and tags["description"] == tags["og:description"]
            assert tags["twitter:card"] == "summary"
            assert tags["og:type"] == "article"
            feed = page.locator('link[rel=alternate][type="application/atom+xml"]')
            assert await feed.count() >= 1
        await browser.close()
