"""The run report as the operator reads it: the admin copy's text and `digest report`'s.

Plain string work on a report's JSON (``DailyReport.as_json``), apart from the
service, so that `digest report` does not import the pipeline to print it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from digest.store.reports import FailingSource

STREAK = 2  # a source failing this many fetches in a row is called out


def admin_text(data: dict[str, Any], trigger: str, failing: Sequence[FailingSource]) -> str:
    """The short text of one run's report (``DailyReport.as_json``) for the operator."""
    sources = data["sources"]
    lines = [f"compiler-digest {trigger} run of {data['date']}: "
             + ("ok" if data["ok"] else f"FAILED: {data['error'] or 'a delivery failed'}"),
             f"sources: {sources['ok']} ok, {len(sources['failed'])} failed"]
    lines += [f"  failed: {f['source']}: {f['error']}" for f in sources["failed"]]
    lines.append(f"entries {data['entries']}, events {data['events']}"
                 + ("" if data["events"] else " (no events in this window)"))
    lines.append(f"built: {_step(data, 'built')}; published: {_step(data, 'published')}")
    if not data["deliveries"]:
        lines.append("deliveries: none")
    for name, tally in data["deliveries"].items():
        counts = ", ".join(f"{k} {v}" for k, v in tally.items() if isinstance(v, int) and v)
        lines.append(f"deliveries {name}: {counts or 'nothing to send'}")
    llm = data["llm"]
    lines.append(f"llm: {llm['calls']} calls, {llm['tokens']} tokens; took {data['seconds']} s")
    if failing:
        lines.append("failing several days in a row:")
        lines += [f"  {s.key}: {s.failures} fetches in a row ({s.error or 'no error kept'})" for s in failing]
    return "\n".join(lines) + "\n"


def _step(data: dict[str, Any], name: str) -> str:
    return "yes" if data[name] else f"no ({data.get(name + '_reason')})"
