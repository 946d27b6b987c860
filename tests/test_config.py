"""Settings: defaults, environment, digest.toml, one-line errors naming the variable."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from digest.config import Secret, Settings, load_settings
from digest.domain.errors import ConfigError


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("DIGEST_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_defaults_are_the_embedded_ones() -> None:
    s = load_settings()
    assert s.database_url == "sqlite+aiosqlite:///./var/digest.db"
    assert s.timezone == "Asia/Shanghai"
    assert s.locales == ["zh"]
    assert s.llm_model == "deepseek-chat"
    assert s.llm_api_key is None
    assert s.mail_outbox == Path("./var/outbox")
    assert s.fetch_max_bytes == 10 * 1024 * 1024


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIGEST_LOCALES", "zh, en")
    monkeypatch.setenv("DIGEST_LLM_API_KEY", "sk-test")
    monkeypatch.setenv("DIGEST_TIMEZONE", "Europe/Berlin")
    s = load_settings()
    assert s.locales == ["zh", "en"]
    assert s.llm_api_key is not None and s.llm_api_key.get_secret_value() == "sk-test"
    assert "sk-test" not in repr(s)
    assert s.timezone == "Europe/Berlin"


def test_digest_toml_is_read_and_env_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "digest.toml").write_text('timezone = "UTC"\nllm_top_events = 3\n')
    assert load_settings().timezone == "UTC"
    monkeypatch.setenv("DIGEST_TIMEZONE", "Asia/Tokyo")
    s = load_settings()
    assert (s.timezone, s.llm_top_events) == ("Asia/Tokyo", 3)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DIGEST_TIMEZONE", "Mars/Olympus"),
        ("DIGEST_LOCALES", "zh,fr"),
        ("DIGEST_FETCH_CONCURRENCY", "lots"),
        ("DIGEST_SMTP_TLS", "maybe"),
        ("DIGEST_SITE_URL", "ftp://example"),
        ("DIGEST_SITE_URL", "http://a b"),
        ("DIGEST_SITE_URL", "http://"),
        ("DIGEST_SITE_URL", "https://dïgest.example.org"),
        ("DIGEST_SITE_URL", "https://digest.example.org/?=?utf-8?q?x?="),
        ("DIGEST_SITE_URL", "https://digest.example.org/\r\nX: y"),
        ("DIGEST_LLM_BASE_URL", "api.deepseek.com"),
        ("DIGEST_TELEGRAM_API_BASE", "http:///bot"),
        ("DIGEST_MAIL_FROM", "digest@example.org\nBcc: victim@example.org"),
        ("DIGEST_MAIL_FROM", "=?utf-8?q?x=0d=0aBcc=3a_v=40evil.example?= <d@example.org>"),
        ("DIGEST_MAIL_FROM", "not an address"),
        ("DIGEST_UNSUBSCRIBE_MAILTO", "leave@example.org\r\nBcc: v@example.org"),
        ("DIGEST_SMTP_HOST", "mail.example.org\nx"),
        ("DIGEST_SEND_BACKOFF", "inf"),
        ("DIGEST_SEND_BACKOFF", "nan"),
        ("DIGEST_SMTP_RATE", "-1"),
        ("DIGEST_SMTP_TIMEOUT", "infinity"),
        ("DIGEST_OUTBOX_LEASE", "0"),
        ("DIGEST_OUTBOX_HEARTBEAT", "60"),
        ("DIGEST_FETCH_TIMEOUT", "-inf"),
        ("DIGEST_SEND_RETRY_LATER", "1e400"),
        ("DIGEST_SCORE_WEIGHTS", "{bad"),
        ("DIGEST_SCORE_WEIGHTS", '{"authority": NaN}'),
        ("DIGEST_SCORE_WEIGHTS", '{"authority": -3}'),
        ("DIGEST_SECRET_KEY", ""),
        ("DIGEST_SECRET_KEY", "k"),
        ("DIGEST_SECRET_KEY", "x" * 31),
        ("DIGEST_NOW", "2026-12-01T08:00:00"),
        ("DIGEST_NOW", "yesterday"),
        ("DIGEST_TRUSTED_PROXIES", "127.0.0.1,not-an-ip"),
        # each kind once more (the standard-library loader that replaced pydantic-settings)
        ("DIGEST_FETCH_CONCURRENCY", "1.5"),
        ("DIGEST_FETCH_CONCURRENCY", ""),
        ("DIGEST_FETCH_CONCURRENCY", "١٢"),  # digits of another script
        ("DIGEST_FETCH_CONCURRENCY", "65"),
        ("DIGEST_DISCORD_GUILD_ID", "0"),
        ("DIGEST_DISCORD_GUILD_ID", ""),
        ("DIGEST_LLM_TIMEOUT", "3601"),
        ("DIGEST_SEND_BACKOFF", "1,5"),
        ("DIGEST_LOG_JSON", "maybe"),
        ("DIGEST_LOG_JSON", "2"),
        ("DIGEST_LOG_JSON", ""),
        ("DIGEST_SMTP_TLS", "SSL"),
        ("DIGEST_LOCALES", ""),
        ("DIGEST_TIMEZONE", "America"),  # a folder of zones, not a zone
        ("DIGEST_TIMEZONE", "x" * 300),
        ("DIGEST_NOW", "1700000000"),  # ISO 8601 only, no Unix time
        ("DIGEST_NOW", ""),
        ("DIGEST_SCORE_WEIGHTS", ""),
        ("DIGEST_SCORE_WEIGHTS", "[1, 2]"),
        ("DIGEST_SCORE_WEIGHTS", '{"novelty": "lots"}'),
        ("DIGEST_SCORE_WEIGHTS", "[" * 100_000),
        ("DIGEST_TELEGRAM_WEBHOOK_SECRET", ""),
    ],
)
def test_bad_value_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert message.startswith(name + ":")
    assert "\n" not in message


def test_score_weights_come_from_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    from digest.bootstrap import build_options

    monkeypatch.setenv("DIGEST_SCORE_WEIGHTS", '{"novelty": 5, "authority": 25}')
    weights = build_options(load_settings()).weights
    assert (weights.novelty, weights.authority) == (5.0, 25.0)
    monkeypatch.setenv("DIGEST_SCORE_WEIGHTS", '{"charisma": 5}')
    with pytest.raises(ConfigError, match="charisma"):
        build_options(load_settings())


def test_secret_key_is_generated_once_and_kept(tmp_path: Path) -> None:
    s = load_settings()
    first = s.secret()
    assert first == load_settings().secret()
    assert (tmp_path / "var" / "secret_key").exists()


def test_a_bad_value_in_digest_toml_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "digest.toml").write_text("max_events = 0\n")
    with pytest.raises(ConfigError, match=r"^digest\.toml: max_events: "):
        load_settings()


def test_a_digest_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "digest.toml").write_text('timezone = "UTC\n')
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value).startswith("digest.toml: ") and "\n" not in str(info.value)


def test_a_non_utf8_digest_toml_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "digest.toml").write_bytes(b'timezone = "\xff"\n')
    with pytest.raises(ConfigError, match=r"^digest\.toml: "):
        load_settings()


def test_misspelled_settings_are_warned_about_by_name(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("DIGEST_TIMZONE", "UTC")
    monkeypatch.setenv("DIGEST_TEST_POSTGRES_URL_X", "ignored")  # the suite's own names stay quiet
    (tmp_path / "digest.toml").write_text("max_event = 3\n")
    with caplog.at_level("WARNING", logger="digest.config"):
        load_settings()
    messages = [r.getMessage() for r in caplog.records]
    assert any("DIGEST_TIMZONE" in m and "DIGEST_TIMEZONE" in m for m in messages), messages
    assert any("max_event" in m and "max_events" in m for m in messages), messages
    assert not any("DIGEST_TEST_" in m for m in messages)


def test_the_pinned_clock_starts_at_digest_now_and_runs_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as dt

    monkeypatch.setenv("DIGEST_NOW", "2026-12-05T03:00:00+08:00")
    clock = load_settings().clock
    first, second = clock(), clock()
    start = dt.datetime(2026, 12, 4, 19, 0, tzinfo=dt.UTC)
    assert start <= first <= second < start + dt.timedelta(minutes=5)
    assert first.tzinfo is not None and first.utcoffset() == dt.timedelta(0)


def test_the_system_clock_is_the_default() -> None:
    import datetime as dt

    before = dt.datetime.now(dt.UTC)
    assert before <= load_settings().clock() <= dt.datetime.now(dt.UTC)


def test_an_empty_or_short_key_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    key_file = tmp_path / "var" / "secret_key"
    key_file.parent.mkdir()
    for content in ("", "\n", "short"):
        key_file.write_text(content)
        with pytest.raises(ConfigError, match="secret_key") as info:
            load_settings().secret()
        assert "\n" not in str(info.value)


def test_the_generated_key_is_private_and_long(tmp_path: Path) -> None:
    key = load_settings().secret()
    path = tmp_path / "var" / "secret_key"
    assert len(key) >= 32
    assert path.stat().st_mode & 0o777 == 0o600


def test_an_unusable_var_dir_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("DIGEST_VAR_DIR", str(tmp_path / "file" / "var"))
    with pytest.raises(ConfigError, match="DIGEST_VAR_DIR") as info:
        load_settings().secret()
    assert "\n" not in str(info.value)


def test_concurrent_first_starts_agree_on_one_key(tmp_path: Path) -> None:
    """Eight processes racing on a fresh var dir, several times: one key each time."""
    import subprocess
    import sys

    code = "from digest.config import load_settings; print(load_settings().secret())"
    for trial in range(3):
        var = tmp_path / f"var{trial}"
        env = {"PATH": "/usr/bin:/bin", "DIGEST_VAR_DIR": str(var)}
        procs = [subprocess.Popen([sys.executable, "-c", code], env=env, cwd=tmp_path,
                                  stdout=subprocess.PIPE, text=True) for _ in range(8)]
        keys = {p.communicate(timeout=60)[0].strip() for p in procs}
        assert all(p.returncode == 0 for p in procs)
        assert keys == {(var / "secret_key").read_text().strip()}
        assert [p.name for p in var.iterdir()] == ["secret_key"]  # no temporary file left


@pytest.mark.parametrize("env", [{"DIGEST_SITE_URL": "http://a b"}, {"DIGEST_SCORE_WEIGHTS": "{bad"},
                                 {"DIGEST_SEND_BACKOFF": "inf"}])
def test_the_cli_prints_one_line_and_exits_1_on_a_bad_setting(tmp_path: Path, env: dict[str, str]) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "digest", "subscribers", "list"], cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and next(iter(env)) in lines[0], done.stderr
    assert not (tmp_path / "var").exists()  # nothing was created before the check


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("DIGEST_FETCH_CONCURRENCY", " 5 ", 5),
        ("DIGEST_FETCH_CONCURRENCY", "+5", 5),
        ("DIGEST_FETCH_CONCURRENCY", "5.0", 5),
        ("DIGEST_FETCH_MAX_BYTES", "2_000_000", 2_000_000),
        ("DIGEST_DISCORD_GUILD_ID", "1234567890123456789", 1234567890123456789),
        ("DIGEST_SEND_BACKOFF", "1e3", 1000.0),
        ("DIGEST_SEND_BACKOFF", "0", 0.0),
        *[("DIGEST_LOG_JSON", text, True) for text in ("1", "true", "TRUE", "Yes", "on", "t", "Y")],
        *[("DIGEST_LOG_JSON", text, False) for text in ("0", "false", "No", "OFF", "f", "n")],
        ("DIGEST_LOCALES", " en , zh ,en", ["en", "zh"]),
        ("DIGEST_TRUSTED_PROXIES", "10.0.0.0/8, ::1", ["10.0.0.0/8", "::1"]),
        ("DIGEST_SCORE_WEIGHTS", '{"novelty": 5, "authority": true}', {"novelty": 5.0, "authority": 1.0}),
        ("DIGEST_NOW", "2026-12-01T08:00:00Z", dt.datetime(2026, 12, 1, 8, tzinfo=dt.UTC)),
        ("DIGEST_SMTP_TLS", "ssl", "ssl"),
        ("DIGEST_SITE_URL", "https://digest.example.org/", "https://digest.example.org"),
        ("DIGEST_UNSUBSCRIBE_MAILTO", "mailto:leave@example.org", "leave@example.org"),
        # an empty variable: what pydantic-settings made of it, kind by kind
        ("DIGEST_ADMIN_EMAIL", "", None),
        ("DIGEST_UNSUBSCRIBE_MAILTO", " ", None),
        ("DIGEST_TELEGRAM_WEBHOOK_URL", "", None),
        ("DIGEST_TRUSTED_PROXIES", "", []),
        ("DIGEST_ADMIN_TELEGRAM_CHAT", "", ""),
        ("DIGEST_DATABASE_URL", "", ""),
        ("DIGEST_SOURCES", "", Path(".")),
    ],
)
def test_each_kind_reads_its_text(monkeypatch: pytest.MonkeyPatch, name: str, text: str,
                                  expected: object) -> None:
    monkeypatch.setenv(name, text)
    value = getattr(load_settings(), name.removeprefix("DIGEST_").lower())
    assert value == expected and type(value) is type(expected)


def test_an_empty_secret_is_an_empty_secret_but_the_signing_key_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIGEST_TELEGRAM_TOKEN", "")
    token = load_settings().telegram_token
    assert isinstance(token, Secret) and token.get_secret_value() == "" and not token
    monkeypatch.setenv("DIGEST_SECRET_KEY", "")
    with pytest.raises(ConfigError, match=r"^DIGEST_SECRET_KEY: must be at least 32 characters"):
        load_settings()


def test_a_variable_name_in_any_case_is_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("digest_timezone", "UTC")
    assert load_settings().timezone == "UTC"


# The text kinds whose checks do the most parsing; each gets arbitrary text.
_FUZZED = {
    "DIGEST_FETCH_CONCURRENCY": int, "DIGEST_DISCORD_GUILD_ID": int, "DIGEST_SEND_BACKOFF": float,
    "DIGEST_FETCH_TIMEOUT": float, "DIGEST_LOG_JSON": bool, "DIGEST_SITE_URL": str,
    "DIGEST_TELEGRAM_API_BASE": str, "DIGEST_TELEGRAM_WEBHOOK_URL": (str, type(None)),
    "DIGEST_DISCORD_GATEWAY": str, "DIGEST_NOW": dt.datetime, "DIGEST_SCORE_WEIGHTS": dict,
    "DIGEST_TRUSTED_PROXIES": list, "DIGEST_LOCALES": list, "DIGEST_TIMEZONE": str,
    "DIGEST_MAIL_FROM": str, "DIGEST_ADMIN_EMAIL": (str, type(None)), "DIGEST_SMTP_TLS": str,
    "DIGEST_DISCORD_SHARDS": str, "DIGEST_SECRET_KEY": Secret,
}
_ENV_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(_FUZZED)),
       text=st.one_of(_ENV_TEXT, st.from_regex(r"[ +-]?[0-9_.eE]{0,8}( ?)", fullmatch=True),
                      st.sampled_from(["inf", "-Infinity", "NaN", "1e400", "null", "[]", "{}", "0", "-0"])))
def test_arbitrary_text_is_a_value_of_its_kind_or_one_line_naming_the_variable(name: str, text: str) -> None:
    with mock.patch.dict(os.environ, {name: text}):
        try:
            value = getattr(load_settings(), name.removeprefix("DIGEST_").lower())
        except ConfigError as exc:
            assert str(exc).startswith(name + ": ") and "\n" not in str(exc)
        else:
            assert isinstance(value, _FUZZED[name])


def test_overrides_beat_the_environment_which_beats_digest_toml(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "digest.toml").write_text('max_events = 5\nsite_url = "https://toml.example"\n')
    monkeypatch.setenv("DIGEST_MAX_EVENTS", "6")
    s = load_settings(max_events=7)
    assert (s.max_events, s.site_url, s.fetch_concurrency) == (7, "https://toml.example", 8)
    assert {"max_events", "site_url"} <= s.explicitly_set and "fetch_concurrency" not in s.explicitly_set
    assert load_settings().max_events == 6
    monkeypatch.delenv("DIGEST_MAX_EVENTS")
    assert load_settings().max_events == 5
    (tmp_path / "digest.toml").unlink()
    assert load_settings().max_events == 12


def test_a_bad_override_names_the_variable_and_an_unknown_one_is_a_type_error() -> None:
    with pytest.raises(ConfigError, match=r"^DIGEST_MAX_EVENTS: Input should be greater than or equal to 1$"):
        load_settings(max_events=0)
    with pytest.raises(TypeError, match="max_events"):
        load_settings(max_event=3)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('max_events = "many"', "max_events: Input should be a valid integer, unable to parse string"),
        ("max_events = 2.5", "max_events: Input should be a valid integer, got a number with a fractional"),
        ("timezone = 5", "timezone: Input should be a valid string"),
        ("locales = 5", "locales: Input should be a valid list"),
        ("locales = [1]", "locales: Input should be a valid string"),
        ('log_json = "maybe"', "log_json: Input should be a valid boolean"),
        ("send_backoff = inf", "send_backoff: Input should be a finite number"),
        ("score_weights = 5", "score_weights: Input should be a valid dictionary"),
        ("now = 2026-12-01T08:00:00", "now: Input should have timezone info"),
        ("now = 2026-12-01", "now: Input should be a valid datetime"),
        ("var_dir = 5", "var_dir: Input is not a valid path"),
        ("outbox_lease = 10", "DIGEST_OUTBOX_HEARTBEAT: must be shorter than DIGEST_OUTBOX_LEASE (10 s)"),
    ],
)
def test_a_digest_toml_value_of_the_wrong_kind_is_one_line(tmp_path: Path, toml: str, message: str) -> None:
    (tmp_path / "digest.toml").write_text(toml + "\n")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value).startswith(message if message.startswith("DIGEST_") else f"digest.toml: {message}")
    assert "\n" not in str(info.value)


def test_digest_toml_values_are_read_as_pydantic_lax_mode_read_them(tmp_path: Path) -> None:
    (tmp_path / "digest.toml").write_text(
        'MAX_EVENTS = "7"\nfetch_timeout = 5\nlog_json = "yes"\nlocales = "zh,en"\n'
        "now = 2026-12-05T03:00:00+08:00\n[score_weights]\nnovelty = 5\n")
    s = load_settings()
    assert (s.max_events, s.llm_top_events, s.fetch_timeout, s.log_json) == (7, 7, 5.0, True)
    assert s.locales == ["zh", "en"]
    assert type(s.fetch_timeout) is float and s.score_weights == {"novelty": 5.0}
    assert s.now == dt.datetime(2026, 12, 4, 19, tzinfo=dt.UTC)


def test_llm_top_events_follows_max_events_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIGEST_MAX_EVENTS", "20")
    assert load_settings().llm_top_events == 20
    monkeypatch.setenv("DIGEST_LLM_TOP_EVENTS", "3")
    assert load_settings().llm_top_events == 3


def test_secrets_never_show_in_repr_str_or_a_log_line(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    import logging

    values = {name: f"{name.lower()}-{'s3cr3t' * 6}" for name in (
        "DIGEST_LLM_API_KEY", "DIGEST_SMTP_PASSWORD", "DIGEST_TELEGRAM_TOKEN", "DIGEST_DISCORD_TOKEN",
        "DIGEST_SECRET_KEY")}
    values["DIGEST_TELEGRAM_WEBHOOK_SECRET"] = "hook_s3cr3t_" + "x" * 20
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    s = load_settings()
    with caplog.at_level("INFO"):
        logging.getLogger("digest.test").info("settings %s %r %s", s, s, s.llm_api_key)
    shown = " ".join([repr(s), str(s), f"{s.smtp_password}", caplog.text])
    assert "s3cr3t" not in shown and "Secret('**********')" in repr(s)
    assert s.secret() == values["DIGEST_SECRET_KEY"]
    assert s.telegram_webhook_secret is not None
    assert s.telegram_webhook_secret.get_secret_value() == values["DIGEST_TELEGRAM_WEBHOOK_SECRET"]


def test_replace_checks_the_changes_as_loading_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIGEST_TIMEZONE", "UTC")
    s = load_settings(max_events=5, var_dir="somewhere")
    monkeypatch.setenv("DIGEST_TIMEZONE", "Asia/Tokyo")  # replace reads nothing again
    copy = s.replace(discord_guild_id="42", max_events=8)
    assert (copy.discord_guild_id, copy.max_events, copy.llm_top_events) == (42, 8, 8)
    assert (copy.timezone, copy.var_dir) == ("UTC", Path("somewhere"))
    assert {"discord_guild_id", "max_events", "timezone"} <= copy.explicitly_set
    assert (s.discord_guild_id, s.max_events) == (None, 5)  # the original is untouched
    for changes, variable in [({"max_events": 0}, "DIGEST_MAX_EVENTS"),
                              ({"outbox_heartbeat": 90.0}, "DIGEST_OUTBOX_HEARTBEAT"),
                              ({"site_url": "ftp://example"}, "DIGEST_SITE_URL"),
                              ({"telegram_token": 5}, "DIGEST_TELEGRAM_TOKEN")]:
        with pytest.raises(ConfigError, match=f"^{variable}: "):
            s.replace(**changes)
    with pytest.raises(TypeError):
        s.replace(max_event=3)


def test_replace_keeps_the_clock_and_settings_are_read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    monkeypatch.setenv("DIGEST_NOW", "2026-12-05T03:00:00+08:00")
    s = load_settings()
    assert s.replace(discord_threads=False).clock is s.clock
    assert s.replace(now=dt.datetime(2027, 1, 1, tzinfo=dt.UTC)).clock is not s.clock
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.max_events = 3  # type: ignore[misc]
    assert isinstance(s, Settings)
