"""One background event loop per process, owned by a daemon thread.

Sync code submits coroutines with :func:`run_sync` / :func:`submit`. Calling
:func:`run_sync` from the loop's own thread would deadlock, so it raises.
After ``fork`` the child starts a fresh loop on first use (threads do not
survive a fork).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def get_loop() -> asyncio.AbstractEventLoop:
    """The engine's event loop, started on first use."""
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=_serve, args=(loop,), name="insitu-loop", daemon=True)
            thread.start()
            _loop, _thread = loop, thread
        return _loop


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


def in_loop_thread() -> bool:
    return _thread is not None and threading.current_thread() is _thread


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Schedule ``coro`` on the engine loop; returns a thread-safe future."""
    return asyncio.run_coroutine_threadsafe(coro, get_loop())


def run_sync(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the engine loop and wait for its result."""
    if in_loop_thread():
        coro.close()
        raise RuntimeError("insitu: a blocking call was made from the engine's own event loop")
    return submit(coro).result(timeout)


def _after_fork_in_child() -> None:
    global _loop, _thread
    _loop, _thread = None, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
