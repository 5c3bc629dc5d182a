"""Time limits for store requests, checked together by one timer per event loop.

``asyncio.timeout`` schedules a timer per request and cancels it when the
request ends: a timer object, a push onto the loop's heap and, once cancelled,
a dead entry that every later push and pop compares against. With hundreds of
requests in flight and thousands per second (one-sample chunks on object
storage), that was an eighth of the engine's CPU per chunk on the read path.

Here a request registers its deadline in a set, and one sweep per loop,
every eighth of the shortest limit in use, cancels the requests past theirs:
a request is abandoned between its limit and an eighth of it later. The
cancellation becomes ``TimeoutError`` exactly as ``asyncio.timeout`` does it
(the task's cancellation count restored, a cancellation from anyone else
passed through as it came).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: A sweep looks this often, as a share of the shortest limit it watches.
SWEEP_SHARE = 1 / 8
#: ...but not more often than this (a limit of a millisecond must not spin the loop).
MIN_SWEEP_S = 0.001


class _Attempt:
    __slots__ = ("cancelling", "deadline", "expired", "task")

    def __init__(self, deadline: float, task: asyncio.Task[object], cancelling: int) -> None:
        self.deadline = deadline
        self.task = task
        self.cancelling = cancelling  # the task's cancellation requests when the attempt began
        self.expired = False


class _Sweeper:
    """The attempts in flight on one loop, and the one timer that checks them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weakly: the registry maps the loop to this, and a strong reference back would keep both.
        self._loop = weakref.ref(loop)
        self.attempts: set[_Attempt] = set()
        self.every_s = float("inf")
        # The pending sweep, weakly too (a handle holds its loop); the loop's schedule holds it.
        self._timer: weakref.ref[asyncio.TimerHandle] | None = None

    @property
    def timer(self) -> asyncio.TimerHandle | None:
        """The sweep scheduled next (None when idle)."""
        return None if self._timer is None else self._timer()

    def add(self, attempt: _Attempt, limit_s: float) -> None:
        self.attempts.add(attempt)
        every = max(MIN_SWEEP_S, limit_s * SWEEP_SHARE)
        timer = self.timer
        if timer is None or every < self.every_s:
            if timer is not None:
                timer.cancel()
            self.every_s = every
            self._schedule(every)

    def _sweep(self) -> None:
        self._timer = None
        if not self.attempts:
            self.every_s = float("inf")  # idle: the next request sets the pace again
            return
        loop = self._loop()
        if loop is None:
            return
        now = loop.time()
        for attempt in [a for a in self.attempts if a.deadline <= now]:
            self.attempts.discard(attempt)
            attempt.expired = True
            attempt.task.cancel()
        self._schedule(self.every_s)

    def _schedule(self, delay_s: float) -> None:
        loop = self._loop()
        self._timer = None if loop is None else weakref.ref(loop.call_later(delay_s, self._sweep))


_SWEEPERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Sweeper] = weakref.WeakKeyDictionary()


async def within(limit_s: float, request: Callable[[], Awaitable[T]]) -> T:
    """``await request()``, raising ``TimeoutError`` once it has run ``limit_s`` (up to an eighth
    later). Outside a task there is nothing to cancel: it defers to ``asyncio.timeout``, which
    refuses that the way it always has."""
    task = asyncio.current_task()
    if task is None:
        async with asyncio.timeout(limit_s):
            return await request()
    loop = asyncio.get_running_loop()
    sweeper = _SWEEPERS.get(loop)
    if sweeper is None:
        sweeper = _SWEEPERS[loop] = _Sweeper(loop)
    attempt = _Attempt(loop.time() + limit_s, task, task.cancelling())
    sweeper.add(attempt, limit_s)
    try:
        return await request()
    except asyncio.CancelledError as exc:
        if attempt.expired:
            attempt.expired = False  # handled here: its cancellation is taken back once
            # Ours, unless someone else asked too since the attempt began: theirs passes through.
            if task.uncancel() <= attempt.cancelling:
                raise TimeoutError from exc  # as asyncio.timeout: whoever retries names the limit
        raise
    finally:
        if attempt.expired:  # expired, yet the request swallowed the cancellation: take it back
            task.uncancel()
        else:
            sweeper.attempts.discard(attempt)
