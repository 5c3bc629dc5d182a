"""Room in a pass's batch queue, shared by the emitter (on the loop) and the consumer (any thread).

The emitter takes a credit for each batch it hands over and waits when none
is left (``prefetch`` batches wait unconsumed); the consumer gives one back
for each batch it takes. Giving one back touches the loop only when the
emitter is waiting for it: a consumer that keeps up (the usual case, the
loader ahead of the model) then costs no wake-up of the loop per batch,
where a hop through ``call_soon_threadsafe`` per batch was a self-pipe write
and read, a handle and a semaphore release each time.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class BatchCredits:
    """At most ``n`` batches handed over and not yet taken."""

    def __init__(self, loop: asyncio.AbstractEventLoop, n: int) -> None:
        if n < 1:
            raise ValueError(f"a pass needs room for at least one batch, got {n}")
        self._loop = loop
        self._n = n
        self._taken = 0  # credits the emitter took (written on the loop only)
        self._given = 0  # credits given back (under _lock: any thread)
        self._lock = threading.Lock()
        self._waiter: asyncio.Future[None] | None = None  # set while the emitter waits

    @property
    def outstanding(self) -> int:
        """Batches handed over and not taken back yet."""
        return self._taken - self._given

    async def acquire(self) -> None:
        """Take a credit (on the loop), waiting while ``n`` are out."""
        while self._taken - self._given >= self._n:
            waiter = self._loop.create_future()
            self._waiter = waiter
            # Published first, then looked again: a credit given back in between is seen here,
            # and one given back later finds the waiter to wake.
            if self._taken - self._given < self._n:
                self._waiter = None
                break
            try:
                await waiter
            finally:
                self._waiter = None
        self._taken += 1

    def give_back(self) -> None:
        """Return a credit (any thread); wakes the emitter only if it is waiting for one."""
        with self._lock:
            self._given += 1
            waiter = self._waiter
        if waiter is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing waits any more
                self._loop.call_soon_threadsafe(_wake, waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
