"""``digest --help`` imports no heavy library (in the style of lemon24/reader's test_lazy_imports).

A fresh interpreter runs the CLI's help and prints ``sys.modules``: a module
that imports a client library at its top would show up here long before anyone
notices the second of start-up it costs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("sqlalchemy", "openai", "jinja2", "feedparser", "httpx", "discord", "telegram", "aiosmtplib",
         "alembic", "starlette", "uvicorn", "pydantic", "pydantic_settings", "email_validator")
SCRIPT = """
import sys
from digest.cli.main import main
try:
    main({argv!r})
except SystemExit:
    pass
print(" ".join(sorted({{name.split(".")[0] for name in sys.modules}})), file=sys.stderr)
"""


def loaded_by(argv: list[str]) -> set[str]:
    """The top-level packages a fresh interpreter holds after ``digest ARGV`` (help or a usage error)."""
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(argv=argv)], capture_output=True,
                         text=True, cwd=ROOT, timeout=120, check=True)
    return set(out.stderr.strip().splitlines()[-1].split())


@pytest.mark.parametrize("argv", [["--help"], ["sources", "--help"], ["preview", "--help"],
                                  ["subscribers", "remove", "--help"], ["buidl"]])
def test_help_and_usage_errors_import_no_heavy_library(argv: list[str]) -> None:
    assert loaded_by(argv) & set(HEAVY) == set()
