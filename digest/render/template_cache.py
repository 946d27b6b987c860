"""Compiled templates kept between processes: a command compiles a template once, not on every run.

Compiling ``digest.md.j2`` (lexing, parsing, generating and compiling its Python) takes some
15 ms of every ``digest preview``; loading the code object takes well under one. Jinja's
:class:`~jinja2.FileSystemBytecodeCache` keeps that code per template, checked against a
checksum of the template's source. This cache also

- checks what else the compiled code depends on (:func:`compiled_with`): Jinja's version, the
  environment's syntax and whitespace options, whether it autoescapes that template, the
  filters and tests a template may name. Code compiled under other settings is never reused;
- is only a shortcut: a folder that cannot be made or written (a read-only var dir), or an entry
  that cannot be read, means compiling as if there were no cache, never a failed render.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from jinja2.bccache import Bucket, FileSystemBytecodeCache


def compiled_with(env: jinja2.Environment, name: str) -> str:
    """Everything besides its source that the compiled code of template ``name`` depends on, as one line."""
    autoescape = env.autoescape(name) if callable(env.autoescape) else env.autoescape
    return repr((
        jinja2.__version__, env.block_start_string, env.block_end_string, env.variable_start_string,
        env.variable_end_string, env.comment_start_string, env.comment_end_string,
        env.line_statement_prefix, env.line_comment_prefix, env.trim_blocks, env.lstrip_blocks,
        env.newline_sequence, env.keep_trailing_newline, autoescape, env.optimized, env.is_async,
        env.finalize is not None, sorted(env.extensions), sorted(env.filters), sorted(env.tests),
    ))


class TemplateCache(FileSystemBytecodeCache):
    """Compiled templates in ``folder``, made on first use inside its existing parent (the var dir)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(str(folder))
        self.folder = folder

    def get_bucket(self, environment: jinja2.Environment, name: str, filename: str | None,
                   source: str) -> Bucket:
        """The entry of template ``name``, loaded if it was compiled from this source with these settings."""
        bucket = Bucket(environment, self.get_cache_key(name, filename),
                        self.get_source_checksum(compiled_with(environment, name) + "\n" + source))
        self.load_bytecode(bucket)
        return bucket

    def load_bytecode(self, bucket: Bucket) -> None:
        """The stored code, if any; an entry that cannot be read is compiled again."""
        try:
            super().load_bytecode(bucket)
        except Exception:  # an unreadable folder, or a damaged entry (its checksum is a pickle: any error)
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        """Keep the code just compiled (written aside, then renamed), unless the folder cannot take it."""
        try:
            self.folder.mkdir(exist_ok=True)
            super().dump_bytecode(bucket)
        except OSError:
            pass  # no cache this time: the template was compiled and renders all the same
