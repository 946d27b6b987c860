"""A private environment for running ``digest`` in-process: no DIGEST_* of the caller's leaks in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def private_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, db_name: str, *,
                chdir: bool = True, **settings: str) -> str:
    """Clear every DIGEST_* variable, point the database and var dir into ``tmp_path``; the URL.

    ``settings`` are more DIGEST_* variables (``DIGEST_NOW=...``); ``chdir`` runs from ``tmp_path``.
    """
    for name in [n for n in os.environ if n.startswith("DIGEST_")]:
        monkeypatch.delenv(name)
    url = f"sqlite+aiosqlite:///{tmp_path / db_name}"
    monkeypatch.setenv("DIGEST_DATABASE_URL", url)
    monkeypatch.setenv("DIGEST_VAR_DIR", str(tmp_path / "var"))
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    if chdir:
        monkeypatch.chdir(tmp_path)
    return url
