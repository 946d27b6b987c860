"""Typed settings from the environment (prefix ``DIGEST_``) and an optional ``digest.toml``.

Settings are loaded once, at the edge (the CLI or the service), with
:func:`load_settings`; core functions receive plain values. Nothing here runs
at import time. Every value is checked at load: a typo stops the command with
one line naming the variable (or the file) before anything is claimed or sent.
"""

from __future__ import annotations

import contextlib
import difflib
import ipaddress
import logging
import math
import os
import re
import secrets
import tomllib
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AwareDatetime,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from digest.domain.clock import Clock, make_clock
from digest.domain.errors import ConfigError
from digest.domain.layers import LAYER_IDS
from digest.domain.locales import LOCALES

TOML_FILE = "digest.toml"
DEFAULT_SCHEDULE = "0 8 * * *"  # croniter accepts it (tests/test_lazy_imports.py); see Settings._cron
MIN_SECRET_CHARS = 32
_PREFIX = "DIGEST_"
_UNCHECKED_PREFIX = "DIGEST_TEST_"  # the test suite's own variables
_ADDRESS = re.compile(r"[^\s@<>\",;:()\[\]\\]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
_LINE_BREAK = re.compile(r"[\r\n\x00\u2028\u2029\x85]")
log = logging.getLogger(__name__)


class Settings(BaseSettings):
    """Every setting of the service; see the README's configuration table."""

    model_config = SettingsConfigDict(
        env_prefix=_PREFIX,
        toml_file=TOML_FILE,
        extra="ignore",
        validate_default=True,
        allow_inf_nan=False,
    )

    database_url: str = "sqlite+aiosqlite:///./var/digest.db"
    var_dir: Path = Path("./var")
    sources: Path | None = None
    sources_extra: Path = Path("./var/sources.toml")  # added to the built-in list
    timezone: str = "Asia/Shanghai"
    locales: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["zh"])
    now: AwareDatetime | None = None

    fetch_concurrency: int = Field(8, ge=1, le=64)
    fetch_per_host: int = Field(2, ge=1, le=16)
    fetch_timeout: float = Field(30.0, gt=0)
    fetch_max_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    fetch_max_redirects: int = Field(5, ge=0, le=20)

    llm_api_key: SecretStr | None = None
    llm_base_url: str = "https://api.deepseek.com"
    llm_model: str = "deepseek-chat"
    llm_daily_tokens: int = Field(200_000, ge=0)
    llm_top_events: int = Field(12, ge=0, le=100)  # unset: max_events (every shown event)
    max_events: int = Field(12, ge=1, le=100)
    include_prereleases: bool = False
    score_weights: dict[str, float] = Field(default_factory=dict)
    llm_timeout: float = Field(60.0, gt=0, le=3600)

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
    smtp_timeout: float = Field(60.0, gt=0, le=3600)
    outbox_lease: float = Field(60.0, gt=0, le=86400)
    outbox_heartbeat: float = Field(15.0, gt=0, le=86400)
    send_attempts: int = Field(3, ge=1, le=10)
    send_backoff: float = Field(1.0, ge=0, le=3600)
    send_retry_later: float = Field(600.0, ge=0, le=7 * 86400)

    telegram_token: SecretStr | None = None
    telegram_api_base: str | None = None
    discord_token: SecretStr | None = None
    discord_api_base: str | None = None
    discord_gateway: str | None = None
    discord_guild_id: int | None = Field(None, gt=0)
    discord_shards: str | None = None
    discord_threads: bool = True
    discord_discussion_channel: int | None = Field(None, gt=0)
    telegram_discussion_url: str | None = None  # the Telegram group where readers discuss the digests

    # The Telegram webhook: set, Telegram posts the updates to the web app at the URL's path (no polling),
    # with the secret in X-Telegram-Bot-Api-Secret-Token (unset: derived from DIGEST_SECRET_KEY).
    telegram_webhook_url: str | None = None
    telegram_webhook_secret: SecretStr | None = None

    @field_validator("telegram_webhook_url")
    @classmethod
    def _webhook_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parts = urlsplit(http_url(value))
        if parts.path in ("", "/") or "%" in parts.path or parts.query or parts.fragment:
            raise ValueError(f"must name the path the web app serves it on, with no query "
                             f"(https://digest.example.org/telegram/webhook): {value!r}")
        return value

    @field_validator("telegram_webhook_secret")
    @classmethod
    def _webhook_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_-]{16,256}", value.get_secret_value()):
            raise ValueError("must be 16 to 256 characters of A-Z, a-z, 0-9, _ and - (Telegram's rule)")
        return value

    schedule: str = DEFAULT_SCHEDULE
    admin_email: str | None = None
    admin_telegram_chat: str | None = None
    admin_discord_channel: str | None = None
    log_json: bool = False

    site_url: str = "http://127.0.0.1:8000"
    secret_key: SecretStr | None = None
    trusted_proxies: Annotated[list[str], NoDecode] = Field(default_factory=list)

    @field_validator("locales", "trusted_proxies", mode="before")
    @classmethod
    def _split_list(cls, value: object) -> object:
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

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"not an IP address or network: {item!r}") from None
        return value

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
        return http_url(value).rstrip("/")

    @field_validator("telegram_api_base", "discord_api_base", "telegram_discussion_url")
    @classmethod
    def _optional_http_url(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value)

    @field_validator("discord_gateway")
    @classmethod
    def _ws_url(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"wss?://[^\s/?#]+[^\s]*", value):
            raise ValueError(f"must be a ws:// or wss:// URL with a host: {value!r}")
        return value

    @field_validator("discord_shards")
    @classmethod
    def _shards(cls, value: str | None) -> str | None:
        if value is not None and value != "auto" and not (value.isdecimal() and value.isascii()
                                                            and 0 < int(value) <= 4096):
            raise ValueError("must be 'auto' or a number of shards (1 to 4096)")
        return value

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        """A configured expression is checked by croniter, the parser the schedule runs on.

        The shipped default is not parsed again on every start: importing croniter runs
        ``platform.architecture()``, which forks ``file`` on the interpreter, a few
        hundredths of a second each command (``digest preview`` never needs the schedule).
        """
        if value == DEFAULT_SCHEDULE:
            return value
        from croniter import croniter

        if not croniter.is_valid(value):
            raise ValueError(f"not a cron expression (minute hour day month weekday): {value!r}")
        return value

    @field_validator("admin_email")
    @classmethod
    def _admin_email(cls, value: str | None) -> str | None:
        return None if value is None or not value.strip() else mail_address(value.strip(), display_name=False)

    @field_validator("mail_from")
    @classmethod
    def _mail_from(cls, value: str) -> str:
        return mail_address(value, display_name=True)

    @field_validator("unsubscribe_mailto")
    @classmethod
    def _mailto(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return mail_address(value.strip().removeprefix("mailto:"), display_name=False)

    @field_validator("smtp_host", "smtp_user", "llm_model")
    @classmethod
    def _one_token(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or re.search(r"\s", value)):
            raise ValueError("must be one word without spaces or line breaks")
        return value

    @field_validator("score_weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [k for k, v in value.items() if not math.isfinite(v) or v < 0]
        if bad:
            raise ValueError(f"weights must be finite and non-negative: {', '.join(bad)}")
        return value

    @field_validator("secret_key")
    @classmethod
    def _long_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().strip()) < MIN_SECRET_CHARS:
            raise ValueError(f"must be at least {MIN_SECRET_CHARS} characters (unset it to generate one)")
        return value

    @field_validator("outbox_heartbeat")
    @classmethod
    def _heartbeat_within_lease(cls, value: float, info: ValidationInfo) -> float:
        lease = info.data.get("outbox_lease")
        if lease is not None and value >= lease:
            raise ValueError(f"must be shorter than DIGEST_OUTBOX_LEASE ({lease:g} s)")
        return value

    @model_validator(mode="after")
    def _llm_writes_every_shown_event(self) -> Settings:
        """DIGEST_LLM_TOP_EVENTS defaults to DIGEST_MAX_EVENTS: the LLM writes every shown event."""
        if "llm_top_events" not in self.model_fields_set:
            self.llm_top_events = self.max_events
        return self

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

    @cached_property
    def clock(self) -> Clock:
        """The one clock of this process: the system's, or DIGEST_NOW running on from there.

        Read it through ``digest.bootstrap.clock``; adapters handed the settings may read it here.
        """
        return make_clock(self.now)

    def secret(self) -> str:
        """The signing key: configured, or generated once (atomically) and kept under ``var_dir``."""
        if self.secret_key is not None:
            return self.secret_key.get_secret_value().strip()
        return read_or_create_key(self.var_dir / "secret_key")

    @property
    def all_layers(self) -> tuple[str, ...]:
        """The closed list of layer ids."""
        return LAYER_IDS


def http_url(value: str) -> str:
    """``value`` when it is a full http(s) URL with a host; ValueError otherwise."""
    try:
        parts = urlsplit(value)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        raise ValueError(f"not a valid URL: {value!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise ValueError(f"must be a full http(s) URL with a host (https://digest.example.org): {value!r}")
    if re.search(r"[\s\x00-\x1f\x7f<>\"\\^`{|}]", value) or "=?" in value:
        raise ValueError(f"must not contain spaces, line breaks, quotes or '=?': {value!r}")
    if not value.isascii():
        raise ValueError(f"must be ASCII (write an international host name as xn--...): {value!r}")
    return value


def mail_address(value: str, *, display_name: bool) -> str:
    """``value`` when it is one mail address (``Name <a@b>`` if ``display_name``); ValueError otherwise."""
    from email.utils import parseaddr

    if _LINE_BREAK.search(value) or "=?" in value:
        raise ValueError(f"must be one address without line breaks or encoded words: {value!r}")
    name, address = parseaddr(value)
    if (not display_name and name) or not _ADDRESS.fullmatch(address) or not value.isprintable():
        raise ValueError(f"not a usable mail address: {value!r}")
    return value


def read_or_create_key(path: Path) -> str:
    """The key in ``path``; created once with mode 0600 if missing (every concurrent first start agrees).

    The new key is written to a private temporary file and hard-linked into
    place: the link either appears with the whole key in it or fails because
    another process won, whose key is then read.
    """
    where = f"the key file {path} (DIGEST_VAR_DIR)"
    try:
        if not path.exists():
            _create_key(path)
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot be used: {getattr(exc, 'strerror', None) or exc}") from None
    if len(key) < MIN_SECRET_CHARS:
        raise ConfigError(f"{where} holds a key shorter than {MIN_SECRET_CHARS} characters; "
                          "delete it to generate a new one, or set DIGEST_SECRET_KEY")
    return key


def _create_key(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(secrets.token_urlsafe(48) + "\n")
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):  # another process won: its key is the key
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _toml_values(path: Path) -> dict[str, Any]:
    """The top-level table of ``digest.toml`` (empty when there is none); ConfigError naming the file."""
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def unknown_setting_warnings(environ: dict[str, str], toml: dict[str, Any]) -> list[str]:
    """One warning per ``DIGEST_`` variable or digest.toml key that no setting has."""
    names = list(Settings.model_fields)
    env_names = [_PREFIX + n.upper() for n in names]
    warnings = [
        f"unknown setting {key} is ignored{_suggest(key, env_names)}"
        for key in sorted(environ)
        if key.startswith(_PREFIX) and not key.startswith(_UNCHECKED_PREFIX) and key not in env_names
    ]
    warnings += [f"{TOML_FILE}: unknown key {key!r} is ignored{_suggest(key.lower(), names)}"
                 for key in sorted(toml) if key.lower() not in names]
    return warnings


def _where(field: str, environ: dict[str, str], toml: dict[str, Any]) -> str:
    """Where a bad value came from: the variable, or the digest.toml key when the environment lacks it."""
    variable = _PREFIX + field.upper()
    if variable not in environ and any(k.lower() == field for k in toml):
        return f"{TOML_FILE}: {field}"
    return variable


def load_settings(**overrides: object) -> Settings:
    """Load settings from the environment and ``digest.toml``; one-line error on a bad value."""
    environ = dict(os.environ)
    toml = _toml_values(Path(TOML_FILE))
    for warning in unknown_setting_warnings(environ, toml):
        log.warning("%s", warning)
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        message = str(first["msg"]).removeprefix("Value error, ")
        where = _where(field, environ, toml) if field else "settings"
        raise ConfigError(f"{where}: {message}") from None
    except SettingsError as exc:
        found = re.search(r'field "(\w+)"', str(exc))
        field = found.group(1) if found else ""
        raise ConfigError(f"{_where(field, environ, toml) if field else 'settings'}: "
                          "not valid JSON (e.g. {\"novelty\": 5})") from None
