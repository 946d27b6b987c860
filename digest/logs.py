"""The service's logging: one line per event, JSON lines with DIGEST_LOG_JSON=1, no secret in any line.

:class:`RedactConfigured` replaces every configured secret (bot tokens, the SMTP
password, the LLM key, the signing key) wherever it appears in a record: the
message, its arguments and any traceback. It sits on the root handlers, so
whoever logs (httpx printing a bot API URL with its token, an SMTP error) is
covered. :func:`configure` sets it up once per process.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from collections.abc import Iterable

REDACTED = "[redacted]"
MIN_SECRET = 6  # shorter values would redact ordinary words


class JsonLines(logging.Formatter):
    """One JSON object per record: time, level, logger, message (and the traceback, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        data = {"time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
                "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            data["error"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False)


class OneLine(logging.Formatter):
    """``LEVEL logger: message``, a traceback folded onto the same line."""

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace("\n", " | ")


class RedactConfigured(logging.Filter):
    """Replace the given secrets in every record (never drops one)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)

    def clean(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        if (clean := self.clean(message)) != message:
            record.msg, record.args = clean, ()
            record.__dict__.pop("color_message", None)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.clean(record.exc_text)
        return True


def configure(secrets: Iterable[str], *, json_lines: bool, level: int = logging.INFO) -> RedactConfigured:
    """Log to stderr, one line per record (JSON with ``json_lines``), every configured secret redacted."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if json_lines else OneLine("%(levelname)s %(name)s: %(message)s"))
    redact = RedactConfigured(secrets)
    handler.addFilter(redact)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(min(root.level or level, level))
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request, with bot tokens in URLs
    logging.getLogger("alembic").setLevel(logging.WARNING)  # its lines on every database opened
    return redact
