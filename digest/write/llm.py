"""The OpenAI-compatible client: JSON answers, a cache, a daily token budget, one retry policy.

The only module that imports ``openai``. :class:`LLMClient` puts three pieces
together; one call of :meth:`LLMClient.ask_json`:

1. cache    :class:`digest.write.cache.AnswerCache`, keyed by (prompt version,
            model, sha256 of the input); a hit costs no tokens and no request.
2. budget   :class:`digest.write.budget.TokenBudget`: tokens spent today = the
            tokens of the cache rows created since ``day_start`` + tokens spent
            on answers that could not be cached; refuse when nothing is left or
            the prompt would not fit.
3. request  :class:`ChatTransport`: ``chat.completions.create`` with
            ``response_format=json_object``; the SDK's retries are off. 429 (its
            ``retry-after`` honoured, capped), 5xx, timeouts and connection errors
            are retried with exponential backoff (:class:`RetryPolicy`, waited
            through an injectable ``sleep``) up to ``max_attempts``; any other 4xx
            is final.
4. parse    the answer must be one JSON object; only then it is cached (committed).

Failures are returned as :class:`LLMFailure` with a reason (``budget``,
``rate_limited``, ``server_error``, ``timeout``, ``connection``, ``http_<code>``,
``bad_response``, ``bad_json``) and logged; nothing is raised.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import json
import logging
import math
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from digest import metrics
from digest.domain.clock import Clock, system_now
from digest.domain.retry import RetryPolicy
from digest.store.db import SessionFactory
from digest.write.budget import TokenBudget, estimate_tokens
from digest.write.cache import AnswerCache, input_hash

log = logging.getLogger(__name__)

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")

Sleep = Callable[[float], Awaitable[None]]


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


def retry_after_seconds(headers: Mapping[str, str] | None, now: Clock = system_now) -> float | None:
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
            return max(0.0, (when - now()).total_seconds())
    return None


def _http_date(value: str) -> dt.datetime | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


class ChatTransport:
    """One OpenAI-compatible chat endpoint under :class:`RetryPolicy`; JSON-object answers."""

    def __init__(
        self,
        api_key: str,
        base_url: str,
        model: str,
        timeout: float,
        policy: RetryPolicy,
        *,
        max_completion_tokens: int = 2048,
        temperature: float | None = 0.3,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.model = model
        self.policy = policy
        self.max_completion_tokens = max_completion_tokens
        self.temperature = temperature
        self._sleep = sleep
        import openai  # a second of imports: only a run that has a key pays it (not fetch, build, serve)

        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout
        )
        self.calls = 0  # HTTP requests sent, retries included
        self.tokens = 0  # tokens of the answers received

    async def aclose(self) -> None:
        """Close the underlying HTTP client."""
        await self._client.close()

    async def ask(self, system: str, user: str) -> LLMAnswer | LLMFailure:
        """Send the prompt under the retry policy, then parse the answer (failures logged)."""
        reason, last, attempts = "unknown", "", self.policy.attempts
        for attempt in range(1, attempts + 1):
            try:
                return self._parse(await self._request(system, user), system + user)
            except _Final as exc:
                return self._fail(LLMFailure(exc.reason), _cause(exc))
            except _Retryable as exc:
                reason, last = exc.reason, _cause(exc)
                if attempt == attempts:
                    break
                delay = self.policy.delay(attempt - 1, exc.delay)
                log.info("LLM %s, attempt %d/%d; retrying in %.2fs", reason, attempt, attempts, delay)
                await self._sleep(delay)
        return self._fail(LLMFailure(reason), f"gave up after {attempts} attempt(s); last: {last}")

    async def _request(self, system: str, user: str) -> Any:
        """One HTTP request; errors sorted into retryable and final."""
        import openai  # loaded by __init__ already

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
        metrics.active().llm(prompt_tokens + completion_tokens)
        try:
            data = json.loads(_FENCE.sub("", content.strip()))
        except ValueError:
            data = None
        if not isinstance(data, dict):
            spent = prompt_tokens + completion_tokens
            return self._fail(LLMFailure("bad_json", spent), f"not a JSON object: {content[:80]!r}")
        return LLMAnswer(data, prompt_tokens, completion_tokens, cached=False)

    def _fail(self, failure: LLMFailure, why: str) -> LLMFailure:
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
        clock: Clock = system_now,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.cache = AnswerCache(sessions, model, clock)  # the clock stamps rows the budget sums
        self.budget = TokenBudget(daily_tokens, day_start, self.cache.tokens_since)
        policy = RetryPolicy(max(1, max_attempts), backoff, math.inf, max_retry_after)
        self.transport = ChatTransport(
            api_key, base_url, model, timeout, policy,
            max_completion_tokens=max_completion_tokens, temperature=temperature, sleep=sleep,
        )
        self.model = model
        self.cache_hits = 0
        self.failures: Counter[str] = Counter()

    @property
    def max_attempts(self) -> int:
        """Attempts per prompt, the first included."""
        return self.transport.policy.attempts

    @property
    def calls(self) -> int:
        """HTTP requests sent, retries included."""
        return self.transport.calls

    @property
    def tokens(self) -> int:
        """Tokens spent by this client (cached answers cost none)."""
        return self.transport.tokens

    async def aclose(self) -> None:
        """Close the underlying HTTP client."""
        await self.transport.aclose()

    async def complete_json(self, prompt_version: str, system: str, user: str) -> LLMAnswer | None:
        """A JSON object answer (cached or fresh), or None when there is none (logged)."""
        result = await self.ask_json(prompt_version, system, user)
        return result if isinstance(result, LLMAnswer) else None

    async def ask_json(
        self, prompt_version: str, system: str, user: str
    ) -> LLMAnswer | LLMFailure:
        """Like :meth:`complete_json`, but a failure says why."""
        key = input_hash(system, user)
        cached = await self.cache.get(prompt_version, key)
        if cached is not None:
            self.cache_hits += 1
            return LLMAnswer(cached, 0, 0, cached=True)
        estimate = estimate_tokens(system + user)
        if not await self.budget.reserve(estimate):
            log.warning("LLM call failed (budget, model %s): daily token budget exhausted", self.model)
            return self._counted(LLMFailure("budget"))
        try:
            result = await self.transport.ask(system, user)
        except BaseException:  # cancelled: the reservation must not outlive the call
            self.budget.release(estimate)
            raise
        await self.budget.settle(estimate, lambda: self._record(prompt_version, key, result))
        return self._counted(result) if isinstance(result, LLMFailure) else result

    async def _record(self, prompt_version: str, key: str, result: LLMAnswer | LLMFailure) -> int:
        """Cache an answer (its tokens count through the cache); else the tokens it cost."""
        if isinstance(result, LLMAnswer) and await self.cache.put(
            prompt_version, key, result.data, result.prompt_tokens, result.completion_tokens
        ):
            return 0
        return result.tokens

    def _counted(self, failure: LLMFailure) -> LLMFailure:
        self.failures[failure.reason] += 1
        return failure

    def record_failure(self, reason: str) -> None:
        """Count a failure found by a caller (invalid answer, unsupported figure)."""
        self.failures[reason] += 1

    async def spent_today(self) -> int:
        """Tokens spent since ``day_start``: cached answers plus uncacheable ones."""
        return await self.budget.spent_today()
