"""One background event loop per process, owned by a daemon thread.

Sync code submits coroutines with :func:`run_sync` / :func:`submit`. Calling
:func:`run_sync` from the loop's own thread would deadlock, so it raises.
After ``fork`` the child starts a fresh loop on first use (threads do not
survive a fork).

At interpreter exit the loop's tasks are cancelled and given a moment to
finish (at most :data:`EXIT_GRACE_S`), then the loop stops: a script that
exits mid-epoch without closing its dataset would otherwise leave tasks
pending when the daemon thread is frozen, and their destruction during
shutdown prints "Task was destroyed but it is pending!" (seen with an epoch
of a million chunks, whose teardown outlasts the interpreter's). Before the
loop stops, the requests a native runtime still serves are let finish
(:func:`native_call`): one that ends while the interpreter finalizes aborts
the process:

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
import atexit
import concurrent.futures
import contextlib
import os
import threading
import time
from collections.abc import Awaitable, Coroutine
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
        register_exit_handler()
        return _loop


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


def in_loop_thread() -> bool:
    """Whether the caller runs on the engine's event-loop thread (where blocking on the loop would
    deadlock)."""
    return _thread is not None and threading.current_thread() is _thread


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Schedule ``coro`` on the engine loop; returns a thread-safe future."""
    return asyncio.run_coroutine_threadsafe(coro, get_loop())


def run_sync(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the engine loop and wait for its result."""
    if in_loop_thread():
        coro.close()
        raise RuntimeError("insitu: a blocking call was made from the engine's own event loop")
    if _exited:
        coro.close()
        raise RuntimeError("insitu: the interpreter is exiting and the engine's loop has stopped")
    return submit(coro).result(timeout)


EXIT_GRACE_S = 2.0  # the longest an exiting script waits for the loop's tasks to wind down


_registered_pid: int | None = None


def register_exit_handler() -> None:
    """Have the interpreter's exit wind the loop down (once per process; a later call moves the
    handler to run first, before handlers registered since, such as zarr's, stop their loops)."""
    global _registered_pid
    if _registered_pid == os.getpid():
        atexit.unregister(_stop_at_exit)
    atexit.register(_stop_at_exit)
    _registered_pid = os.getpid()


def _stop_at_exit() -> None:
    """Cancel what still runs on the loop and let it finish, let native requests finish (each
    bounded), and stop the loop."""
    global _exited
    if _exited or in_loop_thread():
        return
    loop, thread = _loop, _thread
    running = loop is not None and thread is not None and not loop.is_closed() and thread.is_alive()

    async def wind_down() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=EXIT_GRACE_S / 2)

    if loop is not None and running:
        with contextlib.suppress(Exception):  # a loop stuck in a callback: exit anyway, after the grace
            asyncio.run_coroutine_threadsafe(wind_down(), loop).result(timeout=EXIT_GRACE_S)
    wait_until_idle(EXIT_GRACE_S)
    _exited = True
    if loop is not None and thread is not None and running:
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=EXIT_GRACE_S / 4)


_exited = False


# -- requests native runtimes serve ------------------------------------------------------------
_native_lock = threading.Lock()
_idle = threading.Condition(_native_lock)
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
    with _native_lock:
        _in_flight += 1
        first, _ever_called = not _ever_called, True
    if first:
        # Registered (again) at the first request, so after zarr's own exit handler (zarr is
        # imported by then): handlers run last-registered first, so this one waits while zarr's
        # loop, which resolves these futures, still runs.
        register_exit_handler()


def _finished(_future: object) -> None:
    global _in_flight
    with _native_lock:
        _in_flight -= 1
        if _in_flight == 0:
            _idle.notify_all()


def in_flight() -> int:
    """Native requests started and not yet resolved."""
    with _native_lock:
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


def loop_exited() -> bool:
    """True once the interpreter's exit stopped the loop: nothing submitted to it runs any more."""
    return _exited


def _after_fork_in_child() -> None:
    global _loop, _thread, _in_flight
    _loop, _thread = None, None
    _in_flight = 0  # the parent's requests are not this process's


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
