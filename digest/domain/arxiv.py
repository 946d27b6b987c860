"""The arXiv listing header, named once: ``arXiv:2609.01234v1 Announce Type: new Abstract: ...``.

Ingestion reads the announce type from it (group 1) and strips it from the
summary; the extractive writer strips it from any text that still has it.
Standard library only.
"""

from __future__ import annotations

import re

ARXIV_PREFIX_RE = re.compile(r"^\s*arXiv:\S+\s+Announce Type:\s*([\w-]+)\s*(?:Abstract:\s*)?", re.I)
