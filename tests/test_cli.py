"""The ``digest`` command end to end, as a user runs it (subprocess, real files)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from digest.domain.window import latest_closed

ROOT = Path(__file__).resolve().parent.parent
# The clock of every command here: a Saturday 03:00 UTC, when the latest closed window (Shanghai)
# holds the bundled samples' early-morning items (dates are relative to this instant).
NOW = dt.datetime(2026, 12, 5, 3, 0, tzinfo=dt.UTC)


def digest(tmp: Path, *args: str, sources: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m digest`` with a private database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env["DIGEST_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp / 'cli.db'}"
    env["DIGEST_VAR_DIR"] = str(tmp / "var")
    env["DIGEST_NOW"] = NOW.isoformat()
    if sources:
        env["DIGEST_SOURCES"] = str(sources)
    return subprocess.run([sys.executable, "-m", "digest", *args], capture_output=True, text=True,
                          env=env, cwd=tmp, timeout=120)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """Samples fetched and the latest closed window built, once for the module."""
    tmp = tmp_path_factory.mktemp("cli")
    out = digest(tmp, "samples", "--out", str(tmp / "samples"))
    assert out.returncode == 0, out.stderr
    sources = Path(out.stdout.strip())
    run = digest(tmp, "run", "--json", sources=sources)
    assert run.returncode == 0, run.stderr
    (tmp / "run.json").write_text(run.stdout)
    date = latest_closed(NOW, "Asia/Shanghai").isoformat()
    return tmp, sources, date


def test_run_fetches_and_builds(built: tuple[Path, Path, str]) -> None:
    tmp, sources, date = built
    fetched = digest(tmp, "fetch", "--json", sources=sources)
    assert fetched.returncode == 0
    rows = json.loads(fetched.stdout)
    assert {r["status"] for r in rows} == {"not_modified"}
    keys = {"source", "status", "http_status", "entries_total", "entries_new", "entries_updated",
            "bytes", "seconds", "warnings", "error"}
    assert all(keys <= set(r) for r in rows)
    again = digest(tmp, "build", "--date", date, sources=sources)
    assert again.returncode == 0 and "already built" in again.stdout


RUN_KEYS = {"date", "sources", "entries", "events", "built", "published", "deliveries", "llm", "seconds"}


def test_run_json_is_one_document_with_the_report(built: tuple[Path, Path, str]) -> None:
    tmp, _, date = built
    report = json.loads((tmp / "run.json").read_text())  # one JSON value, nothing after it
    assert isinstance(report, dict) and set(report) >= RUN_KEYS
    assert report["date"] == date and report["built"] is True and report["published"] is True
    assert report["sources"]["ok"] > 0 and report["sources"]["failed"] == []
    assert report["entries"] > 0 and report["events"] > 0
    assert report["llm"] == {"calls": 0, "tokens": 0} and isinstance(report["seconds"], float)
    assert all({"planned", "sent", "failed"} <= set(t) for t in report["deliveries"].values())


def test_run_json_is_printed_when_the_run_fails(tmp_path: Path) -> None:
    toml = tmp_path / "sources.toml"
    toml.write_text('[[source]]\nkey = "dead"\nname = "Dead"\nurl = "http://127.0.0.1:9/feed"\n')
    out = digest(tmp_path, "run", "--json", sources=toml)
    assert out.returncode == 1
    report = json.loads(out.stdout)
    assert set(report) >= RUN_KEYS and report["built"] is False and report["published"] is False
    assert "no source could be reached" in report["built_reason"]
    assert [f["source"] for f in report["sources"]["failed"]] == ["dead"]
    last = out.stderr.strip().splitlines()[-1]
    assert "no source could be reached" in last and "digest samples" in last


def test_help_loads_no_client_library() -> None:
    """``digest --help`` stays fast: building the parser imports none of the heavy clients."""
    code = ("import sys; from digest.cli.main import build_parser; build_parser(); "
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                cwd=ROOT, timeout=120).stdout.split())
    heavy = {"httpx", "feedparser", "openai", "jinja2", "aiosmtplib", "starlette", "uvicorn", "alembic"}
    assert loaded & heavy == set()


def test_preview_json_contract(built: tuple[Path, Path, str]) -> None:
    tmp, _, date = built
    out = digest(tmp, "preview", "--date", date, "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"date", "title", "overview", "generation_mode", "window", "events", "watchlist",
            "stats"} <= set(data)
    assert data["date"] == date and data["generation_mode"] == "extractive"
    assert data["window"]["start"].endswith("+08:00") and "T08:00:00" in data["window"]["end"]
    assert isinstance(data["stats"]["tokens"], int) and data["stats"]["entries_by_source"]
    assert data["events"], "the samples always give a non-empty day"
    for event in data["events"]:
        assert round(sum(event["score_breakdown"].values()), 1) == event["score"]
        assert event["written_by"] == "extractive" and isinstance(event["id"], int)
        assert all(s["url"] is None or s["url"].startswith("http") for s in event["sources"])


def test_preview_filters_and_formats(built: tuple[Path, Path, str]) -> None:
    tmp, _, date = built
    full = json.loads(digest(tmp, "preview", "--date", date, "--format", "json").stdout)
    layer = full["events"][-1]["layers"][0]
    out = digest(tmp, "preview", "--date", date, "--format", "json", "--layers", layer,
                 "--locale", "en")
    kept = json.loads(out.stdout)
    assert kept["events"] and all(layer in e["layers"] for e in kept["events"])
    dropped = [e["title"] for e in full["events"] if layer not in e["layers"]]
    for title in dropped:
        assert title not in kept["title"] + kept["overview"]
    for fmt, marker in (("md", "## "), ("text", "\n"), ("html", "<!doctype html>")):
        page = digest(tmp, "preview", "--date", date, "--format", fmt, "--locale", "en")
        assert page.returncode == 0 and marker in page.stdout
        assert "重点变化" not in page.stdout  # one language only
    events = json.loads(digest(tmp, "events", "--date", date, "--json").stdout)
    assert {"id", "title", "relevant", "layers", "score", "entry_urls"} <= set(events[0])
    assert any(not e["relevant"] for e in events), "candidates below the cut are listed too"


def test_errors_are_one_line_with_the_right_exit_code(built: tuple[Path, Path, str]) -> None:
    tmp, _, date = built
    missing = digest(tmp, "preview", "--date", "2001-01-01")
    assert missing.returncode == 1
    assert missing.stderr.strip().count("\n") == 0 and "digest build --date 2001-01-01" in missing.stderr
    bad_layer = digest(tmp, "preview", "--date", date, "--layers", "frontend,quantum")
    assert bad_layer.returncode == 2 and "quantum" in bad_layer.stderr
    assert digest(tmp, "preview", "--date", "yesterday").returncode == 2
    bad_env = digest(tmp, "sources", "list", sources=tmp / "nope.toml")
    assert bad_env.returncode == 1 and "DIGEST_SOURCES" in bad_env.stderr


def test_offline_run_says_so_in_one_line(tmp_path: Path) -> None:
    toml = tmp_path / "sources.toml"
    toml.write_text('[[source]]\nkey = "dead"\nname = "Dead"\nurl = "http://127.0.0.1:9/feed"\n')
    out = digest(tmp_path, "run", sources=toml)
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert "no source could be reached" in last and "digest samples" in last


def test_sources_list_shows_outcomes(built: tuple[Path, Path, str]) -> None:
    tmp, sources, _ = built
    rows = json.loads(digest(tmp, "sources", "list", "--json", sources=sources).stdout)
    assert rows and all(r["last_status"] in ("ok", "not_modified") for r in rows)
    assert all(r["consecutive_failures"] == 0 and r["entries"] > 0 for r in rows)


def test_layers_all_is_accepted_where_the_help_shows_it(built: tuple[Path, Path, str]) -> None:
    tmp, _, date = built
    every = digest(tmp, "preview", "--date", date, "--format", "json", "--layers", "all")
    assert every.returncode == 0, every.stderr
    plain = digest(tmp, "preview", "--date", date, "--format", "json")
    assert json.loads(every.stdout)["events"] == json.loads(plain.stdout)["events"]
