"""compiler-digest: a daily digest of compiler-technology news.

The core package. It never imports the chat adapters in ``bot/``; those are
found through the ``compiler_digest.channels`` entry points.
"""

__version__ = "0.1.0"
