"""What a patch order reads: the chunks each block needs, and how often a chunk is decoded.

Each block of a :class:`~insitu.plan.patches_order.PatchOrder` needs the
chunks its patches touch (its own regions' and, for patches straddling the
block's border, some of the neighbours'), per array chunking
(:func:`block_chunk_needs`): the same ragged layout as the slab needs of
:mod:`insitu.plan.reads`, one flat array of chunk ids block after block, and
with the next and previous use of each chunk, over every offset reading the
array, the engine's own :class:`~insitu.plan.reads.ArrayNeeds`
(:func:`patch_array_needs`).

A chunk two blocks need is decoded once when the pool can keep it from the
first block to the second; otherwise twice. :func:`read_amplification` models
the pool (:mod:`insitu.engine.pool`) at a budget in chunks: a block's chunks are
held together while it is served, and between blocks the pool keeps the chunks
needed soonest again (Belady's rule, which the pool follows for chunks a running
epoch needs again). The result, chunk decodes over distinct chunks, is 1.0 when
the budget holds every chunk until its last use: what ``stats`` will report as
the read amplification, and a lower bound on what a pass measures (read-ahead
pins more blocks at once, leaving less room to keep chunks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from insitu.options import positive_int
from insitu.plan.order import Ragged
from insitu.plan.patches_order import PatchOrder
from insitu.plan.reads import ArrayNeeds
from insitu.plan.splits import concat_runs


def block_chunk_needs(order: PatchOrder, chunk_shape: Sequence[int], offset: int = 0) -> Ragged:
    """The chunk ids (flat, C order over the chunk grid of ``chunk_shape``; sorted and distinct
    per block) every block entry of ``order`` reads, for an array of the reference's shape
    chunked ``chunk_shape``; ``offset`` moves the patches along the sample axis (a window).

    A whole block's chunks come from its boxes (per-axis arithmetic, all blocks in one pass); a
    block cut short to the rank's count, from its patches."""
    patches = order.patches
    # A weighted order draws its positions from data during the pass: every entry needs what any
    # position of its regions may read.
    whole = [order.is_whole(i) or order.weighted is not None for i in range(order.n_blocks)]
    # Whole entries, each once (padding repeats them): their boxes, tagged with the entry's rank
    # among them, expand into chunks in one pass.
    owner_of: dict[tuple[int, int], int] = {}
    for i in np.flatnonzero(whole).tolist():
        owner_of.setdefault((int(order.blocks[i]), int(order.region_lo[i])), i)
    distinct = np.fromiter(owner_of.values(), dtype=np.int64, count=len(owner_of))
    lo = order.block_regions_starts[order.blocks[distinct]] + order.region_lo[distinct]
    hi = order.block_regions_starts[order.blocks[distinct]] + order.region_hi[distinct]
    regions = order.block_regions_values[concat_runs(lo, hi - lo)]
    region_owner = np.repeat(np.arange(len(distinct), dtype=np.int64), hi - lo)
    box_starts = patches.region_box_starts
    per_region = box_starts[regions + 1] - box_starts[regions]
    boxes = concat_runs(box_starts[regions], per_region)
    owners, ids = patches.chunk_ids_by_owner(boxes, np.repeat(region_owner, per_region), chunk_shape, offset)
    bounds = np.searchsorted(owners, np.arange(len(distinct) + 1, dtype=np.int64))
    rank_of = {key: k for k, key in enumerate(owner_of)}
    parts = []
    for i in range(order.n_blocks):
        if whole[i]:
            k = rank_of[int(order.blocks[i]), int(order.region_lo[i])]
            parts.append(ids[bounds[k] : bounds[k + 1]])
        else:  # cut short to the rank's count: from its patches
            parts.append(patches.patch_chunk_ids(order.block_positions(i), chunk_shape, offset))
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    values = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return Ragged(values, np.concatenate(([0], np.cumsum(sizes))).astype(np.int64))


def patch_array_needs(
    order: PatchOrder,
    chunk_shape: Sequence[int],
    offsets: Sequence[int] = (0,),
    to_array: Callable[[np.ndarray], np.ndarray] | None = None,
) -> ArrayNeeds:
    """Every block's chunks of one array, read by labels at ``offsets`` along the sample axis
    (``t2m`` and ``t2m+24`` share the array's chunks), as the engine's per-array needs: block
    ``b`` needs ``slabs[starts[b]:starts[b + 1]]``, here flat chunk ids, each once, with the next
    and previous block needing each (``None`` when no chunk is needed by two blocks). What
    :class:`~insitu.engine.epoch.EpochRun` pins, loads and releases today for slabs.

    ``to_array`` maps chunk ids of the ``chunk_shape`` grid over the reference's extent onto the
    array's own (an array at another resolution whose chunk count rounds differently)."""
    per_offset = [block_chunk_needs(order, chunk_shape, off) for off in sorted(set(offsets))]
    if to_array is not None:
        per_offset = [Ragged(to_array(n.values), n.starts) for n in per_offset]
    values, starts = per_offset[0].values, per_offset[0].starts
    n_blocks = len(starts) - 1
    blocks = np.repeat(np.arange(n_blocks, dtype=np.int64), np.diff(starts))
    if len(per_offset) > 1 or to_array is not None:  # the union per block (a mapping may merge ids)
        values = np.concatenate([n.values for n in per_offset])
        blocks = np.concatenate([np.repeat(np.arange(n_blocks), np.diff(n.starts)) for n in per_offset])
        by_block = np.lexsort((values, blocks))
        values, blocks = values[by_block], blocks[by_block]
        new = np.concatenate(([True], (values[1:] != values[:-1]) | (blocks[1:] != blocks[:-1])))[
            : len(values)
        ]
        values, blocks = values[new], blocks[new]
        starts = np.searchsorted(blocks, np.arange(n_blocks + 1, dtype=np.int64)).astype(np.int64)
    by_chunk = np.lexsort((blocks, values))
    same = values[by_chunk][1:] == values[by_chunk][:-1]
    if not same.any():
        return ArrayNeeds(values, starts, None, None)
    next_use = np.full(len(values), -1, dtype=np.int64)
    prev_use = np.full(len(values), -1, dtype=np.int64)
    next_use[by_chunk[:-1]] = np.where(same, blocks[by_chunk][1:], -1)
    prev_use[by_chunk[1:]] = np.where(same, blocks[by_chunk][:-1], -1)
    return ArrayNeeds(values, starts, next_use, prev_use)


@dataclass(frozen=True)
class ReadAmplification:
    """Chunk decodes of one epoch order at a pool budget, against the distinct chunks it reads."""

    decodes: int
    distinct: int
    budget_chunks: int
    largest_block: int  # most chunks one block holds at once: a budget below it streams some

    @property
    def ratio(self) -> float:
        """Decodes per distinct chunk (1.0: every chunk decoded once; 0 reads: 1.0)."""
        return self.decodes / self.distinct if self.distinct else 1.0


def read_amplification(needs: Ragged | ArrayNeeds, budget_chunks: int) -> ReadAmplification:
    """Decodes per distinct chunk when blocks read ``needs`` (:func:`block_chunk_needs` or
    :func:`patch_array_needs`) in order through a pool of ``budget_chunks`` chunks (see the
    module docstring for the model).

    Whole-array numpy per block: a few sorts of the resident set and the block's chunks, so an
    epoch of thousands of blocks models in well under a second.
    """
    budget = positive_int("budget_chunks", budget_chunks)
    values, starts = (
        (needs.slabs, needs.starts) if isinstance(needs, ArrayNeeds) else (needs.values, needs.starts)
    )
    n_blocks = len(starts) - 1
    if n_blocks == 0 or len(values) == 0:
        return ReadAmplification(0, 0, budget, 0)
    never = np.iinfo(np.int64).max
    blocks = np.repeat(np.arange(n_blocks, dtype=np.int64), np.diff(starts))
    by_chunk = np.lexsort((blocks, values))
    same = values[by_chunk][1:] == values[by_chunk][:-1]
    next_use = np.full(len(values), never, dtype=np.int64)
    next_use[by_chunk[:-1]] = np.where(same, blocks[by_chunk][1:], never)
    resident = np.zeros(0, dtype=np.int64)  # sorted chunk ids kept between blocks
    resident_next = np.zeros(0, dtype=np.int64)
    decodes = 0
    for b in range(n_blocks):
        lo, hi = int(starts[b]), int(starts[b + 1])
        ids, nxt = values[lo:hi], next_use[lo:hi]
        kept_old = ~np.isin(resident, ids, assume_unique=True)
        decodes += len(ids) - (len(resident) - int(kept_old.sum()))
        cand = np.concatenate([resident[kept_old], ids])
        cand_next = np.concatenate([resident_next[kept_old], nxt])
        live = cand_next != never
        cand, cand_next = cand[live], cand_next[live]
        if len(cand) > budget:  # keep those needed soonest
            keep = np.argpartition(cand_next, budget - 1)[:budget]
            cand, cand_next = cand[keep], cand_next[keep]
        order = np.argsort(cand)
        resident, resident_next = cand[order], cand_next[order]
    distinct = len(np.unique(values))
    return ReadAmplification(decodes, distinct, budget, int(np.diff(starts).max()))
