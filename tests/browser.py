"""Debian's chromium driven by playwright (python): never a downloaded browser.

Locally a missing chromium or playwright skips the browser tests with the reason;
in CI (``CI=true``) it fails them, never skips (the same rule as PostgreSQL).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser, Playwright

CHROMIUM = os.environ.get("DIGEST_TEST_CHROMIUM", "/usr/bin/chromium")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Headless as root, and nothing leaves loopback: anything else goes to a closed port.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--proxy-server=127.0.0.1:9"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "browser"


def require_browser() -> str:
    """The chromium path, or skip (locally) / fail (in CI) when it or playwright is missing."""
    missing = []
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright python package (pip install -e '.[test]')")
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)) and not shutil.which(CHROMIUM):
        missing.append(f"chromium at {CHROMIUM} (apt-get install chromium fonts-noto-cjk)")
    if missing:
        reason = "browser tests need " + " and ".join(missing) + "; never run `playwright install`"
        if IN_CI:
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    return CHROMIUM


async def launch(playwright: Playwright) -> Browser:
    """Start headless chromium with the flags these machines need."""
    return await playwright.chromium.launch(executable_path=require_browser(), args=ARGS)
