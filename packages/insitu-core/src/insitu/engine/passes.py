"""The engine as views see it: a service that starts passes and counts the consumer's time.

A view never touches the engine, the gatherer or the loop. It asks the
dataset's :class:`PassService` to start a pass over a plan and gets a
:class:`RunningPass`: the consumer's end of one :class:`~insitu.engine.epoch.EpochRun`
(take the next item, hand back a credit, cancel, wake a blocked consumer).
The settings every pass runs with (prefetch depth, read-ahead, what a bad
chunk does, whether a short batch is dropped) are given to the service once,
when the dataset is assembled, not read back by each view.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import sys
import threading
from typing import Any

from insitu.engine.epoch import END, EpochRun
from insitu.engine.gather import Gatherer
from insitu.engine.loader import Engine
from insitu.engine.patch_epoch import PatchEpochRun, patch_readahead
from insitu.errors import ConfigError
from insitu.plan.reads import EpochPlan
from insitu.store.loop import in_loop_thread, submit

__all__ = ["CLOSED", "END", "PassService", "RunningPass"]

CLOSED = object()  # put in a pass's queue when the dataset closes: wakes a consumer blocked on it


class RunningPass:
    """The consumer's end of one pass: its plan, its queue of batches and the loop-side operations
    a consumer may ask for (from any thread). Nothing runs until :meth:`launch`."""

    def __init__(self, run: EpochRun, engine: Engine) -> None:
        self._run = run
        self._loop = engine.loop
        self.plan: EpochPlan = run.plan

    def launch(self) -> concurrent.futures.Future[None]:
        """Start the pass on the loop; the future ends when the pass has (its error, if it crashed)."""
        return submit(self._run.main())

    def next_item(self, timeout: float) -> Any:
        """The next item of the pass (a batch, :data:`END`, :data:`CLOSED` or the exception that
        stopped it), waiting at most ``timeout`` seconds; ``queue.Empty`` when none came."""
        return self._run.out.get(timeout=timeout)

    def drained(self) -> bool:
        """True when nothing is waiting in the pass's queue."""
        return self._run.out.empty()

    def took_batch(self) -> None:
        """The consumer took a batch: the pass may prepare one more."""
        self._run.release_credit()

    def cancel(self) -> None:
        """Cancel the pass on the loop (nothing to do once the loop is gone)."""
        with contextlib.suppress(RuntimeError):  # the loop is gone: nothing is running there
            self._loop.call_soon_threadsafe(self._run.cancel)

    def wake_closed(self) -> None:
        """Cancel the pass and wake a consumer blocked on its queue with :data:`CLOSED`."""
        self.cancel()
        self._run.out.put(CLOSED)

    def wait_stopped(self, future: concurrent.futures.Future[None], timeout: float = 60) -> None:
        """Wait until the pass has stopped (so it released its pins before a next pass starts), where
        waiting is safe: never from the loop's own thread (it would wait for itself) nor while the
        interpreter shuts down. Whatever stopped it is not raised here."""
        if in_loop_thread() or sys.is_finalizing() or not threading.main_thread().is_alive():
            return
        with contextlib.suppress(concurrent.futures.CancelledError, Exception):
            future.result(timeout=timeout)


class PassService:
    """Starts the passes of one dataset's views over its engine and gatherer, and keeps the
    consumer's side of the engine's counters (time iterating, time waiting)."""

    def __init__(
        self,
        engine: Engine,
        gatherer: Gatherer,
        *,
        prefetch: int,
        readahead_blocks: int,
        skip_bad: bool,
        drop_last: bool,
    ) -> None:
        self._engine = engine
        self._gatherer = gatherer
        self._prefetch = prefetch
        self._readahead_blocks = readahead_blocks
        self._skip_bad = skip_bad
        self._drop_last = drop_last

    def start(self, plan: EpochPlan, *, split: str, epoch: int, start_batch: int) -> RunningPass:
        """A pass over ``plan`` from batch ``start_batch`` on, ready to :meth:`RunningPass.launch`.
        A patch plan runs as a :class:`PatchEpochRun`, reading ahead only as far as the pool's
        slots hold the chunks (a chunk cannot be streamed)."""
        runner: type[EpochRun] = EpochRun
        ahead = self._readahead_blocks
        if plan.patches is not None:
            runner = PatchEpochRun
            slots = {path: apool.n_slots for path, apool in self._engine.pool.arrays.items()}
            fits = patch_readahead(plan, slots, self._readahead_blocks)
            if fits is None:
                need = {path: plan.max_slots(path, plan.batch_span) for path in plan.arrays}
                raise ConfigError(
                    f"the pool holds {slots} chunk(s) per array, but one batch of split {split!r} reads "
                    f"{need} at once; raise cache_budget_bytes or lower batch_size or block_chunks"
                )
            ahead = fits
        run = runner(
            self._engine,
            self._gatherer,
            plan,
            split=split,
            epoch=epoch,
            prefetch=self._prefetch,
            readahead_blocks=ahead,
            skip_bad=self._skip_bad,
            drop_short=self._drop_last,
            start_batch=start_batch,
        )
        return RunningPass(run, self._engine)

    def count_waiting(self, seconds: float) -> None:
        """The consumer waited ``seconds`` for a batch (the loader was behind)."""
        self._engine.stats.waiting_s += seconds

    def count_iterating(self, seconds: float) -> None:
        """The consumer spent ``seconds`` inside a pass."""
        self._engine.stats.iterating_s += seconds

    def inflight_limits(self, since: int = 0) -> tuple[int, ...]:
        """The requests-in-flight limit in force at change ``since`` and each chosen after it."""
        return self._engine.inflight_limits(since)
