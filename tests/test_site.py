"""``digest site``: the static export, its files and links, and no read count."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import feedparser
import pytest

from digest.cmd_web import serve_cmd, site_cmd
from digest.config import load_settings
from digest.db import SessionFactory
from digest.errors import UsageError
from digest.layers import LAYER_IDS
from digest.queries import load_view
from digest.site import export_site
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
    db_url: str, sessions: SessionFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = await build_archive(sessions)
    out = tmp_path / "site"
    settings = load_settings(database_url=db_url, var_dir=tmp_path / "var", site_url=SITE_URL, timezone=TZ)
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
        assert "Back to the archive" in page and 'href="../index.html"' in page and "Comments" in page
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
    report = await export_site(sqlite_sessions, renderer(), tmp_path, locale="zh", site_url=SITE_URL,
                               timezone=TZ, now=NOW, page_size=2)
    assert report.digests == 3 and report.events == sum(len(v) for v in archive.event_ids.values())
    first, second = (tmp_path / "index.html").read_text(), (tmp_path / "page-2.html").read_text()
    assert 'href="page-2.html"' in first and 'href="index.html"' in second
    assert f'href="d/{DATES[2]}.html"' in second and f'href="d/{DATES[2]}.html"' not in first
    distributed = (tmp_path / "layer-distributed.html").read_text()
    for date in DATES:
        assert (f'href="d/{date}.html"' in distributed) == ("distributed" in archive.layers[date])
    assert "返回博客主页" in (tmp_path / f"d/{DATES[0]}.html").read_text()
    assert_links_resolve(tmp_path)
    hostile = (tmp_path / f"e/{archive.hostile_event}.html").read_text()
    assert "<script" not in hostile and "&lt;script&gt;" in hostile


async def test_html_preview_stands_alone(sqlite_sessions: SessionFactory) -> None:
    await build_archive(sqlite_sessions)
    async with sqlite_sessions() as session:
        view = await load_view(session, DATES[0], "zh")
    page = renderer().render(view, "html")
    assert page.startswith("<!doctype html>") and "<style>" in page and "<link" not in page
    assert f'href="{SITE_URL}/"' in page and f'href="{SITE_URL}/e/{view.events[0].id}"' in page
    assert "阅读" in page and "评论" in page and "<script" not in page


async def test_serve_refuses_a_bad_port(tmp_path: Path) -> None:
    settings = load_settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", var_dir=tmp_path)
    with pytest.raises(UsageError, match="--port"):
        await serve_cmd(settings, argparse.Namespace(web=True, host="127.0.0.1", port=70000))
