"""Requests answered from a native runtime's threads, kept in view until they finish.

obstore and Icechunk serve each request on a Tokio thread of their own, which
takes the GIL to hand the answer to the event loop. Before Python 3.14 a thread
that asks for the GIL while the interpreter finalizes is ended with
``pthread_exit``; unwinding through Rust frames that may not unwind aborts the
process (SIGABRT, exit status -6) after the script has finished its work
(cpython gh-87135). Two things leave such a request running when a script
exits:

- a request nobody awaits any more: zarr gathers its metadata probes
  (``.zmetadata``, ``.zgroup``, ``.zattrs``) and, when one fails, the others
  run on unobserved;
- a request whose awaiting task was cancelled: the native side still takes
  the GIL once to see the cancellation.

So a request awaited through :func:`native_call` is shielded from
cancellation (it runs to its own end, bounded by the client's timeouts) and
counted until its future resolves; at exit, :func:`wait_until_idle` lets
the count reach zero (bounded) before the interpreter finalizes.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_idle = threading.Condition(_lock)
_in_flight = 0
_ever_called = False

#: After the last request resolves, its native thread may still be returning from the call that
#: woke the event loop (a socket write, made without the GIL, after which it takes the GIL again).
#: This long is ample for that return; it is waited once, at exit, and only if a request was made.
RETURN_GRACE_S = 0.02


async def native_call(awaitable: Awaitable[T]) -> T:
    """``await awaitable`` (a future a native runtime resolves), tracked until it resolves.

    Cancelling the caller does not cancel the request: it finishes on its own, so that no native
    thread is left to take the GIL while the interpreter exits.
    """
    future = asyncio.ensure_future(awaitable)
    _started()
    future.add_done_callback(_finished)
    return await asyncio.shield(future)


def _started() -> None:
    global _in_flight, _ever_called
    first = False
    with _lock:
        _in_flight += 1
        first, _ever_called = not _ever_called, True
    if first:
        # Registered at the first request, so after zarr's own exit handler (zarr is imported by
        # then): handlers run last-registered first, so this one waits while zarr's loop, which
        # resolves these futures, still runs.
        from insitu.store.loop import register_exit_handler

        register_exit_handler()


def _finished(_future: object) -> None:
    global _in_flight
    with _lock:
        _in_flight -= 1
        if _in_flight == 0:
            _idle.notify_all()


def in_flight() -> int:
    """Native requests started and not yet resolved."""
    with _lock:
        return _in_flight


def wait_until_idle(timeout_s: float) -> bool:
    """Block until no native request is in flight (at most ``timeout_s``); True if none is.

    Must not be called on an event loop's thread: the loops resolve the requests.
    """
    with _idle:
        idle = _idle.wait_for(lambda: _in_flight == 0, timeout=timeout_s)
        called = _ever_called
    if idle and called:
        time.sleep(RETURN_GRACE_S)
    return idle


def _after_fork_in_child() -> None:
    global _in_flight
    _in_flight = 0  # the parent's requests are not this process's


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["in_flight", "native_call", "wait_until_idle"]
