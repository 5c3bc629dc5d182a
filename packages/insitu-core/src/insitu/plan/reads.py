"""Per-epoch read plan: which slabs each block needs, and when each is next needed.

Labels that read the same array (``t2m`` and ``t2m+24``) share its slabs, so a
chunk needed by the input at t and the target at t+h is decoded once. The plan
is whole-array numpy: each array's needs are one flat array of slabs, block
after block (:class:`ArrayNeeds`), derived from the runs of samples the order
was made of rather than from every sample. Python loops run per array and per
offset, never per block or per sample, so planning ten million one-sample
chunks costs a few passes over ten million integers.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from insitu.arrays.geometry import ArrayGeometry
from insitu.plan.order import EpochOrder, EpochRuns, sorted_unique
from insitu.plan.patches_order import PatchOrder
from insitu.plan.splits import concat_runs

__all__ = ["ArrayNeeds", "BlockNeeds", "EpochPlan", "plan_epoch", "sorted_unique"]


@dataclass(frozen=True)
class BlockNeeds:
    """Slabs of one array needed by one block, and the next block needing each (-1: none)."""

    slabs: np.ndarray
    next_use: np.ndarray


@dataclass(frozen=True, eq=False)
class ArrayNeeds:
    """The slabs one array's blocks need, block after block: block ``b`` needs
    ``slabs[starts[b]:starts[b + 1]]`` (each once). ``next_use`` gives the next block needing the
    same slab (-1: none), ``prev_use`` the previous; both are ``None`` when no slab is needed by
    two blocks (the common case: one sample window, chunks aligned with the manifest's)."""

    slabs: np.ndarray
    starts: np.ndarray
    next_use: np.ndarray | None
    prev_use: np.ndarray | None
    _distinct: dict[int, int] = field(default_factory=dict, repr=False)  # max_distinct, by window

    @property
    def n_blocks(self) -> int:
        """Number of blocks."""
        return len(self.starts) - 1

    def block(self, b: int) -> BlockNeeds:
        """The slabs block ``b`` needs (each once) and, for each, the next block needing it (-1: none)."""
        lo, hi = int(self.starts[b]), int(self.starts[b + 1])
        nxt = self.next_use[lo:hi] if self.next_use is not None else np.full(hi - lo, -1, dtype=np.int64)
        return BlockNeeds(self.slabs[lo:hi], nxt)

    def block_ids(self, from_block: int = 0) -> np.ndarray:
        """The block of every entry from block ``from_block`` on."""
        counts = np.diff(self.starts[from_block:])
        return np.repeat(np.arange(from_block, self.n_blocks, dtype=np.int64), counts)

    def max_distinct(self, window: int) -> int:
        """Most distinct slabs any ``window`` consecutive blocks need together.

        An entry (block ``k``, previous use ``p``) is new to the windows starting at
        ``max(p + 1, k - window + 1) .. k``; counting with a difference array over window starts
        gives every window's distinct count in one pass.
        """
        found = self._distinct.get(window)
        if found is None:
            found = self._distinct[window] = self._count_distinct(window)
        return found

    def _count_distinct(self, window: int) -> int:
        n = self.n_blocks
        if n == 0 or len(self.slabs) == 0:
            return 0
        if self.prev_use is None:  # every slab once: a window's count is the sum of its blocks' sizes
            sizes = np.diff(self.starts)
            csum = np.concatenate(([0], np.cumsum(sizes)))
            ends = np.minimum(np.arange(n) + window, n)
            return int((csum[ends] - csum[:n]).max())
        blocks = self.block_ids()
        lo = np.maximum(np.maximum(self.prev_use + 1, blocks - window + 1), 0)
        diff = np.zeros(n + 1, dtype=np.int64)
        np.add.at(diff, lo, 1)
        np.add.at(diff, blocks + 1, -1)
        return int(np.cumsum(diff[:n]).max())


class _BlockNeedsSequence(Sequence[Mapping[str, BlockNeeds]]):
    """``plan.needs[b][path]``: a per-block view over the flat per-array needs."""

    def __init__(self, arrays: Mapping[str, ArrayNeeds], n_blocks: int) -> None:
        self._arrays = arrays
        self._n = n_blocks

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, b: int) -> Mapping[str, BlockNeeds]:  # type: ignore[override]
        if not -self._n <= b < self._n:
            raise IndexError(f"block {b} of {self._n}")
        b %= self._n
        return {path: needs.block(b) for path, needs in self._arrays.items()}


@dataclass(frozen=True, eq=False)
class EpochPlan:
    """One epoch's read plan for a view: the order, the batches cut from it, and the slabs every block
    needs of every pooled array.

    The order is of samples (:class:`~insitu.plan.order.EpochOrder`: anchors along the sample
    axis, arrays pooled by slab) or of patches (:class:`~insitu.plan.patches_order.PatchOrder`:
    patch positions, arrays pooled by chunk, ``arrays`` holding flat chunk ids); either way
    positions run block after block and batches are cut from them.
    """

    order: EpochOrder | PatchOrder
    batch_size: int
    n_batches: int
    arrays: Mapping[str, ArrayNeeds]  # per array path: every block's slabs (patches: chunks)

    @property
    def n_blocks(self) -> int:
        """Number of blocks."""
        return self.order.n_blocks

    @property
    def block_starts(self) -> np.ndarray:
        """Block ``b`` holds positions ``block_starts[b]:block_starts[b + 1]`` of the order."""
        order = self.order
        return order.starts if isinstance(order, PatchOrder) else order.block_starts

    @property
    def n_positions(self) -> int:
        """Positions (samples or patches) the order holds, padding included."""
        order = self.order
        return order.n_patches if isinstance(order, PatchOrder) else len(order.anchors)

    @property
    def n_valid(self) -> int:
        """Positions from this one on repeat earlier ones (``uneven="pad"``); -1: none do."""
        return self.order.n_valid

    @property
    def patches(self) -> PatchOrder | None:
        """The patch order of a patch plan; None for a plan of samples."""
        return self.order if isinstance(self.order, PatchOrder) else None

    @property
    def anchors(self) -> np.ndarray:
        """The anchors of a plan of samples, in delivery order."""
        order = self.order
        if isinstance(order, PatchOrder):
            raise TypeError("a patch plan has patch positions, not anchors (see EpochPlan.patches)")
        return order.anchors

    @property
    def needs(self) -> Sequence[Mapping[str, BlockNeeds]]:
        """Per block: ``{array path: BlockNeeds}``."""
        return _BlockNeedsSequence(self.arrays, self.n_blocks)

    def block_needs(self, b: int) -> dict[str, BlockNeeds]:
        """``{array path: BlockNeeds}`` of block ``b``."""
        return {path: needs.block(b) for path, needs in self.arrays.items()}

    def batch_bounds(self, k: int) -> tuple[int, int]:
        """``[lo, hi)``: the positions in the epoch order that batch ``k`` delivers (the last batch may be
        short)."""
        lo = k * self.batch_size
        return lo, min(lo + self.batch_size, self.n_positions)

    def block_of(self, position: int) -> int:
        """Block holding anchor ``position`` of the epoch order."""
        # The array's own method: np.searchsorted's dispatch wrapper cost more than the search
        # (this runs a few times per batch, on the loop).
        return int(self.block_starts.searchsorted(position, side="right")) - 1

    @functools.cached_property
    def distinct_chunks(self) -> int:
        """Patch plans: the distinct stored chunks the epoch reads over every array (0 for a plan
        of samples, where counting them would cost a pass over every slab)."""
        if self.patches is None:
            return 0
        return sum(len(np.unique(needs.slabs)) for needs in self.arrays.values())

    @functools.cached_property
    def batch_span(self) -> int:
        """Most blocks any one batch draws from (all must be resident together)."""
        if self.n_batches == 0:
            return 1
        starts = np.arange(self.n_batches, dtype=np.int64) * self.batch_size
        ends = np.minimum(starts + self.batch_size, self.n_positions) - 1
        bs = self.block_starts
        first = np.searchsorted(bs, starts, side="right") - 1
        last = np.searchsorted(bs, ends, side="right") - 1
        return int((last - first).max()) + 1

    def first_uses(self, path: str, from_block: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Slabs of ``path`` the blocks from ``from_block`` on need, and the first block needing each."""
        needs = self.arrays[path]
        if from_block >= needs.n_blocks:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        slabs = needs.slabs[needs.starts[from_block] :]
        blocks = needs.block_ids(from_block)
        if needs.prev_use is None:
            return slabs, blocks
        # Entries run block after block, so a stable sort by slab puts each slab's first use first.
        order = np.argsort(slabs, kind="stable")
        slabs, blocks = slabs[order], blocks[order]
        first = np.concatenate(([True], slabs[1:] != slabs[:-1]))
        return slabs[first], blocks[first]

    def max_slots(self, path: str, window: int) -> int:
        """Most distinct slabs of ``path`` pinned by any ``window`` consecutive blocks."""
        return self.arrays[path].max_distinct(window)


def plan_epoch(
    order: EpochOrder,
    labels: Sequence[ArrayGeometry],
    batch_size: int,
    drop_last: bool,
    runs: EpochRuns | None = None,
) -> EpochPlan:
    """Turn an epoch order into per-block slab needs for every array.

    ``runs`` (from :func:`insitu.plan.order.order_with_runs`) lets the planner work per run of
    samples; without it every anchor is a run of its own (same result, more work).
    """
    by_path: dict[str, list[ArrayGeometry]] = {}
    for g in labels:
        by_path.setdefault(g.path, []).append(g)
    n = len(order.anchors)
    n_batches = n // batch_size if drop_last else -(-n // batch_size)
    runs = runs if runs is not None else EpochRuns.of_anchors(order)
    arrays = {path: _array_needs(order, runs, geoms) for path, geoms in by_path.items()}
    return EpochPlan(order, batch_size, n_batches, arrays)


def _array_needs(order: EpochOrder, runs: EpochRuns, geoms: Sequence[ArrayGeometry]) -> ArrayNeeds:
    """Every block's slabs of one array (read by ``geoms``, at their offsets), each once a block."""
    g0 = geoms[0]
    c = g0.chunk_len
    offsets = sorted({g.offset for g in geoms})
    n_blocks = order.n_blocks
    regular = runs.regular_blocks
    run_starts = runs.starts[: regular + 1]
    n_runs = int(run_starts[-1])
    first, size = runs.first[:n_runs], runs.size[:n_runs]
    # Per offset: the slabs of the regular blocks' runs, block after block (a run spans
    # consecutive slabs), and where each block's entries start.
    per_offset: list[tuple[np.ndarray, np.ndarray]] = []
    for off in offsets:
        if off == 0 and c == 1 and runs.chunk_len == 1:
            # One-sample runs read at their own index: the slabs are the regular blocks' anchors
            # (shuffled within each block, which is no matter), so no array of their own.
            per_offset.append((order.anchors[:n_runs], run_starts))
            continue
        lo = (first + off) // c
        if runs.chunk_len == c and off % c == 0:  # a run lies inside one slab
            per_offset.append((lo, run_starts))
            continue
        count = (first + size - 1 + off) // c - lo + 1
        per_offset.append((concat_runs(lo, count), np.concatenate(([0], np.cumsum(count)))[run_starts]))
    # Blocks cut short or padding are known by their anchors only.
    extra = [
        sorted_unique(np.concatenate([(order.block_anchors(b) + off) // c for off in offsets]))
        for b in range(regular, n_blocks)
    ]
    # Runs of distinct chunks map to disjoint slabs when one offset reads the array and its chunks
    # nest inside the manifest's: no slab then repeats within a block, nor (without padding)
    # across blocks, and no sort is needed.
    disjoint = runs.one_per_chunk and len(offsets) == 1 and runs.chunk_len % c == 0 and offsets[0] % c == 0
    if disjoint:
        slabs, starts = per_offset[0]
        if extra:
            slabs = np.concatenate([slabs, *extra])
            starts = np.concatenate([starts, starts[-1] + np.cumsum([len(e) for e in extra])])
        starts = starts.astype(np.int64, copy=False)
        if not runs.padded:
            return ArrayNeeds(slabs, starts, None, None)
        blocks = np.repeat(np.arange(n_blocks, dtype=np.int64), np.diff(starts))
    else:
        # Keys (block, slab) as one integer; the base covers every slab seen, whatever the caller's
        # anchor range, so two pairs never share a key.
        n_slabs = max([g0.n_slabs, 1, *(int(s.max()) + 1 for s, _ in per_offset if len(s))])
        keys = [
            np.repeat(np.arange(regular, dtype=np.int64), np.diff(entry_starts)) * n_slabs + slabs
            for slabs, entry_starts in per_offset
        ]
        keys += [b * n_slabs + e for b, e in zip(range(regular, n_blocks), extra, strict=True)]
        unique = sorted_unique(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)
        blocks, slabs = unique // n_slabs, unique % n_slabs
        starts = np.concatenate(([0], np.cumsum(np.bincount(blocks, minlength=n_blocks)))).astype(np.int64)
    # Next and previous use of each slab: sort entries by (slab, block).
    by_slab = np.argsort(slabs * max(n_blocks, 1) + blocks)
    s_sorted, b_sorted = slabs[by_slab], blocks[by_slab]
    same = s_sorted[1:] == s_sorted[:-1]
    next_use = np.full(len(slabs), -1, dtype=np.int64)
    prev_use = np.full(len(slabs), -1, dtype=np.int64)
    next_use[by_slab[:-1]] = np.where(same, b_sorted[1:], -1)
    prev_use[by_slab[1:]] = np.where(same, b_sorted[:-1], -1)
    return ArrayNeeds(slabs, starts, next_use, prev_use)
