"""Publishing a real built digest to a real SMTP server (and fake chat channels): filters, faults, report."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import os
import re
import subprocess
import sys
from collections import Counter
from email import message_from_bytes, policy
from pathlib import Path

import pytest
from sqlalchemy import select

from digest.deliver.channels import Message, Outcome, SendResult
from digest.deliver.mailer import FileOutbox
from digest.deliver.outbox import Held, claim, held_rows
from digest.deliver.publish import PublishOptions
from digest.deliver.sending import DeliveryError
from digest.deliver.smtp import SmtpChannel, SmtpConfig
from digest.domain.errors import BuildError
from digest.domain.status import DeliveryStatus
from digest.store.db import SessionFactory
from digest.store.models import Delivery, Subscriber
from digest.store.queries import load_view
from digest.subscribe.tokens import UNSUBSCRIBE, read_token
from tests.publish_runner import (
    DAY,
    FAST,
    NOW,
    SECRET,
    SITE,
    RecordingChannel,
    StepClock,
    add_subscriber,
    build_day,
    make_runner,
)
from tests.smtpserver import Faults, Received, SMTPTestServer, smtp_server

ROOT = Path(__file__).resolve().parent.parent
CLI_SECRET = "a-test-signing-key-of-at-least-32-characters"


def _smtp(server: SMTPTestServer, password: str | None = None, concurrency: int = 3) -> SmtpChannel:
    return SmtpChannel(SmtpConfig(host=server.host, port=server.port, tls="none", timeout=5,
                                  user="digest" if password else None, password=password,
                                  concurrency=concurrency, envelope_from="digest@example.org"))


def _text(item: Received) -> str:
    body = item.message.get_body(("plain",))
    assert body is not None
    return str(body.get_content())


async def _rows(sessions: SessionFactory) -> dict[str, Delivery]:
    async with sessions() as session:
        rows = (await session.execute(select(Subscriber.address, Delivery)
                                      .join(Delivery, Delivery.subscriber_id == Subscriber.id))).all()
    return {address: row for address, row in rows}


async def _status(sessions: SessionFactory, address: str) -> str:
    async with sessions() as session:
        return str(await session.scalar(select(Subscriber.status).where(Subscriber.address == address)))


async def test_each_reader_receives_exactly_the_events_it_chose(sqlite_sessions: SessionFactory) -> None:
    sessions = sqlite_sessions
    await build_day(sessions)
    async with sessions() as session:
        events = (await load_view(session, DAY, "en")).events
    (top, mid, low) = events
    carried = {la: sum(la in x.layers for x in events) for e in events for la in e.layers}
    only = min(carried, key=lambda la: (carried[la], la))  # the layer fewest events carry
    assert carried[only] < len(events), "some layer leaves an event out"
    filters = {
        "all@example.com": (("frontend", *{la for e in events for la in e.layers}), 0.0),
        "one@example.com": ((only,), 0.0),  # a layer some event lacks (whichever the classifier gave)
        "best@example.com": (tuple(mid.layers), (mid.score + low.score) / 2),
        "none@example.com": (("distributed",), 0.0),
        "high@example.com": (tuple(top.layers), top.score + 1),
    }
    for address, (layers, score) in filters.items():
        await add_subscriber(sessions, address, layers=layers, min_score=score,
                             locale="zh" if address.startswith("one") else "en")
    expected = {a: {e.url for e in events if set(la) & set(e.layers) and e.score >= s}
                for a, (la, s) in filters.items()}
    assert [len(expected[a]) for a in filters] == [3, carried[only], 2, 0, 0]
    with smtp_server() as server:
        runner = make_runner(sessions, {"email": _smtp(server)})
        report = await runner.publish(DAY, "en")
        await runner.channels.aclose()
    got = server.by_recipient()
    assert set(got) == {a for a, urls in expected.items() if urls}
    for address, (item,) in got.items():
        text = _text(item)
        assert {e.url for e in events if e.url and e.url in text} == expected[address], address
        others = [e.title for e in events if e.url not in expected[address]]
        assert not any(title in text for title in others)
    assert runner.composer.groups == 3
    tally = report.channels["email"]
    assert (tally.planned, tally.empty, tally.sent, tally.failed, tally.resent) == (3, 2, 3, 0, 0)
    assert set(await _rows(sessions)) == set(got)


async def test_headers_carry_stable_ids_and_working_links(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    sid = await add_subscriber(sqlite_sessions, "reader@example.com")
    with smtp_server() as server:
        runner = make_runner(sqlite_sessions, {"email": _smtp(server)}, mailto="leave@example.org")
        await runner.publish(DAY, "en")
        await runner.channels.aclose()
    (item,) = server.received
    msg = item.message
    assert msg["Message-ID"] == f"<digest-{DAY}-sub-{sid}@example.org>"
    assert (await _rows(sqlite_sessions))["reader@example.com"].message_id == msg["Message-ID"]
    unsubscribe, mailto = (part.strip(" <>") for part in str(msg["List-Unsubscribe"]).split(","))
    assert mailto == "mailto:leave@example.org?subject=unsubscribe"
    assert unsubscribe.startswith("https://digest.example.org/unsubscribe?token=")
    assert read_token(SECRET, UNSUBSCRIBE, unsubscribe.partition("token=")[2]) == (sid, "reader@example.com")
    assert unsubscribe in _text(item)
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert item.mail_from == "digest@example.org"


async def test_faults_are_retried_bounced_or_contained(sqlite_sessions: SessionFactory) -> None:
    sessions = sqlite_sessions
    await build_day(sessions)
    for name in ("ok", "busy", "gone", "flaky"):
        await add_subscriber(sessions, f"{name}@example.com")
    faults = Faults(refuse={"gone@example.com"}, defer_first={"busy@example.com"},
                    drop_first={"flaky@example.com"})
    with smtp_server(faults) as server:
        runner = make_runner(sessions, {"email": _smtp(server)})
        report = await runner.publish(DAY, "en")
        await runner.channels.aclose()
    assert Counter(r for item in server.received for r in item.rcpt_tos) == Counter(
        ["ok@example.com", "busy@example.com", "flaky@example.com"])
    rows = await _rows(sessions)
    assert {a: r.status for a, r in rows.items()} == {
        "ok@example.com": DeliveryStatus.SENT, "busy@example.com": DeliveryStatus.SENT,
        "flaky@example.com": DeliveryStatus.SENT, "gone@example.com": DeliveryStatus.FAILED}
    assert rows["busy@example.com"].attempts == 2 and rows["ok@example.com"].attempts == 1
    assert "550" in (rows["gone@example.com"].last_error or "")
    assert await _status(sessions, "gone@example.com") == "bounced"
    assert await _status(sessions, "busy@example.com") == "active"
    tally = report.channels["email"]
    assert (tally.sent, tally.failed, tally.retried, tally.deferred) == (3, 1, 2, 0)


async def test_authentication_failure_stops_the_run_and_marks_nobody(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    for n in range(5):
        await add_subscriber(sqlite_sessions, f"r{n}@example.com")
    with smtp_server(Faults(password="right")) as server:
        runner = make_runner(sqlite_sessions, {"email": _smtp(server, password="wrong")})
        with pytest.raises(DeliveryError, match="535"):
            await runner.publish(DAY, "en")
        await runner.channels.aclose()
        assert server.received == []
    rows = await _rows(sqlite_sessions)
    assert {r.status for r in rows.values()} == {DeliveryStatus.PLANNED}
    assert {r.attempts for r in rows.values()} == {0} and {r.claimed_at for r in rows.values()} == {None}
    async with sqlite_sessions() as session:
        assert set((await session.scalars(select(Subscriber.status))).all()) == {"active"}


async def test_publishing_again_sends_nothing_twice_and_no_backlog(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    for n in range(4):
        await add_subscriber(sqlite_sessions, f"r{n}@example.com")
    with smtp_server() as server:
        first = make_runner(sqlite_sessions, {"email": _smtp(server)})
        await first.publish(DAY, "en")
        await first.channels.aclose()
        await add_subscriber(sqlite_sessions, "late@example.com")
        again = make_runner(sqlite_sessions, {"email": _smtp(server)})
        report = await again.publish(DAY, "en")
        await again.channels.aclose()
        assert len(server.received) == 4 and "late@example.com" not in server.by_recipient()
    assert report.channels == {}
    assert "late@example.com" not in await _rows(sqlite_sessions)


async def test_publishing_an_unbuilt_date_asks_to_build_it(sqlite_sessions: SessionFactory) -> None:
    runner = make_runner(sqlite_sessions, {"email": RecordingChannel("email")})
    with pytest.raises(BuildError, match="build it first: digest build --date 2026-09-29"):
        await runner.publish(DAY, "en")


async def test_dry_run_changes_nothing_a_real_publish_will_do(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    await add_subscriber(sqlite_sessions, "r@example.com")
    await add_subscriber(sqlite_sessions, "42", channel="telegram")
    email = RecordingChannel("email")
    dry = make_runner(sqlite_sessions, {"email": email}, options=PublishOptions(dry_run=True, send=FAST))
    report = await dry.publish(DAY, "en")
    assert email.calls == [] and await _rows(sqlite_sessions) == {}
    assert (report.channels["email"].planned, report.channels["email"].rendered) == (1, 1)
    assert report.channels["telegram"].skipped == 1 and report.channels["telegram"].notes
    real = await make_runner(sqlite_sessions, {"email": email}).publish(DAY, "en")
    assert len(email.sent) == 1 and real.channels["email"].planned == 1


async def test_check_copy_goes_first_and_its_failure_stops_all(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    await add_subscriber(sqlite_sessions, "r@example.com", layers=["distributed", "kernel_codegen"])
    with smtp_server(Faults(refuse={"bad@example.com"})) as server:
        bad = make_runner(sqlite_sessions, {"email": _smtp(server)},
                          options=PublishOptions(to="bad@example.com", send=FAST))
        with pytest.raises(DeliveryError, match="check copy"):
            await bad.publish(DAY, "en")
        assert server.received == [] and await _rows(sqlite_sessions) == {}
        good = make_runner(sqlite_sessions, {"email": _smtp(server)},
                           options=PublishOptions(to="ops@example.com", send=FAST))
        report = await good.publish(DAY, "en")
        await good.channels.aclose()
        first, second = server.received
    assert first.rcpt_tos == ("ops@example.com",) and "-check-" in first.message_id
    assert _text(first).count("https://arxiv.org/abs/") > _text(second).count("https://arxiv.org/abs/")
    assert report.check_copy == "ops@example.com" and report.channels["email"].sent == 1


async def test_unconfigured_channel_keeps_its_rows_for_a_worker(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    await add_subscriber(sqlite_sessions, "r@example.com")
    await add_subscriber(sqlite_sessions, "-100123", channel="telegram")
    email = RecordingChannel("email")
    report = await make_runner(sqlite_sessions, {"email": email}).publish(DAY, "en")
    skipped = report.channels["telegram"]
    assert skipped.skipped == 1 and "not configured" in skipped.notes[0]
    assert (await _rows(sqlite_sessions))["-100123"].status == DeliveryStatus.PLANNED
    telegram = RecordingChannel("telegram")
    worker = await make_runner(sqlite_sessions, {"email": email, "telegram": telegram}).work(once=True)
    assert [m.address for m in telegram.sent] == ["-100123"] and len(email.sent) == 1
    assert all(isinstance(part, str) and "<b>" in part for part in telegram.sent[0].parts)
    assert worker.channels["telegram"].sent == 1


async def test_chat_verdicts(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    for address in ("1", "2", "3", "4", "5"):
        await add_subscriber(sqlite_sessions, address, channel="telegram")
    later = [SendResult(Outcome.TRANSIENT, 0, "429", retry_after=0.01)] * 3
    script = {"1": [SendResult(Outcome.PERMANENT, 0, "403 blocked")],
              "2": [SendResult(Outcome.BUG, 0, "400 can't parse entities")],
              "3": later, "4": [SendResult(Outcome.SENT, 1, new_address="-1004")]}
    telegram = RecordingChannel("telegram", script=script)
    report = await make_runner(sqlite_sessions, {"telegram": telegram}).publish(DAY, "en")
    rows = await _rows(sqlite_sessions)
    assert {a: r.status for a, r in rows.items()} == {
        "1": DeliveryStatus.FAILED, "2": DeliveryStatus.FAILED, "3": DeliveryStatus.PLANNED,
        "-1004": DeliveryStatus.SENT, "5": DeliveryStatus.SENT}
    assert rows["3"].attempts == 3 and rows["3"].last_error == "429"
    assert [await _status(sqlite_sessions, a) for a in ("1", "2", "3")] == ["blocked", "active", "active"]
    tally = report.channels["telegram"]
    assert (tally.sent, tally.failed, tally.deferred, tally.retried) == (2, 2, 1, 2)
    retry = await make_runner(sqlite_sessions, {"telegram": telegram}).work(once=True)
    assert retry.channels["telegram"].sent == 1
    assert (await _rows(sqlite_sessions))["3"].status == DeliveryStatus.SENT


async def test_attempts_across_runs_are_capped(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    await add_subscriber(sqlite_sessions, "9", channel="telegram")
    options = PublishOptions(send=dataclasses.replace(FAST, attempts_per_run=1, max_attempts=2))
    telegram = RecordingChannel("telegram", script={"9": [SendResult(Outcome.TRANSIENT, 0, "timeout")] * 5})
    first = await make_runner(sqlite_sessions, {"telegram": telegram}, options=options).publish(DAY, "en")
    second = await make_runner(sqlite_sessions, {"telegram": telegram}, options=options).work(once=True)
    assert first.channels["telegram"].deferred == 1 and second.channels["telegram"].failed == 1
    assert (await _rows(sqlite_sessions))["9"].status == DeliveryStatus.FAILED


async def test_a_deferred_row_waits_before_its_next_run(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    await add_subscriber(sqlite_sessions, "7", channel="telegram")
    options = PublishOptions(send=dataclasses.replace(FAST, attempts_per_run=1,
                                                      retry_later=dt.timedelta(minutes=10)))
    telegram = RecordingChannel("telegram", script={"7": [SendResult(Outcome.TRANSIENT, 0, "429")]})
    first = make_runner(sqlite_sessions, {"telegram": telegram}, options=options)
    assert (await first.publish(DAY, "en")).channels["telegram"].deferred == 1
    soon = make_runner(sqlite_sessions, {"telegram": telegram}, options=options,
                       clock=lambda: dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5))
    assert "telegram" not in (await soon.work(once=True)).channels or not telegram.sent
    later = make_runner(sqlite_sessions, {"telegram": telegram}, options=options,
                        clock=lambda: dt.datetime.now(dt.UTC) + dt.timedelta(minutes=11))
    assert (await later.work(once=True)).channels["telegram"].sent == 1


async def test_a_reader_who_left_before_its_turn_is_skipped(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    sid = await add_subscriber(sqlite_sessions, "r@example.com")
    email = RecordingChannel("email")
    dry = make_runner(sqlite_sessions, {}, options=PublishOptions(send=FAST))
    await dry.publish(DAY, "en")  # plans; email not configured: the row waits
    async with sqlite_sessions.begin() as session:
        (await session.get_one(Subscriber, sid)).status = "unsubscribed"
    report = await make_runner(sqlite_sessions, {"email": email}).work(once=True)
    assert email.calls == [] and report.channels["email"].skipped == 1
    assert (await _rows(sqlite_sessions))["r@example.com"].status == DeliveryStatus.SKIPPED


async def test_rows_of_a_dead_process_are_resent_and_counted(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    for n in range(3):
        await add_subscriber(sqlite_sessions, f"r{n}@example.com")
    email = RecordingChannel("email")
    await make_runner(sqlite_sessions, {}).publish(DAY, "en")
    lease_end = NOW + dt.timedelta(minutes=1)
    async with sqlite_sessions.begin() as session:  # a worker claimed two rows, then was killed
        for row in (await session.scalars(select(Delivery).where(Delivery.id <= 2))).all():
            row.status, row.claimed_at, row.lease_until = DeliveryStatus.SENDING, NOW, lease_end
    soon = make_runner(sqlite_sessions, {"email": email}, clock=lambda: lease_end - dt.timedelta(seconds=1))
    held = (await soon.work(once=True)).channels["email"]
    assert (held.sent, held.held, held.held_until) == (1, 2, lease_end)
    late = make_runner(sqlite_sessions, {"email": email}, clock=lambda: lease_end)
    report = await late.work(once=True)
    assert (report.channels["email"].sent, report.channels["email"].resent) == (2, 2)
    assert report.channels["email"].held == 0
    assert sorted(m.delivery_id for m in email.sent) == [1, 2, 3]


async def test_a_resumed_row_stays_counted_until_it_is_sent(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    await add_subscriber(sqlite_sessions, "r@example.com")
    await make_runner(sqlite_sessions, {}).publish(DAY, "en")
    async with sqlite_sessions.begin() as session:
        row = await session.get_one(Delivery, 1)
        row.status, row.claimed_at = DeliveryStatus.SENDING, NOW
        row.lease_until = NOW + dt.timedelta(minutes=1)
    options = PublishOptions(send=dataclasses.replace(FAST, attempts_per_run=1))
    email = RecordingChannel("email", script={"r@example.com": [SendResult(Outcome.TRANSIENT, 0, "451")]})
    tallies = []
    for minutes in (2, 3):  # deferred in the first run, sent in the next
        runner = make_runner(sqlite_sessions, {"email": email}, options=options,
                             clock=lambda m=minutes: NOW + dt.timedelta(minutes=m))
        tallies.append((await runner.work(once=True)).channels["email"])
    assert [(t.sent, t.resent, t.deferred) for t in tallies] == [(0, 0, 1), (1, 1, 0)]
    assert len(email.calls) == 2 and (await _rows(sqlite_sessions))["r@example.com"].attempts == 2


async def test_file_outbox_end_to_end(sqlite_sessions: SessionFactory, tmp_path: Path) -> None:
    await build_day(sqlite_sessions)
    for n in range(3):
        await add_subscriber(sqlite_sessions, f"r{n}@example.com")
    outbox = FileOutbox(tmp_path / "outbox")
    await make_runner(sqlite_sessions, {"email": outbox}).publish(DAY, "en")
    await make_runner(sqlite_sessions, {"email": outbox}).publish(DAY, "en")
    files = sorted(p.name for p in (tmp_path / "outbox").iterdir())
    assert files == [f"digest-{DAY}-sub-{n}@example.org.eml" for n in (1, 2, 3)]


def _cli(tmp: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """``python -m digest ARGS`` on the test's database, mailing into a file outbox."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env.update(DIGEST_DATABASE_URL=f"sqlite+aiosqlite:///{tmp / 'cli.db'}", DIGEST_VAR_DIR=str(tmp / "var"),
               DIGEST_MAIL_OUTBOX=str(tmp / "outbox"), DIGEST_MAIL_FROM="digest@example.org",
               DIGEST_SECRET_KEY=CLI_SECRET, **settings)
    return subprocess.run([sys.executable, "-m", "digest", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=60)


async def test_cli_publish_reports_as_json_and_as_a_table(tmp_path: Path) -> None:
    from digest.store.db import open_database

    unbuilt = _cli(tmp_path, "publish", "--date", str(DAY))
    assert unbuilt.returncode == 1 and "build it first" in unbuilt.stderr
    async with open_database(f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}") as sessions:
        await build_day(sessions)
        await add_subscriber(sessions, "r@example.com")
    out = _cli(tmp_path, "publish", "--date", str(DAY), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["channels"]["email"]["sent"] == 1 and data["total"]["planned"] == 1
    assert len(list((tmp_path / "outbox").iterdir())) == 1
    again = _cli(tmp_path, "publish", "--date", str(DAY))
    assert again.returncode == 0
    assert again.stdout.splitlines()[0].split()[:3] == ["channel", "planned", "empty"]
    bad = _cli(tmp_path, "publish", "--date", str(DAY), "--to", "not an address")
    assert bad.returncode == 2 and "--to" in bad.stderr


async def test_preview_eml_is_the_message_a_filtered_reader_gets(sqlite_sessions: SessionFactory,
                                                                 tmp_path: Path) -> None:
    from digest.bootstrap import preview_eml
    from digest.config import load_settings
    from digest.domain.views import filter_view

    await build_day(sqlite_sessions)
    async with sqlite_sessions() as session:
        full = await load_view(session, DAY, "en")
    view = filter_view(full, ["optimization"], None)
    settings = load_settings(secret_key="k" * 32, var_dir=tmp_path, mail_from="digest@example.org")
    eml = preview_eml(view, settings)
    assert all(len(line) <= 998 for line in eml.encode().split(b"\r\n"))
    msg = message_from_bytes(eml.encode(), policy=policy.default)
    body = msg.get_body(("plain",))
    assert body is not None and msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    text = str(body.get_content())
    assert [e.url for e in full.events if e.url in text] == [e.url for e in view.events] != []


async def test_chat_bug_failures_are_retried_by_the_worker_and_refusals_are_not(
        sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    for address in ("1", "2"):
        await add_subscriber(sqlite_sessions, address, channel="telegram")
    script = {"1": [SendResult(Outcome.PERMANENT, 0, "403 blocked")],
              "2": [SendResult(Outcome.BUG, 0, "400 can't parse entities")]}
    telegram = RecordingChannel("telegram", script=script)
    first = (await make_runner(sqlite_sessions, {"telegram": telegram}).publish(DAY, "en")).channels
    rows = await _rows(sqlite_sessions)
    assert (first["telegram"].failed, first["telegram"].failed_bug) == (2, 1)
    assert (rows["1"].failure, rows["2"].failure) == ("permanent", "bug")
    plain = await make_runner(sqlite_sessions, {"telegram": telegram}).work(once=True)
    assert plain.channels == {}  # a failed row waits for --retry-failed
    retry = make_runner(sqlite_sessions, {"telegram": telegram},
                        options=PublishOptions(retry_failed=True, send=FAST))
    tally = (await retry.work(once=True)).channels["telegram"]
    assert (tally.requeued, tally.sent, tally.failed) == (1, 1, 0)
    assert [m.address for m in telegram.sent] == ["2"] and len(telegram.calls) == 3
    rows = await _rows(sqlite_sessions)
    assert (rows["1"].status, rows["1"].failure, rows["2"].status) == (
        DeliveryStatus.FAILED, "permanent", DeliveryStatus.SENT)


async def test_retry_failed_resends_bug_failures_once_fixed_and_leaves_refusals_alone(
        sqlite_sessions: SessionFactory, caplog: pytest.LogCaptureFixture) -> None:
    from digest.render.renderer import Renderer

    await build_day(sqlite_sessions)
    for address in ("ok@example.com", "gone@example.com"):
        await add_subscriber(sqlite_sessions, address)
    await add_subscriber(sqlite_sessions, "zh@example.com", locale="zh")
    broken = Renderer(site_url="https://digest.example.org", timezone="Mars/Olympus_Mons")  # a config typo
    with smtp_server(Faults(refuse={"gone@example.com"})) as server:
        runner = make_runner(sqlite_sessions, {"email": _smtp(server)}, renderer=broken)
        with caplog.at_level("ERROR"):
            first = (await runner.publish(DAY, "en")).channels["email"]
        await runner.channels.aclose()
        assert server.received == [] and (first.failed, first.failed_bug, first.sent) == (3, 3, 0)
        tracebacks = [r for r in caplog.records if r.exc_info]
        one_liners = [r for r in caplog.records if "failed (our bug or configuration)" in r.getMessage()]
        assert len(tracebacks) == 2 and len(one_liners) == 3  # once per group (en, zh); a line per delivery
        assert all(not r.exc_info for r in one_liners)
        assert {r.failure for r in (await _rows(sqlite_sessions)).values()} == {"bug"}

        retry = PublishOptions(retry_failed=True, send=FAST)
        fixed = make_runner(sqlite_sessions, {"email": _smtp(server)}, options=retry)
        second = (await fixed.publish(DAY, "en")).channels["email"]
        await fixed.channels.aclose()
        assert (second.requeued, second.sent, second.failed, second.failed_bug) == (3, 2, 1, 0)
        assert set(server.by_recipient()) == {"ok@example.com", "zh@example.com"}
        rows = await _rows(sqlite_sessions)
        gone = rows["gone@example.com"]
        assert (gone.status, gone.failure) == (DeliveryStatus.FAILED, "permanent")
        assert await _status(sqlite_sessions, "gone@example.com") == "bounced"

        connections = server.handler.connections
        again = make_runner(sqlite_sessions, {"email": _smtp(server)}, options=retry)
        assert (await again.publish(DAY, "en")).channels == {}
        await again.channels.aclose()
        assert server.handler.connections == connections and len(server.received) == 2


class _Gated:
    """A real channel whose sends wait at a gate the test opens (a sender as slow as the test wants)."""

    def __init__(self, inner: SmtpChannel) -> None:
        self.inner, self.name, self.concurrency = inner, inner.name, inner.concurrency
        self.gate, self.full = asyncio.Event(), asyncio.Event()
        self.waiting = 0

    async def send(self, message: Message) -> SendResult:
        self.waiting += 1
        if self.waiting == self.concurrency:
            self.full.set()
        await self.gate.wait()
        return await self.inner.send(message)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _steal(sessions: SessionFactory, now: dt.datetime) -> list[int]:
    """What another run would take at ``now``: every claimable row."""
    async with sessions.begin() as session:
        taken = await claim(session, digest_id=None, channels=["email"], limit=100, now=now,
                            lease=dt.timedelta(seconds=60), planned_before=now)
    return [c.delivery_id for c in taken]


async def test_a_slow_live_sender_keeps_its_rows_by_its_heartbeat(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    for n in range(4):  # 2c rows: two in flight, two queued, none left planned
        await add_subscriber(sqlite_sessions, f"r{n}@example.com")
    clock = StepClock(NOW)
    lease = dt.timedelta(seconds=4)
    options = PublishOptions(send=dataclasses.replace(FAST, lease=lease, heartbeat=dt.timedelta(seconds=1)))
    with smtp_server() as server:
        channel = _Gated(_smtp(server, concurrency=2))
        runner = make_runner(sqlite_sessions, {"email": channel}, options=options, clock=clock,
                             sleep=clock.sleep)
        publish = asyncio.create_task(runner.publish(DAY, "en"))
        await asyncio.wait_for(channel.full.wait(), timeout=60)
        for beat in range(3 * 4):  # three leases of injected time while the sends hang
            await clock.step(1.0)
            assert await _steal(sqlite_sessions, clock()) == [], f"a live sender lost rows at beat {beat}"
            async with sqlite_sessions() as session:
                assert await held_rows(session, clock()) == {"email": Held(4, clock() + lease)}
        channel.gate.set()
        tally = (await asyncio.wait_for(publish, timeout=60)).channels["email"]
        await runner.channels.aclose()
    assert Counter(r for item in server.received for r in item.rcpt_tos) == {f"r{n}@example.com": 1
                                                                             for n in range(4)}
    assert (tally.sent, tally.resent, tally.held) == (4, 0, 0)


async def test_cli_reports_rows_held_by_another_run_and_when_they_fall_due(tmp_path: Path) -> None:
    from digest.store.db import open_database

    url = f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"
    async with open_database(url) as sessions:
        await build_day(sessions)
        for n in range(3):
            await add_subscriber(sessions, f"r{n}@example.com")
        await make_runner(sessions, {}).publish(DAY, "en")  # plans; email not configured here
        pinned = NOW + dt.timedelta(minutes=5)
        lease_end = pinned + dt.timedelta(seconds=45)
        async with sessions.begin() as session:  # another run claimed row 1 (its lease runs on)
            row = await session.get_one(Delivery, 1)
            row.status, row.claimed_at, row.lease_until = DeliveryStatus.SENDING, pinned, lease_end
    text = _cli(tmp_path, "publish", "--date", str(DAY), DIGEST_NOW=pinned.isoformat())
    assert text.returncode == 0, text.stderr
    header, _, email_row = text.stdout.splitlines()[:3]
    assert dict(zip(header.split(), email_row.split(), strict=True))["held"] == "1"
    assert (f"1 delivery is held by another run until {lease_end:%H:%M:%S} UTC; run publish again after that"
            in text.stdout)
    as_json = _cli(tmp_path, "publish", "--date", str(DAY), "--json", DIGEST_NOW=pinned.isoformat())
    data = json.loads(as_json.stdout)
    assert as_json.returncode == 0 and data["channels"]["email"]["held"] == 1 == data["total"]["held"]
    assert data["channels"]["email"]["held_until"] == lease_end.isoformat() == data["total"]["held_until"]
    due = _cli(tmp_path, "publish", "--date", str(DAY), "--json", DIGEST_NOW=lease_end.isoformat())
    email = json.loads(due.stdout)["channels"]["email"]
    assert (email["sent"], email["resent"], email["held"], email["held_until"]) == (1, 1, 0, None)
    assert len(list((tmp_path / "outbox").iterdir())) == 3


async def test_cli_bug_failure_exits_1_with_a_note_and_retry_failed_sends_it_once_fixed(
        tmp_path: Path) -> None:
    from digest.store.db import open_database

    hostile = "bad@example.com\r\nBcc: spy@example.com"  # stored by a bug elsewhere; no header may carry it
    async with open_database(f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}") as sessions:
        await build_day(sessions)
        await add_subscriber(sessions, "ok@example.com")
        bad = await add_subscriber(sessions, hostile)
    failed = _cli(tmp_path, "publish", "--date", str(DAY))
    assert failed.returncode == 1, failed.stderr
    assert ("1 delivery failed because of a bug or configuration; fix it and run publish --retry-failed"
            in failed.stdout)
    assert "Traceback" not in failed.stderr  # one line per failure; the traceback only with -v
    assert len([ln for ln in failed.stderr.splitlines() if "(our bug or configuration)" in ln]) == 1
    rerun = _cli(tmp_path, "publish", "--date", str(DAY), "--json")
    assert rerun.returncode == 0 and json.loads(rerun.stdout)["channels"] == {}
    async with open_database(f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}") as sessions:
        assert {a: (r.status, r.failure) for a, r in (await _rows(sessions)).items()} == {
            "ok@example.com": (DeliveryStatus.SENT, None), hostile: (DeliveryStatus.FAILED, "bug")}
    verbose_dry = _cli(tmp_path, "-v", "publish", "--date", str(DAY), "--retry-failed", "--dry-run")
    assert verbose_dry.returncode == 1 and verbose_dry.stderr.count("Traceback") == 1
    assert "1 failed delivery (bug or configuration) would be put back to send again" in verbose_dry.stdout
    assert "1 delivery would fail because of a bug or configuration" in verbose_dry.stdout
    worker_failed = _cli(tmp_path, "worker", "--once", "--retry-failed")
    assert worker_failed.returncode == 1, "one sweep that failed a delivery by our bug says so in its code"
    assert "1 delivery failed because of a bug or configuration; fix it and run worker --retry-failed" \
        in worker_failed.stdout
    async with open_database(f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}") as sessions, \
            sessions.begin() as session:  # the cause is fixed
        (await session.get_one(Subscriber, bad)).address = "bad@example.com"
    retried = _cli(tmp_path, "publish", "--date", str(DAY), "--retry-failed", "--json")
    assert retried.returncode == 0, retried.stderr
    email = json.loads(retried.stdout)["channels"]["email"]
    assert (email["requeued"], email["sent"], email["failed"], email["failed_bug"]) == (1, 1, 0, 0)
    assert len(list((tmp_path / "outbox").iterdir())) == 2
    worker = _cli(tmp_path, "worker", "--once", "--retry-failed", "--json")
    assert worker.returncode == 0 and json.loads(worker.stdout)["channels"] == {}


# -- one filter rule, one retry policy ------------------------------------------------

FILTERS: list[tuple[tuple[str, ...], float | None]] = [
    (("tensor_ir", "kernel_codegen", "optimization", "hardware_backend"), 0.0),
    (("kernel_codegen",), 0.0), (("optimization",), 0.0), (("hardware_backend",), 54.0),
    (("tensor_ir", "optimization"), 54.5), (("kernel_codegen",), None), (("runtime",), 0.0),
    (("tensor_ir",), 99.0),
]


async def test_preview_publish_and_chat_keep_the_same_events_for_each_filter(
        sqlite_sessions: SessionFactory) -> None:
    """For one built day and each filter: the events the preview keeps, those in the message publish
    sends to a subscriber with that filter, and those /digest shows that chat are the same."""
    from bot.commands import Chat, Commands
    from digest.domain.views import filter_view
    from digest.subscribe.subscriptions import subscribe
    from tests.chatday import DAY as CHAT_DAY
    from tests.chatday import LATER
    from tests.chatday import build_day as build_chat_day

    await build_chat_day(sqlite_sessions)
    async with sqlite_sessions() as session:
        view = await load_view(session, CHAT_DAY, "en")
    boundary = max(e.score for e in view.events)  # one event kept at >=, none at >
    filters = [(layers, boundary if score is None else score) for layers, score in FILTERS]
    async with sqlite_sessions.begin() as session:
        for n, (layers, score) in enumerate(filters):
            await subscribe(session, "telegram", str(1000 + n), layers=layers, min_score=score, locale="en",
                            confirmed=True, now=LATER)
    channel = RecordingChannel("telegram")
    await make_runner(sqlite_sessions, {"telegram": channel}, clock=lambda: LATER).publish(CHAT_DAY, "en")
    published = {m.address: _event_ids("".join(m.parts)) for m in channel.sent}
    commands = Commands(sqlite_sessions, channel="telegram", clock=lambda: LATER)

    async def anyone() -> bool:
        return True

    for n, (layers, score) in enumerate(filters):
        preview = tuple(e.id for e in filter_view(view, layers, score).events)
        reply = await commands.run(Chat("telegram", str(1000 + n)), "digest", [CHAT_DAY.isoformat()], anyone)
        assert reply.digest is not None
        chat = tuple(e.id for e in reply.digest.events)
        assert preview == published.get(str(1000 + n), ()) == chat, (layers, score)
    assert {len(ids) for ids in published.values()} >= {1, len(view.events)}  # filters that matter
    assert "1006" not in published and "1007" not in published  # nothing kept: nothing sent


def _event_ids(html: str) -> tuple[int, ...]:
    """The events a rendered Telegram digest shows, in order (each links its page once)."""
    return tuple(int(found) for found in re.findall(re.escape(SITE) + r"/e/([0-9]+)", html))


async def test_the_check_copy_is_retried_by_the_senders_policy(sqlite_sessions: SessionFactory) -> None:
    """Backoff doubling up to its cap, a longer retry_after honoured, no wait after the last try."""
    await build_day(sqlite_sessions)
    busy, later = SendResult(Outcome.TRANSIENT, 0, "451 busy"), SendResult(Outcome.TRANSIENT, 0, "451", 5.0)
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        await asyncio.sleep(0)

    send = dataclasses.replace(FAST, attempts_per_run=3, backoff=1.0, backoff_cap=1.5)
    email = RecordingChannel("email", script={"ops@example.com": [busy, later]})
    options = PublishOptions(to="ops@example.com", send=send)
    runner = make_runner(sqlite_sessions, {"email": email}, options=options, sleep=sleep)
    report = await runner.publish(DAY, "en")
    assert report.check_copy == "ops@example.com" and len(email.calls) == 3 and sleeps == [1.0, 5.0]
    sleeps.clear()
    email = RecordingChannel("email", script={"ops@example.com": [busy, busy, busy]})
    with pytest.raises(DeliveryError, match="check copy"):
        await make_runner(sqlite_sessions, {"email": email}, options=options, sleep=sleep).publish(DAY, "en")
    assert len(email.calls) == 3 and sleeps == [1.0, 1.5]


async def test_the_report_counts_subscribers_who_joined_after_the_first_publish(
        sessions: SessionFactory) -> None:
    await build_day(sessions)
    await add_subscriber(sessions, "first@example.com")
    before = NOW - dt.timedelta(hours=1)  # the subscribers below are created at NOW: after it
    first = await make_runner(sessions, {"email": RecordingChannel("email")},
                              clock=lambda: before).publish(DAY, "en")
    assert first.joined_after == 0
    await add_subscriber(sessions, "late@example.com")
    await add_subscriber(sessions, "later@example.com")
    await add_subscriber(sessions, "unconfirmed@example.com", status="pending")
    again = await make_runner(sessions, {"email": RecordingChannel("email")},
                              clock=lambda: NOW).publish(DAY, "en")
    assert again.joined_after == 2 and again.as_json()["joined_after"] == 2
    assert set(await _rows(sessions)) == {"first@example.com"}


async def test_a_partial_digest_is_never_published(sqlite_sessions: SessionFactory) -> None:
    from sqlalchemy import update

    from digest.store.models import Digest

    await build_day(sqlite_sessions)
    await add_subscriber(sqlite_sessions, "r@example.com")
    async with sqlite_sessions.begin() as session:
        await session.execute(update(Digest).values(partial=True))
    runner = make_runner(sqlite_sessions, {"email": RecordingChannel("email")})
    with pytest.raises(BuildError, match="partial") as refused:
        await runner.publish(DAY, "en")
    assert "\n" not in str(refused.value) and await _rows(sqlite_sessions) == {}
