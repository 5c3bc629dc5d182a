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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from insitu.fetch import ChunkFetcher
from insitu.reads import ArrayReader, Read


class Job:
    """One unit of thread work. ``run`` executes in a worker; ``complete`` on the loop."""

    def run(self) -> Any:
        raise NotImplementedError

    def complete(self, result: Any) -> None:
        raise NotImplementedError


@dataclass(eq=False)
class DecodeJob(Job):
    """Decode the pieces of one read into their slab slots.

    ``raw`` is the fetched bytes; with ``local=True`` the file is read here.
    ``views[i]`` is the slot region of piece ``i``. ``on_done(result)`` gets
    ``(nbytes, errors)`` where ``errors[i]`` is None or the exception of piece ``i``.
    """

    reader: ArrayReader
    read: Read
    views: Sequence[np.ndarray]
    on_done: Callable[[DecodeJob, Any], None]
    raw: Any = None
    local: Any = None  # ChunkFetcher when the bytes are read in-thread
    fill_on_error: Any = None  # value written over a piece that fails, or None to leave it
    meta: dict[str, Any] = field(default_factory=dict)

    def run(self) -> tuple[int, list[BaseException | None], bool]:
        raw = self.raw
        if self.local is not None:
            fetcher: ChunkFetcher = self.local
            try:
                raw = fetcher.read_file(self.read.key, self.read.byte_range)
            except OSError as exc:
                return 0, [self._fill(i, exc) for i in range(len(self.views))], False
        if raw is None:  # absent object: every piece is the fill value
            for piece, view in zip(self.read.pieces, self.views, strict=True):
                self.reader.fill(piece.coords, self.reader.geom.fill_value, view)
            return 0, [None] * len(self.views), True
        errors: list[BaseException | None] = []
        mv = memoryview(raw)
        for i, (piece, view) in enumerate(zip(self.read.pieces, self.views, strict=True)):
            end = None if piece.length is None else piece.start + piece.length
            try:
                self.reader.place(piece.coords, mv[piece.start : end], view)
                errors.append(None)
            except Exception as exc:
                errors.append(self._fill(i, exc))
        return len(raw), errors, False

    def _fill(self, i: int, exc: BaseException) -> BaseException:
        if self.fill_on_error is not None:
            self.reader.fill(self.read.pieces[i].coords, self.fill_on_error, self.views[i])
        return exc

    def complete(self, result: Any) -> None:
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


def _run_jobs(jobs: list[Job]) -> list[Any]:
    out = []
    for job in jobs:
        try:
            out.append(job.run())
        except Exception as exc:  # a job's own failure must not lose its neighbours' results
            out.append(exc)
    return out


class DecodePump:
    """Feeds jobs to ``threads`` workers, batching up to ``max_batch`` per hop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, executor: Executor, threads: int, max_batch: int = 8):
        self.loop = loop
        self.executor = executor
        self.threads = threads
        self.max_batch = max_batch
        self.pending: collections.deque[Job] = collections.deque()
        self.active = 0

    def submit(self, job: Job) -> None:
        self.pending.append(job)
        self._pump()

    def _pump(self) -> None:
        while self.pending and self.active < self.threads:
            free = self.threads - self.active
            k = min(self.max_batch, max(1, -(-len(self.pending) // free)), len(self.pending))
            batch = [self.pending.popleft() for _ in range(k)]
            self.active += 1
            fut = self.loop.run_in_executor(self.executor, _run_jobs, batch)
            fut.add_done_callback(lambda f, b=batch: self._done(b, f))  # type: ignore[misc]

    def _done(self, batch: list[Job], fut: asyncio.Future[list[Any]]) -> None:
        self.active -= 1
        try:
            results = fut.result()
        except BaseException as exc:  # executor shut down or cancelled
            results = [exc] * len(batch)
        for job, res in zip(batch, results, strict=True):
            job.complete(res)
        self._pump()
