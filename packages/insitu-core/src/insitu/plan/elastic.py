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

Memory: nothing of the size of the epoch's samples is made. What an epoch has
left is kept per unit (one byte each: whole, none, or in part with the samples
listed); an old rank stops inside one block and may be cut inside one more, so
only those blocks' samples are listed. The old ranks' orders are rebuilt one at
a time and freed, and only the new rank's own share is materialised.

A segment's samples are those its orders hold before padding: the first
segment's are the fresh epoch's (``drop`` has already left out the W1
remainder), and a later one's are what the previous segments left.
"""

from __future__ import annotations

import logging
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
from insitu.plan.splits import SplitManifest, concat_runs

log = logging.getLogger(__name__)

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
    rest = _Rest(units, whole=True)
    for k, segment in enumerate(history):
        left = _Rest(units, whole=False)
        if k == 0:
            if segment.world_size > max(units.n_units, 1):
                raise ConfigError(
                    f"the state's world_size={segment.world_size} exceeds the {units.n_units} chunk(s) "
                    f"of split {split!r}: it was not saved on this data"
                )
            limit = units.rank_limit(segment.world_size, s.uneven) if units.n_units else None
            for r in range(segment.world_size if units.n_units else 0):
                # One old rank at a time: each order is freed before the next one is made.
                order = units.rank_order(r, segment.world_size, limit, s.block_chunks, s.first_block_chunks)[
                    0
                ]
                positions = np.arange(r, units.n_units, segment.world_size, dtype=np.int64)
                left.keep_undelivered(rest, order, positions, _handed_out(segment, r, order, s, split))
                del order, positions
        else:
            shares = _Shares(rest, segment.world_size)
            for r in range(segment.world_size):
                order, positions = _resumed_order(rest, shares, s, (split, k), r)
                left.keep_undelivered(rest, order, positions, _handed_out(segment, r, order, s, split))
                del order, positions
            del shares
        left.seal()
        rest = left
    shares = _Shares(rest, world_size)
    order = _resumed_order(rest, shares, s, (split, len(history)), rank)[0]
    _report_dropped(shares, order, s, split, world_size)
    return order


def _handed_out(segment: Segment, rank: int, order: EpochOrder, s: ElasticSettings, split: str) -> int:
    """Samples old ``rank`` handed out in ``segment``, its batch count checked against its pass."""
    done = segment.batches_done[rank]
    n = len(order.anchors)
    n_batches = n // s.batch_size if s.drop_last else -(-n // s.batch_size)
    if done > n_batches:
        raise ConfigError(
            f"batches_done={done} of rank {rank} of {segment.world_size} exceeds the {n_batches} "
            f"batch(es) of that pass (epoch {s.epoch}, split {split!r})"
        )
    return done * s.batch_size


def _report_dropped(
    shares: _Shares, order: EpochOrder, s: ElasticSettings, split: str, world_size: int
) -> None:
    """Say how much of the rest ``uneven="drop"`` leaves out: when fewer than about ``world_size``
    chunks remain, every rank yields nothing more, which must not pass in silence."""
    if s.uneven != "drop" or world_size == 1:
        return
    kept = len(order.anchors) * world_size
    dropped = shares.total - kept
    if dropped <= 0:
        return
    per_rank = len(order.anchors)
    batches = per_rank // s.batch_size if s.drop_last else -(-per_rank // s.batch_size)
    level = logging.WARNING if batches == 0 else logging.INFO
    log.log(
        level,
        "elastic resume of epoch %d of split %r at world_size=%d: %d sample(s) were left; "
        'uneven="drop" leaves out %d of them so every rank delivers %d sample(s) (%d batch(es)); '
        'uneven="pad" delivers them all',
        s.epoch,
        split,
        world_size,
        shares.total,
        dropped,
        per_rank,
        batches,
    )


class _Rest:
    """What an epoch has left, unit by unit in permutation order, with no array the size of the
    epoch's samples: a unit is left whole (all its valid samples), not at all, or in part (the
    samples listed, sorted by unit then sample: the order the unit's runs hold them in)."""

    NONE, WHOLE, PART = 0, 1, 2

    def __init__(self, units: EpochUnits, *, whole: bool) -> None:
        self.units = units
        # One byte per unit: 10 MB at 10**7 chunks, where one int64 per sample is 80 MB or more.
        self.state = np.full(units.n_units, self.WHOLE if whole else self.NONE, dtype=np.int8)
        self.part_unit = np.zeros(0, dtype=np.int64)
        self.part_sample = np.zeros(0, dtype=np.int64)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []

    def counts(self) -> np.ndarray:
        """Samples left of every unit, in permutation order."""
        counts = self.units.sizes_in_order()
        counts[self.state != self.WHOLE] = 0
        if len(self.part_unit):  # sorted: each unit's listed samples are adjacent
            new = np.flatnonzero(np.concatenate(([True], self.part_unit[1:] != self.part_unit[:-1])))
            counts[self.part_unit[new]] = np.diff(np.append(new, len(self.part_unit)))
        return counts

    def listed(self, positions: np.ndarray) -> np.ndarray:
        """Indices into the listed samples of the units at ``positions`` (each in part), unit after unit."""
        lo = np.searchsorted(self.part_unit, positions, side="left")
        hi = np.searchsorted(self.part_unit, positions, side="right")
        return concat_runs(lo, hi - lo)

    def samples(self, positions: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The samples left of the units at ``positions`` (ascending), unit after unit; ``counts``
        are theirs (from :meth:`counts`)."""
        out = np.empty(int(counts.sum()), dtype=np.int64)
        offsets = np.cumsum(counts) - counts
        state = self.state[positions]
        whole = state == self.WHOLE
        if whole.any():
            first, size = self.units.runs_of(positions[whole])
            out[concat_runs(offsets[whole], counts[whole])] = concat_runs(first, size)
        part = state == self.PART
        if part.any():
            out[concat_runs(offsets[part], counts[part])] = self.part_sample[self.listed(positions[part])]
        return out

    def keep_undelivered(
        self, source: _Rest, order: EpochOrder, positions: np.ndarray, handed_out: int
    ) -> None:
        """Record what ``order`` left of ``source`` after ``handed_out`` samples. ``order`` is an old
        rank's, over the units at ``positions`` of ``source`` (in its block order): the blocks after
        the one it stopped in are left as they were in ``source``; that block, and the last one
        (which ``uneven="drop"`` may have cut short), are listed sample by sample. Padding is no
        sample of the epoch."""
        real = len(order.anchors) if order.n_valid < 0 else order.n_valid
        if handed_out >= real:
            return
        starts, unit_starts = order.block_starts, order.chunk_starts
        stop_block = int(np.searchsorted(starts, handed_out, side="right")) - 1
        last_block = int(np.searchsorted(starts, real, side="left")) - 1  # holds the last real sample
        if last_block > stop_block + 1:  # the blocks in between are left as they were
            at = positions[int(unit_starts[stop_block + 1]) : int(unit_starts[last_block])]
            self.state[at] = source.state[at]
            was_part = at[source.state[at] == self.PART]
            if len(was_part):
                take = source.listed(was_part)
                self._pending.append((source.part_unit[take], source.part_sample[take]))
        for b in sorted({stop_block, last_block}):
            lo, hi = max(handed_out, int(starts[b])), min(real, int(starts[b + 1]))
            block_units = positions[int(unit_starts[b]) : int(unit_starts[b + 1])]
            left = order.anchors[lo:hi]
            if not len(left):
                continue
            # A block's units are distinct chunks: a sample's unit is that of its chunk.
            chunks = self.units.chunk_of(block_units)
            by_chunk = np.argsort(chunks, kind="stable")
            unit = block_units[by_chunk[np.searchsorted(chunks[by_chunk], left // self.units.chunk_len)]]
            self.state[unit] = self.PART
            self._pending.append((unit, left))

    def seal(self) -> None:
        """Sort the listed samples by unit, then sample (once every old rank is recorded)."""
        if not self._pending:
            return
        unit = np.concatenate([self.part_unit, *(u for u, _ in self._pending)])
        sample = np.concatenate([self.part_sample, *(x for _, x in self._pending)])
        self._pending = []
        by_unit = np.lexsort((sample, unit))
        self.part_unit, self.part_sample = unit[by_unit], sample[by_unit]


class _Shares:
    """How the rest is cut over ``world_size`` new ranks: rank r takes the units (with samples left)
    starting in ``[r * total / W, (r + 1) * total / W)`` of the rest, taken unit after unit in
    permutation order: whole chunks, and counts within one chunk of ``total / W``."""

    def __init__(self, rest: _Rest, world_size: int) -> None:
        counts = rest.counts()
        self.positions = np.flatnonzero(counts)  # units with samples left, in permutation order
        counts = counts[self.positions]  # the whole-epoch array is freed here
        # Offset of each unit in the rest, then the total: the sum written in place, no copy.
        self.unit_starts = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=self.unit_starts[1:])
        del counts
        self.total = int(self.unit_starts[-1])
        # The first unit at or after r * total / W, for every r (ceil division: no W * offsets temporary).
        bounds = -(-np.arange(world_size + 1, dtype=np.int64) * self.total // world_size)
        self.cut = np.searchsorted(self.unit_starts[:-1], bounds, side="left")
        self.cut[-1] = len(self.positions)
        self.per_rank = np.diff(self.unit_starts[self.cut])

    def prefix(self, rest: _Rest, n: int) -> np.ndarray:
        """The first ``min(n, total)`` samples of the rest (or a little more: whole units)."""
        j = int(np.searchsorted(self.unit_starts, min(n, self.total), side="left"))
        j = max(1, min(j, len(self.positions)))
        return rest.samples(self.positions[:j], np.diff(self.unit_starts[: j + 1]))


def _resumed_order(
    rest: _Rest, shares: _Shares, s: ElasticSettings, segment: tuple[str, int], rank: int
) -> tuple[EpochOrder, np.ndarray]:
    """Rank ``rank``'s share of ``rest`` in ``segment`` (split, index) of the epoch, and the
    permutation positions of its units (in its block order)."""
    world_size = len(shares.cut) - 1
    u0, u1 = int(shares.cut[rank]), int(shares.cut[rank + 1])
    positions = shares.positions[u0:u1]
    starts = shares.unit_starts[u0 : u1 + 1] - shares.unit_starts[u0]
    anchors = rest.samples(positions, np.diff(starts))
    chunk_ids = rest.units.chunk_of(positions)
    bounds = block_bounds(len(chunk_ids), s.block_chunks, s.first_block_chunks)
    block_starts = starts[bounds]
    if s.shuffle:
        rng = epoch_rng(s.seed, s.epoch, f"{segment[0]}#{segment[1]}:{_RESUME_SALT}")
        shuffle_within_blocks(anchors, block_starts, rng)
    limit = None
    if world_size > 1:
        limit = int(shares.per_rank.min()) if s.uneven == "drop" else int(shares.per_rank.max())
    pad_from = None
    if limit is not None and not len(anchors) and limit > 0:  # a rank left with nothing repeats the rest
        pad_from = shares.prefix(rest, limit)
    c = rest.units.chunk_len
    order = fit_to_limit(anchors, block_starts, chunk_ids, bounds, limit, c, pad_from=pad_from)[0]
    return order, positions
