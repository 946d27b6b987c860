"""Publishing a real built digest to a real SMTP server (and fake chat channels): filters, faults, report."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
from collections import Counter
from email import message_from_bytes, policy
from pathlib import Path

import pytest
from sqlalchemy import select

from digest.channels import Outcome, SendResult
from digest.db import SessionFactory
from digest.errors import BuildError
from digest.mailer import FileOutbox
from digest.models import Delivery, Subscriber
from digest.outbox import FAILED, PLANNED, SENDING, SENT, SKIPPED
from digest.publish import PublishOptions
from digest.queries import load_view
from digest.sending import DeliveryError
from digest.smtp import SmtpChannel, SmtpConfig
from digest.tokens import UNSUBSCRIBE, read_token
from tests.publish_runner import (
    DAY,
    FAST,
    NOW,
    SECRET,
    RecordingChannel,
    add_subscriber,
    build_day,
    make_runner,
)
from tests.smtpserver import Faults, Received, SMTPTestServer, smtp_server

ROOT = Path(__file__).resolve().parent.parent


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
    filters = {
        "all@example.com": (("frontend", *{la for e in events for la in e.layers}), 0.0),
        "one@example.com": (tuple(set(top.layers) - set(mid.layers) - set(low.layers)), 0.0),
        "best@example.com": (tuple(mid.layers), (mid.score + low.score) / 2),
        "none@example.com": (("distributed",), 0.0),
        "high@example.com": (tuple(top.layers), top.score + 1),
    }
    for address, (layers, score) in filters.items():
        await add_subscriber(sessions, address, layers=layers, min_score=score,
                             locale="zh" if address.startswith("one") else "en")
    expected = {a: {e.url for e in events if set(la) & set(e.layers) and e.score >= s}
                for a, (la, s) in filters.items()}
    assert [len(expected[a]) for a in filters] == [3, 1, 2, 0, 0]
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
        "ok@example.com": SENT, "busy@example.com": SENT, "flaky@example.com": SENT,
        "gone@example.com": FAILED}
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
    assert {r.status for r in rows.values()} == {PLANNED}
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
    assert (await _rows(sqlite_sessions))["-100123"].status == PLANNED
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
    assert {a: r.status for a, r in rows.items()} == {"1": FAILED, "2": FAILED, "3": PLANNED, "-1004": SENT,
                                                      "5": SENT}
    assert rows["3"].attempts == 3 and rows["3"].last_error == "429"
    assert [await _status(sqlite_sessions, a) for a in ("1", "2", "3")] == ["blocked", "active", "active"]
    tally = report.channels["telegram"]
    assert (tally.sent, tally.failed, tally.deferred, tally.retried) == (2, 2, 1, 2)
    retry = await make_runner(sqlite_sessions, {"telegram": telegram}).work(once=True)
    assert retry.channels["telegram"].sent == 1 and (await _rows(sqlite_sessions))["3"].status == SENT


async def test_attempts_across_runs_are_capped(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    await add_subscriber(sqlite_sessions, "9", channel="telegram")
    options = PublishOptions(send=dataclasses.replace(FAST, attempts_per_run=1, max_attempts=2))
    telegram = RecordingChannel("telegram", script={"9": [SendResult(Outcome.TRANSIENT, 0, "timeout")] * 5})
    first = await make_runner(sqlite_sessions, {"telegram": telegram}, options=options).publish(DAY, "en")
    second = await make_runner(sqlite_sessions, {"telegram": telegram}, options=options).work(once=True)
    assert first.channels["telegram"].deferred == 1 and second.channels["telegram"].failed == 1
    assert (await _rows(sqlite_sessions))["9"].status == FAILED


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
    assert (await _rows(sqlite_sessions))["r@example.com"].status == SKIPPED


async def test_rows_of_a_dead_process_are_resent_and_counted(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    for n in range(3):
        await add_subscriber(sqlite_sessions, f"r{n}@example.com")
    email = RecordingChannel("email")
    await make_runner(sqlite_sessions, {}).publish(DAY, "en")
    async with sqlite_sessions.begin() as session:  # a worker claimed two rows, then was killed
        for row in (await session.scalars(select(Delivery).where(Delivery.id <= 2))).all():
            row.status, row.claimed_at = SENDING, NOW
    soon = make_runner(sqlite_sessions, {"email": email}, clock=lambda: NOW + dt.timedelta(minutes=1))
    assert (await soon.work(once=True)).channels["email"].sent == 1
    late = make_runner(sqlite_sessions, {"email": email}, clock=lambda: NOW + dt.timedelta(minutes=11))
    report = await late.work(once=True)
    assert (report.channels["email"].sent, report.channels["email"].resent) == (2, 2)
    assert sorted(m.delivery_id for m in email.sent) == [1, 2, 3]


async def test_a_resumed_row_stays_counted_until_it_is_sent(sqlite_sessions: SessionFactory) -> None:
    await build_day(sqlite_sessions)
    await add_subscriber(sqlite_sessions, "r@example.com")
    await make_runner(sqlite_sessions, {}).publish(DAY, "en")
    async with sqlite_sessions.begin() as session:
        row = await session.get_one(Delivery, 1)
        row.status, row.claimed_at = SENDING, NOW
    later = lambda: NOW + dt.timedelta(minutes=11)  # noqa: E731
    options = PublishOptions(send=dataclasses.replace(FAST, attempts_per_run=1))
    email = RecordingChannel("email", script={"r@example.com": [SendResult(Outcome.TRANSIENT, 0, "451")]})
    runner = make_runner(sqlite_sessions, {"email": email}, options=options, clock=later)
    tally = (await runner.work(once=True)).channels["email"]
    assert (tally.sent, tally.resent, tally.deferred) == (1, 1, 1)
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


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env.update(DIGEST_DATABASE_URL=f"sqlite+aiosqlite:///{tmp / 'cli.db'}", DIGEST_VAR_DIR=str(tmp / "var"),
               DIGEST_MAIL_OUTBOX=str(tmp / "outbox"), DIGEST_MAIL_FROM="digest@example.org")
    return subprocess.run([sys.executable, "-m", "tests.publish_runner", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=60)


async def test_cli_publish_reports_as_json_and_as_a_table(tmp_path: Path) -> None:
    from digest.db import open_database

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
    from digest.config import load_settings
    from digest.mailer import preview_eml
    from digest.views import filter_view

    await build_day(sqlite_sessions)
    async with sqlite_sessions() as session:
        full = await load_view(session, DAY, "en")
    view = filter_view(full, ["optimization"], None)
    settings = load_settings(secret_key="k", var_dir=tmp_path, mail_from="digest@example.org")
    eml = preview_eml(view, settings)
    assert all(len(line) <= 998 for line in eml.encode().split(b"\r\n"))
    msg = message_from_bytes(eml.encode(), policy=policy.default)
    body = msg.get_body(("plain",))
    assert body is not None and msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    text = str(body.get_content())
    assert [e.url for e in full.events if e.url in text] == [e.url for e in view.events] != []
