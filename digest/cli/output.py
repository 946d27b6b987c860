"""What every command group shares: JSON and plain-text tables on stdout, the date argument."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import unicodedata
from collections.abc import Sequence
from typing import Any


def print_json(data: Any) -> None:
    """Machine output: JSON on stdout."""
    json.dump(data, sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")


def iso_date(text: str) -> dt.date:
    """The ``--date YYYY-MM-DD`` argument type: a bad date is a usage error (exit 2)."""
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from None


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int, right: bool) -> str:
    gap = " " * (width - _width(text))
    return gap + text if right else text + gap


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[int] = ()) -> str:
    """Align ``rows`` under ``headers``; columns whose index is in ``right`` align right."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(_width(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(_pad(cell, widths[i], i in right) for i, cell in enumerate(row)).rstrip()
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def tell_wait(name: str) -> None:
    """A run lock is taken: say once, on stderr, what the command waits for."""
    print(f"digest: waiting for another {name} ...", file=sys.stderr, flush=True)


def layers_help(what: str) -> str:
    """The help of an option taking layers: what it does, the nine ids, and "all"."""
    from digest.domain.layers import LAYER_IDS

    return f"{what}: comma-separated layer ids, or all ({', '.join(LAYER_IDS)})"


def layers_arg(text: str) -> list[str]:
    """The type of every ``--layers`` option: ids in ``LAYER_IDS`` order; ``all`` is every layer.

    The subscribers' rule (:func:`digest.subscribe.validation.validate_layers`), so the
    command line, the web form, the chat commands and CSV import refuse the same lists;
    a bad list is a usage error with the closest id (exit 2).
    """
    from digest.domain.errors import SubscriptionError
    from digest.subscribe.validation import validate_layers

    try:
        return validate_layers(text)
    except SubscriptionError as exc:
        raise argparse.ArgumentTypeError(exc.detail) from None


def score_arg(text: str) -> float:
    """The type of every ``--min-score`` option: the subscribers' rule, a number from 0 to 100 (exit 2)."""
    from digest.domain.errors import SubscriptionError
    from digest.subscribe.validation import validate_min_score

    try:
        value: object = float(text)
    except ValueError:
        value = text  # refused below, in the rule's own words
    try:
        return validate_min_score(value)
    except SubscriptionError as exc:
        raise argparse.ArgumentTypeError(exc.detail) from None


def seconds_arg(text: str) -> float:
    """The type of an option taking a time span (``worker --poll``): a finite number of seconds above 0."""
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text!r}")
    return value
