"""Sending under the one retry policy (:class:`digest.domain.retry.RetryPolicy`): tries, waits.

``sending.Dispatch`` (every delivery) and the publish's check copy both send
through :func:`send_with_retry`; the wait between tries goes through an
injected sleep, so tests wait for nothing.

    send ─ TRANSIENT ─► between(result) ─► sleep(retry_after or min(backoff·2ⁿ, cap)) ─► send ...

:func:`through_outage` is the same doubling wait for a step that failed because
the database went away (a restart, a failover): it is run again until it goes
through or the patience (a sender passes its lease) is spent.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from digest.deliver.channels import Outcome, SendResult
from digest.domain.errors import StorageError
from digest.domain.ratelimit import Sleep
from digest.domain.retry import RetryPolicy

log = logging.getLogger(__name__)
Send = Callable[[], Awaitable[SendResult]]
Between = Callable[[SendResult, int], Awaitable[None]]
T = TypeVar("T")


@dataclass(frozen=True)
class Tries:
    """The last result, how many sends it took, and whether ``stopped`` cut the tries short."""

    result: SendResult
    sends: int
    stopped: bool = False


def _never() -> bool:
    return False


async def send_with_retry(send: Send, policy: RetryPolicy, sleep: Sleep, *, between: Between | None = None,
                          stopped: Callable[[], bool] = _never) -> Tries:
    """Send until the outcome is not TRANSIENT or the policy's tries run out.

    After a transient try, ``between(result, sends)`` runs (e.g. to record the
    attempt) and the policy's delay is slept; ``stopped`` is asked before each
    retry, and a True ends the tries there.
    """
    for n in range(policy.attempts):
        result = await send()
        if result.outcome is not Outcome.TRANSIENT or n + 1 == policy.attempts:
            return Tries(result, n + 1)
        if between is not None:
            await between(result, n + 1)
        await sleep(policy.delay(n, result.retry_after))
        if stopped():
            return Tries(result, n + 1, stopped=True)
    raise ValueError(f"a retry policy needs at least one attempt, not {policy.attempts}")


OUTAGE = RetryPolicy(attempts=1, backoff=0.1, cap=2.0)  # the waits while the database is away


async def through_outage(step: Callable[[], Awaitable[T]], *, lost: Callable[[BaseException], bool],
                         patience: float, sleep: Sleep, what: str, policy: RetryPolicy = OUTAGE) -> T:
    """``step()``, run again after ``policy``'s doubling wait while it fails with ``lost(exc)``.

    Every other failure is raised at once. Once the waits add up to ``patience``
    seconds, the outage is a :class:`StorageError` (one line naming ``what``).
    """
    waited, n = 0.0, 0
    while True:
        try:
            return await step()
        except Exception as exc:
            if not lost(exc):
                raise
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
            if waited >= patience:
                raise StorageError(f"{what}: the database stayed unreachable for {waited:.0f} s: "
                                   f"{reason}") from exc
            delay = min(policy.delay(n), max(patience - waited, 0.0))
            if n == 0:
                log.warning("%s: lost the database connection (%s); retrying until it is back", what,
                            reason)
            await sleep(delay)
            waited, n = waited + delay, n + 1
