"""``digest site``: the static export, its files and links, and no read count."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import feedparser
import pytest

from digest.cli.web import serve_cmd, site_cmd
from digest.config import load_settings
from digest.domain.errors import UsageError
from digest.domain.layers import LAYER_IDS
from digest.store.db import SessionFactory
from digest.store.queries import load_view
from digest.web.site import ExportError, export_site
from tests.archive import DATES, NOW, SITE_URL, TZ, build_archive, renderer

_LINK = re.compile(r'(?:href|src)="([^"]*)"')


def local_links(root: Path) -> dict[Path, list[str]]:
    """Every link in every exported HTML file."""
    return {page: _LINK.findall(page.read_text()) for page in root.rglob("*.html")}


def assert_links_resolve(root: Path) -> None:
    """Relative links point at files that exist; absolute ones are http(s)."""
    for page, links in local_links(root).items():
        for link in links:
            if link.startswith(("http://", "https://")):
                continue
            assert not link.startswith(("/", "javascript:", "data:")), f"{page}: {link}"
            target = (page.parent / link.split("#")[0]).resolve()
            assert target.is_file(), f"{page.relative_to(root)} links to missing {link}"


async def test_site_command_writes_a_browsable_archive(
    migrated_url: str, sessions: SessionFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = await build_archive(sessions)
    out = tmp_path / "site"
    settings = load_settings(database_url=migrated_url, var_dir=tmp_path / "var", site_url=SITE_URL,
                             timezone=TZ)
    assert await site_cmd(settings, argparse.Namespace(out=out, locale="en")) == 0
    assert str(out) in capsys.readouterr().out
    events = {i for ids in archive.event_ids.values() for i in ids}
    expected = {"index.html", "feed.xml", "style.css", "404.html", "api/digests.json"}
    expected |= {f"d/{d}.html" for d in DATES} | {f"api/digests/{d}.json" for d in DATES}
    expected |= {f"e/{i}.html" for i in events} | {f"api/events/{i}.json" for i in events}
    expected |= {f"layer-{lid}.html" for lid in LAYER_IDS}
    written = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert expected <= written
    assert_links_resolve(out)
    index = (out / "index.html").read_text()
    assert [index.index(f'href="d/{d}.html"') for d in DATES] == sorted(
        index.index(f'href="d/{d}.html"') for d in DATES)
    for date in DATES:
        page = (out / f"d/{date}.html").read_text()
        assert 'id="reads"' not in page and "Reads" not in page and "阅读" not in page
        assert "Back to the archive" in page and 'href="../index.html"' in page
        assert 'id="comments"' not in page  # no discussion configured: no bare "Comments" label
        assert 'href="../style.css"' in page and "<style" not in page
    async with sessions() as session:
        view = await load_view(session, DATES[0], "en")
    assert json.loads((out / f"api/digests/{DATES[0]}.json").read_text()) == renderer().as_json(view)
    feed = feedparser.parse((out / "feed.xml").read_bytes())
    assert not feed.bozo and [e.link for e in feed.entries] == [f"{SITE_URL}/d/{d}.html" for d in DATES]
    listed = json.loads((out / "api/digests.json").read_text())
    assert [d["url"] for d in listed["digests"]] == [f"{SITE_URL}/d/{d}.html" for d in DATES]


async def test_export_paginates_and_filters_by_layer(sqlite_sessions: SessionFactory, tmp_path: Path) -> None:
    archive = await build_archive(sqlite_sessions)
    out = tmp_path / "site"
    report = await export_site(sqlite_sessions, renderer(), out, locale="zh", site_url=SITE_URL,
                               timezone=TZ, now=NOW, page_size=2)
    assert report.digests == 3 and report.events == sum(len(v) for v in archive.event_ids.values())
    first, second = (out / "index.html").read_text(), (out / "page-2.html").read_text()
    assert 'href="page-2.html"' in first and 'href="index.html"' in second
    assert f'href="d/{DATES[2]}.html"' in second and f'href="d/{DATES[2]}.html"' not in first
    distributed = (out / "layer-distributed.html").read_text()
    for date in DATES:
        assert (f'href="d/{date}.html"' in distributed) == ("distributed" in archive.layers[date])
    assert "返回博客主页" in (out / f"d/{DATES[0]}.html").read_text()
    assert_links_resolve(out)
    hostile = (out / f"e/{archive.hostile_event}.html").read_text()
    assert "<script" not in hostile and "&lt;script&gt;" in hostile


async def test_html_preview_stands_alone(sqlite_sessions: SessionFactory) -> None:
    await build_archive(sqlite_sessions)
    async with sqlite_sessions() as session:
        view = await load_view(session, DATES[0], "zh")
    page = renderer().render(view, "html")
    assert page.startswith("<!doctype html>") and "<style>" in page and "<link" not in page
    assert f'href="{SITE_URL}/"' in page and f'href="{SITE_URL}/e/{view.events[0].id}"' in page
    assert "阅读" in page and 'id="comments"' not in page and "<script" not in page


async def test_serve_refuses_a_bad_port(tmp_path: Path) -> None:
    settings = load_settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", var_dir=tmp_path)
    with pytest.raises(UsageError, match="--port"):
        await serve_cmd(settings, argparse.Namespace(web=True, host="127.0.0.1", port=70000))


def site_cli(tmp: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``python -m digest site --out OUT`` with a private (empty) database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env |= {"DIGEST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'site.db'}",
            "DIGEST_VAR_DIR": str(tmp / "var")}
    return subprocess.run([sys.executable, "-m", "digest", "site", "--out", str(out)], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=120)


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_site_onto_a_file_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "public"
    target.write_text("keep me")
    done = site_cli(tmp_path, target)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [f"digest: error: --out {target}: exists and is not a folder"]
    assert target.read_text() == "keep me" and done.stdout == ""
    assert [n for n in listing(tmp_path) if n.startswith(".")] == []


def test_site_into_an_unwritable_place_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    if os.geteuid() == 0:  # root writes through file modes; sysfs refuses even root
        parent = Path("/sys")
    else:
        parent = tmp_path / "read-only"
        parent.mkdir()
        parent.chmod(0o555)
    before = listing(parent)
    for target in (parent / "site", parent / "deeper" / "site"):
        done = site_cli(tmp_path, target)
        assert done.returncode == 1, done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith(f"digest: error: --out {target}: cannot write: "), line
        assert listing(parent) == before and not target.exists()


async def test_export_replaces_an_earlier_export_whole_and_refuses_other_folders(
    sqlite_sessions: SessionFactory, tmp_path: Path
) -> None:
    await build_archive(sqlite_sessions)
    out = tmp_path / "public" / "site"

    async def export(where: Path) -> None:
        await export_site(sqlite_sessions, renderer(), where, locale="zh", site_url=SITE_URL, timezone=TZ,
                          now=NOW)

    await export(out)
    assert (out.stat().st_mode & 0o777) == 0o755 and (out / "index.html").is_file()
    (out / "stale.html").write_text("from an older export")
    await export(out)
    assert not (out / "stale.html").exists() and (out / "index.html").is_file()
    assert listing(out.parent) == ["site"]  # no temporary or old folder left beside it
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="not an earlier export"):
        await export(foreign)
    assert listing(foreign) == ["notes.txt"]
    assert [n for n in listing(tmp_path) if not n.startswith("digest.store.db")] == ["home", "public"]
