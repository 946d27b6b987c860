"""Dependency rules: the core never imports the adapters, and importing does no work."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = ("bot", "discord", "telegram")


def _core_modules() -> list[str]:
    return sorted(
        "digest." + ".".join(p.relative_to(ROOT / "digest").with_suffix("").parts)
        for p in (ROOT / "digest").rglob("*.py")
        if p.name != "__main__.py"
    )


def test_no_core_module_names_an_adapter() -> None:
    offenders = []
    for path in (ROOT / "digest").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []


def test_importing_the_core_loads_no_adapter_and_reads_no_setting() -> None:
    code = (
        "import importlib, json, sys\n"
        f"for name in {_core_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{FORBIDDEN!r})))\n"
    )
    # A broken setting proves nothing reads the environment at import time.
    env = {**os.environ, "DIGEST_TIMEZONE": "Not/AZone", "DIGEST_FETCH_CONCURRENCY": "many"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True
    )
    assert json.loads(out.stdout) == []
