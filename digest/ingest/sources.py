"""The source list: the built-in real sources plus ``DIGEST_SOURCES_EXTRA``, or only ``DIGEST_SOURCES``.

A source file holds ``[[source]]`` tables with ``key``, ``name``, ``url``
(required), ``kind`` (default ``rss``), ``weight`` (default 0.5) and
``enabled`` (default true). An unknown field, a bad value or a repeated key is
a :class:`ConfigError` naming the file and line; a key in both the built-in
list and the extra file names both.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from digest.domain.errors import ConfigError
from digest.resources import data_dir

KINDS = ("rss", "atom", "arxiv", "github-releases")
FIELDS = {"key", "name", "url", "kind", "weight", "enabled"}
_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class SourceSpec:
    """One configured source."""

    key: str
    name: str
    url: str
    kind: str = "rss"
    weight: float = 0.5
    enabled: bool = True

    @property
    def is_local(self) -> bool:
        """True for a local file (``file://`` or a plain path)."""
        return not self.url.startswith(("http://", "https://"))

    @property
    def path(self) -> Path:
        """The local file's path (only for local sources)."""
        return Path(self.url[len("file://"):] if self.url.startswith("file://") else self.url)


def default_sources_path() -> Path:
    """The built-in list of real sources shipped with the package."""
    return data_dir() / "sources.toml"


def load_sources(path: Path | None = None, extra: Path | None = None) -> list[SourceSpec]:
    """``path`` alone when given (it replaces the list), else the built-in list plus ``extra``."""
    if path is not None:
        return load_file(path)
    specs = load_file(default_sources_path())
    if extra is None or not extra.exists():
        return specs
    return merged(specs, default_sources_path(), load_file(extra), extra)


def merged(base: list[SourceSpec], base_path: Path, added: list[SourceSpec],
           added_path: Path) -> list[SourceSpec]:
    """``base`` then ``added``; a key in both is a ConfigError naming both files and lines."""
    known = {spec.key for spec in base}
    for spec in added:
        if spec.key in known:
            raise ConfigError(f"{added_path}:{key_line(added_path, spec.key)}: source key {spec.key!r} "
                              f"is already in {base_path}:{key_line(base_path, spec.key)}")
    return base + added


def key_line(path: Path, key: str) -> int:
    """The line of ``key = "KEY"`` in a source file (0 if not found)."""
    pattern = re.compile(rf"""^\s*["']?key["']?\s*=\s*["']{re.escape(key)}["']""")
    lines = path.read_text(encoding="utf-8").splitlines()
    return next((n for n, line in enumerate(lines, 1) if pattern.match(line)), 0)


def load_file(path: Path) -> list[SourceSpec]:
    """Load and validate one source file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"DIGEST_SOURCES: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        byte = exc.object[exc.start]
        raise ConfigError(f"{path}: line {line}: not UTF-8 text (byte {byte:#04x})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return parse_sources(data, text, path)


def parse_sources(data: dict[str, Any], text: str, path: Path) -> list[SourceSpec]:
    """Validate parsed TOML; ``text`` is used to name lines in errors."""
    extra = set(data) - {"source"}
    if extra:
        raise ConfigError(f"{path}: unknown top-level key {sorted(extra)[0]!r}; use [[source]] tables")
    tables = data.get("source", [])
    if not isinstance(tables, list):
        raise ConfigError(f"{path}: 'source' must be an array of tables ([[source]])")
    header_lines = _header_lines(text)
    specs: list[SourceSpec] = []
    seen: dict[str, int] = {}
    for index, table in enumerate(tables):
        line = header_lines[index] if index < len(header_lines) else 0
        spec = _parse_table(table, path, line, text, path.parent)
        if spec.key in seen:
            key_line = _field_line(text, line, "key")
            raise ConfigError(
                f"{path}:{key_line}: repeated source key {spec.key!r} (first at line {seen[spec.key]})"
            )
        seen[spec.key] = _field_line(text, line, "key")
        specs.append(spec)
    return specs


def _header_lines(text: str) -> list[int]:
    return [n for n, raw in enumerate(text.splitlines(), 1) if raw.strip().startswith("[[source]]")]


def _field_line(text: str, header_line: int, field: str) -> int:
    """The line of ``field`` inside the table whose header is on ``header_line``."""
    lines = text.splitlines()
    pattern = re.compile(rf"^\s*[\"']?{re.escape(field)}[\"']?\s*=")
    for n in range(header_line, len(lines)):  # lines[header_line] is the line after the header
        if lines[n].lstrip().startswith("["):
            break
        if pattern.match(lines[n]):
            return n + 1
    return header_line


def _parse_table(table: Any, path: Path, line: int, text: str, base: Path) -> SourceSpec:
    def fail(field: str, message: str) -> ConfigError:
        return ConfigError(f"{path}:{_field_line(text, line, field)}: {message}")

    if not isinstance(table, dict):
        raise ConfigError(f"{path}:{line}: [[source]] must be a table")
    for field in table:
        if field not in FIELDS:
            raise fail(field, f"unknown field {field!r} (allowed: {', '.join(sorted(FIELDS))})")
    for field in ("key", "name", "url"):
        if not isinstance(table.get(field), str) or not table[field].strip():
            raise ConfigError(f"{path}:{line}: source is missing the required field {field!r}")
    key = table["key"].strip()
    if not _KEY_RE.match(key):
        raise fail("key", f"bad key {key!r}: use lowercase letters, digits, '.', '_' or '-'")
    kind = table.get("kind", "rss")
    if kind not in KINDS:
        raise fail("kind", f"unknown kind {kind!r} (allowed: {', '.join(KINDS)})")
    weight = table.get("weight", 0.5)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 1:
        raise fail("weight", f"weight must be a number from 0 to 1, not {weight!r}")
    enabled = table.get("enabled", True)
    if not isinstance(enabled, bool):
        raise fail("enabled", f"enabled must be true or false, not {enabled!r}")
    url = _resolve_url(table["url"].strip(), base, lambda msg: fail("url", msg))
    return SourceSpec(key, table["name"].strip(), url, kind, float(weight), enabled)


def _resolve_url(url: str, base: Path, fail: Any) -> str:
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        return url
    if scheme == "file":
        return url
    if scheme and len(scheme) > 1:
        raise fail(f"unsupported URL scheme {scheme!r}: use http(s), file:// or a path")
    path = Path(url).expanduser()
    return str(path if path.is_absolute() else (base / path).resolve())
