"""The rest of an epoch after a change of world size (elastic resume): the plan floor.

An epoch's order is a pure function of (seed, epoch, split) and its sharding
of (world size, rank), so the samples the old ranks handed out follow from
their batch counts alone. An epoch interrupted at world size W1 and resumed
at W2 is a list of segments (:class:`Segment`), one per stretch at one world size.
What the segments left undelivered is re-sharded for the next one:

- the remaining samples are taken unit (chunk) after unit in the epoch's
  permutation order, and cut into W2 contiguous stretches of whole chunks
  whose sample counts differ by less than one chunk (no chunk is read by two
  ranks, and the ranks' counts are as equal as chunk alignment allows);
- each rank cuts its stretch into blocks as a fresh epoch does and shuffles
  inside them with a generator of (seed, epoch, split, segment);
- ``uneven`` then applies as in a fresh epoch: ``"drop"`` cuts every rank to
  the shortest rank's count (fewer than W2 chunks' worth of samples are
  dropped), ``"pad"`` repeats each rank's own samples up to the longest
  (a rank left without samples repeats samples of the others).

A segment's samples are those its orders hold before padding: the first
segment's are the fresh epoch's (``drop`` has already left out the W1
remainder), and a later one's are what the previous segments left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from insitu.errors import ConfigError
from insitu.plan.order import (
    EpochOrder,
    EpochUnits,
    block_bounds,
    epoch_rng,
    fit_to_limit,
    shuffle_within_blocks,
)
from insitu.plan.splits import SplitManifest

#: Mixed into the seed of a resumed segment's block shuffle, so it differs from the epoch's own.
_RESUME_SALT = 0x5E5
__all__ = ["ElasticSettings", "Segment", "elastic_order"]


@dataclass(frozen=True)
class Segment:
    """One stretch of an epoch at one world size: the batches each rank handed out in it."""

    world_size: int
    batches_done: tuple[int, ...]  # one per rank, rank 0 first

    def to_json(self) -> dict[str, object]:
        """The segment as a JSON-able dict (how resume states store it)."""
        return {"world_size": self.world_size, "batches_done": list(self.batches_done)}


@dataclass(frozen=True)
class ElasticSettings:
    """What the orders of an epoch depend on besides the ranks (as given to a fresh epoch)."""

    anchor_range: tuple[int, int]
    epoch: int
    seed: int
    shuffle: bool
    block_chunks: int
    first_block_chunks: int | None
    uneven: str
    batch_size: int
    drop_last: bool


def elastic_order(
    manifest: SplitManifest,
    split: str,
    settings: ElasticSettings,
    history: Sequence[Segment],
    *,
    rank: int,
    world_size: int,
) -> EpochOrder:
    """The order ``rank`` of ``world_size`` delivers for the rest of an epoch whose earlier
    segments are ``history`` (oldest first; the first is the epoch as it started)."""
    s = settings
    units = EpochUnits(
        manifest, split, anchor_range=s.anchor_range, epoch=s.epoch, seed=s.seed, shuffle=s.shuffle
    )
    c = units.chunk_len
    stream = units.samples_in_order()  # every sample, unit after unit in permutation order
    remaining = np.zeros(int(stream.max()) + 1 if len(stream) else 0, dtype=bool)
    for k, segment in enumerate(history):
        if k == 0:
            if segment.world_size > max(units.n_units, 1):
                raise ConfigError(
                    f"the state's world_size={segment.world_size} exceeds the {units.n_units} chunk(s) "
                    f"of split {split!r}: it was not saved on this data"
                )
            limit = units.rank_limit(segment.world_size, s.uneven) if units.n_units else None
            orders = [
                units.rank_order(r, segment.world_size, limit, s.block_chunks, s.first_block_chunks)[0]
                for r in range(segment.world_size if units.n_units else 0)
            ]
        else:
            rest = stream[remaining[stream]]
            orders = [
                _resumed_order(rest, c, s, (split, k), r, segment.world_size)
                for r in range(segment.world_size)
            ]
        remaining[:] = False
        for r, (order, done) in enumerate(zip(orders, segment.batches_done, strict=False)):
            real = order.anchors if order.n_valid < 0 else order.anchors[: order.n_valid]
            n = len(order.anchors)
            n_batches = n // s.batch_size if s.drop_last else -(-n // s.batch_size)
            if done > n_batches:
                raise ConfigError(
                    f"batches_done={done} of rank {r} of {segment.world_size} exceeds the {n_batches} "
                    f"batch(es) of that pass (epoch {s.epoch}, split {split!r})"
                )
            remaining[real[done * s.batch_size :]] = True
    rest = stream[remaining[stream]]
    return _resumed_order(rest, c, s, (split, len(history)), rank, world_size)


def _resumed_order(
    rest: np.ndarray, c: int, s: ElasticSettings, segment: tuple[str, int], rank: int, world_size: int
) -> EpochOrder:
    """Rank ``rank``'s share of ``rest`` (samples grouped by chunk, in permutation order) in
    ``segment`` (split, index) of the epoch."""
    unit = rest // c
    unit_starts = np.flatnonzero(np.concatenate(([True], unit[1:] != unit[:-1]))) if len(rest) else unit
    total = len(rest)
    # Rank r takes the chunks starting in [r * total / W, (r + 1) * total / W): whole chunks, and
    # counts within one chunk of total / W.
    cut_at = np.searchsorted(unit_starts * world_size, np.arange(world_size + 1) * total, side="left")
    cuts = np.append(unit_starts, total)[cut_at]
    counts = np.diff(cuts)
    lo, hi = int(cuts[rank]), int(cuts[rank + 1])
    anchors = rest[lo:hi].copy()
    first_unit, last_unit = np.searchsorted(unit_starts, [lo, hi])
    starts = np.append(unit_starts[first_unit:last_unit] - lo, hi - lo)
    chunk_ids = unit[unit_starts[first_unit:last_unit]]
    bounds = block_bounds(len(chunk_ids), s.block_chunks, s.first_block_chunks)
    block_starts = starts[bounds]
    if s.shuffle:
        rng = epoch_rng(s.seed, s.epoch, f"{segment[0]}#{segment[1]}:{_RESUME_SALT}")
        shuffle_within_blocks(anchors, block_starts, rng)
    limit = None
    if world_size > 1:
        limit = int(counts.min()) if s.uneven == "drop" else int(counts.max())
    return fit_to_limit(anchors, block_starts, chunk_ids, bounds, limit, c, pad_from=rest)[0]
