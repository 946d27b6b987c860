"""Search and the weekly chart in a real headless browser (Debian's chromium via playwright) over uvicorn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.archive import Archive, served_archive
from tests.browser import ARTIFACTS, launch, require_browser

if TYPE_CHECKING:
    pass

pytestmark = pytest.mark.browser


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, Archive]]:
    """The archive, served by ``digest serve --web``'s own code path on an ephemeral loopback port."""
    require_browser()
    async with served_archive(tmp_path) as site:
        yield site


async def test_search_form_results_and_the_weekly_chart(served: tuple[str, Archive]) -> None:
    from playwright.async_api import async_playwright

    base, archive = served
    problems: list[str] = []
    async with async_playwright() as p:
        browser = await launch(p)
        page = await (await browser.new_context(locale="en-US")).new_page()
        page.on("dialog", lambda dialog: problems.append(dialog.message))
        page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
        await page.goto(base + "/search?lang=en")
        await page.fill("#q", "triton")
        await page.click("form[role=search] button")
        await page.wait_for_selector("#results")
        links = await page.eval_on_selector_all("#results a", "els => els.map(e => e.getAttribute('href'))")
        assert links[0] == f"/e/{archive.hostile_event}?lang=en"
        assert "<script>" in (await page.text_content("#results a") or "")  # shown as text, never run
        await page.goto(base + "/search?q=%E5%86%85%E6%A0%B8&lang=zh")  # 内核: two characters
        assert await page.locator("#results li").count() >= 2
        await page.goto(base + "/?layer=distributed&lang=en")
        await page.click("#layer-stats")
        await page.wait_for_url("**/stats?layer=distributed*")
        chart = page.locator("svg#chart-archive")
        assert await chart.get_attribute("role") == "img"
        assert "Whole archive" in (await page.text_content("#chart-archive-title") or "")
        assert "stacked by layer" in (await page.text_content("#chart-archive-desc") or "")
        labelled = await chart.get_attribute("aria-labelledby")
        assert labelled == "chart-archive-title chart-archive-desc"
        rows = await page.eval_on_selector_all(
            "#chart-archive-table tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
        assert rows[:2] == [["2026-09-21", "1"], ["2026-09-28", "0"]]  # then the weeks to today
        assert all(count == "0" for _, count in rows[2:])
        assert await page.locator("#chart-archive rect").count() >= 1
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "stats-en.png"), full_page=True)
        assert await page.evaluate("() => window.__pwned === undefined")
        await browser.close()
    assert problems == []
