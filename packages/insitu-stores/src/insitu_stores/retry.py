"""How the stores here call their backends: every store retries by itself, under insitu's ``RetryPolicy``.

Each store is the single layer that retries its transient failures
(:class:`insitu.capabilities.RetriesItself`), so insitu's engine calls it once
per read and retries nothing on top:

- obstore and Icechunk retry inside their Rust clients, configured from the
  policy (attempts, backoff, timeouts); :func:`call_once` only bounds the wait
  (past every attempt the backend may make) and translates what still fails.
- fsspec filesystems have no retry setting that can follow the policy (s3fs
  and botocore take a count but fix their own backoff; HTTP has none), so the
  backend makes one attempt per call and :func:`call_with_policy` retries
  with insitu's own loop (:func:`insitu.fetch.call_with_retries`).

Either way, what is still failing after the last attempt leaves the store
translated (see :mod:`insitu_stores.errors`).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from insitu.fetch import RetryPolicy, call_with_retries
from insitu_stores.errors import StoreError, StoreTimeoutError, TransientStoreError

T = TypeVar("T")

#: Turns a backend exception into a store error (or None: not a store failure, re-raise as is).
Translate = Callable[[BaseException, str | None], StoreError | None]

DEFAULT_RETRY = RetryPolicy()


async def call_once(
    op: Callable[[], Awaitable[T]],
    *,
    deadline_s: float | None,
    translate: Translate,
    key: str | None,
    url: str,
) -> T:
    """``await op()`` once (the backend retries inside it), its failure translated.

    ``deadline_s`` bounds the whole call; it is a backstop for a request that
    hangs past the backend's own timeouts, so pass more than the backend's
    longest retried call (:meth:`RetryPolicy.longest_call_s`).
    """
    try:
        async with asyncio.timeout(deadline_s):
            return await _translating(op, translate, key)
    except StoreError:
        raise
    except TimeoutError:
        raise StoreTimeoutError(
            f"{_where(url, key)}: no answer within {deadline_s} s", url=url, key=key
        ) from None


async def call_with_policy(
    op: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    translate: Translate,
    key: str | None,
    url: str,
    on_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """``await op()`` under ``policy``: each attempt timed and translated, transient ones retried.

    Translated transient errors (:class:`TransientStoreError`, a
    ``ConnectionError``; :class:`StoreTimeoutError`, a ``TimeoutError``) are
    what the policy retries by type; everything else is raised at once.
    """
    attempts = 1

    def count(error: BaseException) -> None:
        nonlocal attempts
        attempts += 1
        if on_retry is not None:
            on_retry(error)

    try:
        return await call_with_retries(lambda: _translating(op, translate, key), policy, on_retry=count)
    except (TransientStoreError, StoreTimeoutError) as err:
        if attempts > 1:
            err.args = (f"{err.args[0]} (after {attempts} attempts)",)
        raise
    except StoreError:
        raise
    except TimeoutError:  # the policy's per-attempt timeout, on the last attempt
        suffix = f" (after {attempts} attempts)" if attempts > 1 else ""
        raise StoreTimeoutError(
            f"{_where(url, key)}: no answer within {policy.timeout_s} s{suffix}", url=url, key=key
        ) from None


async def _translating(op: Callable[[], Awaitable[T]], translate: Translate, key: str | None) -> T:
    try:
        return await op()
    except StoreError:
        raise
    except Exception as exc:
        err = translate(exc, key)
        if err is None:
            raise
    # Raised outside the handler: the backend's own exception may quote request details we do not
    # control (a URL with its password), so it is neither the cause nor the context of ours.
    raise err


def _where(url: str, key: str | None) -> str:
    if key is None:
        return url
    return f"{url.rstrip('/')}/{key}"


def __getattr__(name: str) -> Any:
    if name == "StoreRetry":
        warnings.warn(
            "insitu_stores.StoreRetry is deprecated: pass insitu.RetryPolicy (same fields) as retry=",
            DeprecationWarning,
            stacklevel=2,
        )
        return RetryPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DEFAULT_RETRY", "Translate", "call_once", "call_with_policy"]
