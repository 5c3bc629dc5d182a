"""One pass of one view over its epoch plan: pin and load blocks, gather batches.

Two coroutines on the engine loop cooperate:

* the *producer* walks the blocks in order, pins the slabs each needs
  (reserving pool slots and starting loads for the missing ones) and runs at
  most ``readahead_blocks`` blocks ahead of the emitter, however large the
  cache budget is, so the first batch never waits for the cache to fill;
* the *emitter* waits until the blocks a batch touches are ready, has the
  gatherer copy it out of the pool on its thread, and hands it to the
  consumer through a queue bounded by ``prefetch``.

A block's pins are released once its last batch is gathered; a slab the epoch
needs again later stays cached with that next use as its eviction priority.
"""

from __future__ import annotations

import asyncio
import functools
import queue
from typing import Any

import numpy as np

from insitu.gather import BatchRows, Gatherer
from insitu.loader import Engine
from insitu.plan import EpochPlan
from insitu.pool import FAILED, READY, BlockWaiter, Slab

END = object()


class EpochRun:
    """State of one iteration; ``main`` runs on the loop, ``out`` feeds the consumer."""

    def __init__(
        self,
        engine: Engine,
        gatherer: Gatherer,
        plan: EpochPlan,
        *,
        split: str,
        epoch: int,
        prefetch: int,
        readahead_blocks: int,
        skip_bad: bool,
        start_batch: int = 0,
    ) -> None:
        self.engine = engine
        self.gatherer = gatherer
        self.plan = plan
        self.split = split
        self.epoch = epoch
        self.prefetch = prefetch
        self.readahead = readahead_blocks
        self.skip_bad = skip_bad
        self.out: queue.Queue[Any] = queue.Queue()
        self.credits: asyncio.Semaphore | None = None
        self.task: asyncio.Task[Any] | None = None
        n = plan.order.n_blocks
        # Only the blocks between the emitter and the producer's read-ahead are live: per-block
        # state is kept for those, so an epoch of a million blocks costs nothing up front.
        self._pinned: dict[int, dict[str, list[Slab]]] = {}
        self._block_waiter: dict[int, BlockWaiter | None] = {}
        self._produced = 0  # blocks [first block, _produced) are pinned and loading
        self._produced_event: asyncio.Future[None] | None = None
        # Resuming mid-epoch: blocks before the first remaining batch are never loaded.
        self.start_batch = start_batch
        self._first_block = (
            plan.block_of(start_batch * plan.batch_size) if start_batch < plan.n_batches else n
        )
        self._emitting = self._first_block
        self._produced = self._first_block
        self._advanced: asyncio.Future[None] | None = None

    # -- consumer side (any thread) -------------------------------------------
    def release_credit(self) -> None:
        if self.credits is not None:
            self.credits.release()

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    # -- loop side ----------------------------------------------------------
    async def main(self) -> None:
        loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.credits = asyncio.Semaphore(self.prefetch)
        producer = loop.create_task(self._produce())
        try:
            await self._emit()
            self.out.put(END)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.out.put(exc)
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
            for b in list(self._pinned):
                self._release_block(b)

    async def _produce(self) -> None:
        engine = self.engine
        loop = asyncio.get_running_loop()
        for path, apool in engine.pool.arrays.items():
            if apool.has_spare:  # cached slabs of an earlier pass: give each its first use in this one
                slabs, first = self.plan.first_uses(path, self._first_block)
                apool.expect(slabs, first)
        for b in range(self._first_block, self.plan.order.n_blocks):
            while b > self._emitting + self.readahead:
                self._advanced = loop.create_future()
                await self._advanced
            pinned: dict[str, list[Slab]] = {}
            self._pinned[b] = pinned
            for path, need in self.plan.block_needs(b).items():
                apool = engine.pool.arrays[path]
                slabs = need.slabs.tolist()
                # In the order of need.slabs, so that releasing pairs each with its next use.
                held: list[Slab | None] = [None] * len(slabs)
                pinned[path] = held  # type: ignore[assignment]  # filled below, before anyone reads it
                missing = []
                # Pin what is resident (or loading) first, so reserving slots cannot evict it.
                for i, s in enumerate(slabs):
                    e = apool.get(s)
                    if e is None:
                        missing.append(i)
                    else:
                        apool.pin(e)
                        held[i] = e
                engine.stats.slab_hits += len(slabs) - len(missing)
                fresh: list[Slab] = []
                for i in missing:
                    s = slabs[i]
                    e = apool.get(s)  # another run may have started loading it meanwhile
                    if e is not None:
                        apool.pin(e)
                    else:
                        while (e := apool.reserve(s)) is None:
                            if fresh:  # let what is reserved start loading while we wait
                                engine.load(path, fresh, priority=b)
                                fresh = []
                            await engine.pool.wait_space()
                        apool.pin(e)
                        fresh.append(e)
                    held[i] = e
                if fresh:
                    engine.load(path, fresh, priority=b)
            self._block_waiter[b] = self._waiter_for(pinned, loop)
            self._produced = b + 1
            if self._produced_event is not None and not self._produced_event.done():
                self._produced_event.set_result(None)

    @staticmethod
    def _waiter_for(pinned: dict[str, list[Slab]], loop: asyncio.AbstractEventLoop) -> BlockWaiter | None:
        """One waiter for every slab of the block that is not ready yet (None: all ready)."""
        loading = [e for es in pinned.values() for e in es if e.state != READY]
        if not loading:
            return None
        waiter = BlockWaiter(loop.create_future(), len(loading))
        for e in loading:
            if e.state == FAILED:
                waiter.slab_done(e)
            else:
                e.waiters.append(waiter)
        return waiter

    async def _emit(self) -> None:
        loop = asyncio.get_running_loop()
        plan = self.plan
        n_anchors = len(plan.order.anchors)
        ready_upto = released = self._first_block  # blocks < ready_upto are loaded
        for k in range(self.start_batch, plan.n_batches):
            lo, hi = plan.batch_bounds(k)
            last = plan.block_of(hi - 1)
            # Wait for room in the consumer's queue before letting the producer read further ahead.
            assert self.credits is not None
            await self.credits.acquire()
            self._set_emitting(last)
            while ready_upto <= last:
                while self._produced <= ready_upto:
                    self._produced_event = loop.create_future()
                    await self._produced_event
                waiter = self._block_waiter.pop(ready_upto, None)
                if waiter is not None:
                    await waiter.future
                ready_upto += 1
            where = self._rows(lo, hi)
            gather = functools.partial(
                self.gatherer.gather, where, split=self.split, epoch=self.epoch, index=k
            )
            batch = await loop.run_in_executor(self.gatherer.executor, gather)
            self.engine.stats.batches += 1
            self.engine.stats.samples += batch.size
            self.out.put(batch)
            done_upto = plan.block_of(hi) if hi < n_anchors else plan.order.n_blocks
            while released < done_upto:
                self._release_block(released)
                released += 1

    def _set_emitting(self, block: int) -> None:
        self._emitting = block
        if self._advanced is not None and not self._advanced.done():
            self._advanced.set_result(None)

    def _rows(self, lo: int, hi: int) -> BatchRows:
        """Arena rows of anchors ``[lo, hi)``, computed on the loop while their slots are pinned."""
        anchors = self.plan.order.anchors[lo:hi]
        n_valid = self.plan.order.n_valid
        valid = np.arange(lo, hi) < n_valid if n_valid >= 0 else None
        where = self.gatherer.rows(anchors, valid, skip_bad=self.skip_bad)
        self.engine.stats.skipped_samples += where.skipped
        return where

    def _release_block(self, b: int) -> None:
        pinned = self._pinned.pop(b, None)
        if pinned is None:
            return
        pools = self.engine.pool.arrays
        for path, entries in pinned.items():
            needs = self.plan.arrays[path]
            apool = pools[path]
            if needs.next_use is None:  # no slab of this epoch is needed by two blocks
                for e in entries:
                    if e is not None:
                        apool.unpin(e, None)
                continue
            lo = int(needs.starts[b])
            nexts = needs.next_use[lo : lo + len(entries)].tolist()
            for e, nu in zip(entries, nexts, strict=True):
                if e is not None:  # None: the producer was cancelled before pinning it
                    apool.unpin(e, nu if nu >= 0 else None)
        self.engine.pool.notify_space()
