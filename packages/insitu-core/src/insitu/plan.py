"""Per-epoch read plan: which slabs each block needs, and when each is next needed.

Labels that read the same array (``t2m`` and ``t2m+24``) share its slabs, so a
chunk needed by the input at t and the target at t+h is decoded once. Work
here is vectorised numpy over anchors: Python loops run per block and per
array, never per sample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from insitu.geometry import ArrayGeometry
from insitu.order import EpochOrder


@dataclass(frozen=True)
class BlockNeeds:
    """Slabs of one array needed by one block, and the next block needing each (-1: none)."""

    slabs: np.ndarray
    next_use: np.ndarray


@dataclass(frozen=True)
class EpochPlan:
    order: EpochOrder
    batch_size: int
    n_batches: int
    needs: tuple[Mapping[str, BlockNeeds], ...]  # per block: {array path: needs}

    def batch_bounds(self, k: int) -> tuple[int, int]:
        lo = k * self.batch_size
        return lo, min(lo + self.batch_size, len(self.order.anchors))

    def block_of(self, position: int) -> int:
        """Block holding anchor ``position`` of the epoch order."""
        return int(np.searchsorted(self.order.block_starts, position, side="right") - 1)

    @property
    def batch_span(self) -> int:
        """Most blocks any one batch draws from (all must be resident together)."""
        if self.n_batches == 0:
            return 1
        starts = np.arange(self.n_batches) * self.batch_size
        ends = np.minimum(starts + self.batch_size, len(self.order.anchors)) - 1
        bs = self.order.block_starts
        first = np.searchsorted(bs, starts, side="right") - 1
        last = np.searchsorted(bs, ends, side="right") - 1
        return int((last - first).max()) + 1

    def first_uses(self, path: str, from_block: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Slabs of ``path`` the blocks from ``from_block`` on need, and the first block needing each."""
        blocks = self.needs[from_block:]
        if not blocks:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        slabs = np.concatenate([blk[path].slabs for blk in blocks])
        block_ids = np.concatenate(
            [np.full(len(blk[path].slabs), from_block + i, dtype=np.int64) for i, blk in enumerate(blocks)]
        )
        order = np.lexsort((block_ids, slabs))  # by slab, then block: each slab's first use leads
        slabs, block_ids = slabs[order], block_ids[order]
        first = np.concatenate(([True], slabs[1:] != slabs[:-1])) if len(slabs) else np.zeros(0, dtype=bool)
        return slabs[first], block_ids[first]

    def max_slots(self, path: str, window: int) -> int:
        """Most distinct slabs of ``path`` pinned by any ``window`` consecutive blocks."""
        best = 0
        for b in range(len(self.needs)):
            parts = [self.needs[j][path].slabs for j in range(b, min(b + window, len(self.needs)))]
            best = max(best, len(sorted_unique(np.concatenate(parts))) if parts else 0)
        return best


def plan_epoch(
    order: EpochOrder,
    labels: Sequence[ArrayGeometry],
    batch_size: int,
    drop_last: bool,
) -> EpochPlan:
    """Turn an epoch order into per-block slab needs for every array."""
    by_path: dict[str, list[ArrayGeometry]] = {}
    for g in labels:
        by_path.setdefault(g.path, []).append(g)
    n = len(order.anchors)
    n_batches = n // batch_size if drop_last else -(-n // batch_size)
    per_block: list[dict[str, np.ndarray]] = []
    for b in range(order.n_blocks):
        anchors = order.block_anchors(b)
        per_block.append(
            {
                path: sorted_unique(np.concatenate([(anchors + g.offset) // g.chunk_len for g in geoms]))
                for path, geoms in by_path.items()
            }
        )
    needs = []
    next_uses = {path: _next_uses([blk[path] for blk in per_block]) for path in by_path}
    for b, blk in enumerate(per_block):
        needs.append({path: BlockNeeds(slabs, next_uses[path][b]) for path, slabs in blk.items()})
    return EpochPlan(order, batch_size, n_batches, tuple(needs))


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` for 1-D integers, without its first-call import of ``numpy.ma`` (~20 ms)."""
    s = np.sort(values)
    if len(s) < 2:
        return s
    return s[np.concatenate(([True], s[1:] != s[:-1]))]


def _next_uses(blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """For each block's slabs, the index of the next block using the same slab (-1 if none)."""
    if not blocks:
        return []
    slabs = np.concatenate(blocks)
    block_ids = np.concatenate([np.full(len(s), b, dtype=np.int64) for b, s in enumerate(blocks)])
    order = np.lexsort((block_ids, slabs))
    nxt = np.full(len(slabs), -1, dtype=np.int64)
    same = slabs[order][1:] == slabs[order][:-1]
    nxt_sorted = np.where(same, block_ids[order][1:], -1)
    nxt[order[:-1]] = nxt_sorted
    bounds = np.cumsum([0] + [len(s) for s in blocks])
    return [nxt[bounds[i] : bounds[i + 1]] for i in range(len(blocks))]
