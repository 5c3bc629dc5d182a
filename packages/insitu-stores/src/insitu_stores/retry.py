"""Retries with exponential backoff and a per-request timeout, shared by every store here.

obstore retries inside its Rust client (configured from the same
:class:`StoreRetry`, so it knows HTTP statuses and Retry-After); the fsspec and
Icechunk stores retry in Python through :func:`call_with_retry`. Either way,
what is still failing after the last attempt leaves the store translated (see
:mod:`insitu_stores.errors`), and a transient error is a ``ConnectionError``
or ``TimeoutError`` that insitu's engine may retry once more at chunk level.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from insitu_stores.errors import StoreError, StoreTimeoutError, TransientStoreError

T = TypeVar("T")

#: Turns a backend exception into a store error (or None: not a store failure, re-raise as is).
Translate = Callable[[BaseException, str | None], StoreError | None]


@dataclass(frozen=True)
class StoreRetry:
    """How a store retries transient failures (5xx, throttling, connection reset).

    ``retries`` extra attempts, waiting ``backoff_s * 2**attempt`` (with
    jitter, capped at ``max_backoff_s``) between them. Each request is
    abandoned after ``timeout_s`` (``None``: no limit) and each connection
    attempt after ``connect_timeout_s``. Permanent errors (403, a missing
    bucket) are never retried.
    """

    retries: int = 3
    backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    timeout_s: float | None = 30.0
    connect_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("backoff_s and max_backoff_s must be >= 0")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 or None, got {self.timeout_s}")
        if self.connect_timeout_s <= 0:
            raise ValueError(f"connect_timeout_s must be > 0, got {self.connect_timeout_s}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt + 1`` (full backoff, half jittered)."""
        base = min(self.max_backoff_s, self.backoff_s * (2**attempt))
        return base * (0.5 + random.random() / 2)

    # -- obstore's Rust client ----------------------------------------------
    def obstore_retry_config(self) -> dict[str, Any]:
        """obstore ``retry_config``: the same attempts and backoff, applied per request."""
        # retry_timeout bounds the whole retry sequence; leave room for every attempt.
        per_try = self.timeout_s if self.timeout_s is not None else 300.0
        budget = (self.retries + 1) * per_try + self.retries * self.max_backoff_s
        return {
            "max_retries": self.retries,
            "backoff": {
                "init_backoff": timedelta(seconds=self.backoff_s),
                "max_backoff": timedelta(seconds=max(self.max_backoff_s, self.backoff_s)),
                "base": 2.0,
            },
            "retry_timeout": timedelta(seconds=budget),
        }

    def obstore_client_options(self) -> dict[str, Any]:
        """obstore ``client_options``: per-request and connect timeouts."""
        options: dict[str, Any] = {"connect_timeout": timedelta(seconds=self.connect_timeout_s)}
        if self.timeout_s is not None:
            options["timeout"] = timedelta(seconds=self.timeout_s)
        return options


DEFAULT_RETRY = StoreRetry()


async def call_with_retry(
    op: Callable[[], Awaitable[T]],
    *,
    retry: StoreRetry,
    translate: Translate,
    key: str | None,
    url: str,
    attempts: int | None = None,
) -> T:
    """Await ``op()``, retrying transient failures per ``retry``; raise translated errors.

    ``attempts`` overrides ``retry.retries`` (0 when the backend already
    retried, as obstore does). The timeout applies to each attempt.
    """
    retries = retry.retries if attempts is None else attempts
    attempt = 0
    while True:
        try:
            if retry.timeout_s is None:
                return await op()
            return await asyncio.wait_for(op(), retry.timeout_s)
        except TimeoutError as exc:
            err: StoreError | None = (
                exc
                if isinstance(exc, StoreError)
                else StoreTimeoutError(
                    f"{_where(url, key)}: no answer within {retry.timeout_s} s", url=url, key=key
                )
            )
        except Exception as exc:
            err = exc if isinstance(exc, StoreError) else translate(exc, key)
            if err is None:
                raise
        assert err is not None
        if isinstance(err, (TransientStoreError, StoreTimeoutError)) and attempt < retries:
            await asyncio.sleep(retry.delay(attempt))
            attempt += 1
            continue
        if attempt and isinstance(err, (TransientStoreError, StoreTimeoutError)):
            err.args = (f"{err.args[0]} (after {attempt + 1} attempts)",)
        # ``from None``: the backend's own exception may quote request details we do not control.
        raise err from None


def _where(url: str, key: str | None) -> str:
    if key is None:
        return url
    return f"{url.rstrip('/')}/{key}"


__all__ = ["DEFAULT_RETRY", "StoreRetry", "Translate", "call_with_retry"]
