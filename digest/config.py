"""Typed settings from the environment (prefix ``DIGEST_``) and an optional ``digest.toml``.

Settings are loaded once, at the edge (the CLI or the service), with
:func:`load_settings`; core functions receive plain values. Nothing here runs
at import time.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from digest.errors import ConfigError
from digest.layers import LAYER_IDS

LOCALES = ("zh", "en")


class Settings(BaseSettings):
    """Every setting of the service; see the README's configuration table."""

    model_config = SettingsConfigDict(
        env_prefix="DIGEST_",
        toml_file="digest.toml",
        extra="ignore",
        validate_default=True,
    )

    database_url: str = "sqlite+aiosqlite:///./var/digest.db"
    var_dir: Path = Path("./var")
    sources: Path | None = None
    timezone: str = "Asia/Shanghai"
    locales: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["zh"])

    fetch_concurrency: int = Field(8, ge=1, le=64)
    fetch_per_host: int = Field(2, ge=1, le=16)
    fetch_timeout: float = Field(30.0, gt=0)
    fetch_max_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    fetch_max_redirects: int = Field(5, ge=0, le=20)

    llm_api_key: SecretStr | None = None
    llm_base_url: str = "https://api.deepseek.com"
    llm_model: str = "deepseek-chat"
    llm_daily_tokens: int = Field(200_000, ge=0)
    llm_top_events: int = Field(8, ge=0, le=50)
    max_events: int = Field(12, ge=1, le=100)
    include_prereleases: bool = False
    score_weights: dict[str, float] = Field(default_factory=dict)
    llm_timeout: float = Field(60.0, gt=0)

    smtp_host: str | None = None
    smtp_port: int = Field(587, ge=1, le=65535)
    smtp_user: str | None = None
    smtp_password: SecretStr | None = None
    smtp_tls: Literal["auto", "starttls", "ssl", "none"] = "auto"
    mail_from: str = "compiler-digest <digest@localhost>"
    mail_outbox: Path = Path("./var/outbox")
    unsubscribe_mailto: str | None = None
    smtp_concurrency: int = Field(4, ge=1, le=64)
    smtp_rate: float = Field(0.0, ge=0)
    smtp_timeout: float = Field(60.0, gt=0)
    outbox_lease: float = Field(600.0, gt=0)
    send_attempts: int = Field(3, ge=1, le=10)
    send_backoff: float = Field(1.0, ge=0)
    send_retry_later: float = Field(600.0, ge=0)

    telegram_token: SecretStr | None = None
    telegram_api_base: str | None = None
    discord_token: SecretStr | None = None
    discord_api_base: str | None = None

    site_url: str = "http://127.0.0.1:8000"
    secret_key: SecretStr | None = None

    @field_validator("locales", mode="before")
    @classmethod
    def _split_locales(cls, value: object) -> object:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("locales")
    @classmethod
    def _known_locales(cls, value: list[str]) -> list[str]:
        unknown = [loc for loc in value if loc not in LOCALES]
        if unknown or not value:
            raise ValueError(f"locales must be a non-empty subset of {','.join(LOCALES)}")
        return list(dict.fromkeys(value))

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r}") from exc
        return value

    @field_validator("site_url", "llm_base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL")
        return value.rstrip("/")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))

    def secret(self) -> str:
        """The signing key: configured, or generated once and kept under ``var_dir``."""
        if self.secret_key is not None:
            return self.secret_key.get_secret_value()
        path = self.var_dir / "secret_key"
        if path.exists():
            return path.read_text().strip()
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(32)
        path.write_text(key + "\n")
        path.chmod(0o600)
        return key

    @property
    def all_layers(self) -> tuple[str, ...]:
        """The closed list of layer ids."""
        return LAYER_IDS


def load_settings(**overrides: object) -> Settings:
    """Load settings from the environment and ``digest.toml``; one-line error on a bad value."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "?"
        raise ConfigError(f"DIGEST_{field.upper()}: {first['msg']}") from None
