r"""The rest of a patch epoch after a change of world size (elastic resume).

A patch order is a pure function of (seed, epoch, split, rank, world size), so
the patches the old ranks handed out follow from their batch counts alone, as
for samples (:mod:`insitu.plan.elastic`). An epoch interrupted at world size
W1 and resumed at W2 is a list of :class:`~insitu.plan.elastic.Segment`\\ s;
what they left is re-dealt for the next one:

- each old rank's order is rebuilt (the fresh epoch's, or for a later segment
  the one this module made for it) and what it had not handed out is kept as
  *units*: its untouched block entries, referred to by block and regions
  (their patches are generated again, by the same generators, when served),
  and the rest of the one entry it stopped in (and of an entry cut to the
  rank's count), listed;
- the units, in old-rank order, are permuted with a generator of (seed,
  epoch, split, segment) when the view shuffles, then cut into W2 contiguous
  stretches whose patch counts differ by less than one unit; a unit is one
  block or part of one, so no chunk region is read by two new ranks except
  at the halo it always shares;
- ``uneven`` then applies as in a fresh epoch: ``"drop"`` cuts every rank to
  the shortest stretch's count, ``"pad"`` repeats each rank's own units up to
  the longest (a rank left with nothing repeats the first stretch's).

Only the entries an old rank stopped inside are listed, so the memory of a
resumed plan is that of a fresh one plus at most two blocks' patches per old
rank.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np

from insitu.errors import ConfigError
from insitu.plan.elastic import Segment
from insitu.plan.patches import epoch_patches
from insitu.plan.patches_order import PatchOrder, _rng, fit_entries
from insitu.plan.patches_regions import PatchSet
from insitu.plan.patches_spec import PatchSpec
from insitu.plan.weighted_draw import WeightedDraw

__all__ = ["PatchEpochSettings", "elastic_patch_order", "segment_order"]

#: Keeps the permutation of a resumed segment's units apart from the epoch's other draws.
_RESUME_WORD = 0x5E5


@dataclass(frozen=True)
class PatchEpochSettings:
    """What every rank's patch order of one epoch depends on besides the rank and world size."""

    spec: PatchSpec
    epoch: int
    seed: int
    split: str
    shuffle: bool
    block_chunks: int
    first_block_chunks: int | None
    uneven: str
    batch_size: int
    weighted: WeightedDraw | None = None  # weighted random sampling (insitu.plan.weighted_draw)


@dataclass(frozen=True)
class _Unit:
    """Patches not handed out yet: entry ``entry`` of ``order`` whole, or the ``listed`` ones."""

    order: PatchOrder
    entry: int
    listed: np.ndarray | None

    @property
    def size(self) -> int:
        return int(self.order.counts[self.entry]) if self.listed is None else len(self.listed)


def elastic_patch_order(
    patches: PatchSet,
    settings: PatchEpochSettings,
    history: tuple[Segment, ...],
    *,
    rank: int,
    world_size: int,
) -> PatchOrder:
    """Rank ``rank`` of ``world_size``'s share of what the segments of ``history`` left of the
    epoch (see the module docstring); ``history`` must not be empty."""
    if not history:
        raise ValueError("an elastic order needs the segments the epoch already ran")
    units, template = _left_after(patches, settings, history)
    if settings.shuffle and units:
        perm = _rng(settings.seed, settings.epoch, settings.split, _RESUME_WORD, len(history)).permutation(
            len(units)
        )
        units = [units[i] for i in perm]
    stretches = _stretches(units, world_size)
    totals = [sum(u.size for u in s) for s in stretches]
    limit = None
    if world_size > 1:
        limit = min(totals) if settings.uneven == "drop" else max(totals)
    mine = stretches[rank]
    if not mine and limit:  # pad: a rank left with nothing repeats a stretch's patches, all padding
        order = _order_of(next(s for s in stretches if s), limit, template)
        return replace(order, n_valid=0)
    return _order_of(mine, limit, template)


def _order_of(units: list[_Unit], limit: int | None, template: PatchOrder) -> PatchOrder:
    """A patch order serving ``units`` (fitted to ``limit`` patches) in turn, with the block
    structure of ``template`` (an order of the epoch's first segment: every whole unit refers to
    its blocks)."""
    sizes = np.array([u.size for u in units], dtype=np.int64)
    index, counts, n_valid = fit_entries(sizes, limit) if len(units) else (np.zeros(0, np.int64), sizes, -1)
    if limit == 0:
        index, counts = index[:0], counts[:0]
    blocks, lo, hi, entry_sizes = [], [], [], []
    explicit: dict[int, np.ndarray] = {}
    for k, i in enumerate(index.tolist()):
        u = units[i]
        o = u.order
        if u.listed is None:
            blocks.append(int(o.blocks[u.entry]))
            lo.append(int(o.region_lo[u.entry]))
            hi.append(int(o.region_hi[u.entry]))
            entry_sizes.append(int(o.entry_sizes[u.entry]))
        else:
            blocks.append(-1)
            lo.append(0)
            hi.append(0)
            entry_sizes.append(len(u.listed))
            explicit[k] = u.listed
    return replace(
        template,
        blocks=np.array(blocks, dtype=np.int64),
        region_lo=np.array(lo, dtype=np.int64),
        region_hi=np.array(hi, dtype=np.int64),
        entry_sizes=np.array(entry_sizes, dtype=np.int64),
        counts=counts.astype(np.int64),
        starts=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        n_valid=n_valid,
        explicit=explicit,
        _last={},
    )


def _stretches(units: list[_Unit], world_size: int) -> list[list[_Unit]]:
    """``units`` cut into ``world_size`` contiguous stretches of about equal patch counts."""
    sizes = np.array([u.size for u in units], dtype=np.int64)
    ends = np.cumsum(sizes)
    total = int(ends[-1]) if len(ends) else 0
    targets = [total * (r + 1) / world_size for r in range(world_size)]
    # A stretch ends at the unit boundary nearest its share's end: counts differ by under one unit.
    cuts = [0]
    for t in targets[:-1]:
        k = int(np.searchsorted(ends, t, side="left"))
        if k < len(ends) and k > 0 and abs(int(ends[k - 1]) - t) <= abs(int(ends[k]) - t):
            k -= 1
        cuts.append(max(cuts[-1], min(len(units), k + 1)))
    cuts.append(len(units))
    return [units[a:b] for a, b in itertools.pairwise(cuts)]


def _left_after(
    patches: PatchSet, settings: PatchEpochSettings, history: tuple[Segment, ...]
) -> tuple[list[_Unit], PatchOrder]:
    """What the old ranks of the last segment of ``history`` had not handed out, as units, in
    old-rank order; and one of their orders (its block structure is every segment's)."""
    *before, last = history
    units: list[_Unit] = []
    template: PatchOrder | None = None
    for r, done in enumerate(last.batches_done):
        order = segment_order(patches, settings, tuple(before), r, last.world_size)
        if template is None:
            template = order
        end = order.n_valid if order.n_valid >= 0 else order.n_patches
        n_batches = -(-order.n_patches // settings.batch_size)
        handed = min(done * settings.batch_size, order.n_patches)
        if done > n_batches or done < 0:
            raise ConfigError(
                f"state has batches_done={done} for rank {r} of {last.world_size}, but that rank's order "
                f"of split {settings.split!r} in epoch {settings.epoch} is {n_batches} batch(es) long"
            )
        units.extend(_rest_of(order, min(handed, end), end))
    if template is None:
        raise ConfigError(f"the resumed segment at world size {last.world_size} lists no rank")
    return units, template


def _rest_of(order: PatchOrder, handed: int, end: int) -> list[_Unit]:
    """The units of ``order`` between positions ``handed`` and ``end``."""
    out: list[_Unit] = []
    if handed >= end:
        return out
    first = order.block_of(handed)
    last = order.block_of(end - 1)
    for i in range(first, last + 1):
        s, e = int(order.starts[i]), int(order.starts[i + 1])
        lo, hi = max(handed, s), min(end, e)
        if lo == s and hi == e and order.is_whole(i):
            out.append(_Unit(order, i, None))
        else:
            out.append(_Unit(order, i, order.block_positions(i)[lo - s : hi - s].copy()))
    return out


def segment_order(
    patches: PatchSet, settings: PatchEpochSettings, history: tuple[Segment, ...], rank: int, world_size: int
) -> PatchOrder:
    """Rank ``rank``'s order in the segment after ``history``: the fresh epoch's when ``history``
    is empty, else its share of what the segments left."""
    if history:
        if settings.weighted is not None:
            raise ConfigError(
                "a weighted or balanced patch epoch resumes at the world size it was saved at: its "
                "positions are drawn from decoded data per block, which a new split of the rest "
                "would redraw; finish the epoch at that world size, or start the next epoch"
            )
        return elastic_patch_order(patches, settings, history, rank=rank, world_size=world_size)
    return epoch_patches(
        patches,
        settings.spec,
        epoch=settings.epoch,
        seed=settings.seed,
        split=settings.split,
        shuffle=settings.shuffle,
        block_chunks=settings.block_chunks,
        first_block_chunks=settings.first_block_chunks,
        rank=rank,
        world_size=world_size,
        uneven=settings.uneven,
        weighted=settings.weighted,
    )
