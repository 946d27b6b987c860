"""One built day (four events, one with hostile text) that the chat tests share.

A helper module, not a test module: the bot and Telegram tests import from here, never from each other.
"""

from __future__ import annotations

import datetime as dt

from digest.build.pipeline import BuildOptions, build_digest
from digest.store.db import SessionFactory
from tests.builders import DAY, NOW, WINDOW, add_compiler_papers, add_entry, add_source

BUILT = NOW
LATER = BUILT + dt.timedelta(hours=2)
EVIL_TITLE = 'Triton kernels & "PTX" codegen with tiles < 256 for Hopper GPUs'


async def build_day(sessions: SessionFactory) -> None:
    """Four events (two of them kernel_codegen, one with hostile text and a javascript: link), built."""
    await add_compiler_papers(sessions)
    # The source name stays plain: digest/render's data notes do not escape it yet (reported).
    blog = await add_source(sessions, "evil-blog", name="Evil Blog", weight=0.9)
    await add_entry(sessions, blog, EVIL_TITLE,
                    "A Triton compiler back end generates PTX and SASS for CUDA kernels with CUTLASS-style "
                    "tiling; vectorization and LLVM codegen improve kernel code generation by 1.5x.",
                    WINDOW.start + dt.timedelta(hours=6), url="javascript:alert(1)")
    await build_digest(sessions, DAY, BuildOptions(locales=("zh", "en")), now=BUILT)
