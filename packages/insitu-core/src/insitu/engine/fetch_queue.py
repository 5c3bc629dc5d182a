"""Whole-chunk GETs of a remote store, queued in block order and served under the adaptive limit.

A task per GET cost the loop a task, its done callback and a set update per chunk; here a GET
is a heap push and a wake-up of an idle worker, and the chunks of the block the consumer waits
for go out before read-ahead ones queued earlier (lower ``priority`` first).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from insitu.engine.concurrency import AdaptiveLimiter
from insitu.engine.jobs import ReadItem


class QueuedReader(Protocol):
    """What the queue asks of the loader that queued a GET (an :class:`insitu.engine.loader.ArrayLoader`)."""

    async def fetch_then_decode(self, item: ReadItem, priority: int) -> None:
        """Make the GET of ``item`` (a slot of the limiter is held meanwhile), then queue its decode."""
        ...

    def fail_read(self, item: ReadItem, exc: BaseException) -> None:
        """Every piece of ``item`` failed with ``exc``, raised while fetching it."""
        ...


class FetchQueue:
    """Whole-chunk GETs in block order, served by ``workers`` long-lived tasks.

    Workers start on the first GET, through ``spawn`` (the engine's: cancelled with it); there
    are ``workers`` of them (``max_inflight``), and each takes a slot of ``limiter`` (the engine's
    adaptive limiter, shared with shard and zarr reads) *before* taking a GET off the heap, so the
    limit the controller chose is what is in flight, and the GET that goes out when a slot frees
    is the most urgent one queued then.
    """

    def __init__(
        self,
        limiter: AdaptiveLimiter,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        workers: int,
    ) -> None:
        self.workers = workers
        self._limiter = limiter
        self._spawn = spawn
        self._heap: list[tuple[int, int, QueuedReader, ReadItem]] = []
        self._seq = itertools.count()
        self._idle: list[asyncio.Future[None]] = []
        self._started = False

    def has_queued(self) -> bool:
        """True when GETs wait for a worker slot (demand above the chosen concurrency)."""
        return bool(self._heap)

    @property
    def outstanding(self) -> int:
        """GETs queued or holding a slot of the limiter (shard and zarr reads included)."""
        return len(self._heap) + self._limiter.in_use

    def put(self, priority: int, reader: QueuedReader, item: ReadItem) -> None:
        """Queue one GET (on the loop): ``reader`` makes it when a worker takes it."""
        heapq.heappush(self._heap, (priority, next(self._seq), reader, item))
        if not self._started:
            self._started = True
            for _ in range(self.workers):
                self._spawn(self._work())
        while self._idle:
            waiter = self._idle.pop()
            if not waiter.done():
                waiter.set_result(None)
                break

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        limiter = self._limiter
        while True:
            if not self._heap:
                waiter = loop.create_future()
                self._idle.append(waiter)
                await waiter
                continue
            async with limiter:
                if self._heap:  # another worker may have taken it while this one waited for a slot
                    await self._serve_next()

    async def _serve_next(self) -> None:
        # Its own frame: an idle worker keeps nothing of its last chunk alive.
        priority, _, reader, item = heapq.heappop(self._heap)
        try:
            await reader.fetch_then_decode(item, priority)
        except Exception as exc:  # a worker must outlive any one chunk; its waiters learn why
            reader.fail_read(item, exc)
