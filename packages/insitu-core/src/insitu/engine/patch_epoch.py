"""One pass of one view over a patch plan: the pass of :mod:`insitu.engine.epoch`, pooled by chunk.

The producer and emitter are those of :class:`~insitu.engine.epoch.EpochRun`;
what differs is the unit and where a batch comes from:

* a block pins the stored *chunks* its patches touch (its regions' chunks and
  the halo its straddling patches reach into), each chunk one pool slot, and
  releases them with their next use in the pass, so a halo chunk the next
  block needs stays cached and is decoded once;
* nothing is streamed: a chunk feeds every patch that overlaps it, in
  several batches, so it must sit in a slot while its block is served. The
  dataset sizes the pool for the chunks the blocks in flight pin at once
  (:func:`patch_readahead`), and a pass reads ahead only as far as that holds;
* a batch is gathered by :class:`~insitu.engine.patch_gather.PatchGatherer`
  from the patch origins of its positions.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from insitu.engine.blocks import LiveBlock
from insitu.engine.epoch import EpochRun
from insitu.engine.gather import BatchRows
from insitu.engine.patch_gather import PatchGatherer
from insitu.plan.patches_order import PatchOrder
from insitu.plan.reads import BlockNeeds, EpochPlan


def patch_readahead(plan: EpochPlan, slots: Mapping[str, int], readahead_blocks: int) -> int | None:
    """The most blocks a pass over ``plan`` may load ahead of the batch being assembled (at most
    ``readahead_blocks``) while the chunks pinned at once fit the pool's ``slots`` per array;
    None when not even the blocks of one batch fit."""
    span = plan.batch_span
    for ahead in range(readahead_blocks, -1, -1):
        window = min(plan.n_blocks, span + ahead + 1)
        if all(plan.max_slots(path, window) <= slots[path] for path in plan.arrays):
            return ahead
    return None


class PatchEpochRun(EpochRun):
    """State of one pass over a patch plan (see the module docstring)."""

    @property
    def patches(self) -> PatchOrder:
        """The patch order this pass serves."""
        order = self.plan.patches
        assert order is not None, "a patch pass runs a patch plan"
        return order

    @property
    def patch_gatherer(self) -> PatchGatherer:
        """The gatherer, which copies patches out of pooled chunks."""
        gatherer = self.gatherer
        assert isinstance(gatherer, PatchGatherer), "a patch pass gathers patches"
        return gatherer

    def _may_produce(self, b: int) -> bool:
        """Within ``readahead_blocks`` of the batch being assembled, never further: the pool is
        sized for that many blocks' chunks, and a chunk cannot be streamed."""
        return b <= self._emitting + self.readahead

    def _take_array(self, block: LiveBlock, path: str, need: BlockNeeds) -> None:
        """Pin the resident chunks of array ``path`` the block needs and load the others into slots
        taken for them, evicting chunks no live block holds (those needed last go first)."""
        apool = self.engine.pool.arrays[path]
        units = need.slabs.tolist()
        missing = block.pin_resident(path, apool, units)
        self.engine.stats.slab_hits += len(units) - len(missing)
        if not missing:
            return
        fresh, left = block.reserve_missing(path, apool, units, missing, None, evict=True)
        if left:
            raise RuntimeError(
                f"internal error: the pool of {path!r} has no slot for {len(left)} chunk(s) of block "
                f"{block.index} ({apool.n_slots} slots); it is sized for the blocks in flight"
            )
        self.engine.load(path, fresh, priority=block.index)

    def _rows(self, lo: int, hi: int) -> BatchRows:
        """The patches of positions ``[lo, hi)``: their origins and, per label, the slots of the
        chunks they read (computed on the loop while those chunks are pinned)."""
        plan = self.plan
        order = self.patches
        values_of = None
        if order.weighted is not None:  # positions drawn from the weighting array's pinned chunks
            values_of = functools.partial(self.patch_gatherer.read_box, order.weighted.weighting.label)
        origins = order.origins_between(lo, hi, values_of)
        n_valid = plan.n_valid
        valid = (np.arange(lo, hi) < n_valid) if n_valid >= 0 else None
        where = self.patch_gatherer.patch_rows(
            origins, valid, skip_bad=self.skip_bad, grid=self.patches.patches.grid
        )
        self.engine.stats.skipped_samples += where.skipped
        return where
