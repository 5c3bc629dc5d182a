"""Thread-side work: read (local files), decode and place chunks; run chunk transforms.

The event loop hands work to threads through :class:`DecodePump`, which puts
several jobs in one executor task when a backlog builds up: one loop-to-thread
hop then serves many chunks, which keeps per-chunk overhead to a few
microseconds at the one-sample-per-chunk end.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu.fetch import ChunkFetcher
from insitu.memory import populate_for_write
from insitu.reads import ArrayReader, Read


class Job:
    """One unit of thread work. ``run`` executes in a worker; ``complete`` on the loop."""

    reported = False  # set in the worker once ``complete`` has been scheduled

    def run(self) -> Any:
        raise NotImplementedError

    def complete(self, result: Any) -> None:
        raise NotImplementedError


class ReadItem:
    """One read of a decode job: the bytes (or None to read locally), the slab of
    each piece, and the slot region each piece is decoded into."""

    __slots__ = ("raw", "read", "targets", "views")

    def __init__(
        self, read: Read, targets: Sequence[Any], views: Sequence[np.ndarray], raw: Any = None
    ) -> None:
        self.read = read
        self.targets = targets
        self.views = views
        self.raw = raw


@dataclass(eq=False)
class DecodeJob(Job):
    """Read (local files) and decode several reads' pieces into their slab slots.

    ``on_done(job, results)`` gets one ``(nbytes, errors, missing)`` per item,
    where ``errors[i]`` is None or the exception of piece ``i`` and
    ``missing`` says the object was absent (fill value written).
    """

    reader: ArrayReader
    items: Sequence[ReadItem]
    on_done: Callable[[DecodeJob, Any], None]
    local: ChunkFetcher | None = None  # read the bytes here, in the worker
    fill_on_error: Any = None  # value written over a piece that fails, or None to leave it

    def run(self) -> list[tuple[int, list[BaseException | None], bool]]:
        return [self._run_item(item) for item in self.items]

    def _run_item(self, item: ReadItem) -> tuple[int, list[BaseException | None], bool]:
        raw = item.raw
        read = item.read
        if self.local is not None:
            try:
                raw = self.local.read_file(read.key, read.byte_range, reuse=True)
            except OSError as exc:
                return 0, [self._fill(item, i, exc) for i in range(len(item.views))], False
        if raw is None:  # absent object: every piece is the fill value
            for piece, view in zip(read.pieces, item.views, strict=True):
                self.reader.fill(piece.coords, self.reader.geom.fill_value, view)
            return 0, [None] * len(item.views), True
        if len(read.pieces) == 1 and read.pieces[0].length is None:  # the common whole-chunk case
            view = item.views[0]
            if view.flags.c_contiguous:
                populate_for_write(view)
            try:
                self.reader.place(read.pieces[0].coords, raw, item.views[0])
                return len(raw), [None], False
            except Exception as exc:
                return len(raw), [self._fill(item, 0, exc)], False
        errors: list[BaseException | None] = []
        mv = memoryview(raw)
        for i, (piece, view) in enumerate(zip(read.pieces, item.views, strict=True)):
            end = None if piece.length is None else piece.start + piece.length
            try:
                self.reader.place(piece.coords, mv[piece.start : end], view)
                errors.append(None)
            except Exception as exc:
                errors.append(self._fill(item, i, exc))
        return len(raw), errors, False

    def _fill(self, item: ReadItem, i: int, exc: BaseException) -> BaseException:
        if self.fill_on_error is not None:
            self.reader.fill(item.read.pieces[i].coords, self.fill_on_error, item.views[i])
        return exc

    def complete(self, result: Any) -> None:
        if isinstance(result, BaseException):  # the job itself failed: every piece of every item
            result = [(0, [result] * len(item.views), False) for item in self.items]
        self.on_done(self, result)


@dataclass(eq=False)
class CallJob(Job):
    """Run ``fn()`` in a worker and pass its result (or exception) to ``on_done``."""

    fn: Callable[[], Any]
    on_done: Callable[[Any], None]

    def run(self) -> Any:
        try:
            return self.fn()
        except Exception as exc:
            return exc

    def complete(self, result: Any) -> None:
        self.on_done(result)


def _run_jobs(jobs: list[Job], loop: asyncio.AbstractEventLoop) -> None:
    """Run a batch of jobs in a worker, reporting each as soon as it is done.

    Reporting per job (one ``call_soon_threadsafe``, a few microseconds) lets a
    slab become ready without waiting for unrelated chunks batched with it.
    """
    for job in jobs:
        try:
            result = job.run()
        except Exception as exc:  # a job's own failure must not lose its neighbours' results
            result = exc
        job.reported = True
        loop.call_soon_threadsafe(job.complete, result)


class DecodePump:
    """Feeds jobs to ``threads`` workers, batching up to ``max_batch`` per hop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, executor: Executor, threads: int, max_batch: int = 2):
        self.loop = loop
        self.executor = executor
        self.threads = threads
        self.max_batch = max_batch
        self.pending: collections.deque[Job] = collections.deque()
        self.active = 0
        self.closed = False

    def close(self) -> None:
        """Stop dispatching; queued jobs complete with an error so no waiter hangs."""
        self.closed = True
        dropped, self.pending = list(self.pending), collections.deque()
        for job in dropped:
            job.complete(RuntimeError("insitu: dataset closed before this chunk was decoded"))

    def submit(self, job: Job) -> None:
        if self.closed:
            job.complete(RuntimeError("insitu: dataset closed before this chunk was decoded"))
            return
        self.pending.append(job)
        self._pump()

    def _pump(self) -> None:
        while self.pending and self.active < self.threads and not self.closed:
            free = self.threads - self.active
            k = min(self.max_batch, max(1, -(-len(self.pending) // free)), len(self.pending))
            batch = [self.pending.popleft() for _ in range(k)]
            self.active += 1
            try:
                fut = self.loop.run_in_executor(self.executor, _run_jobs, batch, self.loop)
            except RuntimeError as exc:  # executor already shut down
                self.active -= 1
                for job in batch:
                    job.complete(exc)
                continue
            fut.add_done_callback(lambda f, b=batch: self._batch_done(b, f))  # type: ignore[misc]

    def _batch_done(self, batch: list[Job], fut: asyncio.Future[None]) -> None:
        self.active -= 1
        if fut.cancelled() or fut.exception() is not None:
            err = fut.exception() if not fut.cancelled() else RuntimeError("decode task cancelled")
            for job in batch:
                if not job.reported:
                    job.complete(err)
        self._pump()
