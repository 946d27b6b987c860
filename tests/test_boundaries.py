"""Dependency rules: the core never imports the adapters, and importing does no work."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

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


# --- the layering: which package may import what (read with ast, every import, also inside functions)

STDLIB = sys.stdlib_module_names
PACKAGES = ("domain", "ingest", "analyze", "write", "build", "store", "render", "deliver", "subscribe",
            "web", "cli")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")[: -node.level] if node.level else []
    return ".".join([*base, node.module] if node.module else base)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (also under TYPE_CHECKING and in functions)."""
    module, found = _module_name(path), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return found


def _runtime_imports(path: Path) -> set[str]:
    """The imports that run: those under ``if TYPE_CHECKING:`` are left out."""
    module, found = _module_name(path), set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(child) for body in node.body for child in ast.walk(body))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package.replace(".", "/")).rglob("*.py"))


def _violations(package: str, allowed: Callable[[str], bool]) -> list[str]:
    return sorted(f"{_module_name(p)} imports {name}" for p in _files(package)
                  for name in _imports(p) if not allowed(name))


def _first_party(name: str) -> bool:
    return name.split(".")[0] in ("digest", "bot")


def _within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_domain_imports_only_the_standard_library() -> None:
    assert _violations("digest.domain", lambda n: n.split(".")[0] in STDLIB
                       or _within(n, "digest.domain") or n == "__future__") == []


def test_analyze_does_no_io() -> None:
    io = ("sqlalchemy", "httpx", "openai", "feedparser", "aiosmtplib", "jinja2", "digest.store")
    assert _violations("digest.analyze", lambda n: not _within(n, *io)) == []


@pytest.mark.parametrize(("library", "owner"), [
    ("httpx", ("digest.ingest",)), ("feedparser", ("digest.ingest",)), ("openai", ("digest.write",)),
    ("jinja2", ("digest.render",)), ("aiosmtplib", ("digest.deliver",)),
])
def test_each_client_library_lives_in_one_package(library: str, owner: tuple[str, ...]) -> None:
    users = sorted({_module_name(p) for p in _files("digest") if any(
        _within(n, library) for n in _runtime_imports(p))})
    assert [u for u in users if not _within(u, *owner)] == []


def test_deliver_never_imports_web_or_cli() -> None:
    assert _violations("digest.deliver", lambda n: not _within(n, "digest.web", "digest.cli")) == []


def test_web_never_imports_build_or_cli() -> None:
    assert _violations("digest.web", lambda n: not _within(n, "digest.build", "digest.cli")) == []


def test_nothing_imports_the_cli() -> None:
    outside = [p for p in _files("digest") if not _within(_module_name(p), "digest.cli", "digest.__main__")]
    outside += _files("bot")
    assert sorted(f"{_module_name(p)} imports {n}" for p in outside for n in _imports(p)
                  if _within(n, "digest.cli")) == []


def test_bot_reaches_the_core_through_queries_and_services() -> None:
    banned = ("sqlalchemy", "digest.store.models")
    assert _violations("bot", lambda n: not _within(n, *banned)) == []


def _graph() -> dict[str, set[str]]:
    """First-party module -> the first-party modules it imports at run time."""
    paths = {_module_name(p): p for root in ("digest", "bot") for p in _files(root)}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        graph[module] = {n for n in _runtime_imports(path) if n in paths and n != module}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, or None (depth-first search with colours)."""
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if colour.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in colour and (found := visit(nxt)):
                return found
        stack.pop()
        colour[node] = 2
        return None

    for start in sorted(graph):
        if start not in colour and (found := visit(start)):
            return found
    return None


def test_the_import_graph_has_no_cycle() -> None:
    graph = _graph()
    # A package's __init__ importing its modules is not a cycle with them.
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
