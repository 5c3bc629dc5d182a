"""One pass of one view over its epoch plan: pin and load blocks, gather batches.

Two coroutines on the engine loop cooperate:

* the *producer* walks the blocks in order, pins the slabs each needs
  (reserving pool slots and starting loads for the missing ones) and runs at
  most ``readahead_blocks`` blocks ahead of the emitter, however large the
  cache budget is, so the first batch never waits for the cache to fill;
* the *emitter* waits until the blocks a batch touches are ready, gathers it
  in a worker thread with one ``np.take`` per label over the array's arena,
  and hands it to the consumer through a queue bounded by ``prefetch``.

A block's pins are released once its last batch is gathered; a slab the epoch
needs again later stays cached with that next use as its eviction priority.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from insitu.batch import Batch
from insitu.geometry import ArrayGeometry
from insitu.plan import EpochPlan
from insitu.pool import Slab
from insitu.scheduler import Engine

BatchTransform = Callable[[Batch], Batch]
END = object()


class EpochRun:
    """State of one iteration; ``main`` runs on the loop, ``out`` feeds the consumer."""

    def __init__(
        self,
        engine: Engine,
        plan: EpochPlan,
        labels: Sequence[ArrayGeometry],
        *,
        split: str,
        epoch: int,
        prefetch: int,
        readahead_blocks: int,
        batch_transforms: Sequence[BatchTransform],
        skip_bad: bool,
    ) -> None:
        self.engine = engine
        self.plan = plan
        self.labels = list(labels)
        self.split = split
        self.epoch = epoch
        self.prefetch = prefetch
        self.readahead = readahead_blocks
        self.batch_transforms = list(batch_transforms)
        self.skip_bad = skip_bad
        self.out: queue.Queue[Any] = queue.Queue()
        self.credits: asyncio.Semaphore | None = None
        self.task: asyncio.Task[None] | None = None
        n = plan.order.n_blocks
        self._pinned: list[dict[str, list[Slab]] | None] = [None] * n
        self._block_ready: list[asyncio.Future[None]] = []
        self._emitting = 0
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
        self.task = asyncio.current_task()  # type: ignore[assignment]
        self.credits = asyncio.Semaphore(self.prefetch)
        self._block_ready = [loop.create_future() for _ in range(self.plan.order.n_blocks)]
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
            for b in range(len(self._pinned)):
                self._release_block(b)

    async def _produce(self) -> None:
        engine = self.engine
        for b in range(self.plan.order.n_blocks):
            while b > self._emitting + self.readahead:
                self._advanced = asyncio.get_running_loop().create_future()
                await self._advanced
            pinned: dict[str, list[Slab]] = {}
            self._pinned[b] = pinned
            for path, need in self.plan.needs[b].items():
                apool = engine.pool.arrays[path]
                entries: list[Slab | None] = []
                # Pin what is resident first, so reserving slots cannot evict it.
                for s in need.slabs.tolist():
                    e = apool.get(s)
                    if e is not None:
                        apool.pin(e)
                        engine.stats.slab_hits += 1
                    entries.append(e)
                pinned[path] = [e for e in entries if e is not None]
                fresh: list[Slab] = []
                for i, s in enumerate(need.slabs.tolist()):
                    if entries[i] is not None:
                        continue
                    e = apool.get(s)  # another run may have started loading it meanwhile
                    if e is not None:
                        apool.pin(e)
                    else:
                        while (e := apool.reserve(s, asyncio.get_running_loop())) is None:
                            if fresh:  # let what is reserved start loading while we wait
                                engine.load(path, fresh)
                                fresh = []
                            await engine.wait_space()
                        apool.pin(e)
                        fresh.append(e)
                    entries[i] = e
                    pinned[path].append(e)
                if fresh:
                    engine.load(path, fresh)
            self._block_ready[b].set_result(None)

    async def _emit(self) -> None:
        plan = self.plan
        n_anchors = len(plan.order.anchors)
        ready_upto = 0  # blocks < ready_upto are loaded
        released = 0
        for k in range(plan.n_batches):
            lo, hi = plan.batch_bounds(k)
            last = plan.block_of(hi - 1)
            # Wait for room in the consumer's queue before letting the producer read further ahead.
            assert self.credits is not None
            await self.credits.acquire()
            self._set_emitting(last)
            while ready_upto <= last:
                await self._block_ready[ready_upto]
                pinned = self._pinned[ready_upto]
                assert pinned is not None
                waits = [e.ready for es in pinned.values() for e in es if not e.ready.done()]
                if waits:
                    await asyncio.gather(*waits)
                for es in pinned.values():
                    for e in es:
                        if e.ready.exception() is not None:
                            raise e.ready.exception()  # type: ignore[misc]
                ready_upto += 1
            anchors, idx = self._indices(lo, hi)
            loop = asyncio.get_running_loop()
            batch = await loop.run_in_executor(self.engine.gather_executor, self._gather, anchors, idx, k)
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

    def _indices(self, lo: int, hi: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Arena row of every (sample, label), computed on the loop while slots are pinned."""
        anchors = self.plan.order.anchors[lo:hi]
        pools = self.engine.pool.arrays
        if self.skip_bad:
            keep = np.ones(len(anchors), dtype=bool)
            for g in self.labels:
                keep &= ~pools[g.path].bad[(anchors + g.offset) // g.chunk_len]
            if not keep.all():
                self.engine.stats.skipped_samples += int((~keep).sum())
                anchors = anchors[keep]
        idx: dict[str, np.ndarray] = {}
        for g in self.labels:
            pos = anchors + g.offset
            slab = pos // g.chunk_len
            slot = pools[g.path].slab_to_slot[slab]
            if len(slot) and slot.min() < 0:
                raise RuntimeError(f"internal error: slab of {g.label!r} not resident at gather time")
            idx[g.label] = slot * g.chunk_len + (pos - slab * g.chunk_len)
        return anchors, idx

    def _gather(self, anchors: np.ndarray, idx: dict[str, np.ndarray], k: int) -> Batch:
        data = {}
        reads = {}
        pools = self.engine.pool.arrays
        for g in self.labels:
            arena = pools[g.path].arena
            out = np.empty((len(anchors), *g.sample_shape), dtype=g.dtype)
            np.take(arena, idx[g.label], axis=0, out=out, mode="clip")  # 'clip': no extra buffering
            data[g.label] = out
            reads[g.label] = anchors + g.offset
        batch = Batch(data, anchors.copy(), reads, self.split, self.epoch, k)
        for t in self.batch_transforms:
            batch = t(batch)
        return batch

    def _release_block(self, b: int) -> None:
        pinned = self._pinned[b]
        if pinned is None:
            return
        self._pinned[b] = None
        pools = self.engine.pool.arrays
        for path, entries in pinned.items():
            need = self.plan.needs[b][path]
            next_of = dict(zip(need.slabs.tolist(), need.next_use.tolist(), strict=True))
            for e in entries:
                nu = next_of.get(e.slab, -1)
                pools[path].unpin(e, nu if nu >= 0 else None)
        self.engine.notify_space()
