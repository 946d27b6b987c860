"""Settings: defaults, environment, digest.toml, one-line errors naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from digest.config import load_settings
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
