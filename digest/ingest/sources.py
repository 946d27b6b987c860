"""The source list: the built-in real sources plus ``DIGEST_SOURCES_EXTRA``, or only ``DIGEST_SOURCES``.

A source file holds ``[[source]]`` tables with ``key``, ``name``, ``url``
(required), ``kind`` (default ``rss``), ``weight`` (default 0.5) and
``enabled`` (default true). An unknown field, a bad value or a repeated key is
a :class:`ConfigError` naming the file and line; a key in both the built-in
list and the extra file names both. The extra file may also hold
``[[override]]`` tables (``key`` of a built-in source and ``enabled``): how
``digest sources disable`` turns a built-in source off without copying it.

:class:`SourceEditor` is how ``digest sources add/remove/enable/disable`` change
the file in use. The file is written again whole from its parsed tables (URLs
as written, the leading comment block kept, other comments not), read back
before it replaces the old one, through a temporary file and a rename, so a
crash leaves the old file or the new one and never half of one. An edit reads
and writes the file under an exclusive lock (:func:`edit_sources`): two edits at
once, from two shells or an operator's script, take turns, and neither is lost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import fcntl
import logging
import os
import re
import stat
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from digest.domain.errors import ConfigError
from digest.resources import data_dir

KINDS = ("rss", "atom", "arxiv", "github-releases")
FIELDS = ("key", "name", "url", "kind", "weight", "enabled")  # also the order they are written in
OVERRIDE_FIELDS = ("key", "enabled")
_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\x85]")
MAX_NAME = 200
MAX_URL = 2000
EXTRA_HEADER = ("# Sources added to the built-in list (DIGEST_SOURCES_EXTRA), written by `digest sources`.\n"
                "# This leading comment block is kept when the file is rewritten; other comments are not.\n")
log = logging.getLogger(__name__)

# Where a validation message points: the field's "path:line: " prefix ("" outside a file).
Locate = Callable[[str | None], str]


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
    added = read_source_file(extra, overrides=True)
    base = with_overrides(specs, added.overrides, extra)
    return merged(base, default_sources_path(), added.specs(), extra)


def merged(base: list[SourceSpec], base_path: Path, added: list[SourceSpec],
           added_path: Path) -> list[SourceSpec]:
    """``base`` then ``added``; a key in both is a ConfigError naming both files and lines."""
    known = {spec.key for spec in base}
    for spec in added:
        if spec.key in known:
            raise ConfigError(f"{added_path}:{key_line(added_path, spec.key)}: source key {spec.key!r} "
                              f"is already in {base_path}:{key_line(base_path, spec.key)}")
    return base + added


def with_overrides(specs: list[SourceSpec], overrides: dict[str, bool], path: Path) -> list[SourceSpec]:
    """``specs`` with the extra file's ``enabled`` overrides; one for no built-in source is ignored."""
    keys = {spec.key for spec in specs}
    for key in overrides.keys() - keys:
        log.warning("%s: [[override]] of %r ignored: no built-in source has that key "
                    "(digest sources enable/disable edits it)", path, key)
    return [replace(spec, enabled=overrides[spec.key]) if spec.key in overrides else spec for spec in specs]


def key_line(path: Path, key: str) -> int:
    """The line of ``key = "KEY"`` in a source file (0 if not found)."""
    pattern = re.compile(rf"""^\s*["']?key["']?\s*=\s*["']{re.escape(key)}["']""")
    lines = path.read_text(encoding="utf-8").splitlines()
    return next((n for n, line in enumerate(lines, 1) if pattern.match(line)), 0)


def load_file(path: Path) -> list[SourceSpec]:
    """Load and validate one source file (no ``[[override]]`` allowed)."""
    return read_source_file(path).specs()


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"DIGEST_SOURCES: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        byte = exc.object[exc.start]
        raise ConfigError(f"{path}: line {line}: not UTF-8 text (byte {byte:#04x})") from None


def parse_sources(data: dict[str, Any], text: str, path: Path) -> list[SourceSpec]:
    """Validate parsed TOML; ``text`` is used to name lines in errors."""
    return _parse(data, text, path, overrides=False)[0]


def _parse(data: dict[str, Any], text: str, path: Path,
           overrides: bool) -> tuple[list[SourceSpec], dict[str, bool]]:
    allowed = {"source", "override"} if overrides else {"source"}
    unknown = set(data) - allowed
    if "override" in unknown:
        line = next(iter(_header_lines(text, "override")), 0)
        raise ConfigError(f"{path}:{line}: [[override]] tables belong in the DIGEST_SOURCES_EXTRA file only")
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key {sorted(unknown)[0]!r}; use [[source]] tables")
    return _parse_tables(data, text, path), _parse_overrides(data, text, path)


def _tables(data: dict[str, Any], name: str, path: Path) -> list[Any]:
    tables = data.get(name, [])
    if not isinstance(tables, list):
        raise ConfigError(f"{path}: {name!r} must be an array of tables ([[{name}]])")
    return tables


def _parse_tables(data: dict[str, Any], text: str, path: Path) -> list[SourceSpec]:
    header_lines = _header_lines(text, "source")
    specs: list[SourceSpec] = []
    seen: dict[str, int] = {}
    for index, table in enumerate(_tables(data, "source", path)):
        line = header_lines[index] if index < len(header_lines) else 0
        spec = _parse_table(table, _locator(path, text, line), path.parent)
        if spec.key in seen:
            key_line = _field_line(text, line, "key")
            raise ConfigError(
                f"{path}:{key_line}: repeated source key {spec.key!r} (first at line {seen[spec.key]})"
            )
        seen[spec.key] = _field_line(text, line, "key")
        specs.append(spec)
    return specs


def _parse_overrides(data: dict[str, Any], text: str, path: Path) -> dict[str, bool]:
    header_lines = _header_lines(text, "override")
    found: dict[str, bool] = {}
    for index, table in enumerate(_tables(data, "override", path)):
        at = _locator(path, text, header_lines[index] if index < len(header_lines) else 0)
        if not isinstance(table, dict):
            raise ConfigError(f"{at(None)}[[override]] must be a table")
        for name in table:
            if name not in OVERRIDE_FIELDS:
                raise ConfigError(f"{at(name)}unknown field {name!r} in [[override]] "
                                  f"(allowed: {', '.join(OVERRIDE_FIELDS)})")
        key, enabled = table.get("key"), table.get("enabled")
        if not isinstance(key, str) or not isinstance(enabled, bool):
            raise ConfigError(f"{at(None)}[[override]] needs key (text) and enabled (true or false)")
        if key in found:
            raise ConfigError(f"{at('key')}repeated [[override]] of {key!r}")
        found[key] = enabled
    return found


def _locator(path: Path, text: str, header_line: int) -> Locate:
    return lambda name: f"{path}:{_field_line(text, header_line, name) if name else header_line}: "


def _header_lines(text: str, name: str) -> list[int]:
    header = f"[[{name}]]"
    return [n for n, raw in enumerate(text.splitlines(), 1) if raw.strip().startswith(header)]


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


def _parse_table(table: Any, at: Locate, base: Path) -> SourceSpec:
    def fail(field: str, message: str) -> ConfigError:
        return ConfigError(f"{at(field)}{message}")

    if not isinstance(table, dict):
        raise ConfigError(f"{at(None)}[[source]] must be a table")
    for field in table:
        if field not in FIELDS:
            raise fail(field, f"unknown field {field!r} (allowed: {', '.join(sorted(FIELDS))})")
    for field in ("key", "name", "url"):
        if not isinstance(table.get(field), str) or not table[field].strip():
            raise ConfigError(f"{at(None)}source is missing the required field {field!r}")
    key = table["key"].strip()
    if not _KEY_RE.match(key):
        raise fail("key", f"bad key {key!r}: use lowercase letters, digits, '.', '_' or '-' "
                          "(64 at most, starting with a letter or digit)")
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


# -- one source from outside a file (the command line, an OPML file) ---------------

def check_source(fields: dict[str, Any]) -> SourceSpec:
    """Validate one source given field by field, by the file's rules plus an http(s) URL with a host.

    ConfigError with a one-line message (no file or line: there is none).
    """
    url = fields.get("url")
    if isinstance(url, str):
        check_web_url(url)
    return _parse_table(fields, lambda name: "", Path.cwd())


def check_web_url(url: str) -> str:
    """``url`` when it is an http(s) URL with a host and no spaces or control characters."""
    shown = url[:100]
    if len(url) > MAX_URL or _CONTROL.search(url) or " " in url:
        raise ConfigError(f"bad URL {shown!r}: no spaces or control characters, {MAX_URL} characters at most")
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as exc:
        raise ConfigError(f"bad URL {shown!r}: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ConfigError(f"bad URL {shown!r}: only http:// and https:// feeds can be added")
    if not host:
        raise ConfigError(f"bad URL {shown!r}: no host")
    return url


def clean_name(text: str, fallback: str) -> str:
    """A display name from untrusted text: one line, no control characters, ``MAX_NAME`` at most."""
    name = " ".join(_CONTROL.sub(" ", text).split())[:MAX_NAME]
    return name or fallback


def guess_kind(url: str) -> str:
    """The kind a URL most likely is: arXiv listings, GitHub release feeds, else ``rss``."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if host == "arxiv.org" or host.endswith(".arxiv.org"):
        return "arxiv"
    if host == "github.com" and parts.path.rstrip("/").endswith("/releases.atom"):
        return "github-releases"
    return "rss"


def url_identity(url: str) -> tuple[str, str, str, str]:
    """What makes two URLs the same feed: scheme and host in any case, a trailing slash ignored."""
    parts = urlsplit(url.strip())
    return parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), parts.query


# -- a source file as written, and writing it --------------------------------------

@dataclass
class SourceFile:
    """A source file as written: its ``[[source]]`` tables (URLs as written), overrides, head comments."""

    path: Path
    tables: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    overrides: dict[str, bool] = dataclasses.field(default_factory=dict)
    preamble: str = ""
    allow_overrides: bool = False

    def text(self) -> str:
        """The TOML of this file (the known schema: strings, numbers and booleans)."""
        out = [self.preamble.rstrip("\n")] if self.preamble.strip() else []
        for table in self.tables:
            ordered = [k for k in FIELDS if k in table] + [k for k in table if k not in FIELDS]
            out += ["", "[[source]]", *(f"{k} = {toml_value(table[k])}" for k in ordered)]
        for key, enabled in self.overrides.items():
            out += ["", "[[override]]", f"key = {toml_value(key)}", f"enabled = {toml_value(enabled)}"]
        return "\n".join(out).lstrip("\n") + "\n"

    def specs(self) -> list[SourceSpec]:
        """The validated sources of this file as it now stands."""
        text = self.text()
        return _parse(tomllib.loads(text), text, self.path, self.allow_overrides)[0]

    def save(self) -> None:
        """Check the new text reads back, then write it atomically (ConfigError on failure)."""
        text = self.text()
        _parse(tomllib.loads(text), text, self.path, self.allow_overrides)
        write_atomically(self.path, text)


def read_source_file(path: Path, *, overrides: bool = False, missing_ok: bool = False) -> SourceFile:
    """Read and validate ``path``; absent and ``missing_ok``: an empty file with the extra file's header."""
    if missing_ok and not path.exists():
        return SourceFile(path, preamble=EXTRA_HEADER, allow_overrides=overrides)
    text = _read_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    _, found = _parse(data, text, path, overrides)
    tables = [dict(t) for t in data.get("source", [])]
    return SourceFile(path, tables, found, _leading_comments(text), overrides)


def _leading_comments(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines).strip("\n") + "\n" if any(x.strip() for x in lines) else ""


def toml_value(value: object) -> str:
    """One TOML value of the source schema: a basic string, a number or a boolean."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(_toml_char(ch) for ch in value) + '"'
    raise TypeError(f"not a value of the source schema: {value!r}")


def _toml_char(ch: str) -> str:
    if ch in '"\\':
        return "\\" + ch
    if ch < " " or ch == "\x7f":
        return {"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(ch, f"\\u{ord(ch):04x}")
    return ch


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` beside ``path`` (through a symlink: beside its target), then rename it over."""
    target = path.resolve()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o644
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _sync_dir(target.parent)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None


def _sync_dir(directory: Path) -> None:
    """Make the rename itself durable (not every file system can open a folder)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- editing the source file in use --------------------------------------------------

def lock_path(path: Path) -> Path:
    """The lock file of the source file ``path`` (beside the file a symlink points to)."""
    target = path.resolve()
    return target.parent / f".{target.name}.lock"


@contextlib.contextmanager
def edit_sources(path: Path | None, extra: Path) -> Iterator[SourceEditor]:
    """The editor of the source file in use, read and kept under an exclusive lock until the block ends.

    Without it, two edits at once each read the file, then each wrote its own copy back: the
    edit saved first was lost. The lock (``flock`` on :func:`lock_path`) is the system's, so a
    process that dies holding it releases it.
    """
    lock = lock_path(path or extra)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a", encoding="utf-8")  # noqa: SIM115 (held until the edit ends)
    except OSError as exc:
        raise ConfigError(f"cannot lock {path or extra} for editing: {exc.strerror or exc}") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield SourceEditor(path, extra)


class SourceEditor:
    """The source file in use and its edits: DIGEST_SOURCES when set, else the extra file.

    With the extra file, the built-in list stays as shipped: a built-in source is turned
    off or on by an ``[[override]]`` in the extra file and cannot be removed.
    """

    def __init__(self, path: Path | None, extra: Path) -> None:
        self.replacing = path is not None
        self.file = read_source_file(path or extra, overrides=not self.replacing,
                                     missing_ok=not self.replacing)
        self.builtin: list[SourceSpec] = [] if self.replacing else load_file(default_sources_path())
        self._specs: list[SourceSpec] | None = None  # what the file now says, kept while adding
        self._urls: dict[tuple[str, str, str, str], str] = {}

    @property
    def path(self) -> Path:
        """The file every edit is written to."""
        return self.file.path

    def specs(self) -> list[SourceSpec]:
        """Every configured source as a run would load it."""
        if self._specs is None:
            base = with_overrides(self.builtin, self.file.overrides, self.path)
            self._specs = merged(base, default_sources_path(), self.file.specs(), self.path)
            self._urls = {url_identity(s.url): s.key for s in self._specs}
        return self._specs

    def key_of_url(self, url: str) -> str | None:
        """The key of the configured source that fetches ``url``, if any."""
        self.specs()
        return self._urls.get(url_identity(url))

    def add(self, spec: SourceSpec) -> None:
        """Append ``spec`` (checked by :func:`check_source`); ConfigError when its key or URL is taken."""
        specs = self.specs()
        if spec.key in {s.key for s in specs}:
            where = "built-in" if self._builtin(spec.key) else "configured"
            raise ConfigError(f"a {where} source already has the key {spec.key!r}; choose another")
        taken = self.key_of_url(spec.url)
        if taken is not None:
            raise ConfigError(f"the source {taken!r} already fetches {spec.url}")
        table: dict[str, Any] = {"key": spec.key, "name": spec.name, "url": spec.url}
        if spec.kind != "rss":
            table["kind"] = spec.kind
        table["weight"] = spec.weight
        if not spec.enabled:
            table["enabled"] = False
        self.file.tables.append(table)
        specs.append(spec)
        self._urls[url_identity(spec.url)] = spec.key

    def remove(self, key: str) -> None:
        """Drop the source ``key`` from the file; a built-in one is refused (disable it instead)."""
        if self._builtin(key):
            raise ConfigError(f"{key!r} is a built-in source and cannot be removed; "
                              f"turn it off with: digest sources disable {key}")
        self.file.tables.remove(self._table(key))
        self._specs = None

    def set_enabled(self, key: str, enabled: bool) -> bool:
        """Turn ``key`` on or off; False when it already was (nothing to write)."""
        self._specs = None
        builtin = self._builtin(key)
        if builtin is None:
            table = self._table(key)
            if table.get("enabled", True) == enabled:
                return False
            if enabled:
                table.pop("enabled", None)
            else:
                table["enabled"] = False
            return True
        if self.file.overrides.get(key, builtin.enabled) == enabled:
            return False
        if enabled == builtin.enabled:  # back to the shipped state: no override needed
            self.file.overrides.pop(key, None)
        else:
            self.file.overrides[key] = enabled
        return True

    def save(self) -> None:
        """Write the file in use (atomically)."""
        self.file.save()

    def _builtin(self, key: str) -> SourceSpec | None:
        return next((s for s in self.builtin if s.key == key), None)

    def _table(self, key: str) -> dict[str, Any]:
        for table in self.file.tables:
            if str(table.get("key", "")).strip() == key:
                return table
        keys = [s.key for s in self.specs()]
        close = difflib.get_close_matches(key, keys, n=1)
        hint = f"; did you mean {close[0]}?" if close else " (digest sources list shows them)"
        raise ConfigError(f"no source has the key {key!r}{hint}")
