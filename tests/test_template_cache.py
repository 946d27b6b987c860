"""Compiled templates kept between processes: the same output, compiled once, never a failed render."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from digest.domain.views import DigestView, EventView
from digest.render.renderer import Renderer
from digest.render.template_cache import compiled_with

FORMATS = ("md", "text", "html")


@pytest.fixture
def view(make_view: Callable[..., DigestView], make_event: Callable[..., EventView]) -> DigestView:
    """A small digest with markup in it (escaped in HTML, kept in Markdown)."""
    return make_view((make_event(1, title="<b>Triton</b> 3.6 & MLIR"), make_event(2)))


def never_compiles(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("compiled a template the cache holds")


def test_a_later_renderer_loads_the_compiled_templates_and_renders_the_same(
        tmp_path: Path, view: DigestView, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = {fmt: Renderer().render(view, fmt) for fmt in FORMATS}
    first = Renderer(compiled=tmp_path / "cache")
    assert {fmt: first.render(view, fmt) for fmt in FORMATS} == plain
    assert first.env.cache is not None
    assert len(list((tmp_path / "cache").iterdir())) == len(first.env.cache) > len(FORMATS)  # and base
    later = Renderer(compiled=tmp_path / "cache")
    monkeypatch.setattr(later.env, "compile", never_compiles)
    assert {fmt: later.render(view, fmt) for fmt in FORMATS} == plain


@pytest.mark.parametrize("where", ["no var dir", "a file"])
def test_a_folder_that_cannot_keep_them_only_means_compiling(tmp_path: Path, view: DigestView,
                                                             where: str) -> None:
    folder = tmp_path / "var" / "template_cache" if where == "no var dir" else tmp_path / "template_cache"
    if where == "a file":
        folder.write_text("not a folder")
    assert Renderer(compiled=folder).render(view, "md") == Renderer().render(view, "md")
    assert not (tmp_path / "var").exists() and not folder.is_dir()  # the var dir is never made for it


def test_a_damaged_entry_is_compiled_again(tmp_path: Path, view: DigestView) -> None:
    expected = Renderer(compiled=tmp_path).render(view, "md")
    (entry,) = tmp_path.iterdir()
    good = entry.read_bytes()
    for damaged in (b"", good[:20], good[:40] + b"\x00garbage" * 8):
        entry.write_bytes(damaged)
        assert Renderer(compiled=tmp_path).render(view, "md") == expected
        assert entry.read_bytes() == good  # rewritten whole


def test_code_compiled_under_other_settings_is_not_reused(tmp_path: Path, view: DigestView) -> None:
    cached = Renderer(compiled=tmp_path)
    cached.render(view, "md")
    other = Renderer(compiled=tmp_path)
    other.env.trim_blocks = False  # another whitespace rule gives other output from the same source
    assert other.render(view, "md") == _untrimmed(view)
    env = Renderer().env
    assert compiled_with(env, "digest.html.j2") != compiled_with(env, "digest.md.j2")  # autoescaped or not


def _untrimmed(view: DigestView) -> str:
    renderer = Renderer()
    renderer.env.trim_blocks = False
    return renderer.render(view, "md")
