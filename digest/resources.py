"""Where the shipped non-Python files live: a source checkout or an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _find(installed: str, checkout: str) -> Path:
    wheel_path = _PACKAGE / installed
    if wheel_path.exists():
        return wheel_path
    return _PACKAGE.parent / checkout


def templates_dir() -> Path:
    """The Jinja2 templates folder (``templates/`` at the top of the project)."""
    return _find("_templates", "templates")


def alembic_dir() -> Path:
    """The Alembic scripts folder (``alembic/`` at the top of the project)."""
    return _find("_alembic", "alembic")


def data_dir() -> Path:
    """Data shipped inside the package: the default source list and the sample feeds."""
    return _PACKAGE / "data"
