"""Every file of the feedparser ill-formed corpus through the real ingest path; nothing may crash.

    python bench/robustness.py [DIR] [--jobs N]

DIR defaults to ../shared/corpus/robustness (beside the checkout; the corpus is not in the
repo, so this is a script, not a test). Each file is served over real HTTP on 127.0.0.1 (the
server of tests/feedserver.py) with the headers its ``Header:`` comment lines name, as
feedparser's own test suite serves them (Content-Type defaults to ``application/xml``, or
``application/json`` for ``.json``), and fetched by the real CLI in its own process, ``digest
fetch --json``, into a fresh SQLite database. Printed per file: the exit code, the source's
status, the entries stored (new of total in the document), the number of warnings and the
one-line error. A crash is an exit code other than 0 or 1, a traceback on stderr, an
``internal error`` (a bug caught by the pipeline), output that is not the JSON report, or an
error longer than one line; the script lists them and exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.feedserver import FeedServer, Reply  # noqa: E402  (the repo root is on the path now)

DEFAULT_DIR = ROOT.parent / "shared" / "corpus" / "robustness"
SKIPPED_SUFFIXES = {".md", ".tsv", ".txt"}
NOW = "2026-01-05T08:00:00+00:00"  # a pinned clock: the same dates and notes on every run
_HEADER_RE = re.compile(rb"^\s*Header:\s*([A-Za-z-]+):\s?(.*?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Outcome:
    """What one file came to."""

    name: str
    code: int
    status: str
    entries_new: int
    entries_total: int
    warnings: int
    error: str
    crash: str | None  # why this counts as a crash, else None


def corpus_files(folder: Path) -> list[Path]:
    """Every file under ``folder`` that may be a feed, in a stable order."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix not in SKIPPED_SUFFIXES)


def headers_of(body: bytes, suffix: str) -> tuple[str | None, dict[str, str]]:
    """(Content-Type, other headers) from the file's ``Header:`` comment lines."""
    content_type = "application/json" if suffix == ".json" else "application/xml"
    others: dict[str, str] = {}
    for name, value in _HEADER_RE.findall(body[:4096]):
        key, text = name.decode("ascii"), value.decode("latin-1")
        if key.lower() == "content-type":
            content_type = text
        else:
            others[key] = text
    return content_type, others


def _env(work: Path, sources: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env.update(DIGEST_DATABASE_URL=f"sqlite+aiosqlite:///{work / 'digest.db'}",
               DIGEST_VAR_DIR=str(work / "var"), DIGEST_SOURCES=str(sources), DIGEST_NOW=NOW,
               DIGEST_FETCH_TIMEOUT="10")
    return env


def fetch_one(name: str, url: str) -> Outcome:
    """``digest fetch --json`` of one source in a fresh database; its outcome."""
    with tempfile.TemporaryDirectory(prefix="robustness-") as tmp:
        work = Path(tmp)
        sources = work / "sources.toml"
        sources.write_text(f'[[source]]\nkey = "corpus"\nname = "corpus"\nurl = "{url}"\n', encoding="utf-8")
        proc = subprocess.run([sys.executable, "-m", "digest", "fetch", "--json"], cwd=ROOT,
                              env=_env(work, sources), capture_output=True, text=True, timeout=120)
    crash = None
    if proc.returncode not in (0, 1):
        crash = f"exit code {proc.returncode}"
    elif "Traceback (most recent call last)" in proc.stderr:
        crash = "a traceback on stderr"
    try:
        (row,) = json.loads(proc.stdout)
    except ValueError:
        return Outcome(name, proc.returncode, "?", 0, 0, 0, _last_line(proc.stderr),
                       crash or "no JSON report")
    error = str(row.get("error") or "")
    if crash is None and "internal error" in error:
        crash = "internal error"
    if crash is None and "\n" in error:
        crash = "an error of several lines"
    return Outcome(name, proc.returncode, str(row["status"]), int(row.get("entries_new") or 0),
                   int(row.get("entries_total") or 0), len(row.get("warnings") or []), error, crash)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--jobs", type=int, default=4, help="fetches run side by side (default 4)")
    args = parser.parse_args(argv)
    files = corpus_files(args.dir)
    if not files:
        print(f"no corpus files under {args.dir}", file=sys.stderr)
        return 2
    with FeedServer() as server:
        urls = {}
        for path in files:
            body = path.read_bytes()
            content_type, headers = headers_of(body, path.suffix)
            name = path.relative_to(args.dir).as_posix()
            urls[name] = server.serve("/" + name, Reply(body, content_type=content_type, headers=headers))
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            outcomes = list(pool.map(lambda item: fetch_one(*item), urls.items()))
    width = max(len(o.name) for o in outcomes)
    print(f"{'file':<{width}}  exit  status         stored  warn  error")
    for o in outcomes:
        stored = f"{o.entries_new}/{o.entries_total}"
        print(f"{o.name:<{width}}  {o.code:>4}  {o.status:<13}  {stored:>6}  {o.warnings:>4}  "
              f"{o.error}{'  <-- CRASH: ' + o.crash if o.crash else ''}")
    crashed = [o for o in outcomes if o.crash]
    by_status: dict[str, int] = {}
    for o in outcomes:
        by_status[o.status] = by_status.get(o.status, 0) + 1
    print(f"\n{len(outcomes)} files: " + ", ".join(f"{n} {s}" for s, n in sorted(by_status.items()))
          + f"; {sum(o.entries_new for o in outcomes)} entries stored; {len(crashed)} crashed")
    for o in crashed:
        print(f"CRASH {o.name}: {o.crash}", file=sys.stderr)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
