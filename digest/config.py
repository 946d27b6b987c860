"""Typed settings from the environment (prefix ``DIGEST_``) and an optional ``digest.toml``.

Settings are loaded once, at the edge (the CLI or the service), with
:func:`load_settings`; core functions receive plain values. Nothing here runs
at import time. Every value is checked at load: a typo stops the command with
one line naming the variable (or the file) before anything is claimed or sent.
Precedence: the keyword overrides of ``load_settings``, then the environment
(``DIGEST_NAME``, any case), then ``./digest.toml`` (``name = value``), then the default.

Standard library only (the kinds and their checks are in :mod:`digest.settings_fields`):
pydantic-settings cost every command about a fifth of a second to import.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import logging
import os
import re
import secrets
import tomllib
import typing
from dataclasses import MISSING, dataclass, field, fields
from functools import cache, cached_property
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from digest.domain.clock import Clock, make_clock
from digest.domain.errors import ConfigError
from digest.domain.layers import LAYER_IDS
from digest.domain.locales import LOCALES
from digest.settings_fields import Rule, Secret, convert, from_environment

__all__ = ["DEFAULT_SCHEDULE", "MIN_SECRET_CHARS", "TOML_FILE", "Secret", "Settings", "http_url",
           "load_settings", "mail_address", "read_or_create_key", "unknown_setting_warnings"]

TOML_FILE = "digest.toml"
DEFAULT_SCHEDULE = "0 8 * * *"  # croniter accepts it (tests/test_lazy_imports.py); see _cron
MIN_SECRET_CHARS = 32
_PREFIX = "DIGEST_"
_UNCHECKED_PREFIX = "DIGEST_TEST_"  # the test suite's own variables
_ADDRESS = re.compile(r"[^\s@<>\",;:()\[\]\\]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
_LINE_BREAK = re.compile(r"[\r\n\x00\u2028\u2029\x85]")
log = logging.getLogger(__name__)

SmtpTls = Literal["auto", "starttls", "ssl", "none"]
LlmTriage = Literal["all", "borderline"]  # digest.build.triage.TriageScope


# -- the checks beyond the kind (each returns the value to keep or raises ValueError with the message) ----

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


def _site_url(value: str) -> str:
    return http_url(value).rstrip("/")


def _webhook_url(value: str) -> str | None:
    if not value.strip():
        return None
    parts = urlsplit(http_url(value))
    if parts.path in ("", "/") or "%" in parts.path or parts.query or parts.fragment:
        raise ValueError(f"must name the path the web app serves it on, with no query "
                         f"(https://digest.example.org/telegram/webhook): {value!r}")
    return value


def _webhook_secret(value: Secret) -> Secret:
    if not re.fullmatch(r"[A-Za-z0-9_-]{16,256}", value.get_secret_value()):
        raise ValueError("must be 16 to 256 characters of A-Z, a-z, 0-9, _ and - (Telegram's rule)")
    return value


def _long_secret(value: Secret) -> Secret:
    if len(value.get_secret_value().strip()) < MIN_SECRET_CHARS:
        raise ValueError(f"must be at least {MIN_SECRET_CHARS} characters (unset it to generate one)")
    return value


def _known_locales(value: list[str]) -> list[str]:
    if not value or any(loc not in LOCALES for loc in value):
        raise ValueError(f"locales must be a non-empty subset of {','.join(LOCALES)}")
    return list(dict.fromkeys(value))


def _networks(value: list[str]) -> list[str]:
    import ipaddress

    for item in value:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueError(f"not an IP address or network: {item!r}") from None
    return value


def _known_timezone(value: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder of zones, a name too long
        raise ValueError(f"unknown time zone {value!r}") from None
    return value


def _ws_url(value: str) -> str:
    if not re.fullmatch(r"wss?://[^\s/?#]+[^\s]*", value):
        raise ValueError(f"must be a ws:// or wss:// URL with a host: {value!r}")
    return value


def _shards(value: str) -> str:
    if value != "auto" and not (value.isdecimal() and value.isascii() and 0 < int(value) <= 4096):
        raise ValueError("must be 'auto' or a number of shards (1 to 4096)")
    return value


def _cron(value: str) -> str:
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


def _admin_email(value: str) -> str | None:
    return mail_address(value.strip(), display_name=False) if value.strip() else None


def _mail_from(value: str) -> str:
    return mail_address(value, display_name=True)


def _mailto(value: str) -> str | None:
    address = value.strip().removeprefix("mailto:")
    return mail_address(address, display_name=False) if value.strip() else None


def _one_token(value: str) -> str:
    if not value.strip() or re.search(r"\s", value):
        raise ValueError("must be one word without spaces or line breaks")
    return value


def _weights(value: dict[str, float]) -> dict[str, float]:
    bad = [key for key, weight in value.items() if weight < 0]  # the kind already refused inf and nan
    if bad:
        raise ValueError(f"weights must be finite and non-negative: {', '.join(bad)}")
    return value


@dataclass(frozen=True)
class Settings:
    """Every setting of the service; see the README's configuration table.

    Built by :func:`load_settings` (or :meth:`replace`), which checks every value: the
    annotation is a setting's kind, its :class:`Rule` (if any) the bounds and the extra check.
    """

    database_url: str = "sqlite+aiosqlite:///./var/digest.db"
    var_dir: Path = Path("./var")
    sources: Path | None = None
    sources_extra: Path = Path("./var/sources.toml")  # added to the built-in list
    timezone: Annotated[str, Rule(check=_known_timezone)] = "Asia/Shanghai"
    locales: Annotated[list[str], Rule(check=_known_locales)] = field(default_factory=lambda: ["zh"])
    now: dt.datetime | None = None

    fetch_concurrency: Annotated[int, Rule(ge=1, le=64)] = 8
    fetch_per_host: Annotated[int, Rule(ge=1, le=16)] = 2
    fetch_timeout: Annotated[float, Rule(gt=0)] = 30.0
    fetch_max_bytes: Annotated[int, Rule(ge=1024)] = 10 * 1024 * 1024
    fetch_max_redirects: Annotated[int, Rule(ge=0, le=20)] = 5

    llm_api_key: Secret | None = None
    llm_base_url: Annotated[str, Rule(check=_site_url)] = "https://api.deepseek.com"
    llm_model: Annotated[str, Rule(check=_one_token)] = "deepseek-chat"
    llm_daily_tokens: Annotated[int, Rule(ge=0)] = 200_000
    llm_top_events: Annotated[int, Rule(ge=0, le=100)] = 12  # unset: max_events (every shown event)
    max_events: Annotated[int, Rule(ge=1, le=100)] = 12
    include_prereleases: bool = False
    score_weights: Annotated[dict[str, float], Rule(check=_weights)] = field(default_factory=dict)
    llm_timeout: Annotated[float, Rule(gt=0, le=3600)] = 60.0
    llm_triage: LlmTriage = "all"  # the events the LLM judges: all, or the rules' borderline ones
    llm_triage_limit: Annotated[int, Rule(ge=0, le=100_000)] = 150  # = digest.build.triage.TRIAGE_LIMIT

    smtp_host: Annotated[str | None, Rule(check=_one_token)] = None
    smtp_port: Annotated[int, Rule(ge=1, le=65535)] = 587
    smtp_user: Annotated[str | None, Rule(check=_one_token)] = None
    smtp_password: Secret | None = None
    smtp_tls: SmtpTls = "auto"
    mail_from: Annotated[str, Rule(check=_mail_from)] = "compiler-digest <digest@localhost>"
    mail_outbox: Path = Path("./var/outbox")
    unsubscribe_mailto: Annotated[str | None, Rule(check=_mailto)] = None
    smtp_concurrency: Annotated[int, Rule(ge=1, le=64)] = 4
    smtp_rate: Annotated[float, Rule(ge=0)] = 0.0
    smtp_timeout: Annotated[float, Rule(gt=0, le=3600)] = 60.0
    outbox_lease: Annotated[float, Rule(gt=0, le=86400)] = 60.0
    outbox_heartbeat: Annotated[float, Rule(gt=0, le=86400)] = 15.0  # < outbox_lease (see _build)
    send_attempts: Annotated[int, Rule(ge=1, le=10)] = 3
    send_backoff: Annotated[float, Rule(ge=0, le=3600)] = 1.0
    send_retry_later: Annotated[float, Rule(ge=0, le=7 * 86400)] = 600.0

    telegram_token: Secret | None = None
    telegram_api_base: Annotated[str | None, Rule(check=http_url)] = None
    discord_token: Secret | None = None
    discord_api_base: Annotated[str | None, Rule(check=http_url)] = None
    discord_gateway: Annotated[str | None, Rule(check=_ws_url)] = None
    discord_guild_id: Annotated[int | None, Rule(gt=0)] = None
    discord_shards: Annotated[str | None, Rule(check=_shards)] = None
    discord_threads: bool = True
    discord_discussion_channel: Annotated[int | None, Rule(gt=0)] = None
    # the Telegram group where readers discuss the digests
    telegram_discussion_url: Annotated[str | None, Rule(check=http_url)] = None

    # The Telegram webhook: set, Telegram posts the updates to the web app at the URL's path (no polling),
    # with the secret in X-Telegram-Bot-Api-Secret-Token (unset: derived from DIGEST_SECRET_KEY).
    telegram_webhook_url: Annotated[str | None, Rule(check=_webhook_url)] = None
    telegram_webhook_secret: Annotated[Secret | None, Rule(check=_webhook_secret)] = None

    schedule: Annotated[str, Rule(check=_cron)] = DEFAULT_SCHEDULE
    admin_email: Annotated[str | None, Rule(check=_admin_email)] = None
    admin_telegram_chat: str | None = None
    admin_discord_channel: str | None = None
    log_json: bool = False

    site_url: Annotated[str, Rule(check=_site_url)] = "http://127.0.0.1:8000"
    secret_key: Annotated[Secret | None, Rule(check=_long_secret)] = None
    trusted_proxies: Annotated[list[str], Rule(check=_networks)] = field(default_factory=list)

    explicitly_set: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    """The settings given (override, environment or digest.toml) rather than defaulted."""

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

    def replace(self, **changes: object) -> Settings:
        """A copy with ``changes``, checked as :func:`load_settings` checks (ConfigError naming the variable).

        Nothing is read again from the environment or digest.toml; the clock is kept unless ``now`` changes.
        """
        given = {name: (getattr(self, name), _variable(name)) for name in self.explicitly_set}
        copy = _build(given | {name: (value, _variable(name)) for name, value in _known(changes).items()})
        if "now" not in changes:  # one clock: a pinned one runs on, it does not start again
            copy.__dict__["clock"] = self.clock
        return copy


@cache
def _fields() -> dict[str, tuple[object, Rule]]:
    """Each setting's name, kind and rule, in declaration order (every field but ``explicitly_set``)."""
    hints = typing.get_type_hints(Settings, include_extras=True)
    return {f.name: Rule.of(hints[f.name]) for f in fields(Settings) if f.name != "explicitly_set"}


def _variable(name: str) -> str:
    return _PREFIX + name.upper()


def _known(values: dict[str, object]) -> dict[str, object]:
    unknown = sorted(set(values) - set(_fields()))
    if unknown:
        raise TypeError(f"unknown setting {unknown[0]!r}{_suggest(unknown[0], list(_fields()))}")
    return values


def _build(given: dict[str, tuple[object, str]]) -> Settings:
    """Settings from ``given`` (name -> raw value and where it came from) and the defaults; ConfigError.

    The first bad value, in declaration order, is reported as ``WHERE: message``.
    """
    values: dict[str, Any] = {}
    for name, (kind, rule) in _fields().items():
        raw, where = given.get(name, (_default(name), _variable(name)))
        try:
            values[name] = convert(kind, rule, raw)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    lease, heartbeat = values["outbox_lease"], values["outbox_heartbeat"]
    if heartbeat >= lease:
        where = given.get("outbox_heartbeat", (None, _variable("outbox_heartbeat")))[1]
        raise ConfigError(f"{where}: must be shorter than DIGEST_OUTBOX_LEASE ({lease:g} s)")
    if "llm_top_events" not in given:  # DIGEST_LLM_TOP_EVENTS defaults to DIGEST_MAX_EVENTS
        values["llm_top_events"] = values["max_events"]
    return Settings(**values, explicitly_set=frozenset(given))


def _default(name: str) -> object:
    spec = Settings.__dataclass_fields__[name]
    return spec.default_factory() if spec.default_factory is not MISSING else spec.default


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
    names = list(_fields())
    env_names = [_variable(n) for n in names]
    warnings = [
        f"unknown setting {key} is ignored{_suggest(key, env_names)}"
        for key in sorted(environ)
        if key.startswith(_PREFIX) and not key.startswith(_UNCHECKED_PREFIX) and key not in env_names
    ]
    warnings += [f"{TOML_FILE}: unknown key {key!r} is ignored{_suggest(key.lower(), names)}"
                 for key in sorted(toml) if key.lower() not in names]
    return warnings


def load_settings(**overrides: object) -> Settings:
    """Load settings from the overrides, the environment and ``digest.toml``; one-line error on a bad value.

    An override's name is the setting's (``var_dir=...``); an unknown one is a TypeError.
    """
    _known(overrides)
    environ = dict(os.environ)
    toml = _toml_values(Path(TOML_FILE))
    for warning in unknown_setting_warnings(environ, toml):
        log.warning("%s", warning)
    env = {key.upper(): text for key, text in environ.items()}  # DIGEST_X, digest_x: the same setting
    table = {key.lower(): value for key, value in toml.items()}
    given: dict[str, tuple[object, str]] = {}
    for name, (kind, _rule) in _fields().items():
        variable = _variable(name)
        if name in overrides:
            given[name] = (overrides[name], variable)
        elif variable in env:
            try:
                given[name] = (from_environment(kind, env[variable]), variable)
            except ValueError as exc:
                raise ConfigError(f"{variable}: {exc}") from None
        elif name in table:
            given[name] = (table[name], f"{TOML_FILE}: {name}")
    return _build(given)
