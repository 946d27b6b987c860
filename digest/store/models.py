"""The data model (SQLAlchemy 2.0 typed ORM). The schema exists only through Alembic.

Datetimes are stored as UTC and always come back timezone-aware (``UTCDateTime``),
so SQLite and PostgreSQL behave alike.

Unlike the other modules this one does not postpone its annotations (no ``from __future__
import annotations``): Python evaluates each ``Mapped[...]`` once, where SQLAlchemy would
parse and ``eval`` every one of them as a string while mapping (7 ms of every command that
opens the database).
"""

import datetime as dt
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> dt.datetime:
    """The current time, timezone-aware UTC (only for defaults; logic takes ``now``)."""
    return dt.datetime.now(dt.UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware UTC datetime, stored naive-UTC on every backend."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(dt.UTC).replace(tzinfo=None)

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        return None if value is None else value.replace(tzinfo=dt.UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dt.datetime: UTCDateTime(),
        dict[str, Any]: JSON,
        list[str]: JSON,
    }


class Source(Base):
    """A feed: its configuration mirror and its fetch state."""

    __tablename__ = "source"

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    url: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(32), default="rss")
    weight: Mapped[float] = mapped_column(Float, default=0.5)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    etag: Mapped[str | None] = mapped_column(Text)
    last_modified: Mapped[str | None] = mapped_column(Text)
    body_hash: Mapped[str | None] = mapped_column(String(64))
    last_fetched_at: Mapped[dt.datetime | None]
    last_status: Mapped[str | None] = mapped_column(String(16))
    last_http_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0)
    next_fetch_at: Mapped[dt.datetime | None]  # not fetched before this (the feed's own max-age/ttl)


class FetchLog(Base):
    """One fetch of one source: what the data notes and ``sources list`` report."""

    __tablename__ = "fetch_log"

    id: Mapped[int] = mapped_column(primary_key=True)
    source_id: Mapped[int] = mapped_column(ForeignKey("source.id", ondelete="CASCADE"), index=True)
    started_at: Mapped[dt.datetime] = mapped_column(index=True)
    status: Mapped[str] = mapped_column(String(16))
    http_status: Mapped[int | None] = mapped_column(Integer)
    entries_total: Mapped[int] = mapped_column(Integer, default=0)
    entries_new: Mapped[int] = mapped_column(Integer, default=0)
    entries_updated: Mapped[int] = mapped_column(Integer, default=0)
    bytes: Mapped[int] = mapped_column(Integer, default=0)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    warnings: Mapped[list[str]] = mapped_column(default=list)
    error: Mapped[str | None] = mapped_column(Text)


class Entry(Base):
    """One item of one feed, normalised."""

    __tablename__ = "entry"
    __table_args__ = (
        UniqueConstraint("source_id", "entry_key"),
        Index("ix_entry_published", "published"),
        Index("ix_entry_arxiv_id", "arxiv_id"),
        Index("ix_entry_canonical_url", "canonical_url"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    source_id: Mapped[int] = mapped_column(ForeignKey("source.id", ondelete="CASCADE"))
    entry_key: Mapped[str] = mapped_column(String(512))
    url: Mapped[str | None] = mapped_column(Text)
    canonical_url: Mapped[str | None] = mapped_column(String(2048))
    title: Mapped[str] = mapped_column(Text)
    summary: Mapped[str] = mapped_column(Text, default="")
    body: Mapped[str] = mapped_column(Text, default="", server_default="")  # sanitised full text, bounded
    authors: Mapped[list[str]] = mapped_column(default=list)
    categories: Mapped[list[str]] = mapped_column(default=list)
    links: Mapped[list[str]] = mapped_column(default=list)
    published: Mapped[dt.datetime]
    published_is_fallback: Mapped[bool] = mapped_column(Boolean, default=False)
    first_seen: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]
    content_hash: Mapped[str] = mapped_column(String(64))
    arxiv_id: Mapped[str | None] = mapped_column(String(64))
    arxiv_version: Mapped[int | None] = mapped_column(Integer)
    announce_type: Mapped[str | None] = mapped_column(String(32))
    doi: Mapped[str | None] = mapped_column(String(256))
    repo: Mapped[str | None] = mapped_column(String(256))
    tag: Mapped[str | None] = mapped_column(String(256))
    prerelease: Mapped[bool] = mapped_column(Boolean, default=False)
    digest_id: Mapped[int | None] = mapped_column(
        ForeignKey("digest.id", ondelete="SET NULL"), index=True
    )
    late: Mapped[bool] = mapped_column(Boolean, default=False)


class Event(Base):
    """One piece of work, gathering the entries about it."""

    __tablename__ = "event"

    id: Mapped[int] = mapped_column(primary_key=True)
    cluster_key: Mapped[str] = mapped_column(String(512), unique=True)
    title: Mapped[str] = mapped_column(Text)
    url: Mapped[str | None] = mapped_column(Text)
    relevant: Mapped[bool] = mapped_column(Boolean, default=False)
    relevance: Mapped[float] = mapped_column(Float, default=0.0)
    layers: Mapped[list[str]] = mapped_column(default=list)
    score: Mapped[float] = mapped_column(Float, default=0.0)
    score_breakdown: Mapped[dict[str, Any]] = mapped_column(default=dict)
    first_seen: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]


class EventEntry(Base):
    """Which entries an event gathers."""

    __tablename__ = "event_entry"

    event_id: Mapped[int] = mapped_column(
        ForeignKey("event.id", ondelete="CASCADE"), primary_key=True
    )
    entry_id: Mapped[int] = mapped_column(
        ForeignKey("entry.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    added_at: Mapped[dt.datetime]


class Writeup(Base):
    """An event's write-up in one locale, and who wrote it (model name or extractive)."""

    __tablename__ = "writeup"
    __table_args__ = (UniqueConstraint("event_id", "locale"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    event_id: Mapped[int] = mapped_column(ForeignKey("event.id", ondelete="CASCADE"))
    locale: Mapped[str] = mapped_column(String(8))
    title: Mapped[str] = mapped_column(Text)
    summary: Mapped[str] = mapped_column(Text)
    why_it_matters: Mapped[str] = mapped_column(Text)
    watch: Mapped[list[str]] = mapped_column(default=list)
    mode: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime]


class Digest(Base):
    """The digest of one date: its window, stats and generation modes."""

    __tablename__ = "digest"

    id: Mapped[int] = mapped_column(primary_key=True)
    date: Mapped[dt.date] = mapped_column(Date, unique=True)
    window_start: Mapped[dt.datetime]
    window_end: Mapped[dt.datetime]
    stats: Mapped[dict[str, Any]] = mapped_column(default=dict)
    generation_modes: Mapped[dict[str, Any]] = mapped_column(default=dict)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    built_at: Mapped[dt.datetime]
    published_at: Mapped[dt.datetime | None]
    read_count: Mapped[int] = mapped_column(Integer, default=0)
    partial: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    hidden_at: Mapped[dt.datetime | None]


class DigestText(Base):
    """A digest's title, overview and watch list in one locale."""

    __tablename__ = "digest_text"
    __table_args__ = (UniqueConstraint("digest_id", "locale"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    digest_id: Mapped[int] = mapped_column(ForeignKey("digest.id", ondelete="CASCADE"))
    locale: Mapped[str] = mapped_column(String(8))
    title: Mapped[str] = mapped_column(Text)
    overview: Mapped[str] = mapped_column(Text)
    watchlist: Mapped[list[str]] = mapped_column(default=list)
    mode: Mapped[str] = mapped_column(String(64))


class DigestEvent(Base):
    """What a digest showed: the event, its rank and its score at build time."""

    __tablename__ = "digest_event"

    digest_id: Mapped[int] = mapped_column(
        ForeignKey("digest.id", ondelete="CASCADE"), primary_key=True
    )
    event_id: Mapped[int] = mapped_column(
        ForeignKey("event.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    rank: Mapped[int] = mapped_column(Integer)
    score: Mapped[float] = mapped_column(Float)
    score_breakdown: Mapped[dict[str, Any]] = mapped_column(default=dict)
    layers: Mapped[list[str]] = mapped_column(default=list)
    updated: Mapped[bool] = mapped_column(Boolean, default=False)


class Subscriber(Base):
    """Someone who receives the digest on one channel."""

    __tablename__ = "subscriber"
    __table_args__ = (UniqueConstraint("channel", "address"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    channel: Mapped[str] = mapped_column(String(16))
    address: Mapped[str] = mapped_column(String(320))
    locale: Mapped[str] = mapped_column(String(8), default="zh")
    layers: Mapped[list[str]] = mapped_column(default=list)
    min_score: Mapped[float] = mapped_column(Float, default=0.0)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    created_at: Mapped[dt.datetime]
    updated_at: Mapped[dt.datetime]
    confirmed_at: Mapped[dt.datetime | None]


class Delivery(Base):
    """One digest to one subscriber: planned once, finished by later publishes."""

    __tablename__ = "delivery"
    __table_args__ = (
        UniqueConstraint("digest_id", "subscriber_id"),
        Index("ix_delivery_status", "status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    digest_id: Mapped[int] = mapped_column(ForeignKey("digest.id", ondelete="CASCADE"))
    subscriber_id: Mapped[int] = mapped_column(ForeignKey("subscriber.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16), default="planned")
    parts_total: Mapped[int] = mapped_column(Integer, default=0)
    parts_sent: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    message_id: Mapped[str | None] = mapped_column(String(255))
    last_error: Mapped[str | None] = mapped_column(Text)
    planned_at: Mapped[dt.datetime]
    claimed_at: Mapped[dt.datetime | None]
    sent_at: Mapped[dt.datetime | None]
    # The claim's lease: a sending row is its claimer's until then (renewed while it lives).
    lease_until: Mapped[dt.datetime | None]
    # It may have gone out before a crash: whoever sends it at last counts it as resent.
    resumed: Mapped[bool] = mapped_column(Boolean, default=False)
    # Why a failed row failed: bug (ours or our configuration), permanent (refused), exhausted.
    failure: Mapped[str | None] = mapped_column(String(16))
    thread_id: Mapped[str | None] = mapped_column(String(32))  # the Discord thread of this day's push


class LLMCache(Base):
    """One LLM answer, keyed by prompt version, model and input hash."""

    __tablename__ = "llm_cache"
    __table_args__ = (UniqueConstraint("prompt_version", "model", "input_hash"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    prompt_version: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(128))
    input_hash: Mapped[str] = mapped_column(String(64))
    answer: Mapped[str] = mapped_column(Text)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(index=True)


class RunLock(Base):
    """A named lock of one running command, on SQLite (PostgreSQL uses advisory locks instead).

    The holder renews ``expires_at`` while it lives; a row past its expiry is free to take.
    """

    __tablename__ = "run_lock"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    acquired_at: Mapped[dt.datetime]
    expires_at: Mapped[dt.datetime]


class RunReport(Base):
    """What one daily run did (scheduled, caught up or ``digest run``): the report as JSON."""

    __tablename__ = "run_report"
    __table_args__ = (Index("ix_run_report_date_started", "date", "started_at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    date: Mapped[dt.date] = mapped_column(Date)
    trigger: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[dt.datetime]
    finished_at: Mapped[dt.datetime]
    ok: Mapped[bool] = mapped_column(Boolean)
    report: Mapped[dict[str, Any]] = mapped_column(default=dict)


class RateBucket(Base):
    """A token bucket every process sees (per platform, chat or web client): tokens left, last refill."""

    __tablename__ = "rate_bucket"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    tokens: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[dt.datetime]
