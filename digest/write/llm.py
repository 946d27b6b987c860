"""The OpenAI-compatible client: JSON answers, a cache, a daily token budget, one retry policy.

The only module that imports ``openai``. One call of :meth:`LLMClient.ask_json`:

1. cache    look up ``LLMCache`` by (prompt version, model, sha256 of the input);
            a hit costs no tokens and no request.
2. budget   tokens spent today = the tokens of the cache rows created since
            ``day_start`` + tokens this client spent on answers it could not
            cache; refuse when nothing is left or the prompt would not fit.
3. request  ``chat.completions.create`` with ``response_format=json_object``; the
            SDK's retries are off. 429 (its ``retry-after`` honoured, capped), 5xx,
            timeouts and connection errors are retried with exponential backoff up
            to ``max_attempts``; any other 4xx is final.
4. parse    the answer must be one JSON object; only then it is cached (committed).

Failures are returned as :class:`LLMFailure` with a reason (``budget``,
``rate_limited``, ``server_error``, ``timeout``, ``connection``, ``http_<code>``,
``bad_response``, ``bad_json``) and logged; nothing is raised.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import hashlib
import json
import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from digest.store.db import SessionFactory
from digest.store.models import LLMCache, utcnow

log = logging.getLogger(__name__)

_CJK = re.compile(r"[\u3000-\u9fff\uac00-\ud7af\uff00-\uffef]")
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


@dataclass(frozen=True)
class LLMAnswer:
    """A parsed JSON answer and what it cost (zero when it came from the cache)."""

    data: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    cached: bool

    @property
    def tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class LLMFailure:
    """Why no answer came back, and the tokens spent on the way (a malformed answer costs)."""

    reason: str
    tokens: int = 0


class _Retryable(Exception):
    def __init__(self, reason: str, delay: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay = delay


class _Final(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def estimate_tokens(text: str) -> int:
    """A deliberately high token estimate: one per CJK character, one per 3 other characters."""
    cjk = len(_CJK.findall(text))
    return cjk + (len(text) - cjk + 2) // 3


def input_hash(system: str, user: str) -> str:
    """The cache key of a prompt: sha256 over the system and user messages."""
    return hashlib.sha256(json.dumps([system, user], ensure_ascii=False).encode()).hexdigest()


def retry_after_seconds(headers: Any) -> float | None:
    """Seconds asked by ``retry-after-ms`` / ``retry-after`` (number or HTTP date), if any."""
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if not value:
            continue
        try:
            return max(0.0, float(value) / divisor)
        except ValueError:
            pass
        when = _http_date(value) if divisor == 1.0 else None
        if when is not None:
            return max(0.0, (when - utcnow()).total_seconds())
    return None


def _http_date(value: str) -> dt.datetime | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


class LLMClient:
    """An OpenAI-compatible chat endpoint behind our cache, budget and retry policy."""

    def __init__(
        self,
        api_key: str,
        base_url: str,
        model: str,
        timeout: float,
        daily_tokens: int,
        sessions: SessionFactory,
        day_start: dt.datetime,
        max_attempts: int = 3,
        backoff: float = 0.5,
        *,
        max_retry_after: float = 30.0,
        max_completion_tokens: int = 2048,
        temperature: float | None = 0.3,
        clock: Callable[[], dt.datetime] = utcnow,
    ) -> None:
        if day_start.tzinfo is None:
            raise ValueError("day_start must be timezone-aware")
        self.model = model
        self.daily_tokens = daily_tokens
        self.day_start = day_start
        self.max_attempts = max(1, max_attempts)
        self.backoff = backoff
        self.max_retry_after = max_retry_after
        self.max_completion_tokens = max_completion_tokens
        self.temperature = temperature
        self._clock = clock  # stamps cache rows, which the budget sums from day_start
        self._sessions = sessions
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout
        )
        self._budget_lock = asyncio.Lock()
        self._reserved = 0
        self._uncached_tokens = 0
        self.calls = 0  # HTTP requests sent, retries included
        self.cache_hits = 0
        self.tokens = 0  # tokens spent by this client (cached answers cost none)
        self.failures: Counter[str] = Counter()

    async def aclose(self) -> None:
        """Close the underlying HTTP client."""
        await self._client.close()

    async def complete_json(self, prompt_version: str, system: str, user: str) -> LLMAnswer | None:
        """A JSON object answer (cached or fresh), or None when there is none (logged)."""
        result = await self.ask_json(prompt_version, system, user)
        return result if isinstance(result, LLMAnswer) else None

    async def ask_json(
        self, prompt_version: str, system: str, user: str
    ) -> LLMAnswer | LLMFailure:
        """Like :meth:`complete_json`, but a failure says why."""
        key = input_hash(system, user)
        cached = await self._cached(prompt_version, key)
        if cached is not None:
            self.cache_hits += 1
            return cached
        estimate = estimate_tokens(system + user)
        if not await self._reserve(estimate):
            return self._fail(LLMFailure("budget"), "daily token budget exhausted")
        released = False
        try:
            result = await self._fresh(system, user)
            async with self._budget_lock:  # spending and releasing look atomic to _reserve
                self._reserved, released = self._reserved - estimate, True
                await self._account(prompt_version, key, result)
            return result
        finally:
            if not released:
                self._reserved -= estimate

    async def _account(self, prompt_version: str, key: str, result: LLMAnswer | LLMFailure) -> None:
        """Cache an answer (its tokens count from then on); remember what a failure cost."""
        if isinstance(result, LLMAnswer):
            await self._store(prompt_version, key, result)
        else:
            self._uncached_tokens += result.tokens

    def record_failure(self, reason: str) -> None:
        """Count a failure found by a caller (invalid answer, unsupported figure)."""
        self.failures[reason] += 1

    async def spent_today(self) -> int:
        """Tokens spent since ``day_start``: cached answers plus uncacheable ones."""
        spent = func.sum(LLMCache.prompt_tokens + LLMCache.completion_tokens)
        async with self._sessions() as session:
            total = await session.scalar(
                select(func.coalesce(spent, 0)).where(LLMCache.created_at >= self.day_start)
            )
        return int(total or 0) + self._uncached_tokens

    async def _reserve(self, estimate: int) -> bool:
        """Reserve room for a prompt; concurrent calls see each other's reservations."""
        async with self._budget_lock:
            left = self.daily_tokens - await self.spent_today() - self._reserved
            if left <= 0 or estimate > left:
                log.warning("LLM budget: %d token(s) left today, prompt needs ~%d", left, estimate)
                return False
            self._reserved += estimate
            return True

    async def _cached(self, prompt_version: str, key: str) -> LLMAnswer | None:
        async with self._sessions() as session:
            row = await session.scalar(
                select(LLMCache).where(
                    LLMCache.prompt_version == prompt_version,
                    LLMCache.model == self.model,
                    LLMCache.input_hash == key,
                )
            )
        if row is None:
            return None
        return LLMAnswer(json.loads(row.answer), 0, 0, cached=True)

    async def _store(self, prompt_version: str, key: str, answer: LLMAnswer) -> None:
        row = LLMCache(
            prompt_version=prompt_version, model=self.model, input_hash=key,
            answer=json.dumps(answer.data, ensure_ascii=False),
            prompt_tokens=answer.prompt_tokens, completion_tokens=answer.completion_tokens,
            created_at=self._clock(),
        )
        try:
            async with self._sessions.begin() as session:
                session.add(row)
        except IntegrityError:  # a concurrent identical call cached it first
            self._uncached_tokens += answer.tokens

    async def _fresh(self, system: str, user: str) -> LLMAnswer | LLMFailure:
        """Send the prompt under the retry policy, then parse the answer."""
        reason, last = "unknown", ""
        for attempt in range(1, self.max_attempts + 1):
            try:
                return self._parse(await self._request(system, user), system + user)
            except _Final as exc:
                return self._fail(LLMFailure(exc.reason), _cause(exc))
            except _Retryable as exc:
                reason, last = exc.reason, _cause(exc)
                if attempt == self.max_attempts:
                    break
                delay = self._delay(attempt, exc.delay)
                log.info("LLM %s, attempt %d/%d; retrying in %.2fs",
                         reason, attempt, self.max_attempts, delay)
                await asyncio.sleep(delay)
        return self._fail(
            LLMFailure(reason), f"gave up after {self.max_attempts} attempt(s); last: {last}"
        )

    def _delay(self, attempt: int, asked: float | None) -> float:
        if asked is not None:
            return min(asked, self.max_retry_after)
        return float(self.backoff * 2 ** (attempt - 1))

    async def _request(self, system: str, user: str) -> Any:
        """One HTTP request; errors sorted into retryable and final."""
        self.calls += 1
        extra: dict[str, Any] = {}
        if self.temperature is not None:  # some reasoning models refuse the parameter
            extra["temperature"] = self.temperature
        try:
            return await self._client.chat.completions.create(
                model=self.model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                response_format={"type": "json_object"},
                max_tokens=self.max_completion_tokens,
                **extra,
            )
        except openai.RateLimitError as exc:
            raise _Retryable("rate_limited", retry_after_seconds(exc.response.headers)) from exc
        except openai.APITimeoutError as exc:
            raise _Retryable("timeout") from exc
        except openai.APIConnectionError as exc:
            raise _Retryable("connection") from exc
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                raise _Retryable("server_error") from exc
            raise _Final(f"http_{exc.status_code}") from exc
        except (openai.OpenAIError, ValueError) as exc:
            raise _Final("bad_response") from exc

    def _parse(self, response: Any, prompt: str) -> LLMAnswer | LLMFailure:
        """The answer's JSON object and its token counts (estimated when no usage came)."""
        try:
            content = response.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError):
            return self._fail(LLMFailure("bad_response"), "no message in the response")
        prompt_tokens, completion_tokens = _usage(response, prompt, content)
        self.tokens += prompt_tokens + completion_tokens
        try:
            data = json.loads(_FENCE.sub("", content.strip()))
        except ValueError:
            data = None
        if not isinstance(data, dict):
            spent = prompt_tokens + completion_tokens
            return self._fail(LLMFailure("bad_json", spent), f"not a JSON object: {content[:80]!r}")
        return LLMAnswer(data, prompt_tokens, completion_tokens, cached=False)

    def _fail(self, failure: LLMFailure, why: str) -> LLMFailure:
        self.failures[failure.reason] += 1
        log.warning("LLM call failed (%s, model %s): %s", failure.reason, self.model, why)
        return failure


def _cause(exc: Exception) -> str:
    """A one-line description of what the SDK raised."""
    cause = exc.__cause__ or exc
    text = " ".join(str(cause).split())[:200]
    return f"{type(cause).__name__}: {text}" if text else type(cause).__name__


def _usage(response: Any, prompt: str, content: str) -> tuple[int, int]:
    usage = getattr(response, "usage", None)
    prompt_tokens = getattr(usage, "prompt_tokens", None)
    completion_tokens = getattr(usage, "completion_tokens", None)
    if isinstance(prompt_tokens, int) and isinstance(completion_tokens, int):
        return prompt_tokens, completion_tokens
    return estimate_tokens(prompt), estimate_tokens(content)
