"""The samples for one ``now``: the items they carry, and the files that carry them."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from digest.domain.errors import DigestError
from digest.ingest.samples.content import load_content
from digest.ingest.samples.entries import SampleItem, check_now
from digest.ingest.samples.feeds import FEEDS
from digest.ingest.samples.renderers import FORMATS


def sample_items(now: datetime) -> list[SampleItem]:
    """Every item the sample feeds carry when written for ``now``, feed by feed."""
    now, content = check_now(now), load_content()
    return [item for feed in FEEDS for item in FORMATS[feed.style].items(feed, content, now)]


def _render_sources(now: datetime) -> str:
    out = [
        # The module path of this comment predates the package move; the bytes stay as they were.
        "# Offline sample sources written by digest.samples.write_samples().",
        f"# Items are dated relative to {now.isoformat()}; urls are relative to this file.",
    ]
    for feed in FEEDS:
        out += [
            "",
            "[[source]]",
            f"key = {json.dumps(feed.key)}",
            f"name = {json.dumps(feed.name)}",
            f"url = {json.dumps(feed.filename)}",
            f"kind = {json.dumps(feed.kind)}",
            f"weight = {feed.weight}",
        ]
    return "\n".join(out) + "\n"


def write_samples(out_dir: Path, now: datetime) -> Path:
    """Write the sample feeds and their ``sources.toml`` into ``out_dir``; return the TOML path.

    ``now`` must be timezone-aware; every item is dated relative to it (whole
    seconds). Existing files of the same names are overwritten, others are left
    alone. The same ``now`` always gives byte-identical files.
    """
    now, content = check_now(now), load_content()
    documents = {feed.filename: FORMATS[feed.style].document(feed, content, now) for feed in FEEDS}
    documents["sources.toml"] = _render_sources(now)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, document in documents.items():
            (out_dir / name).write_bytes(document.encode("utf-8"))
    except OSError as exc:
        raise DigestError(f"cannot write the samples to {out_dir}: {exc.strerror or exc}") from None
    return out_dir / "sources.toml"
