"""Operator mistakes end in one line naming what is wrong (exit 1), never a traceback, and cost nothing.

Each case runs the real ``python -m digest`` in a private folder.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

NOW = "2026-12-05T03:00:00+00:00"


def _digest(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    base.update(DIGEST_DATABASE_URL=f"sqlite+aiosqlite:///{tmp / 'one.db'}",
                DIGEST_VAR_DIR=str(tmp / "var"), DIGEST_NOW=NOW)
    base.update(env)
    return subprocess.run([sys.executable, "-m", "digest", *args], cwd=tmp, env=base,
                          capture_output=True, text=True, timeout=120)


def _samples_onto_a_file(tmp: Path) -> subprocess.CompletedProcess[str]:
    (tmp / "taken").write_text("a file, not a folder")
    return _digest(tmp, "samples", "--out", str(tmp / "taken" / "samples"))


def _non_utf8_sources(tmp: Path) -> subprocess.CompletedProcess[str]:
    (tmp / "sources.toml").write_bytes(b'[[source]]\nkey = "x"\nname = "\xff"\nurl = "a.xml"\n')
    return _digest(tmp, "sources", "list", DIGEST_SOURCES=str(tmp / "sources.toml"))


def _toml_syntax_error(tmp: Path) -> subprocess.CompletedProcess[str]:
    (tmp / "digest.toml").write_text("max_events = [\n")
    return _digest(tmp, "sources", "list")


def _toml_bad_value(tmp: Path) -> subprocess.CompletedProcess[str]:
    (tmp / "digest.toml").write_text("max_events = 'many'\n")
    return _digest(tmp, "sources", "list")


def _unusable_var_dir(tmp: Path) -> subprocess.CompletedProcess[str]:
    """A built day, then a command that needs the signing key with DIGEST_VAR_DIR under a file."""
    samples = tmp / "samples"
    assert _digest(tmp, "samples", "--out", str(samples)).returncode == 0
    built = _digest(tmp, "run", DIGEST_SOURCES=str(samples / "sources.toml"))
    assert built.returncode == 0, built.stderr
    (tmp / "file").write_text("")
    return _digest(tmp, "preview", "--date", "2026-12-05", "--format", "email",
                   DIGEST_VAR_DIR=str(tmp / "file" / "var"))


def _score_weights_nan(tmp: Path) -> subprocess.CompletedProcess[str]:
    return _digest(tmp, "build", DIGEST_SCORE_WEIGHTS='{"authority": NaN}')


def _table_gone(tmp: Path) -> subprocess.CompletedProcess[str]:
    """A database someone damaged by hand (a table dropped after migrating)."""
    assert _digest(tmp, "db", "upgrade").returncode == 0
    db = sqlite3.connect(tmp / "one.db")
    db.execute("DROP TABLE subscriber")
    db.commit()
    db.close()
    return _digest(tmp, "subscribers", "list")


CASES: dict[str, tuple[Callable[[Path], subprocess.CompletedProcess[str]], str]] = {
    "samples --out onto a file": (_samples_onto_a_file, "cannot write the samples"),
    "non-UTF-8 sources.toml": (_non_utf8_sources, "not UTF-8"),
    "digest.toml syntax error": (_toml_syntax_error, "digest.toml: "),
    "digest.toml bad value": (_toml_bad_value, "digest.toml: max_events"),
    "unusable DIGEST_VAR_DIR": (_unusable_var_dir, "DIGEST_VAR_DIR"),
    "NaN score weight": (_score_weights_nan, "DIGEST_SCORE_WEIGHTS"),
    "a table dropped by hand": (_table_gone,
                                "database: (sqlite3.OperationalError) no such table: subscriber"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_line_and_exit_1(tmp_path: Path, case: str) -> None:
    run, words = CASES[case]
    done = run(tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert len(lines) == 1 and words in lines[0], done.stderr
    assert "Traceback" not in done.stderr
