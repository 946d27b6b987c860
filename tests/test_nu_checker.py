"""The W3C Nu Html Checker (vnu.jar) over the archive's pages in both locales: 0 errors.

The pages come from a served archive (real uvicorn on loopback) and are saved under
``test-artifacts/nu/`` with the stylesheet, beside the static export (``digest site``) of the
same archive in each locale; one JVM checks them all (``--also-check-css``),
together with a canary page holding one known error, which proves the checker ran and that its
messages are read per file. The per-page counts are printed for the closing note. Locally a
missing java or jar skips with the reason; under ``CI=true`` it fails (see :mod:`tests.browser`).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import httpx

from digest.store.db import open_database
from digest.web.site import export_site
from tests.archive import DATES, NOW, SITE_URL, TZ, renderer, served_archive
from tests.browser import ARTIFACTS, require_java, require_vnu

NU_DIR = ARTIFACTS.parent / "nu"
LOCALES = {"zh": "zh-CN", "en": "en-US"}  # by Accept-Language, as a browser asks
# Stored times as a real clock leaves them, with microseconds (the archive's are whole minutes):
# an attribute written from one must keep at most three fraction digits.
TIMES = {"entry": ("published", "first_seen"), "event": ("first_seen",), "digest": ("built_at",)}
CANARY = ('<!doctype html><html lang="en"><head><title>canary</title></head><body>'
          '<p><time datetime="2026-12-01T14:55:36.308345+00:00">then</time></p></body></html>')
CANARY_ERROR = "A fraction of a second must be one, two, or three digits."


def _pages(event_id: int) -> dict[str, tuple[str, int]]:
    """Every kind of page a reader meets (file name: path and status); the first six are the issue's."""
    return {"index": ("/", 200), "digest": (f"/d/{DATES[0]}", 200), "event": (f"/e/{event_id}", 200),
            "subscribe": ("/subscribe", 200), "search": ("/search?q=triton", 200), "stats": ("/stats", 200),
            "layer": ("/?layer=distributed", 200), "not-found": ("/d/2000-01-01", 404),
            "bad-link": ("/confirm?token=nonsense", 400)}


def _add_microseconds(database: Path) -> None:
    """Give every stored time in :data:`TIMES` six fraction digits (before any page is cached)."""
    db = sqlite3.connect(database)
    with db:
        for table, columns in TIMES.items():
            for column in columns:
                changed = db.execute(f"UPDATE {table} SET {column} = substr({column}, 1, 19) || '.308345' "
                                     f"WHERE {column} IS NOT NULL").rowcount
                assert changed > 0, (table, column)
    db.close()


def _name(path: Path) -> str:
    return path.relative_to(NU_DIR).as_posix()


def _by_file(report: dict[str, Any], files: list[Path]) -> dict[str, dict[str, list[str]]]:
    """vnu's JSON messages per file under :data:`NU_DIR`: ``errors`` (non-document ones too), ``warnings``."""
    found: dict[str, dict[str, list[str]]] = {_name(f): {"errors": [], "warnings": []} for f in files}
    for m in report["messages"]:
        kind = "warnings" if (m.get("type"), m.get("subType")) == ("info", "warning") else (
            "errors" if m.get("type") in ("error", "non-document-error") else None)
        if kind:
            url = str(m.get("url", ""))
            name = _name(Path(url.removeprefix("file:"))) if url.startswith(f"file:{NU_DIR}/") else url
            extract = " ".join(str(m.get("extract", "")).split())[:80]
            where = f"line {m.get('lastLine', '?')}: {m.get('message', '')} [{extract}]"
            found.setdefault(name, {"errors": [], "warnings": []})[kind].append(where)
    return found


async def _save_pages(base: str, event_id: int) -> list[Path]:
    """Fetch every page in both locales (and the stylesheet) into :data:`NU_DIR`."""
    files: list[Path] = []
    async with httpx.AsyncClient(base_url=base) as client:
        for lang, accept in LOCALES.items():
            headers = {"accept-language": accept}
            for name, (path, status) in _pages(event_id).items():
                response = await client.get(path, headers=headers)
                assert response.status_code == status, (path, lang, response.status_code)
                assert response.headers["content-language"].startswith(lang), path
                files.append(NU_DIR / f"{name}-{lang}.html")
                files[-1].write_bytes(response.content)
            # The subscribe form as a refused submission shows it: errors beside the fields.
            response = await client.post("/subscribe", data={"address": "not an address", "min_score": "150"},
                                         headers=headers | {"origin": base})
            assert response.status_code == 400, response.status_code
            files.append(NU_DIR / f"subscribe-errors-{lang}.html")
            files[-1].write_bytes(response.content)
        css = await client.get("/style.css")
        assert css.status_code == 200
        files.append(NU_DIR / "style.css")
        files[-1].write_bytes(css.content)
    return files


async def _export_sites(database: Path, event_id: int) -> list[Path]:
    """``digest site`` of the same archive in each locale; its pages of every kind."""
    files: list[Path] = []
    async with open_database(f"sqlite+aiosqlite:///{database}") as sessions:
        for lang in LOCALES:
            out = NU_DIR / f"site-{lang}"
            await export_site(sessions, renderer(), out, locale=lang, site_url=SITE_URL, timezone=TZ, now=NOW)
            files += [out / name for name in ("index.html", f"d/{DATES[0]}.html", f"e/{event_id}.html",
                                              "layer-distributed.html", "404.html", "style.css")]
    return files


async def test_nu_checker_finds_no_errors_on_archive_pages(tmp_path: Path) -> None:
    java, jar = require_java(), require_vnu()
    shutil.rmtree(NU_DIR, ignore_errors=True)
    NU_DIR.mkdir(parents=True)
    async with served_archive(tmp_path) as (base, archive):
        _add_microseconds(tmp_path / "web.db")
        files = await _save_pages(base, archive.hostile_event)
    files += await _export_sites(tmp_path / "web.db", archive.hostile_event)
    canary = NU_DIR / "canary.html"
    canary.write_text(CANARY, encoding="utf-8")
    command = [java, "-jar", str(jar), "--format", "json", "--also-check-css", "--exit-zero-always"]
    files.append(canary)
    done = subprocess.run([*command, *map(str, files)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = _by_file(json.loads(done.stderr), files)
    seen = found.pop(_name(canary))["errors"]
    assert len(seen) == 1 and CANARY_ERROR in seen[0], f"the canary's one error, not {seen}"
    for name, got in found.items():
        print(f"nu {name}: {len(got['errors'])} errors, {len(got['warnings'])} warnings")
        for line in got["errors"] + got["warnings"]:
            print(f"    {line}")
    assert {name: got["errors"] for name, got in found.items() if got["errors"]} == {}
