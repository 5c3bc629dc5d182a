"""The one retry policy for transient store errors, and the loop that applies it.

Below both the fetcher and the store capabilities that hand a policy to a
backend which retries by itself (:class:`insitu.store.capabilities.RetriesItself`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from insitu.store.deadlines import within

T = TypeVar("T")

#: The error types retried by default: connection failures and timeouts, matched by type.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError, asyncio.TimeoutError)


@dataclass(frozen=True)
class RetryPolicy:
    """How transient store errors are retried, by whichever single layer owns retries.

    ``retries`` extra attempts after the first, waiting ``backoff_s * 2**n``
    (capped at ``max_backoff_s``, the upper half jittered) before retry
    ``n + 1``. Each attempt is abandoned after ``timeout_s`` (``None``: no
    limit) and, where the backend has the setting, each connection attempt
    after ``connect_timeout_s``. Only errors of a ``transient`` type are
    retried; anything else (a 403, a missing bucket, a misconfiguration) is
    raised at once.

    The defaults are seconds, not minutes: a store that hangs fails after
    about ``attempts * timeout_s`` (40 s) rather than keeping a pass waiting.

    Give it to the layer that owns retries: ``InSituDataset(retry=...)`` for
    plain zarr stores, or the store builder (``obstore_store(url,
    retry=...)``) for a store that retries by itself, which the engine then
    does not retry again.
    """

    retries: int = 3
    backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    timeout_s: float | None = 10.0
    connect_timeout_s: float = 5.0
    transient: tuple[type[BaseException], ...] = TRANSIENT_ERRORS

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("backoff_s and max_backoff_s must be >= 0")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 or None, got {self.timeout_s}")
        if self.connect_timeout_s <= 0:
            raise ValueError(f"connect_timeout_s must be > 0, got {self.connect_timeout_s}")

    @property
    def attempts(self) -> int:
        """Requests made at most for one call: the first and every retry."""
        return self.retries + 1

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt + 1``."""
        base = min(self.max_backoff_s, self.backoff_s * (2**attempt))
        return base * (0.5 + random.random() / 2)

    def longest_call_s(self) -> float | None:
        """The longest one call may take through every attempt and wait (``None``: unbounded).

        A layer that hands the policy to a backend bounds its own wait with
        this, so that the backend's timeouts always fire first.
        """
        if self.timeout_s is None:
            return None
        per_attempt = self.timeout_s + self.connect_timeout_s
        return self.attempts * per_attempt + self.retries * self.max_backoff_s


async def call_with_retries(
    request: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    on_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """``await request()`` under ``policy``: each attempt timed, transient errors retried with backoff.

    ``on_retry(error)`` is called before each retry. What still fails after
    the last attempt is raised as it came (a timed-out attempt as
    ``TimeoutError``, raised between ``timeout_s`` and an eighth of it
    later). The timeout covers the request only: whatever must be set up
    once (a client, a session) belongs before this call, so that slow set-up
    on a busy machine never counts as a failed request.
    """
    attempt = 0
    while True:
        try:
            # One sweep per loop checks every attempt's limit (insitu.store.deadlines): no task
            # (wait_for) and no timer (asyncio.timeout) per request, which at thousands of small
            # chunks per second cost the loop an eighth of its time per chunk.
            if policy.timeout_s is None:
                return await request()
            return await within(policy.timeout_s, request)
        except policy.transient as exc:
            if attempt >= policy.retries:
                raise
            if on_retry is not None:
                on_retry(exc)
            await asyncio.sleep(policy.delay(attempt))
            attempt += 1
