"""Debian's chromium driven by playwright (python): never a downloaded browser; axe-core from npm.

Locally a missing chromium or playwright skips the browser tests with the reason;
in CI (``CI=true``) it fails them, never skips (the same rule as PostgreSQL). axe-core is
installed on first use with npm into ``test-artifacts/axe`` (ignored by git), and the Nu Html
Checker's ``vnu.jar`` (npm ``vnu-jar``, run by the system java) into ``test-artifacts/vnu``;
without npm, java or network the same rule holds: skip locally, fail in CI.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page, Playwright

CHROMIUM = os.environ.get("DIGEST_TEST_CHROMIUM", "/usr/bin/chromium")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Headless as root, and nothing leaves loopback: anything else goes to a closed port.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--proxy-server=127.0.0.1:9"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "browser"
AXE_DIR = ARTIFACTS.parent / "axe"
AXE_JS = AXE_DIR / "node_modules" / "axe-core" / "axe.min.js"
AXE_VERSION = "4"  # npm's newest axe-core 4.x
VNU_DIR = ARTIFACTS.parent / "vnu"
VNU_JAR = VNU_DIR / "node_modules" / "vnu-jar" / "build" / "dist" / "vnu.jar"
VNU_VERSION = "26"  # npm's newest vnu-jar 26.x (the checker's release year)
BLOCKING = ("serious", "critical")  # the axe impacts a page may not have
# axe's violations in a JSON-friendly shape: rule, impact, how many nodes, the first node's target.
_AXE_RUN = """axe.run().then(r => r.violations.map(v => ({
  id: v.id, impact: v.impact, nodes: v.nodes.length, first: v.nodes[0].target.join(" ")})))"""


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


def _missing(reason: str) -> NoReturn:
    if IN_CI:
        pytest.fail(f"CI=true: {reason}")
    pytest.skip(reason)


def _npm_install(spec: str, prefix: Path, wanted: Path) -> Path:
    """``wanted``, installed with ``npm install spec`` into ``prefix`` on first use (no package scripts)."""
    if wanted.is_file():
        return wanted
    npm = shutil.which("npm")
    if npm is None:
        _missing(f"{spec} is installed with npm (apt-get install npm), which is missing")
    prefix.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--silent",
                        "--ignore-scripts", spec], check=True, timeout=300, capture_output=True)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        _missing(f"npm install {spec} failed (no network?): {exc}")
    if not wanted.is_file():
        _missing(f"npm install {spec} left no {wanted}")
    return wanted


def require_axe() -> Path:
    """``axe.min.js``, installed with npm on first use; skip (locally) / fail (in CI) without it."""
    return _npm_install(f"axe-core@{AXE_VERSION}", AXE_DIR, AXE_JS)


def require_java() -> str:
    """The ``java`` the Nu checker runs on; skip (locally) / fail (in CI) without one."""
    java = shutil.which("java")
    if java is None:
        _missing("the Nu Html Checker needs java 11+ (apt-get install default-jre-headless)")
    return str(java)


def require_vnu() -> Path:
    """The Nu Html Checker's ``vnu.jar``, installed with npm on first use (``--ignore-scripts``: its
    install script would download a Java runtime when there is no system java)."""
    return _npm_install(f"vnu-jar@{VNU_VERSION}", VNU_DIR, VNU_JAR)


async def axe_violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's violations on the page as loaded (the context needs ``bypass_csp=True``)."""
    if not await page.evaluate("typeof axe !== 'undefined'"):
        await page.add_script_tag(path=str(require_axe()))
    found: list[dict[str, Any]] = await page.evaluate(_AXE_RUN)
    return found


def blocking(violations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The serious and critical ones."""
    return [v for v in violations if v["impact"] in BLOCKING]
