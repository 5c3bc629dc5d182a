"""Thread-side work: read (local files), decode and place chunks; run chunk transforms.

The event loop hands work to threads through :class:`DecodePump`: a queue
served by long-lived decode threads, each finished job reported back to the
loop with one callback, which keeps per-chunk overhead to a few microseconds
at the one-sample-per-chunk end.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import math
import queue
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu.arrays.layout import ArrayReader, Read
from insitu.engine.pages import populate_for_write
from insitu.engine.scatter import ScratchBuffers
from insitu.store.fetch import ChunkFetcher


class Job:
    """One unit of thread work. ``run`` executes in a worker; ``complete`` on the loop."""

    def run(self) -> Any:
        """The work itself, in a worker thread; its return value (or exception) goes to :meth:`complete`."""
        raise NotImplementedError

    def complete(self, result: Any) -> None:
        """Called on the loop with what :meth:`run` returned (or the exception it raised)."""
        raise NotImplementedError


class ReadItem:
    """One read of a decode job: the bytes (or None to read locally), the slab of
    each piece, and the slot region each piece is decoded into (None: the slab is
    streamed, see :mod:`insitu.engine.scatter`)."""

    __slots__ = ("raw", "read", "source", "targets", "views")

    def __init__(
        self, read: Read, targets: Sequence[Any], views: Sequence[np.ndarray | None], raw: Any = None
    ) -> None:
        self.read = read
        self.targets = targets
        self.views = views
        self.raw = raw
        # What identifies the stored bytes this read got (tracked for a persisted cache only):
        # "v:<version>" of the object, "crc:<crc32>" of the bytes themselves, or "absent".
        self.source: str | None = None


class ChunkReadError(Exception):
    """A local chunk file could not be read: the store failed to deliver, the bytes are not bad.
    ``error`` is the ``OSError`` the read raised."""

    def __init__(self, error: OSError) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


@dataclass(eq=False)
class DecodeJob(Job):
    """Read (local files) and decode several reads' pieces into their slab slots.

    ``on_done(job, results)`` gets one ``(nbytes, errors, missing)`` per item (or the exception
    that failed the job as a whole), where ``errors`` is None when every piece was placed (the
    common case, told apart without a list per chunk), else ``errors[i]`` is None or the
    exception of piece ``i``; ``missing`` says the object was absent (fill value written).
    """

    reader: ArrayReader
    items: Sequence[ReadItem]
    on_done: Callable[[DecodeJob, Any], None]
    local: ChunkFetcher | None = None  # read the bytes here, in the worker
    fill_on_error: Any = None  # value written over a piece that fails, or None to leave it
    track_sources: bool = False  # set each item's ``source`` (a persisted cache checks it on reuse)
    scratch: ScratchBuffers | None = None  # where streamed slabs decode (views of None)

    def run(self) -> list[tuple[int, list[BaseException | None] | None, bool]]:
        """Read (when local) and decode every item: one ``(nbytes, errors, missing)`` per item."""
        return [self._run_item(item) for item in self.items]

    def _run_item(self, item: ReadItem) -> tuple[int, list[BaseException | None] | None, bool]:
        raw = item.raw
        read = item.read
        if self.local is not None:
            versions: list[str | None] | None = [] if self.track_sources else None
            try:
                raw = self.local.read_file(read.key, read.byte_range, reuse=True, versions=versions)
            except OSError as exc:  # not delivered: unlike a decode error (gzip's is an OSError too)
                failed = ChunkReadError(exc)
                return 0, [self._fill_piece(item, i, failed) for i in range(len(item.views))], False
            if versions:
                item.source = "absent" if versions[0] is None else f"v:{versions[0]}"
        elif self.track_sources and item.source is None:
            item.source = "absent" if raw is None else f"crc:{zlib.crc32(raw)}"
        if raw is None:  # absent object: every piece is the fill value
            for i, piece in enumerate(read.pieces):
                view, copy = self._view(item, i)
                self.reader.fill(piece.coords, self.reader.geom.fill_value, view)
                self._scatter(item, i, view, copy)
            return 0, None, True
        if len(read.pieces) == 1 and read.pieces[0].length is None:  # the common whole-chunk case
            view, copy = self._view(item, 0)
            if item.views[0] is not None:
                populate_for_write(view)  # fresh pool memory (streamed slabs decode into warm memory)
            try:
                self.reader.place(read.pieces[0].coords, raw, view)
                error = None
            except Exception as exc:
                error = self._fill(item, 0, exc, view)
            self._scatter(item, 0, view, copy)
            return len(raw), None if error is None else [error], False
        errors: list[BaseException | None] = []
        mv = memoryview(raw)
        for i, piece in enumerate(read.pieces):
            end = None if piece.length is None else piece.start + piece.length
            view, copy = self._view(item, i)
            try:
                self.reader.place(piece.coords, mv[piece.start : end], view)
                errors.append(None)
            except Exception as exc:
                errors.append(self._fill(item, i, exc, view))
            self._scatter(item, i, view, copy)
        return len(raw), errors if any(e is not None for e in errors) else None, False

    def _view(self, item: ReadItem, i: int) -> tuple[np.ndarray, bool]:
        """Where piece ``i`` decodes: its slot region, or for a streamed slab the one batch row it
        is (when it is exactly that), else this thread's scratch; and whether its rows must then
        be copied to their batch rows."""
        view = item.views[i]
        if view is not None:
            return view, False
        dests = item.targets[i].dests
        geom = self.reader.geom
        direct = dests.direct(geom.slab_shape, geom.dtype)
        if direct is not None:
            return direct, False
        assert self.scratch is not None
        return self.scratch.get(geom.slab_shape, geom.dtype), True

    @staticmethod
    def _scatter(item: ReadItem, i: int, view: np.ndarray, copy: bool) -> None:
        """A streamed slab's rows go to its batch rows at once, while they are in cache."""
        if copy:
            item.targets[i].dests.scatter(view)

    def _fill_piece(self, item: ReadItem, i: int, exc: BaseException) -> BaseException:
        view, copy = self._view(item, i)
        error = self._fill(item, i, exc, view)
        self._scatter(item, i, view, copy)
        return error

    def _fill(self, item: ReadItem, i: int, exc: BaseException, view: np.ndarray) -> BaseException:
        if self.fill_on_error is not None:
            self.reader.fill(item.read.pieces[i].coords, self.fill_on_error, view)
        return exc

    def complete(self, result: Any) -> None:
        """Pass the results to ``on_done``: a list of per-item results, or the exception that failed
        the job itself (a scatter, a closed pump), which is no damaged chunk and reaches every waiter."""
        self.on_done(self, result)


@dataclass(eq=False)
class CallJob(Job):
    """Run ``fn()`` in a worker and pass its result (or exception) to ``on_done``."""

    fn: Callable[[], Any]
    on_done: Callable[[Any], None]

    def run(self) -> Any:
        """Call ``fn()``; an exception is returned rather than raised, for :meth:`complete`."""
        try:
            return self.fn()
        except Exception as exc:
            return exc

    def complete(self, result: Any) -> None:
        """Pass ``fn()``'s result or exception to ``on_done``."""
        self.on_done(result)


class DecodePump:
    """``threads`` long-lived workers taking jobs from one priority queue; completions go back to the loop.

    A plain queue and dedicated threads rather than ``loop.run_in_executor``:
    the executor path costs the loop a task future, a chained concurrent
    future and a done callback per hand-off (tens of microseconds each), which
    at one-sample chunks was a third of the event loop's time. Here a hand-off
    is one queue ``put`` and one ``call_soon_threadsafe`` per job, and each
    job reports as soon as it is done, so a slab becomes ready without waiting
    for unrelated chunks. Lower ``priority`` runs first, submission order within one.
    Jobs that finish while the loop has not yet taken the last report ride along with it.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int, name: str = "insitu-decode") -> None:
        self.loop = loop
        self.threads = threads
        self.closed = False
        # Finished jobs waiting for the loop: one wake-up of the loop reports every job finished
        # by then (each wake-up is a write to the loop's self-pipe and a read on its side).
        self._finished: collections.deque[tuple[Job, Any]] = collections.deque()
        self._finished_lock = threading.Lock()
        self._report_pending = False
        self._queue: queue.PriorityQueue[tuple[float, int, Job | None]] = queue.PriorityQueue()
        self._seq = itertools.count()
        self._busy = [0.0] * threads  # per thread, written by that thread only: no lock, no lost update
        self._workers = [
            threading.Thread(target=self._work, args=(i,), name=f"{name}_{i}", daemon=True)
            for i in range(threads)
        ]
        for w in self._workers:
            w.start()

    def busy_s(self) -> float:
        """Seconds the threads have spent running jobs, per thread (utilisation over a span is
        its growth divided by the span's length)."""
        return sum(self._busy) / self.threads

    def submit(self, job: Job, priority: int = 0) -> None:
        """Queue ``job`` (lower ``priority`` first); after :meth:`close` it completes at once with an error."""
        if self.closed:
            job.complete(RuntimeError(_CLOSED))
            return
        self._queue.put((priority, next(self._seq), job))

    def close(self) -> None:
        """Stop taking work (on the loop); queued jobs complete with an error so no waiter hangs."""
        self.closed = True
        stops = 0
        while True:
            try:
                *_, job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                stops += 1
            else:
                job.complete(RuntimeError(_CLOSED))
        for _ in range(stops):  # a stop() already queued must still reach a worker
            self._queue.put((-math.inf, next(self._seq), None))

    def stop(self) -> None:
        """Tell the workers to exit after their current job, without waiting (safe in finalisers)."""
        self.closed = True
        for _ in self._workers:
            self._queue.put((-math.inf, next(self._seq), None))  # before any queued job

    def shutdown(self) -> None:
        """Let the workers finish their current job and exit; waits for them."""
        self.closed = True
        for _ in self._workers:
            self._queue.put((math.inf, next(self._seq), None))  # after any queued job
        for w in self._workers:
            if w is not threading.current_thread():
                w.join()

    def _work(self, index: int) -> None:
        busy = self._busy
        while (job := self._queue.get()[2]) is not None:
            result: Any
            if self.closed:
                result = RuntimeError(_CLOSED)
            else:
                started = time.perf_counter()
                try:
                    result = job.run()
                except Exception as exc:  # a job's own failure must reach its waiters
                    result = exc
                busy[index] += time.perf_counter() - started
            with self._finished_lock:
                self._finished.append((job, result))
                wake, self._report_pending = not self._report_pending, True
            # An idle worker must not keep its last job (and through it the slabs, the pool, or an
            # exception's traceback and the dataset) alive while it waits for the next one.
            del job, result
            if wake:
                try:
                    self.loop.call_soon_threadsafe(self._report)
                except RuntimeError:  # the loop is gone (interpreter shutdown): nobody is waiting
                    return

    def _report(self) -> None:
        """On the loop: complete every job finished since the last report, in finishing order."""
        with self._finished_lock:
            done = list(self._finished)
            self._finished.clear()
            self._report_pending = False
        for job, result in done:
            job.complete(result)


_CLOSED = "insitu: dataset closed before this chunk was decoded"
