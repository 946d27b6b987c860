"""Settings: defaults, environment, digest.toml, one-line errors naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from digest.config import load_settings
from digest.errors import ConfigError


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
    from digest.cmd_digest import build_options

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
