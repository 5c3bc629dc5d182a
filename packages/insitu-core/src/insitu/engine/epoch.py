"""One pass of one view over its epoch plan: pin and load blocks, gather batches.

Two coroutines on the engine loop cooperate:

* the *producer* walks the blocks in order, pins the slabs each needs
  (reserving pool slots and starting loads for the missing ones) and runs at
  most ``readahead_blocks`` blocks ahead of the emitter, however large the
  cache budget is, so the first batch never waits for the cache to fill. On a
  remote store it goes further while the reads queued and in flight are fewer
  than twice the concurrency controller's limit (the controller only raises
  the limit while reads wait for slots, so demand must exceed it), up to
  :func:`~insitu.plan.memory_model.readahead_cap_bytes` of batch rows ahead of the consumer: at one
  sample per chunk and 100 ms per GET, two blocks of 16 chunks would leave
  a limit of 256 with nothing to send;
* the *emitter* waits until the blocks a batch touches are ready, has the
  gatherer copy it out of the pool on its thread (on the loop itself for a
  small batch, see :meth:`~insitu.engine.gather.Gatherer.gathers_inline`),
  and hands it to the consumer through a queue bounded by ``prefetch``.

A block's pins are released once its last batch is gathered; a slab the epoch
needs again later stays cached with that next use as its eviction priority.
What a block holds in between is one :class:`~insitu.engine.blocks.LiveBlock`.

A failure of either coroutine ends the pass and is handed to the consumer.
With ``on_bad_chunk="skip"`` the samples of bad chunks leave their batch: a
batch left empty is never delivered, nor, with ``drop_last``, one left short
(the training step sees full batches only); the first bad chunk of a pass is
logged at WARNING.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
from collections.abc import Callable
from typing import Any

import numpy as np

from insitu.arrays.geometry import ArrayGeometry
from insitu.batch import Batch
from insitu.engine.blocks import LiveBlock, StreamedSlabs, find_slabs
from insitu.engine.credits import BatchCredits
from insitu.engine.gather import BatchRows, Gatherer
from insitu.engine.loader import Engine
from insitu.engine.pool import Slab
from insitu.engine.scatter import Destinations
from insitu.plan.memory_model import exceeds_readahead_cap, sample_bytes
from insitu.plan.reads import BlockNeeds, EpochPlan

END = object()
logger = logging.getLogger("insitu.epoch")


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
        drop_short: bool = False,
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
        self.drop_short = drop_short  # drop_last: a batch that skipping left short is dropped too
        self._bad_before = engine.stats.bad_chunks
        self._warned = False
        # The C queue: a put and a get cost a fraction of queue.Queue's (a lock and two conditions in
        # Python), once per batch on each side.
        self.out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.credits: BatchCredits | None = None
        self.task: asyncio.Task[Any] | None = None
        n = plan.n_blocks
        # Only the blocks between the emitter and the producer's read-ahead are live: per-block
        # state is kept for those, so an epoch of a million blocks costs nothing up front.
        self._live: dict[int, LiveBlock] = {}
        # Per batch (a batch may span blocks, a block feed several batches): the arrays streamed
        # rows are being copied into, taken by the first block that streams into the batch.
        self._batch_buffers: dict[int, dict[str, np.ndarray]] = {}
        self._labels: dict[str, list[ArrayGeometry]] = {}
        for g in gatherer.labels:
            self._labels.setdefault(g.path, []).append(g)
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
        # Bytes of one sample over every label: what a block of read-ahead holds in batch rows.
        self._sample_bytes = sample_bytes(gatherer.specs.values())
        self._gather_inline = gatherer.gathers_inline(plan.batch_size)

    # -- consumer side (any thread) -------------------------------------------
    def release_credit(self) -> None:
        """The consumer took a batch: the producer may prepare one more (any thread; the loop is
        woken only if the emitter waits for room)."""
        if self.credits is not None:
            self.credits.give_back()

    def cancel(self) -> None:
        """Cancel the pass's task on the loop, if it is still running."""
        if self.task is not None and not self.task.done():
            self.task.cancel()

    # -- loop side ----------------------------------------------------------
    async def main(self) -> None:
        """Run the pass on the loop: load blocks ahead, emit batches to ``out``, then ``END`` (or the
        exception that stopped it)."""
        loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.credits = BatchCredits(loop, self.prefetch)
        producer = loop.create_task(self._produce())
        emitter = loop.create_task(self._emit())
        try:
            # Either coroutine may fail (a batch buffer that cannot be mapped, a plan step that
            # raises): the emitter would otherwise wait forever for blocks a dead producer never
            # starts. The first failure ends the pass and reaches the consumer.
            await asyncio.wait((producer, emitter), return_when=asyncio.FIRST_EXCEPTION)
            for task in (producer, emitter):
                if task.done():
                    task.result()  # re-raises the failure
            self.out.put(END)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._forget_settled_waiters()  # before the consumer can raise the error
            self.out.put(exc)
        finally:
            for task in (producer, emitter):
                task.cancel()
            await asyncio.gather(producer, emitter, return_exceptions=True)
            for b in list(self._live):
                self._release_block(b)

    def _forget_settled_waiters(self) -> None:
        """Take the settled waiters off the slabs of live blocks still loading. A failed block's
        waiter holds the error handed to the consumer, whose traceback gains the consumer's frames
        (and so the dataset) when raised there; a slab loading on after the pass would keep all
        that from the garbage collector for as long as its load takes."""
        for block in self._live.values():
            block.forget_settled_waiters()

    async def _produce(self) -> None:
        engine = self.engine
        loop = asyncio.get_running_loop()
        for path, apool in engine.pool.arrays.items():
            if apool.has_spare:  # cached slabs of an earlier pass: give each its first use in this one
                slabs, first = self.plan.first_uses(path, self._first_block)
                apool.expect(slabs, first)
        # Remote reads share the link: the blocks of the first batch go out together as one wave
        # and come in alone, so the first batch waits for one round trip (its own chunks), not for
        # a round trip per block nor for the read-ahead's transfers too.
        first_wave = self._first_batch_last_block() if engine.adapts_inflight else -1
        wave: list[asyncio.Future[None]] = []
        for b in range(self._first_block, self.plan.n_blocks):
            while not self._may_produce(b):
                self._advanced = loop.create_future()
                await self._advanced
            block = self._produce_block(b)
            self._produced = b + 1
            if self._produced_event is not None and not self._produced_event.done():
                self._produced_event.set_result(None)
            if block.waiter is not None and b <= first_wave:
                wave.append(block.waiter.future)
            if b == first_wave and wave:
                with contextlib.suppress(Exception):  # a failure reaches the consumer via the emitter
                    await asyncio.shield(asyncio.gather(*wave, return_exceptions=True))

    def _first_batch_last_block(self) -> int:
        """The last block the first batch of this pass reads from."""
        plan = self.plan
        if self.start_batch >= plan.n_batches:
            return -1
        _, hi = plan.batch_bounds(self.start_batch)
        return plan.block_of(hi - 1)

    def _may_produce(self, b: int) -> bool:
        """Whether block ``b`` may be pinned and loaded now: within ``readahead_blocks`` of the
        batch being assembled or, on a remote store, while the reads outstanding leave the
        controller's limit short of demand and the rows ahead stay under the byte cap."""
        if b <= self._emitting + self.readahead:
            return True
        engine = self.engine
        if not engine.adapts_inflight:
            return False
        starts = self.plan.block_starts
        if exceeds_readahead_cap(
            int(starts[b + 1] - starts[self._emitting]), self._sample_bytes, engine.pump.threads
        ):
            return False
        return engine.outstanding_reads < 2 * engine.inflight_limit

    def _produce_block(self, b: int) -> LiveBlock:
        """Pin (or start loading) every slab block ``b`` needs. A slab goes to the pool when this
        pass needs it again later (it is then decoded once) or a slot is free (it is then cached
        for later passes); any other is streamed into the block's batch rows."""
        # Live before the first pin: a failure part-way still releases what was pinned.
        block = self._live[b] = LiveBlock(b)
        for path, need in self.plan.block_needs(b).items():
            self._take_array(block, path, need)
        self._watch(block)
        return block

    def _take_array(self, block: LiveBlock, path: str, need: BlockNeeds) -> None:
        """Take the slabs of array ``path`` the block needs: pin the resident ones, load the others into
        slots reserved for them, stream those the pool has no slot for."""
        apool = self.engine.pool.arrays[path]
        slabs = need.slabs.tolist()
        missing = block.pin_resident(path, apool, slabs)
        self.engine.stats.slab_hits += len(slabs) - len(missing)
        if not missing:
            return
        nexts = need.next_use.tolist() if self.plan.arrays[path].next_use is not None else None
        fresh, streamed = block.reserve_missing(path, apool, slabs, missing, nexts)
        if fresh:
            self.engine.load(path, fresh, priority=block.index)
        if streamed:
            self._stream(block, path, streamed)

    def _stream(self, block: LiveBlock, path: str, slabs: list[int]) -> None:
        """Start loading ``slabs`` of array ``path`` straight into the block's batch rows."""
        b = block.index
        ids = np.asarray(sorted(slabs), dtype=np.int64)
        dests = self._destinations(b, path, ids)
        entries = [Slab.streamed(s, d) for s, d in zip(ids.tolist(), dests, strict=True)]
        block.streams[path] = StreamedSlabs(ids, entries)
        self.engine.load(path, entries, priority=b)

    def _watch(self, block: LiveBlock) -> None:
        """Give the block its waiter, for the emitter to await."""
        waiter = block.watch(asyncio.get_running_loop())
        if waiter is not None and self.engine.adapts_inflight:
            # Its reads are done: the producer may have room to read further ahead.
            waiter.future.add_done_callback(self._wake_producer)

    def _destinations(self, b: int, path: str, ids: np.ndarray) -> list[Destinations]:
        """For each streamed slab ``ids`` of block ``b`` (sorted), the batch rows its rows fill,
        for every label reading the array; batch buffers are taken here, as blocks are produced."""
        plan, size = self.plan, self.plan.batch_size
        lo = max(int(plan.block_starts[b]), self.start_batch * size)  # resuming: earlier rows unread
        hi = int(plan.block_starts[b + 1])
        anchors = plan.anchors[lo:hi]
        out = [Destinations() for _ in range(len(ids))]
        for g in self._labels[path]:
            label = g.label
            src = anchors + g.offset
            slab = src // g.chunk_len
            at, found = find_slabs(ids, slab)
            hit = np.flatnonzero(found)
            # Row by row (once per streamed sample): the batch's array is looked up again only when
            # the batch changes.
            k_now, buffer = -1, None
            for p, i, r in zip(
                (hit + lo).tolist(), at[hit].tolist(), (src - slab * g.chunk_len)[hit].tolist(), strict=True
            ):
                k, row = divmod(p, size)
                if k != k_now:
                    k_now, buffer = k, self._buffers_of(k)[label]
                out[i].rows.append((buffer, row, r))
        return out

    def _buffers_of(self, k: int) -> dict[str, np.ndarray]:
        """The arrays batch ``k`` is assembled in (taken on first use)."""
        found = self._batch_buffers.get(k)
        if found is None:
            lo, hi = self.plan.batch_bounds(k)
            found = self._batch_buffers[k] = self.gatherer.empty_batch(hi - lo)
        return found

    async def _emit(self) -> None:
        loop = asyncio.get_running_loop()
        plan = self.plan
        n_positions = plan.n_positions
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
                block = self._live.get(ready_upto)
                waiter = block.take_waiter() if block is not None else None
                if waiter is not None:
                    await waiter.future
                ready_upto += 1
            where = self._rows(lo, hi)
            if not self._warned and self.engine.stats.bad_chunks > self._bad_before:
                self._warn_bad(k)
            buffers = self._batch_buffers.pop(k, None)
            if where.skipped and (where.skipped == hi - lo or self.drop_short):
                self.engine.stats.dropped_batches += 1  # nothing (or too little) left to deliver
                self.credits.give_back()
            else:
                gather = functools.partial(
                    self.gatherer.gather, where, split=self.split, epoch=self.epoch, index=k, buffers=buffers
                )
                batch = gather() if self._gather_inline else await self._on_gather_thread(gather)
                self.engine.stats.batches += 1
                self.engine.stats.samples += batch.size
                self.engine.stats.bytes_delivered += sum(getattr(v, "nbytes", 0) for v in batch.values())
                self.out.put(batch)
            done_upto = plan.block_of(hi) if hi < n_positions else plan.n_blocks
            while released < done_upto:
                self._release_block(released)
                released += 1

    async def _on_gather_thread(self, gather: Callable[[], Batch]) -> Batch:
        try:
            return await asyncio.get_running_loop().run_in_executor(self.gatherer.executor, gather)
        except RuntimeError:
            # The executor refuses new work: concurrent.futures shuts every executor down when the
            # interpreter starts exiting, before it waits for the user's non-daemon threads, so one
            # still iterating finishes its pass with its batches gathered here. (A dataset closed
            # by the user cancels this run as well; gathering one more batch first is harmless.)
            return gather()

    def _warn_bad(self, k: int) -> None:
        self._warned = True
        what = (
            "their samples are skipped" if self.skip_bad else "their samples are filled (NaN or fill value)"
        )
        logger.warning(
            "%s epoch %d: bad chunks found by batch %d (%d so far, see dataset.stats); %s "
            "(on_bad_chunk); a summary follows when the pass ends",
            self.split,
            self.epoch,
            k,
            self.engine.stats.bad_chunks - self._bad_before,
            what,
        )

    def _set_emitting(self, block: int) -> None:
        self._emitting = block
        self._wake_producer()

    def _wake_producer(self, _: object = None) -> None:
        if self._advanced is not None and not self._advanced.done():
            self._advanced.set_result(None)

    def _rows(self, lo: int, hi: int) -> BatchRows:
        """Arena rows of anchors ``[lo, hi)``, computed on the loop while their slots are pinned;
        rows of streamed slabs are in the batch's buffers already."""
        plan = self.plan
        anchors = plan.anchors[lo:hi]
        n_valid = plan.n_valid
        valid = np.arange(lo, hi) < n_valid if n_valid >= 0 else None
        streamed: dict[str, np.ndarray] = {}
        bad: dict[str, np.ndarray] = {}
        bs = plan.block_starts
        for b in range(plan.block_of(lo), plan.block_of(hi - 1) + 1):
            block = self._live.get(b)
            if block is None or not block.streams:
                continue
            p0, p1 = max(lo, int(bs[b])), min(hi, int(bs[b + 1]))
            for path, stream in block.streams.items():
                flags = stream.bad_flags()  # final: the block's loads are done
                for g in self._labels[path]:
                    at, hit = stream.locate((anchors[p0 - lo : p1 - lo] + g.offset) // g.chunk_len)
                    mask = streamed.setdefault(g.label, np.zeros(hi - lo, dtype=bool))
                    mask[p0 - lo : p1 - lo] |= hit
                    if flags is not None:
                        marks = bad.setdefault(g.label, np.zeros(hi - lo, dtype=bool))
                        marks[p0 - lo : p1 - lo] |= hit & flags[at]
        where = self.gatherer.rows(
            anchors, valid, skip_bad=self.skip_bad, streamed=streamed, streamed_bad=bad
        )
        self.engine.stats.skipped_samples += where.skipped
        return where

    def _release_block(self, b: int) -> None:
        block = self._live.pop(b, None)
        if block is not None:
            block.release(self.engine.pool.arrays, self.plan.arrays)
