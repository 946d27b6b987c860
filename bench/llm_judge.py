"""The LLM triage's quality: relevance P/R and layer micro-F1 on the two-reader sets.

    DIGEST_LLM_API_KEY=... [DIGEST_LLM_BASE_URL=... DIGEST_LLM_MODEL=...] \\
        .venv/bin/python bench/llm_judge.py [--sets SET ...] [--cache FILE]

Every entry of each set goes through the path a build in LLM mode takes with
``DIGEST_LLM_TRIAGE=all`` (:func:`digest.build.triage.triage_verdicts`, with no
limit: a set is not a day): the rules classify it, then the model, asked with the
real ``openai`` client in batches of ``TRIAGE_BATCH``, decides its relevance and
layers. Printed per set, whole and per kind, beside the rules' own figures on the
same entries, then the sets pooled, then what it cost. The sets default to those
never tuned on (``quality.NEVER_TRAINED``). Answers are
cached in ``--cache`` (SQLite; default a temporary file), so a rerun with the same
model and prompts costs no tokens. An entry's source is named as a feed would name
it: "arXiv cs.PL" for arXiv, the repository (``owner/name``) for a blog or a release.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from labelled import Example, Prediction, count, report  # noqa: E402
from quality import (  # noqa: E402
    DOUBLE_KINDS,
    DOUBLE_SETS,
    NEVER_TRAINED,
    double_rows,
    load_double,
    repository,
)

from digest.analyze.classify import classify  # noqa: E402
from digest.analyze.taxonomy import Taxonomy, load_taxonomy  # noqa: E402
from digest.build.triage import TriageCounts, triage_verdicts  # noqa: E402
from digest.config import load_settings  # noqa: E402
from digest.domain.errors import ConfigError  # noqa: E402
from digest.domain.items import Item  # noqa: E402
from digest.store.db import open_database  # noqa: E402
from digest.write.llm import LLMClient  # noqa: E402


def source_names(named: str) -> dict[str, tuple[str, str | None]]:
    """A set's ids, each with the name its feed would give it and its URL (None if not one)."""
    names: dict[str, tuple[str, str | None]] = {}
    for row in double_rows(named):
        source = str(row["source"])
        name = f"arXiv {source.split('-', 1)[1]}" if source.startswith("arxiv-") else repository(row)
        url = str(row["id"]) if str(row["id"]).startswith(("http://", "https://")) else None
        names[str(row["id"])] = (name, url)
    return names


def items_of(named: str, examples: Sequence[Example]) -> list[Item]:
    """The set's entries as the pipeline holds them (ids 1..n, the feed's name and URL)."""
    names = source_names(named)
    return [replace(e.item(n), source_name=names[e.id][0], url=names[e.id][1])
            for n, e in enumerate(examples, start=1)]


async def judged(client: LLMClient, items: Sequence[Item], taxonomy: Taxonomy,
                 counts: TriageCounts) -> tuple[list[Prediction], list[Prediction]]:
    """The rules' predictions and the triage's, for every entry (``counts``: what it did)."""
    cases = [(item, classify(item, taxonomy)) for item in items]
    verdicts = await triage_verdicts(client, cases, taxonomy, counts, scope="all")
    rules = [(v.relevant, frozenset(v.layers)) for _, v in cases]
    return rules, [(v.relevant, frozenset(v.layers)) for v in verdicts]


def _line(name: str, examples: Sequence[Example], predicted: Sequence[Prediction]) -> str:
    quality = count(examples, predicted)
    return (f"{name:<28} relevance P {quality.relevance.precision:.3f} R {quality.relevance.recall:.3f}"
            f"   layer micro-F1 {quality.micro.f1:.3f}")


async def measure(client: LLMClient, sets: Sequence[str], taxonomy: Taxonomy) -> None:
    """Print each set's figures: the LLM triage's, whole, per kind and per layer, then the rules'.

    With more than one set, last the sets pooled.
    """
    all_gold: list[Example] = []
    all_llm: list[Prediction] = []
    all_rules: list[Prediction] = []
    for named in sets:
        gold = load_double(named)
        counts = TriageCounts()
        rules, llm = await judged(client, items_of(named, gold), taxonomy, counts)
        tuned = "tuned on by the rules" if DOUBLE_SETS[named][1] else "never tuned on"
        print(f"######## {named}: {len(gold)} entries ({tuned}); the LLM answered for "
              f"{counts.answered} of {counts.asked} (the rules decide the rest)")
        print(report(f"{named} (LLM triage)", count(gold, llm)))
        for kind, name in DOUBLE_KINDS.items():
            chosen = [i for i, e in enumerate(gold) if e.source_kind == kind]
            if chosen:
                print(_line(f"  {name} (LLM triage)", [gold[i] for i in chosen], [llm[i] for i in chosen]))
        print(_line("  the rules alone", gold, rules))
        all_gold += gold
        all_llm += llm
        all_rules += rules
    if len(sets) > 1:
        print(f"######## pooled: {len(all_gold)} entries of {', '.join(sets)}")
        print(_line("  LLM triage", all_gold, all_llm))
        print(_line("  the rules alone", all_gold, all_rules))


async def run(sets: Sequence[str], cache: Path) -> int:
    """Measure ``sets`` with the configured endpoint; 2 with a one-line error when there is none."""
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"bench/llm_judge.py: {exc}", file=sys.stderr)
        return 2
    if settings.llm_api_key is None:
        print("bench/llm_judge.py: set DIGEST_LLM_API_KEY (and DIGEST_LLM_BASE_URL, DIGEST_LLM_MODEL) "
              "to the endpoint to measure", file=sys.stderr)
        return 2
    taxonomy = load_taxonomy()
    async with open_database(f"sqlite+aiosqlite:///{cache}") as sessions:
        client = LLMClient(api_key=settings.llm_api_key.get_secret_value(),
                           base_url=settings.llm_base_url, model=settings.llm_model,
                           timeout=settings.llm_timeout, daily_tokens=10**9, sessions=sessions,
                           day_start=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
        try:
            print(f"######## the LLM triage with {settings.llm_model} at {settings.llm_base_url}")
            await measure(client, sets, taxonomy)
        finally:
            await client.aclose()
        print(f"######## cost: {client.calls} request(s), {client.tokens} token(s), "
              f"{client.cache_hits} answer(s) from the cache; failures: "
              f"{dict(client.failures) or 'none'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments and measure."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sets", nargs="+", choices=list(DOUBLE_SETS),
                        default=[s for s in DOUBLE_SETS if s in NEVER_TRAINED],
                        help="the two-reader sets to measure (default: those never tuned on)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="SQLite file that keeps the answers (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.cache is not None:
        return asyncio.run(run(args.sets, args.cache))
    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(run(args.sets, Path(tmp) / "answers.sqlite"))


if __name__ == "__main__":
    raise SystemExit(main())
