"""The patch order of one epoch: blocks of neighbouring regions, shuffled, dealt to ranks.

A *block* is a tile of neighbouring regions, at most ``block_chunks`` of them
(its shape in regions is chosen once per layout, growing first along the axes
where patches reach furthest into the next region, so that a straddling patch's
neighbour chunks are in the same block as often as possible). A block is the
unit of residency, as in :mod:`insitu.plan.order`: its regions' chunks, and the
neighbours' chunks its straddling patches read, are decoded together, and every
patch of the block is served from them.

::

    regions  +--+--+--+--+--+--+      block_chunks = 4: tiles of 2 x 2 regions
             |a  a |b  b |c  c |      blocks a..f, permuted per epoch: e, b, f, a, ...
             |a  a |b  b |c  c |      rank r of W takes permuted blocks r, r + W, ...
             +--+--+--+--+--+--+      patches shuffled across the 4 regions of each block
             |d  d |e  e |f  f |
             ...

The order is a pure function of (seed, epoch, split, rank, world_size), with
numpy generators seeded like :func:`insitu.plan.order.epoch_rng`: the block
permutation is that generator's first draw; each block's shuffle has its own
generator seeded by the block's number (and, in the ramp of a first block cut into
parts, the part's first region), so the patches of any batch follow from
the block sizes alone, without generating earlier blocks (a resume at batch
``k`` costs one block). Grid sampling delivers every position of the
:class:`~insitu.plan.patches_regions.PatchSet` once per epoch (over all ranks,
before evening out). Random sampling first splits ``patches_per_epoch`` draws
over the regions (multinomially, in proportion to the positions each holds: one
draw over regions), then draws each region's origins uniformly from its own
generator: together, independent uniform draws over every position, grouped by
region so each region's chunks are decoded once per block.

Ranks take disjoint blocks (so disjoint regions) and deliver equal numbers of
patches: the shortest rank's count (``uneven="drop"``) or the longest's, the
others repeating their own first patches (``"pad"``; :attr:`PatchOrder.n_valid`
marks where the repeats start), as :func:`insitu.plan.order.epoch_order` does.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from insitu.errors import ConfigError
from insitu.options import check_rank, flag, positive_int, seed_value
from insitu.plan.order import block_bounds, epoch_rng
from insitu.plan.patches_regions import PatchSet, RegionLayout
from insitu.plan.splits import concat_runs

if TYPE_CHECKING:
    from insitu.plan.weighted_draw import ValuesOf, WeightedDraw

#: Bumped whenever the patches of a given (seed, epoch, split, rank, world) change: resume states carry it.
PATCH_ORDER_VERSION = 1
# Words that keep the generators of one epoch apart (block shuffles, region draws, draw counts).
_SHUFFLE, _REGION_DRAW, _DRAW_COUNTS = 1, 2, 3


@dataclass(frozen=True, eq=False)
class PatchOrder:
    """One rank's patches for one epoch, as block entries: entry ``i`` delivers the first
    ``counts[i]`` patches (of ``entry_sizes[i]``) of the (shuffled) patches of regions
    ``region_lo[i] .. region_hi[i]`` of block ``blocks[i]``: a whole block, or a part of the
    first one while the blocks ramp up to ``block_chunks`` regions. Entry ``i`` holds positions
    ``starts[i] .. starts[i + 1]`` of the rank's order; positions from ``n_valid`` on repeat
    earlier ones (``uneven="pad"``; -1: none do)."""

    patches: PatchSet
    blocks: np.ndarray  # global block number of every entry, in delivery order
    region_lo: np.ndarray  # the entry's first region, as an index into its block's regions
    region_hi: np.ndarray
    entry_sizes: np.ndarray  # patches of the entry's regions
    counts: np.ndarray  # patches each entry delivers (fewer in an entry cut to the rank's count)
    starts: np.ndarray  # len = n_entries + 1
    n_valid: int
    tile: tuple[int, ...]  # regions per block along each axis
    block_regions_values: np.ndarray  # regions holding patches, block after block
    block_regions_starts: np.ndarray  # block g's regions: values[starts[g]:starts[g + 1]]
    region_draws: np.ndarray | None  # random sampling: draws per region; None for a grid
    seed: int
    epoch: int
    split: str
    shuffle: bool
    #: Weighted random sampling (:mod:`insitu.plan.patch_weights`): each region's draws are made
    #: among its positions by weights computed from decoded data, given to :meth:`block_positions`.
    weighted: WeightedDraw | None = None
    #: Entries whose patches are listed rather than generated (the rest of an epoch after a change
    #: of world size, :mod:`insitu.plan.patches_elastic`): entry index -> positions in delivery order.
    explicit: Mapping[int, np.ndarray] = field(default_factory=dict)
    _last: dict[tuple[int, int], np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def n_blocks(self) -> int:
        """Number of block entries this rank delivers (padding included)."""
        return len(self.blocks)

    @property
    def n_patches(self) -> int:
        """Patches this rank delivers this epoch (equal on every rank)."""
        return int(self.starts[-1])

    @property
    def nbytes(self) -> int:
        """Bytes the order holds (it grows with regions and blocks, not patches)."""
        arrays = [
            self.blocks,
            self.region_lo,
            self.region_hi,
            self.entry_sizes,
            self.counts,
            self.starts,
            self.block_regions_values,
            self.block_regions_starts,
        ]
        if self.region_draws is not None:
            arrays.append(self.region_draws)
        arrays.extend(self.explicit.values())
        return int(sum(a.nbytes for a in arrays))

    def block_regions(self, i: int) -> np.ndarray:
        """The regions (holding patches) entry ``i`` serves."""
        first = int(self.block_regions_starts[int(self.blocks[i])])
        return self.block_regions_values[first + int(self.region_lo[i]) : first + int(self.region_hi[i])]

    def block_boxes(self, i: int) -> np.ndarray:
        """The boxes of :attr:`patches` entry ``i`` serves."""
        starts = self.patches.region_box_starts
        regions = self.block_regions(i)
        return concat_runs(starts[regions], starts[regions + 1] - starts[regions])

    def is_whole(self, i: int) -> bool:
        """Whether entry ``i`` delivers all of its regions' patches (not cut to the rank's count,
        nor a list of patches)."""
        return i not in self.explicit and int(self.counts[i]) == int(self.entry_sizes[i])

    def block_positions(self, i: int, values_of: ValuesOf | None = None) -> np.ndarray:
        """Position numbers of entry ``i``'s patches, in delivery order. A weighted order draws
        them from data: ``values_of(origins)`` gives the weighting array's values for positions
        of one region (the pass reads them from the block's decoded chunks)."""
        listed = self.explicit.get(i)
        if listed is not None:
            return listed[: int(self.counts[i])]
        key = (int(self.blocks[i]), int(self.region_lo[i]))
        found = self._last.get(key)
        if found is None:
            found = self._generate(key, self.block_regions(i), values_of)
            self._last.clear()  # consecutive batches read one or two blocks: keep only the last
            self._last[key] = found
        return found[: int(self.counts[i])]

    def patches_between(self, lo: int, hi: int, values_of: ValuesOf | None = None) -> np.ndarray:
        """Position numbers of the rank's order from ``lo`` to ``hi`` (half-open): only the blocks
        they fall in are generated."""
        lo, hi = max(0, lo), min(hi, self.n_patches)
        if hi <= lo:
            return np.zeros(0, dtype=np.int64)
        first = self.block_of(lo)
        last = self.block_of(hi - 1)
        parts = []
        for i in range(first, last + 1):
            s = int(self.starts[i])
            parts.append(self.block_positions(i, values_of)[max(lo - s, 0) : hi - s])
        return np.concatenate(parts)

    def batch(self, k: int, batch_size: int) -> np.ndarray:
        """Position numbers of batch ``k`` (the last batch may be short)."""
        return self.patches_between(k * batch_size, (k + 1) * batch_size)

    def n_batches(self, batch_size: int, drop_last: bool = False) -> int:
        """Batches of ``batch_size`` this rank delivers (equal on every rank)."""
        return self.n_patches // batch_size if drop_last else -(-self.n_patches // batch_size)

    def block_of(self, position: int) -> int:
        """The entry holding ``position`` of the rank's order."""
        return int(np.searchsorted(self.starts, position, side="right") - 1)

    def origins_between(self, lo: int, hi: int, values_of: ValuesOf | None = None) -> np.ndarray:
        """The patch origins of positions ``lo .. hi`` (one row per patch: ``Batch.patch_origins``)."""
        return self.patches.grid.origins(self.patches_between(lo, hi, values_of))

    def _generate(self, key: tuple[int, int], regions: np.ndarray, values_of: ValuesOf | None) -> np.ndarray:
        """Every patch of an entry's regions in delivery order, from a generator of its own:
        (seed, epoch, split) and the entry's (block, first region)."""
        ps = self.patches
        starts = ps.region_box_starts
        if self.region_draws is None:
            positions = ps.positions(concat_runs(starts[regions], starts[regions + 1] - starts[regions]))
        else:
            parts = []
            for r in regions.tolist():
                rng = _rng(self.seed, self.epoch, self.split, _REGION_DRAW, r)
                boxes = np.arange(starts[r], starts[r + 1])
                count = int(self.region_draws[r])
                if self.weighted is None:
                    parts.append(ps.draw(boxes, count, rng))
                else:
                    parts.append(self.weighted.draw(ps, r, boxes, count, rng, values_of))
            positions = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        if self.shuffle:
            _rng(self.seed, self.epoch, self.split, _SHUFFLE, *key).shuffle(positions)
        return positions


def order_patches(
    patches: PatchSet,
    *,
    epoch: int,
    seed: int = 0,
    split: str = "train",
    shuffle: bool = True,
    block_chunks: int = 16,
    first_block_chunks: int | None = None,
    rank: int = 0,
    world_size: int = 1,
    uneven: str = "drop",
    draws: int | None = None,
    weighted: WeightedDraw | None = None,
) -> PatchOrder:
    """The order of ``patches`` for ``epoch`` on ``rank`` of ``world_size``.

    ``weighted`` (with ``draws``) splits the draws over the regions by its region weights
    instead of their position counts, and draws inside each region by position weights.

    ``draws`` (random sampling): the epoch's patches over all ranks, drawn uniformly with
    replacement from the positions of ``patches``; ``None`` delivers every position once (grid).
    ``block_chunks`` bounds the regions per block; when fewer blocks than ranks hold patches it
    is halved until each rank has one (an error only when fewer regions than ranks do).
    ``first_block_chunks`` serves the rank's first block in parts of that many regions,
    doubling (as :func:`insitu.plan.order.epoch_order` ramps its first blocks), so the first
    batch waits for a few regions' chunks rather than a whole block's.
    """
    seed = seed_value("seed", seed)
    epoch = seed_value("epoch", epoch)
    shuffle = flag("shuffle", shuffle)
    block_chunks = positive_int("block_chunks", block_chunks)
    if first_block_chunks is not None:
        first_block_chunks = positive_int("first_block_chunks", first_block_chunks)
    check_rank(rank, world_size)
    if uneven not in ("drop", "pad"):
        raise ConfigError(f"uneven={uneven!r}; expected 'drop' or 'pad'")
    layout = patches.layout
    units = patches.region_counts
    region_draws: np.ndarray | None = None
    if draws is not None:
        draws = positive_int("patches_per_epoch", draws)
        total = int(units.sum())
        if total == 0:
            raise ConfigError(f"split {split!r} holds no patch position to draw from")
        rng = _rng(seed, epoch, split, _DRAW_COUNTS)
        share = units / total if weighted is None else weighted.region_shares(units, split)
        units = region_draws = rng.multinomial(draws, share).astype(np.int64)
    tile, block_of_region, block_sizes, nonempty = _blocks(layout, units, block_chunks, world_size, split)
    holding = np.flatnonzero(units > 0)
    by_block = holding[np.argsort(block_of_region[holding], kind="stable")]
    region_starts = np.searchsorted(
        block_of_region[by_block], np.arange(len(block_sizes) + 1, dtype=np.int64)
    ).astype(np.int64)
    perm = epoch_rng(seed, epoch, split).permutation(len(nonempty)) if shuffle else np.arange(len(nonempty))
    dealt = nonempty[perm]
    mine = dealt[rank::world_size]
    limit = None
    if world_size > 1:
        per_rank = np.bincount(
            np.arange(len(dealt)) % world_size, weights=block_sizes[dealt], minlength=world_size
        ).astype(np.int64)
        limit = int(per_rank.min()) if uneven == "drop" else int(per_rank.max())
    entries = _entries(mine, region_starts, by_block, units, block_sizes, block_chunks, first_block_chunks)
    index, counts, n_valid = fit_entries(entries[3], limit)
    blocks, region_lo, region_hi, entry_sizes = (e[index] for e in entries)
    return PatchOrder(
        patches=patches,
        blocks=blocks,
        region_lo=region_lo,
        region_hi=region_hi,
        entry_sizes=entry_sizes,
        counts=counts,
        starts=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        n_valid=n_valid,
        tile=tile,
        block_regions_values=by_block,
        block_regions_starts=region_starts,
        region_draws=region_draws,
        seed=seed,
        epoch=epoch,
        split=split,
        shuffle=shuffle,
        weighted=weighted,
    )


def _entries(
    mine: np.ndarray,
    region_starts: np.ndarray,
    by_block: np.ndarray,
    units: np.ndarray,
    block_sizes: np.ndarray,
    block_chunks: int,
    first_block_chunks: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rank's entries ``(block, first region, end region, patches)``: one per block, the
    first block cut into a ramp of parts when ``first_block_chunks`` asks for it."""
    n_regions = region_starts[mine + 1] - region_starts[mine]
    blocks, lo, hi, sizes = mine, np.zeros(len(mine), dtype=np.int64), n_regions, block_sizes[mine]
    if first_block_chunks is None or not len(mine) or first_block_chunks >= n_regions[0]:
        return blocks, lo, hi, sizes
    bounds = block_bounds(int(n_regions[0]), block_chunks, first_block_chunks)
    first = region_starts[mine[0]]
    cum = np.concatenate(([0], np.cumsum(units[by_block[first : first + n_regions[0]]])))
    parts = len(bounds) - 1
    return (
        np.concatenate([np.full(parts, mine[0], dtype=np.int64), blocks[1:]]),
        np.concatenate([bounds[:-1], lo[1:]]),
        np.concatenate([bounds[1:], hi[1:]]),
        np.concatenate([cum[bounds[1:]] - cum[bounds[:-1]], sizes[1:]]),
    )


def block_tile(layout: RegionLayout, block_chunks: int) -> tuple[int, ...]:
    """Regions per block along each axis, at most ``block_chunks`` in all.

    Grown one region at a time along the axis where a patch reaches furthest past the tile's
    edge, relative to the tile's extent (``(size - 1) / extent``): that is where neighbour
    chunks are read twice when they fall in another block. Axes a patch never crosses (the
    sample axis of a one-sample patch) grow last; ties go to the shorter tile side.
    """
    grid = layout.grid
    tile = [1] * grid.ndim
    while True:
        room = math.prod(tile)
        candidates = sorted(
            (
                -(grid.axes[d].size - 1) / (tile[d] * layout.extent[d]),
                tile[d] * layout.extent[d],
                d,
            )
            for d in range(grid.ndim)
            if tile[d] < layout.n_regions_per_axis[d] and room // tile[d] * (tile[d] + 1) <= block_chunks
        )
        if not candidates:
            return tuple(tile)
        tile[candidates[0][2]] += 1


def _blocks(
    layout: RegionLayout, units: np.ndarray, block_chunks: int, world_size: int, split: str
) -> tuple[tuple[int, ...], np.ndarray, np.ndarray, np.ndarray]:
    """The tile, every region's block, every block's patches, and the blocks holding any: with
    ``block_chunks`` halved while fewer blocks than ranks hold patches."""
    index = layout.region_index(np.arange(layout.n_regions, dtype=np.int64))
    while True:
        tile = block_tile(layout, block_chunks)
        per_axis = tuple(-(-n // t) for n, t in zip(layout.n_regions_per_axis, tile, strict=True))
        block_of_region = np.ravel_multi_index(
            tuple(j // t for j, t in zip(index, tile, strict=True)), per_axis
        ).astype(np.int64)
        sizes = np.bincount(block_of_region, weights=units, minlength=math.prod(per_axis)).astype(np.int64)
        nonempty = np.flatnonzero(sizes > 0)
        if len(nonempty) >= world_size or block_chunks == 1:
            break
        block_chunks = max(1, block_chunks // 2)
    if len(nonempty) < world_size:
        raise ConfigError(
            f"world_size={world_size} exceeds the {len(nonempty)} region(s) holding patches in split "
            f"{split!r}; use fewer ranks or smaller chunks"
        )
    return tile, block_of_region, sizes, nonempty


def fit_entries(sizes: np.ndarray, limit: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """The rank's entries (as indices) cut to ``limit`` patches (drop) or padded up to it by
    cycling its own entries from the first (pad); the patches each delivers; and where padding
    starts (-1: none)."""
    total = int(sizes.sum())
    index = np.arange(len(sizes), dtype=np.int64)
    if limit is None or total == limit:
        return index, sizes, -1
    ends = np.cumsum(sizes)
    if total > limit:
        n = int(np.searchsorted(ends, limit, side="left")) + 1
        cut = sizes[:n].copy()
        cut[-1] -= int(ends[n - 1]) - limit
        return index[:n], cut, -1
    rounds, rest = divmod(limit - total, total)
    n = int(np.searchsorted(ends, rest, side="left")) + 1 if rest else 0
    tail = sizes[:n].copy()
    if n:
        tail[-1] -= int(ends[n - 1]) - rest
    return (
        np.concatenate([index] * (1 + rounds) + [index[:n]]),
        np.concatenate([sizes] * (1 + rounds) + [tail]),
        total,
    )


def _rng(seed: int, epoch: int, split: str, *words: int) -> np.random.Generator:
    """A generator of one epoch's draws, apart from :func:`~insitu.plan.order.epoch_rng`'s by ``words``."""
    salt = zlib.crc32(split.encode())
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(epoch), salt, *words]))
