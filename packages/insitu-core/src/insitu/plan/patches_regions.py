"""Patches in chunk space: regions of stored chunks, the patches each holds, the chunks each reads.

A *region* is a box of the reference array's stored chunks: ``region_chunks``
chunks along each axis (one by default), the whole axis along a dimension the
patch spans whole. Regions tile the array; region ``j`` along an axis covers
elements ``[j * R, (j + 1) * R)``. A patch belongs to the region holding its
origin, so along each axis a region holds the contiguous run of positions
``count_below(j * R) .. count_below((j + 1) * R)`` (origins increase with the
position index): one pair of integers per region and axis, never a list of
patches. A region holds no position when the stride skips it.

::

    chunks   |.......|.......|.......|.......|     R = one chunk (8 elements)
    patches  [-----]   [-----]   [-----]  [-----]  size 6, stride 10, shift
    region       0       1       2       3
    holds       k=0     k=1     k=2     k=3        k=2 starts in region 2 and reads chunk 3

A :class:`PatchSet` is the patches of one split of the array (all of them, or
those :mod:`insitu.plan.patches_split` keeps) as *boxes*: per box, a region and
a range of position indices per axis. Without a split each non-empty region is
one box; a split cuts a region at the positions whose footprint crosses into a
neighbouring cell, so a region is at most a few boxes. Memory grows with
regions: ``2 * ndim + 1`` integers per box.

A patch reads every stored chunk its footprint touches, which may be a
neighbouring region's (a patch straddling a region border): for any chunking
of the arrays sampled together (same shape, their own chunks),
:meth:`PatchSet.chunks_per_axis` gives, per axis, the chunk indices a box's
patches read, and :meth:`PatchSet.chunk_ids` the flat chunk ids of several
boxes together (what one block of the epoch order must have decoded).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from insitu.errors import ConfigError
from insitu.plan.order import sorted_unique
from insitu.plan.patches_spec import PatchGrid
from insitu.plan.splits import concat_runs


@dataclass(frozen=True, eq=False)
class RegionLayout:
    """How a patch grid's positions fall into regions of the reference chunking.

    ``extent[d]`` is a region's length along axis ``d`` in elements, ``n_regions_per_axis[d]``
    the number of regions along it, and ``position_starts[d][j]`` the first position index
    (``k_d``) whose origin lies in region ``j`` along ``d`` (``len = n + 1``).
    """

    grid: PatchGrid
    chunk_shape: tuple[int, ...]
    extent: tuple[int, ...]
    n_regions_per_axis: tuple[int, ...]
    position_starts: tuple[np.ndarray, ...]

    @classmethod
    def of(
        cls, grid: PatchGrid, chunk_shape: Sequence[int], region_chunks: Sequence[int] | None = None
    ) -> RegionLayout:
        """Regions of ``region_chunks`` reference chunks per axis (default 1) over ``grid``."""
        chunks = tuple(int(c) for c in chunk_shape)
        if len(chunks) != grid.ndim:
            raise ConfigError(f"chunk shape {chunks} does not match the patch grid's {grid.ndim} axes")
        multiples = tuple(int(q) for q in region_chunks) if region_chunks is not None else (1,) * grid.ndim
        if len(multiples) != grid.ndim or min(multiples, default=1) < 1:
            raise ConfigError(f"region_chunks must give a positive number per axis, got {region_chunks!r}")
        extent = tuple(
            a.length if a.whole else min(c * q, a.length)
            for a, c, q in zip(grid.axes, chunks, multiples, strict=True)
        )
        per_axis = tuple(-(-a.length // e) for a, e in zip(grid.axes, extent, strict=True))
        starts = tuple(
            a.count_below(np.arange(n + 1, dtype=np.int64) * e)
            for a, n, e in zip(grid.axes, per_axis, extent, strict=True)
        )
        return cls(grid, chunks, extent, per_axis, starts)

    @property
    def n_regions(self) -> int:
        """Number of regions (empty ones included)."""
        return math.prod(self.n_regions_per_axis)

    def region_index(self, regions: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per-axis indices of region numbers (C order over :attr:`n_regions_per_axis`)."""
        return tuple(np.unravel_index(np.asarray(regions, dtype=np.int64), self.n_regions_per_axis))

    def all_patches(self) -> PatchSet:
        """Every position of the grid, one box per region that holds any."""
        grids = np.meshgrid(
            *(np.arange(n, dtype=np.int64) for n in self.n_regions_per_axis), indexing="ij", copy=False
        )
        lo = np.stack([s[g.ravel()] for s, g in zip(self.position_starts, grids, strict=True)], axis=1)
        hi = np.stack([s[g.ravel() + 1] for s, g in zip(self.position_starts, grids, strict=True)], axis=1)
        region = np.arange(self.n_regions, dtype=np.int64)
        keep = (hi > lo).all(axis=1)
        return PatchSet(self, region[keep], lo[keep], hi[keep])


@dataclass(frozen=True, eq=False)
class PatchSet:
    """Patch positions as boxes, grouped by region (ascending): box ``b`` is region ``region[b]``'s
    positions ``lo[b, d] <= k_d < hi[b, d]`` on every axis ``d``; a region's boxes are disjoint."""

    layout: RegionLayout
    region: np.ndarray  # (n_boxes,) int64, ascending
    lo: np.ndarray  # (n_boxes, ndim) int64
    hi: np.ndarray  # (n_boxes, ndim) int64
    _tables: dict[tuple[tuple[int, ...], int], tuple[np.ndarray, ...]] = field(
        default_factory=dict, repr=False
    )

    def __post_init__(self) -> None:
        if len(self.region) > 1 and bool((self.region[1:] < self.region[:-1]).any()):
            order = np.argsort(self.region, kind="stable")
            for name in ("region", "lo", "hi"):
                object.__setattr__(self, name, getattr(self, name)[order])

    @property
    def grid(self) -> PatchGrid:
        """The positions the boxes index."""
        return self.layout.grid

    @property
    def n_boxes(self) -> int:
        """Number of boxes."""
        return len(self.region)

    @functools.cached_property
    def box_sizes(self) -> np.ndarray:
        """Positions in each box."""
        return np.prod(self.hi - self.lo, axis=1, dtype=np.int64)

    @functools.cached_property
    def region_counts(self) -> np.ndarray:
        """Positions of every region (``n_regions`` of them; 0 for a region holding none)."""
        counts = np.zeros(self.layout.n_regions, dtype=np.int64)
        np.add.at(counts, self.region, self.box_sizes)
        return counts

    @functools.cached_property
    def region_box_starts(self) -> np.ndarray:
        """Region ``r``'s boxes are ``region_box_starts[r] .. region_box_starts[r + 1]``."""
        return np.searchsorted(self.region, np.arange(self.layout.n_regions + 1, dtype=np.int64))

    @property
    def n_patches(self) -> int:
        """Positions over every box."""
        return int(self.box_sizes.sum())

    @property
    def nbytes(self) -> int:
        """Bytes the boxes hold: what the set costs, whatever its number of patches."""
        return int(self.region.nbytes + self.lo.nbytes + self.hi.nbytes)

    def box_positions(self, b: int) -> np.ndarray:
        """The position numbers of box ``b``, in C order over the box."""
        counts = self.grid.counts
        ids = np.zeros(1, dtype=np.int64)
        for d in range(self.grid.ndim):
            # C order: position = ((k_0 * n_1 + k_1) * n_2 + k_2) ...
            ks = np.arange(self.lo[b, d], self.hi[b, d], dtype=np.int64)
            ids = (ids[:, None] * counts[d] + ks[None, :]).ravel()
        return ids

    def positions(self, boxes: Sequence[int] | np.ndarray) -> np.ndarray:
        """The position numbers of several boxes, box after box."""
        parts = [self.box_positions(int(b)) for b in boxes]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def draw(self, boxes: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` positions drawn uniformly (with replacement) from the union of ``boxes``
        (disjoint), without listing them: a box is picked in proportion to its size by the
        draw's rank among the boxes' cumulative sizes, then an index inside it."""
        boxes = np.asarray(boxes, dtype=np.int64)
        sizes = self.box_sizes[boxes]
        ends = np.cumsum(sizes)
        local = rng.integers(0, int(ends[-1]), size=count, dtype=np.int64)
        which = np.searchsorted(ends, local, side="right")
        local -= ends[which] - sizes[which]
        lo, widths = self.lo[boxes[which]], self.hi[boxes[which]] - self.lo[boxes[which]]
        ks: list[np.ndarray] = [local] * self.grid.ndim
        rest = local
        for d in range(self.grid.ndim - 1, -1, -1):  # the index inside its box, in C order
            rest, k = np.divmod(rest, widths[:, d])
            ks[d] = lo[:, d] + k
        return np.ravel_multi_index(tuple(ks), self.grid.counts).astype(np.int64, copy=False)

    # -- chunks read ----------------------------------------------------------------------------
    def _chunk_table(self, chunk_shape: tuple[int, ...], offset: int) -> tuple[np.ndarray, ...]:
        """Per axis: the first chunk and the number of chunks every position's patch reads, in
        the chunking ``chunk_shape``, with origins moved ``offset`` along the sample axis."""
        key = (chunk_shape, offset)
        found = self._tables.get(key)
        if found is None:
            out = []
            for d, (axis, c) in enumerate(zip(self.grid.axes, chunk_shape, strict=True)):
                origins = axis.all_origins()
                if offset and d == self.grid.sample_axis:
                    origins = origins + offset
                    if len(origins) and (origins[0] < 0 or origins[-1] >= axis.length):
                        raise ConfigError(
                            f"an offset of {offset} along the sample axis reads outside its {axis.length} "
                            "samples; bound the sample axis (sample_span) to the anchors the window leaves"
                        )
                last = np.minimum(origins + axis.size, axis.length) - 1
                first = origins // c
                out.append(np.stack([first, last // c - first + 1]))
            found = self._tables[key] = tuple(out)
        return found

    def chunks_per_axis(self, b: int, chunk_shape: Sequence[int], offset: int = 0) -> tuple[np.ndarray, ...]:
        """Per axis, the chunk indices (ascending) that box ``b``'s patches read in the chunking
        ``chunk_shape`` (any chunking of an array of the reference's shape); the box reads their
        product. ``offset`` moves the patches along the sample axis (a window, ``shift(k)``)."""
        chunks = self._check_chunks(chunk_shape)
        table = self._chunk_table(chunks, int(offset))
        out = []
        for d in range(self.grid.ndim):
            k0, k1 = int(self.lo[b, d]), int(self.hi[b, d])
            first, n = table[d][0, k0:k1], table[d][1, k0:k1]
            if len(first) and _no_gaps(first, n):
                out.append(np.arange(int(first[0]), int(first[-1] + n[-1]), dtype=np.int64))
            else:
                out.append(sorted_unique(concat_runs(first, n)))
        return tuple(out)

    def chunk_ids(
        self, boxes: Sequence[int] | np.ndarray, chunk_shape: Sequence[int], offset: int = 0
    ) -> np.ndarray:
        """Flat chunk ids (C order over the chunk grid of ``chunk_shape``), sorted and distinct,
        that the patches of ``boxes`` read together."""
        boxes = np.asarray(boxes, dtype=np.int64)
        return self.chunk_ids_by_owner(boxes, np.zeros(len(boxes), dtype=np.int64), chunk_shape, offset)[1]

    def chunk_ids_by_owner(
        self, boxes: np.ndarray, owners: np.ndarray, chunk_shape: Sequence[int], offset: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """The distinct ``(owner, chunk id)`` pairs that boxes read, sorted by owner then chunk,
        for boxes tagged with owners (the block each belongs to): every block's chunks in one
        pass over the boxes, rather than a loop over them."""
        chunks = self._check_chunks(chunk_shape)
        table = self._chunk_table(chunks, int(offset))
        grid = tuple(-(-a.length // c) for a, c in zip(self.grid.axes, chunks, strict=True))
        boxes = np.asarray(boxes, dtype=np.int64)
        owners = np.asarray(owners, dtype=np.int64)
        if all(_no_gaps(t[0], t[1]) for t in table):
            # Every box reads a run of chunks per axis: from its first position's first chunk to
            # its last position's last (both increase with the position).
            ids = np.zeros(len(boxes), dtype=np.int64)
            which = np.arange(len(boxes), dtype=np.int64)
            for d in range(self.grid.ndim):
                lo, hi = self.lo[boxes[which], d], self.hi[boxes[which], d] - 1
                first = table[d][0, lo]
                n = table[d][0, hi] + table[d][1, hi] - first
                ids = np.repeat(ids * grid[d], n) + concat_runs(first, n)
                which = np.repeat(which, n)
            tags = owners[which]
        else:  # a stride past the size skips chunks: per box, per axis, the chunks it reads
            parts, tag_parts = [], []
            for b, owner in zip(boxes.tolist(), owners.tolist(), strict=True):
                one = np.zeros(1, dtype=np.int64)
                for d, sel in enumerate(self.chunks_per_axis(b, chunks, offset)):
                    one = (one[:, None] * grid[d] + sel[None, :]).ravel()
                parts.append(one)
                tag_parts.append(np.full(len(one), owner, dtype=np.int64))
            empty = np.zeros(0, dtype=np.int64)
            ids = np.concatenate(parts) if parts else empty
            tags = np.concatenate(tag_parts) if tag_parts else empty
        order = np.lexsort((ids, tags))
        ids, tags = ids[order], tags[order]
        if len(ids) > 1:
            new = np.concatenate(([True], (ids[1:] != ids[:-1]) | (tags[1:] != tags[:-1])))
            ids, tags = ids[new], tags[new]
        return tags, ids

    def patch_chunk_ids(
        self, positions: np.ndarray, chunk_shape: Sequence[int], offset: int = 0
    ) -> np.ndarray:
        """Flat chunk ids, sorted and distinct, that the patches at ``positions`` read (for a set
        of patches that is not whole boxes: a block cut short to a rank's count)."""
        chunks = self._check_chunks(chunk_shape)
        table = self._chunk_table(chunks, int(offset))
        grid = tuple(-(-a.length // c) for a, c in zip(self.grid.axes, chunks, strict=True))
        ks = self.grid.unravel(positions)
        ids = np.zeros(len(positions), dtype=np.int64)
        for d in range(self.grid.ndim):
            first, n = table[d][0, ks[d]], table[d][1, ks[d]]
            # Expand every patch's id so far by its chunks along this axis.
            ids = np.repeat(ids * grid[d], n) + concat_runs(first, n)
            ks = tuple(np.repeat(k, n) for k in ks)
        return sorted_unique(ids)

    def _check_chunks(self, chunk_shape: Sequence[int]) -> tuple[int, ...]:
        chunks = tuple(int(c) for c in chunk_shape)
        if len(chunks) != self.grid.ndim or min(chunks, default=1) < 1:
            raise ConfigError(
                f"chunk shape {tuple(chunk_shape)} does not fit an array of shape {self.grid.shape}: "
                "arrays sampled together share the reference array's shape"
            )
        return chunks


def _no_gaps(first: np.ndarray, n: np.ndarray) -> bool:
    """Whether consecutive patches' chunk runs leave no chunk between them (the usual case)."""
    return len(first) < 2 or bool((first[1:] <= first[:-1] + n[:-1]).all())
