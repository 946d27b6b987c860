"""How a raw setting becomes a typed value: text from the environment, a TOML value, or a Python object.

The standard library's stand-in for pydantic's lax mode on the few kinds of value
:class:`digest.config.Settings` has (``str``, ``int``, ``float``, ``bool``, ``Path``,
:class:`Secret`, ``list[str]``, ``dict[str, float]``, an aware ``datetime``, a ``Literal``,
each also ``| None``), with pydantic's messages. Importing pydantic-settings cost every
command about a fifth of a second; these checks cost nothing measurable.

A field's annotation is its kind, ``Annotated[kind, Rule(...)]`` adds bounds and a check;
:func:`convert` is the one place a value is checked.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

Check = Callable[[Any], Any]
"""An extra check on a converted value: returns the value to keep, raises ValueError with the message."""

_INTEGER = re.compile(r"[+-]?[0-9](?:_?[0-9])*(?:\.0*)?", re.ASCII)  # "5", "+5", "1_000", "5.0"
_TRUE = frozenset(("1", "on", "t", "true", "y", "yes"))
_FALSE = frozenset(("0", "off", "f", "false", "n", "no"))


class Secret:
    """A text that never shows itself in ``repr``, ``str`` or a log line; ``get_secret_value()`` gives it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __str__(self) -> str:
        return "**********" if self._value else ""

    def __repr__(self) -> str:
        return f"Secret('{self}')"

    def __len__(self) -> int:
        return len(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclasses.dataclass(frozen=True)
class Rule:
    """A setting's bounds (numbers) and extra check, written ``Annotated[int, Rule(ge=1)]``."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    check: Check | None = None

    @staticmethod
    def of(hint: object) -> tuple[object, Rule]:
        """A field's kind and rule from its annotation (``Annotated[kind, Rule(...)]`` or a bare kind)."""
        if typing.get_origin(hint) is Annotated:
            kind, *extras = typing.get_args(hint)
            return kind, next((e for e in extras if isinstance(e, Rule)), Rule())
        return hint, Rule()


# -- the kinds ------------------------------------------------------------------------------------------

def to_str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("Input should be a valid string")
    return value


def to_int(value: object) -> int:
    if isinstance(value, int):  # bool too, as pydantic's lax mode
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("Input should be a finite number")
        if not value.is_integer():
            raise ValueError("Input should be a valid integer, got a number with a fractional part")
        return int(value)
    if not isinstance(value, str):
        raise ValueError("Input should be a valid integer")
    text = value.strip()
    try:
        if _INTEGER.fullmatch(text):
            return int(text.partition(".")[0])
    except ValueError:  # more digits than int() converts
        pass
    raise ValueError("Input should be a valid integer, unable to parse string as an integer")


def to_float(value: object) -> float:
    """A finite number (pydantic's ``allow_inf_nan=False``): "inf", "nan" and 1e400 are refused."""
    if isinstance(value, str):
        try:
            if not value.strip().isascii():  # float() would read other scripts' digits
                raise ValueError(value)
            number = float(value)
        except ValueError:
            raise ValueError("Input should be a valid number, unable to parse string as a number") from None
    elif isinstance(value, int | float):  # bool too
        try:
            number = float(value)
        except OverflowError:
            raise ValueError("Input should be a finite number") from None
    else:
        raise ValueError("Input should be a valid number")
    if not math.isfinite(number):
        raise ValueError("Input should be a finite number")
    return number


def to_bool(value: object) -> bool:
    """pydantic's spellings: 1/0, true/false, yes/no, on/off, t/f, y/n in any case; 0 and 1."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    if isinstance(value, str | int):
        raise ValueError("Input should be a valid boolean, unable to interpret input")
    raise ValueError("Input should be a valid boolean")


def to_path(value: object) -> Path:
    if not isinstance(value, str | os.PathLike):
        raise ValueError("Input is not a valid path for <class 'pathlib.Path'>")
    return Path(value)


def to_secret(value: object) -> Secret:
    return value if isinstance(value, Secret) else Secret(to_str(value))


def to_list(value: object) -> list[str]:
    """A list of texts; a text is split at commas (``zh, en``), blank parts dropped."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list | tuple):
        raise ValueError("Input should be a valid list")
    return [to_str(item) for item in value]


def to_weights(value: object) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ValueError("Input should be a valid dictionary")
    return {to_str(key): to_float(number) for key, number in value.items()}


def to_datetime(value: object) -> dt.datetime:
    """An aware date and time: a ``datetime`` or ISO 8601 text with an offset (``Z`` or ``+08:00``)."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise ValueError("Input should be an ISO 8601 date and time with an offset "
                             "(2026-12-05T03:00:00+08:00)") from None
    if not isinstance(value, dt.datetime):
        raise ValueError("Input should be a valid datetime")
    if value.utcoffset() is None:
        raise ValueError("Input should have timezone info")
    return value


_KINDS: dict[object, Callable[[object], Any]] = {
    str: to_str, int: to_int, float: to_float, bool: to_bool, Path: to_path, Secret: to_secret,
    list[str]: to_list, dict[str, float]: to_weights, dt.datetime: to_datetime,
}


def _choices(options: tuple[str, ...]) -> Callable[[object], str]:
    def to_choice(value: object) -> str:
        if not isinstance(value, str) or value not in options:
            quoted = [f"'{option}'" for option in options]
            raise ValueError(f"Input should be {', '.join(quoted[:-1])} or {quoted[-1]}")
        return value
    return to_choice


def converter(annotation: object) -> tuple[Callable[[object], Any], bool]:
    """The conversion for a field's annotation, and whether None is allowed (``X | None``)."""
    args = typing.get_args(annotation)
    optional = isinstance(annotation, types.UnionType) and type(None) in args
    if optional:
        (annotation,) = (arg for arg in args if arg is not type(None))
    if typing.get_origin(annotation) is Literal:
        return _choices(typing.get_args(annotation)), optional
    return _KINDS[annotation], optional


def from_environment(annotation: object, text: str) -> object:
    """An environment variable's text as the value to convert: JSON for a ``dict`` setting."""
    if typing.get_origin(annotation) is not dict:
        return text
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: brackets nested a thousand deep
        raise ValueError('not valid JSON (e.g. {"novelty": 5})') from None


def convert(kind: object, rule: Rule, value: object) -> Any:
    """``value`` as ``kind``, within the rule's bounds, through its check; ValueError with the message."""
    to_kind, optional = converter(kind)
    if value is None and optional:
        return None
    typed = to_kind(value)
    if rule.ge is not None and typed < rule.ge:
        raise ValueError(f"Input should be greater than or equal to {rule.ge}")
    if rule.gt is not None and typed <= rule.gt:
        raise ValueError(f"Input should be greater than {rule.gt}")
    if rule.le is not None and typed > rule.le:
        raise ValueError(f"Input should be less than or equal to {rule.le}")
    return typed if rule.check is None else rule.check(typed)
