"""The LLM answer cache: ``LLMCache`` rows keyed by (prompt version, model, sha256 of the input).

A hit costs no tokens and no request. Rows are stamped by the injected clock;
the daily budget sums their tokens from the day's start
(:meth:`AnswerCache.tokens_since`), so a stored answer's cost is counted once.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from digest.domain.clock import Clock, system_now
from digest.store.db import SessionFactory
from digest.store.models import LLMCache


def input_hash(system: str, user: str) -> str:
    """The cache key of a prompt: sha256 over the system and user messages."""
    return hashlib.sha256(json.dumps([system, user], ensure_ascii=False).encode()).hexdigest()


class AnswerCache:
    """The cached JSON answers of one model."""

    def __init__(self, sessions: SessionFactory, model: str, clock: Clock = system_now) -> None:
        self.model = model
        self._sessions = sessions
        self._clock = clock

    async def get(self, prompt_version: str, key: str) -> dict[str, Any] | None:
        """The cached answer to a prompt, if any."""
        async with self._sessions() as session:
            row = await session.scalar(
                select(LLMCache).where(
                    LLMCache.prompt_version == prompt_version,
                    LLMCache.model == self.model,
                    LLMCache.input_hash == key,
                )
            )
        return None if row is None else dict(json.loads(row.answer))

    async def put(self, prompt_version: str, key: str, data: dict[str, Any],
                  prompt_tokens: int, completion_tokens: int) -> bool:
        """Store an answer (committed); False when a concurrent identical call stored it first."""
        row = LLMCache(
            prompt_version=prompt_version, model=self.model, input_hash=key,
            answer=json.dumps(data, ensure_ascii=False),
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            created_at=self._clock(),
        )
        try:
            async with self._sessions.begin() as session:
                session.add(row)
        except IntegrityError:
            return False
        return True

    async def tokens_since(self, start: dt.datetime) -> int:
        """Tokens of every answer cached since ``start`` (any model: the budget is the day's)."""
        spent = func.sum(LLMCache.prompt_tokens + LLMCache.completion_tokens)
        async with self._sessions() as session:
            total = await session.scalar(
                select(func.coalesce(spent, 0)).where(LLMCache.created_at >= start)
            )
        return int(total or 0)
