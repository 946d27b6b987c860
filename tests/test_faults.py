"""Injected faults at every network edge, each through the real code path over real sockets.

Each test produces rows of docs/reliability.md:

- feeds: ``digest fetch --json`` (the real CLI, in-process) against the real HTTP
  server of tests/feedserver.py: a source that never answers, one that answers
  500, one that streams 10 GB (with and without a Content-Length), one that
  serves an HTML page, one that redirects to itself; beside a good one;
- the LLM: a build with the real ``openai`` client against tests/fake_llm.py,
  one event per fault (429, 500, content that is not JSON, a figure no source
  states);
- SMTP: a connection dropped in the middle of DATA (tests/smtpserver.py);
- the rule by which senders wait out a database that went away (the restart
  itself is tests/test_pg_restart.py).
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from digest.build.pipeline import BuildOptions, build_digest
from digest.cli import main as cli
from digest.deliver.retry import through_outage
from digest.deliver.smtp import SmtpChannel, SmtpConfig
from digest.domain.errors import StorageError
from digest.store.db import SessionFactory, is_disconnect
from digest.store.models import Delivery, Subscriber
from digest.store.queries import load_view
from digest.write import prompts
from digest.write.llm import LLMClient
from tests.builders import DAY, WINDOW, add_compiler_papers, add_entry, add_source
from tests.builders import NOW as BUILD_NOW
from tests.cli_env import private_env
from tests.fake_llm import FakeLLM, answer, malformed, rate_limited, server_error
from tests.fake_llm import Reply as FakeReply
from tests.feeds import rfc822, rss
from tests.feedserver import FeedServer, Reply
from tests.publish_runner import DAY as PUBLISH_DAY
from tests.publish_runner import add_subscriber, build_day, make_runner
from tests.smtpserver import Faults, smtp_server

NOW = dt.datetime(2026, 9, 29, 3, 0, tzinfo=dt.UTC)
Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
           capsys: pytest.CaptureFixture[str]) -> Iterator[Run]:
    """Run ``digest ARGS`` in-process on a private SQLite database: (code, stdout, stderr)."""
    private_env(monkeypatch, tmp_path, "faults.db", DIGEST_NOW=NOW.isoformat())

    def run(*args: str, **env: str) -> tuple[int, str, str]:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        code = cli.main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    yield run


# ---------------------------------------------------------------- feeds

TEN_GB = 10 * 1024**3
CAP = 1024 * 1024  # DIGEST_FETCH_MAX_BYTES in this test
HTML = (b"<!DOCTYPE html><html><head><title>Blog</title></head><body><p>We moved the feed.</p>"
        b"</body></html>")


def _news(*titles: str) -> bytes:
    when = rfc822(NOW - dt.timedelta(hours=1))
    return rss([{"title": t, "guid": f"tag:ex,2026:{t}", "link": f"https://ex.org/{t}", "pubDate": when}
                for t in titles])


def _sources(path: Path, urls: dict[str, str]) -> Path:
    lines = [f'[[source]]\nkey = "{key}"\nname = "{key}"\nurl = "{url}"\nkind = "rss"\n'
             for key, url in urls.items()]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


FEED_FAULTS = {  # key: (path, reply, the one-line error, requests per fetch)
    "hangs": ("/hangs.xml", Reply(hang=60), "timed out after 1 s for the whole fetch (after 1 retry)", 2),
    "http500": ("/500.xml", Reply(b"oops", status=500), "HTTP 500 Internal Server Error (after 1 retry)", 2),
    "10gb-streamed": ("/10gb.xml", Reply(b"<rss>", padding=TEN_GB, content_length=False),
                      f"body larger than the {CAP}-byte cap (max_bytes); aborted", 1),
    "10gb-declared": ("/10gb-declared.xml", Reply(b"<rss>", padding=TEN_GB),
                      f"body larger than the {CAP}-byte cap (max_bytes); aborted", 1),
    "html": ("/blog", Reply(HTML, content_type="text/html; charset=utf-8"),
             "not a feed: got an HTML page", 1),
    "loop": ("/loop", Reply(status=302, headers={"Location": "/loop"}), "more than 3 redirects", 4),
}


def test_a_failing_feed_fails_alone_in_one_line_stores_nothing_and_is_tried_next_run(
        digest: Run, tmp_path: Path) -> None:
    with FeedServer() as server:
        urls = {"good": server.serve("/good.xml", Reply(_news("a", "b")))}
        for key, (path, reply, _, _) in FEED_FAULTS.items():
            urls[key] = server.serve(path, reply)
        limits = {"DIGEST_SOURCES": str(_sources(tmp_path / "sources.toml", urls)),
                  "DIGEST_FETCH_TIMEOUT": "1", "DIGEST_FETCH_MAX_BYTES": str(CAP),
                  "DIGEST_FETCH_MAX_REDIRECTS": "3"}
        code, out, err = digest("fetch", "--json", **limits)
        first = {row["source"]: row for row in json.loads(out)}
        sent_first = dict(server.sent)
        again_code, again_out, _ = digest("fetch", "--json")
        second = {row["source"]: row for row in json.loads(again_out)}
        requests = {key: len(server.requests_to(path)) for key, (path, *_) in FEED_FAULTS.items()}
        _, listed, _ = digest("sources", "list", "--json")
    assert code == 0 and again_code == 0, err  # one source was fetched: the run goes on
    assert (first["good"]["status"], first["good"]["entries_new"]) == ("ok", 2)
    for key, (_, _, reason, per_fetch) in FEED_FAULTS.items():
        assert (first[key]["status"], first[key]["error"]) == ("error", reason), key
        assert (second[key]["status"], second[key]["error"]) == ("error", reason), key
        assert requests[key] == 2 * per_fetch, key  # tried again on the next run (no backoff)
    assert max(sent_first["/10gb.xml"], sent_first["/10gb-declared.xml"]) < 64 * CAP  # not 10 GB
    assert first["10gb-streamed"]["http_status"] == 200 and first["http500"]["http_status"] == 500
    states = {row["key"]: row for row in json.loads(listed)}
    assert (states["good"]["entries"], states["good"]["consecutive_failures"]) == (2, 0)
    for key, (_, _, reason, _) in FEED_FAULTS.items():
        assert (states[key]["entries"], states[key]["consecutive_failures"]) == (0, 2), key
        assert states[key]["last_error"] == reason
    assert second["good"]["status"] == "not_modified"



# ---------------------------------------------------------------- the LLM

MODEL = "fake-model"
EXTRA_PAPERS = [
    ("Tiling Triton Kernels with Equality Saturation",
     "We tile Triton GPU kernels by equality saturation over a loop IR and pick the tiling with a "
     "learned cost model; the generated kernels match hand-tuned CUTLASS on GEMM."),
    ("Lowering StableHLO Collectives to NCCL without a Runtime",
     "We compile StableHLO all-reduce and all-gather collectives straight to NCCL calls in the "
     "XLA GPU back end, removing the runtime dispatch layer for sharded programs."),
]
# The fault each event meets (by the first word of its title): the rest answer at once.
LLM_FAULTS = {"Splyce": "429", "Learning": "500", "Torch-PIM": "not JSON", "Tiling": "invented figure",
              "Lowering": "429 once"}


def _writer(seen: Counter[str]) -> Callable[[dict[str, Any]], FakeReply]:
    """Answer each event's prompt as :data:`LLM_FAULTS` says; the triage and the day's prompt well."""
    def respond(body: dict[str, Any]) -> FakeReply:
        user = json.loads(body["messages"][-1]["content"])
        if body["messages"][0]["content"] == prompts.TRIAGE_SYSTEM:  # every event relevant
            return answer({"items": [{"id": row["id"], "relevant": True, "layers": []}
                                     for row in user["items"]]})
        if "event_title" not in user:
            return answer({"title": "Compiler news of the day", "overview": "Five pieces of work.",
                           "watchlist": ["Splyce"]})
        title = str(user["event_title"])
        first = title.split()[0].rstrip(":")
        seen[first] += 1
        fault = LLM_FAULTS.get(first)
        if fault == "429" or (fault == "429 once" and seen[first] == 1):
            return rate_limited(0.25)
        if fault == "500":
            return server_error(500)
        if fault == "not JSON":
            return malformed()
        summary = "The work proposes a compiler method."
        if fault == "invented figure":
            summary += " It runs 7.3x faster than cuBLAS."  # no source says 7.3x
        return answer({"title": title, "summary": summary, "why_it_matters": "It matters for compilers.",
                       "layers": user["layers"], "watch": [title[:20]]})
    return respond


async def test_llm_faults_are_retried_by_the_policy_then_written_extractively_and_shown(
        sqlite_sessions: SessionFactory, caplog: pytest.LogCaptureFixture) -> None:
    await add_compiler_papers(sqlite_sessions, WINDOW.start)
    blog = await add_source(sqlite_sessions, "compiler-blog", name="Compiler Blog", weight=0.7)
    for n, (title, summary) in enumerate(EXTRA_PAPERS):
        await add_entry(sqlite_sessions, blog, title, summary, WINDOW.start + dt.timedelta(hours=n + 5))
    seen: Counter[str] = Counter()
    waits: list[float] = []

    async def sleep(seconds: float) -> None:  # the policy's waits, recorded, not waited
        waits.append(seconds)

    with FakeLLM(default=_writer(seen)) as fake:
        client = LLMClient(api_key="sk-test", base_url=fake.base_url, model=MODEL, timeout=5,
                           daily_tokens=100_000, sessions=sqlite_sessions, day_start=WINDOW.end,
                           max_attempts=3, backoff=0.05, sleep=sleep)
        try:
            report = await build_digest(sqlite_sessions, DAY, BuildOptions(locales=("en",)), now=BUILD_NOW,
                                        llm=client)
        finally:
            await client.aclose()
    assert report.created and report.events == 5
    assert seen == Counter({"Splyce": 3, "Learning": 3, "Torch-PIM": 1, "Tiling": 1, "Lowering": 2})
    assert sorted(waits) == sorted([0.25, 0.25, 0.05, 0.1, 0.25])  # retry-after; doubling backoff
    assert report.llm["fallbacks"] == {"rate_limited": 1, "server_error": 1, "bad_json": 1, "figures": 1}
    async with sqlite_sessions() as session:
        view = await load_view(session, DAY, "en")
    written = {e.title.split()[0].rstrip(":"): e.written_by for e in view.events}
    assert written == {"Splyce": "extractive", "Learning": "extractive", "Torch-PIM": "extractive",
                       "Tiling": "extractive", "Lowering": MODEL}
    assert report.generation_mode == "mixed" and view.generation_mode == "mixed"
    assert dict(view.modes_used) == {MODEL: 2, "extractive": 4}  # 5 events and the day
    assert all("7.3x" not in e.summary for e in view.events)
    rejected = [r.getMessage() for r in caplog.records if "rejected (figures)" in r.getMessage()]
    assert len(rejected) == 1 and "7.3x" in rejected[0] and "not in the sources" in rejected[0]


# ---------------------------------------------------------------- SMTP

async def test_a_connection_dropped_mid_data_is_resent_whole_on_a_new_connection(
        sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    for name in ("ok", "cut"):
        await add_subscriber(sqlite_sessions, f"{name}@example.com")
    with smtp_server(Faults(cut_first={"cut@example.com"}, cut_after=12)) as server:
        channel = SmtpChannel(SmtpConfig(host=server.host, port=server.port, tls="none", timeout=5,
                                         concurrency=1, envelope_from="digest@example.org"))
        runner = make_runner(sqlite_sessions, {"email": channel})
        report = await runner.publish(PUBLISH_DAY, "en")
        await runner.channels.aclose()
        received = server.by_recipient()
        connections, cut = server.handler.connections, dict(server.handler.cut)
    assert cut == {"cut@example.com": 1}  # the server read 12 lines of it, then dropped the line
    assert {k: len(v) for k, v in received.items()} == {"ok@example.com": 1, "cut@example.com": 1}
    (whole,) = received["cut@example.com"]
    assert whole.message.get_body(("plain",)) is not None and len(whole.data.splitlines()) > 12
    assert connections == 2, "the dropped connection was replaced by a new one"
    async with sqlite_sessions() as session:
        rows = dict((await session.execute(select(Subscriber.address, Delivery.attempts)
                                           .join(Delivery, Delivery.subscriber_id == Subscriber.id))).all())
        statuses = set((await session.scalars(select(Subscriber.status))).all())
    assert rows == {"ok@example.com": 1, "cut@example.com": 2} and statuses == {"active"}
    tally = report.channels["email"]
    assert (tally.sent, tally.retried, tally.failed, tally.deferred) == (2, 1, 0, 0)


# ---------------------------------------------------------------- the database going away (the rule)

class _Shutdown(Exception):
    sqlstate = "57P03"  # what asyncpg raises while PostgreSQL starts up or shuts down


def test_what_counts_as_the_database_going_away() -> None:
    lost = DBAPIError("SELECT 1", None, ConnectionResetError("reset"), connection_invalidated=True)
    assert is_disconnect(ConnectionRefusedError(111, "Connect call failed"))
    assert is_disconnect(lost) and is_disconnect(_Shutdown("the database system is starting up"))
    assert not is_disconnect(IntegrityError("INSERT", None, Exception("duplicate key")))
    assert not is_disconnect(OperationalError("UPDATE", None, Exception("database is locked")))


async def test_a_step_waits_out_an_outage_within_its_patience_and_no_other_failure() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    failures = [ConnectionRefusedError(111, "refused"), ConnectionRefusedError(111, "refused")]

    async def flaky() -> str:
        if failures:
            raise failures.pop()
        return "done"

    assert await through_outage(flaky, lost=is_disconnect, patience=60, sleep=sleep, what="w") == "done"
    assert waits == [0.1, 0.2]

    async def down() -> str:
        raise ConnectionRefusedError(111, "Connect call failed")

    waits.clear()
    with pytest.raises(StorageError, match=r"^email: recording: the database stayed unreachable for 5 s: "):
        await through_outage(down, lost=is_disconnect, patience=5, sleep=sleep, what="email: recording")
    assert sum(waits) == pytest.approx(5) and max(waits) <= 2.0

    async def broken() -> str:
        raise IntegrityError("INSERT", None, Exception("duplicate key"))

    waits.clear()
    with pytest.raises(IntegrityError):
        await through_outage(broken, lost=is_disconnect, patience=60, sleep=sleep, what="w")
    assert waits == []
