"""How the stores here call their backends: one attempt per call, translated; core owns retrying.

insitu's engine is the single owner of retries (:class:`insitu.store.fetch.ChunkFetcher`
under an :class:`insitu.RetryPolicy`). Nothing in this package runs a retry
loop of its own. A backend's own retry configuration is used only where the
backend has one that can follow the policy, and then the engine does not
retry on top:

- obstore and Icechunk retry inside their Rust clients, configured from the
  store's policy (attempts, backoff, timeouts); such a store declares that
  policy (:class:`insitu.store.capabilities.RetriesItself`), so the engine calls it
  once per read. :func:`call_once` only bounds the wait (past every attempt
  the backend may make) and translates what still fails.
- fsspec filesystems have no retry setting that can follow the policy (s3fs,
  gcsfs and botocore take a count but fix their own backoff; HTTP has none).
  Their own retries are turned down to one attempt, the store declares no
  policy, and the engine retries it under the dataset's ``retry=``: each call
  here is one attempt (:func:`call_once` with the policy's ``timeout_s``),
  raised as a ``ConnectionError`` / ``TimeoutError`` when it is transient.

Either way, what fails leaves the store translated (see :mod:`insitu_stores.errors`).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from insitu.plugin_api import RetryPolicy
from insitu_stores.errors import StoreError, StoreTimeoutError

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
    """``await op()`` once, its failure translated.

    ``deadline_s`` bounds the whole call. For a backend that retries inside
    ``op`` it is a backstop for a request that hangs past the backend's own
    timeouts, so pass more than its longest retried call
    (:meth:`RetryPolicy.longest_call_s`); for one attempt, the policy's
    ``timeout_s``. Running past it raises :class:`StoreTimeoutError`.
    """
    try:
        async with asyncio.timeout(deadline_s):
            return await _translating(op, translate, key)
    except StoreError:
        raise
    except TimeoutError:
        error = StoreTimeoutError(f"{_where(url, key)}: no answer within {deadline_s:g} s", url=url, key=key)
        error.limit_s = deadline_s
        raise error from None


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


__all__ = ["DEFAULT_RETRY", "Translate", "call_once"]
