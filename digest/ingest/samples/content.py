"""The sample content (``digest/data/samples/content.toml``), read into checked pydantic models.

Items carry no dates there, only an age in minutes; :mod:`.entries` dates them.
A table that does not fit its model is refused with one line naming the table
and the field, so a typo in the content file cannot slip through as a default.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from digest.domain.errors import DigestError
from digest.ingest.samples.feeds import FEEDS_BY_KEY, POST_STYLES, FeedStyle
from digest.resources import data_dir

DEFAULT_ARXIV_LICENSE = "http://arxiv.org/licenses/nonexclusive-distrib/1.0/"


class SampleContentError(DigestError):
    """The sample content file does not parse or does not fit its models."""


def _as_tuple(value: object) -> object:
    """TOML arrays arrive as lists; strict models take tuples (so the models stay hashable)."""
    return tuple(value) if isinstance(value, list) else value


Texts = Annotated[tuple[str, ...], BeforeValidator(_as_tuple)]


class _Record(BaseModel):
    """One table of the content file: exact types, no unknown keys, text stripped."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, str_strip_whitespace=True)


def _feed_of(key: str, styles: frozenset[FeedStyle]) -> str:
    feed = FEEDS_BY_KEY.get(key)
    if feed is None or feed.style not in styles:
        raise ValueError(f"unknown or unsuitable feed {key!r}")
    return key


class Paper(_Record):
    """One arXiv paper version, listed in each sample category feed it names."""

    id: str
    version: int
    announce: Literal["new", "replace"]  # the type in the primary category's listing
    categories: Annotated[Texts, Field(min_length=1)]  # the first is the primary category
    age_minutes: int
    relevant: bool
    title: str
    authors: str
    abstract: str
    license: str = DEFAULT_ARXIV_LICENSE


class Post(_Record):
    """One blog or newsletter post."""

    feed: str
    post_id: int = 0
    age_minutes: int
    relevant: bool
    slug: str = ""
    title: str  # "{date}" is replaced by the post's date
    author: str = ""
    categories: Texts = ()
    excerpt: str = ""
    html: str

    @field_validator("feed")
    @classmethod
    def _post_feed(cls, key: str) -> str:
        return _feed_of(key, POST_STYLES)


class Release(_Record):
    """One GitHub release."""

    feed: str
    tag: str
    title: str
    author: str
    age_minutes: int
    relevant: bool
    html: str

    @field_validator("feed")
    @classmethod
    def _release_feed(cls, key: str) -> str:
        return _feed_of(key, frozenset({FeedStyle.GITHUB}))


class Content(_Record):
    """Everything the sample feeds say, undated: the ``[[paper]]``, ``[[post]]``, ``[[release]]``."""

    papers: Annotated[tuple[Paper, ...], BeforeValidator(_as_tuple)] = Field((), alias="paper")
    posts: Annotated[tuple[Post, ...], BeforeValidator(_as_tuple)] = Field((), alias="post")
    releases: Annotated[tuple[Release, ...], BeforeValidator(_as_tuple)] = Field((), alias="release")


def content_path() -> Path:
    """The TOML file holding the sample content."""
    return data_dir() / "samples" / "content.toml"


def parse_content(text: str, where: str) -> Content:
    """Parse and check content TOML; ``where`` (the file) starts every error line."""
    try:
        return Content.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise SampleContentError(f"{where}: not valid TOML: {exc}") from None
    except ValidationError as exc:
        raise SampleContentError(f"{where}: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    """``[[paper]] #3: title: Field required`` (and how many more), from pydantic's first error."""
    error = exc.errors()[0]
    message = error["msg"].removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{_place(error['loc'])}: {message}{more}"


def _place(loc: tuple[int | str, ...]) -> str:
    """``[[paper]] #3: title`` or ``[[post]] #1: categories[2]`` (tables count from 1, as people do)."""
    table, *rest = loc
    place = str(table)
    if rest and isinstance(rest[0], int):
        place, rest = f"[[{table}]] #{rest[0] + 1}", rest[1:]
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in rest)
    return f"{place}: {field[1:]}" if field else place


@functools.cache
def load_content() -> Content:
    """The checked bundled content (cached: it ships with the package)."""
    path = content_path()
    return parse_content(path.read_text(encoding="utf-8"), str(path))

