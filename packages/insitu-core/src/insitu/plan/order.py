"""Sample order for one epoch of one split view.

The order depends only on (seed, epoch, split, rank, world_size): chunks are
permuted, grouped into blocks of ``block_chunks`` consecutive chunks of that
permutation, and samples are shuffled inside each block. A block is the unit
of residency: its chunks are decoded together and its samples gathered from
the pool, so memory scales with ``block_chunks``, not with the dataset.

A split holds a run of samples of each of its chunks: the chunk clipped to the
split's sample range. In the ``"all"`` view a chunk shared by two splits (a
coordinate range cut it, see :func:`insitu.plan.splits.split_by_coord`) carries one
run per split; it is still one unit of the permutation, so it is read once per
pass, by one rank, and each split's samples of it are delivered once.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

import numpy as np
import numpy.random

from insitu.errors import ConfigError
from insitu.plan.splits import SplitManifest, clip_chunks, concat_runs

#: Bumped whenever the order of a given (seed, epoch, split, rank) changes: resume states carry it.
#: 2: blocks shuffled with one 2-D ``Generator.permuted`` per run of equal-length blocks.
ORDER_VERSION = 2


class Ragged(Sequence[tuple[int, ...]]):
    """Rows of varying length over one flat array (``values[starts[i]:starts[i + 1]]``), read as
    tuples: the per-block chunk ids of an epoch, without a Python object per chunk."""

    def __init__(self, values: np.ndarray, starts: np.ndarray) -> None:
        self.values = values
        self.starts = starts

    def __len__(self) -> int:
        return len(self.starts) - 1

    def row(self, i: int) -> np.ndarray:
        """Row ``i`` as an array view."""
        return self.values[self.starts[i] : self.starts[i + 1]]

    @overload
    def __getitem__(self, i: int) -> tuple[int, ...]: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple[int, ...]]: ...
    def __getitem__(self, i: int | slice) -> tuple[int, ...] | list[tuple[int, ...]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"row {i} of {n}")
        return tuple(self.row(i % n).tolist())


@dataclass(frozen=True)
class EpochOrder:
    """Anchors (sample indices) in delivery order, cut into blocks."""

    anchors: np.ndarray  # int64, delivery order
    block_starts: np.ndarray  # int64, len = n_blocks + 1; block b is anchors[starts[b]:starts[b+1]]
    chunk_ids: np.ndarray  # manifest chunk ids of every block, block after block
    chunk_starts: np.ndarray  # int64, len = n_blocks + 1: block b holds chunk_ids[starts[b]:starts[b+1]]
    n_valid: int = -1  # anchors before this position are real; after it, padding (-1: all real)

    @property
    def n_blocks(self) -> int:
        """Number of blocks the epoch is cut into."""
        return len(self.chunk_starts) - 1

    @property
    def block_chunks(self) -> Ragged:
        """Manifest chunk ids per block (a sequence of tuples)."""
        return Ragged(self.chunk_ids, self.chunk_starts)

    def block_anchors(self, b: int) -> np.ndarray:
        """The anchors (sample indices) of block ``b``, in delivery order."""
        return self.anchors[self.block_starts[b] : self.block_starts[b + 1]]


@dataclass(frozen=True)
class EpochRuns:
    """The runs of samples an epoch order was made of: what the planner derives each block's slabs
    from without touching every sample (:func:`insitu.plan.reads.plan_epoch`).

    Run ``r`` is samples ``[first[r], first[r] + size[r])`` of one manifest chunk; blocks
    ``[0, regular_blocks)`` hold exactly runs ``starts[b]:starts[b + 1]``. Later blocks (cut
    short to a rank's sample count, or padding) are known only by their anchors. With
    ``one_per_chunk``, no two runs are of the same chunk.
    """

    first: np.ndarray
    size: np.ndarray
    starts: np.ndarray
    regular_blocks: int
    chunk_len: int
    one_per_chunk: bool
    padded: bool  # the last block repeats samples of earlier ones (uneven="pad")

    @classmethod
    def of_anchors(cls, order: EpochOrder) -> EpochRuns:
        """Runs of one sample each: for an order made elsewhere (every block is regular)."""
        ones = np.ones(len(order.anchors), dtype=np.int64)
        return cls(order.anchors, ones, order.block_starts, order.n_blocks, 1, False, order.n_valid >= 0)


def epoch_rng(seed: int, epoch: int, split: str) -> np.random.Generator:
    """The generator for one (seed, epoch, split); PCG64 is platform-independent."""
    salt = zlib.crc32(split.encode())
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(epoch), salt]))


def split_runs(
    manifest: SplitManifest, split: str, anchor_range: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The entries ``(chunk, first, size)`` of a split: each chunk's run of valid samples
    ``[first, first + size)``, clipped to the split's range and to ``anchor_range``.

    ``"all"`` (unless a split has that name) is every split's entries sorted by chunk, then
    by first sample: a chunk shared by two splits has one entry per split, side by side.
    Computed for all chunks at once, since a per-chunk loop costs seconds at a million chunks.
    """
    if split == "all" and "all" not in manifest.splits:
        parts = []
        for name in manifest.splits:  # a loop over splits, not chunks
            chunks = manifest.chunk_ids(name)
            parts.append((chunks, *_chunk_runs(manifest, chunks, anchor_range, name)))
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        chunks, first, sizes = (np.concatenate([p[k] for p in parts]) for k in range(3))
        order = np.lexsort((first, chunks))
        return chunks[order], first[order], sizes[order]
    chunks = manifest.chunk_ids(split)
    return (chunks, *_chunk_runs(manifest, chunks, anchor_range, split))


def epoch_order(
    manifest: SplitManifest,
    split: str,
    *,
    anchor_range: tuple[int, int],
    epoch: int,
    seed: int,
    shuffle: bool,
    block_chunks: int,
    rank: int = 0,
    world_size: int = 1,
    first_block_chunks: int | None = None,
    uneven: str = "drop",
) -> EpochOrder:
    """Order the samples of ``split`` for ``epoch``.

    ``anchor_range`` clips anchors so every shifted label stays inside its
    array. With ``world_size > 1`` each rank takes every ``world_size``-th
    chunk of the shared permutation (no chunk is read by two ranks) and all
    ranks truncate to the shortest rank's sample count (``uneven="drop"``) or
    repeat their own first samples up to the longest rank's count
    (``uneven="pad"``; ``n_valid`` marks where padding starts), so every rank
    yields the same number of samples.

    ``first_block_chunks`` shortens the first block (blocks then double up to
    ``block_chunks``), so the first batch waits for a batch's worth of chunks
    rather than a whole block: time to first batch stays small whatever
    ``block_chunks`` is.

    Arguments are validated where users give them (:mod:`insitu.options`);
    only what depends on the data (more ranks than chunks) is checked here.
    """
    return order_with_runs(
        manifest,
        split,
        anchor_range=anchor_range,
        epoch=epoch,
        seed=seed,
        shuffle=shuffle,
        block_chunks=block_chunks,
        rank=rank,
        world_size=world_size,
        first_block_chunks=first_block_chunks,
        uneven=uneven,
    )[0]


def order_with_runs(
    manifest: SplitManifest,
    split: str,
    *,
    anchor_range: tuple[int, int],
    epoch: int,
    seed: int,
    shuffle: bool,
    block_chunks: int,
    rank: int = 0,
    world_size: int = 1,
    first_block_chunks: int | None = None,
    uneven: str = "drop",
) -> tuple[EpochOrder, EpochRuns]:
    """:func:`epoch_order`, and the runs it was made of (for the planner).

    Whole-array numpy throughout: the cost is a permutation and a few passes
    over the split's chunks and samples, whatever the number of blocks (ten
    million one-sample chunks order in well under a second).
    """
    c = manifest.chunk_len
    span = _split_span(manifest, split, anchor_range)
    deal = _Deal(split, epoch, seed, shuffle, block_chunks, rank, world_size, first_block_chunks, uneven)
    chunks = _whole_chunks(manifest, split, span)
    if chunks is not None:
        if len(chunks) == 0:  # a split made with fraction 0: it exists and yields nothing, on every rank
            return _empty_order()
        mine = _runs_by_chunk(chunks, c, span, deal)
    else:
        chunks, first, sizes = split_runs(manifest, split, anchor_range)
        keep = sizes > 0
        if not keep.all():
            chunks, first, sizes = chunks[keep], first[keep], sizes[keep]
        if len(chunks) == 0:
            return _empty_order()
        mine = _runs_by_unit(chunks, first, sizes, deal)
    if c == 1:  # every run is one sample: the runs are the anchors
        anchors = mine.run_first.copy()
        block_starts = mine.run_starts.copy()
    else:
        anchors = concat_runs(mine.run_first, mine.run_size)
        block_starts = np.concatenate(([0], np.cumsum(mine.run_size)))[mine.run_starts]
    if shuffle:
        _shuffle_within_blocks(anchors, block_starts, mine.rng)
    order, regular = _even_out(anchors, block_starts, mine, c)
    runs = EpochRuns(
        mine.run_first, mine.run_size, mine.run_starts, regular, c, mine.single, padded=order.n_valid >= 0
    )
    return order, runs


@dataclass(frozen=True)
class _Deal:
    """How an epoch's units (chunks) are permuted, dealt out to the ranks and cut into blocks."""

    split: str
    epoch: int
    seed: int
    shuffle: bool
    block_chunks: int
    rank: int
    world_size: int
    first_block_chunks: int | None
    uneven: str

    def permute(self, n_units: int) -> tuple[np.random.Generator, np.ndarray, np.ndarray, np.ndarray]:
        """The epoch's generator, the permutation of every unit, this rank's units in order, and
        the block boundaries over them."""
        _check_world(self.world_size, n_units, self.split)
        rng = epoch_rng(self.seed, self.epoch, self.split)
        perm = rng.permutation(n_units) if self.shuffle else np.arange(n_units)
        mine = perm[self.rank :: self.world_size]
        bounds = _block_bounds(len(mine), self.block_chunks, self.first_block_chunks)
        return rng, perm, mine, bounds

    def limit(self, sizes_in_perm_order: Callable[[], np.ndarray], n_units: int) -> int | None:
        return _rank_limit(sizes_in_perm_order, n_units, self.world_size, self.uneven)


class _RankRuns(NamedTuple):
    """One rank's share of an epoch, as runs of samples, before anchors are drawn from them."""

    chunk_ids: np.ndarray  # the rank's chunks, block after block
    bounds: np.ndarray  # block boundaries in chunk_ids
    run_first: np.ndarray
    run_size: np.ndarray
    run_starts: np.ndarray  # block boundaries in the runs
    single: bool  # one run per chunk
    limit: int | None  # samples every rank delivers (None on one rank)
    rng: np.random.Generator  # the epoch's generator, after the permutation


def _whole_chunks(manifest: SplitManifest, split: str, span: tuple[int, int]) -> np.ndarray | None:
    """The split's chunk ids inside ``span`` when each is one unit of one run (the fast path);
    None when runs must be derived per entry (``"all"`` over splits, a chunk listed twice)."""
    if split == "all" and "all" not in manifest.splits:
        return None
    c = manifest.chunk_len
    chunks = manifest.chunk_ids(split)
    inside = (chunks >= span[0] // c) & (chunks < -(-span[1] // c)) if span[1] > span[0] else chunks < 0
    if not inside.all():
        chunks = chunks[inside]
    if len(chunks) > 1 and not bool((chunks[1:] != chunks[:-1]).all()):
        return None  # a chunk listed twice in a row: one unit of several entries (general path)
    return chunks


def _runs_by_chunk(ids: np.ndarray, c: int, span: tuple[int, int], deal: _Deal) -> _RankRuns:
    """One run per chunk, all clipped to one span: runs follow from the chunk ids, so nothing
    per chunk is gathered in permuted order but the ids themselves."""
    n_units = len(ids)
    rng, perm, mine, bounds = deal.permute(n_units)
    limit = deal.limit(lambda: clip_chunks(ids, c, span)[1][perm], n_units)
    chunk_ids = ids[mine]
    run_first, run_size = clip_chunks(chunk_ids, c, span)
    return _RankRuns(chunk_ids, bounds, run_first, run_size, bounds, True, limit, rng)


def _runs_by_unit(chunks: np.ndarray, first: np.ndarray, sizes: np.ndarray, deal: _Deal) -> _RankRuns:
    """Runs from the split's entries ``(chunk, first, size)``, by chunk."""
    # The unit of the permutation is a chunk: its entries are adjacent (several only in "all",
    # where a chunk cut by a coordinate range has one run per split).
    single = bool((chunks[1:] != chunks[:-1]).all())
    unit_start = np.flatnonzero(np.concatenate(([True], chunks[1:] != chunks[:-1])))
    n_units = len(unit_start)
    unit_entries = np.diff(np.append(unit_start, len(chunks)))
    rng, perm, mine, bounds = deal.permute(n_units)
    limit = deal.limit(lambda: np.add.reduceat(sizes, unit_start)[perm], n_units)
    per_unit = unit_entries[mine]
    entries = concat_runs(unit_start[mine], per_unit)
    run_starts = np.concatenate(([0], np.cumsum(per_unit)))[bounds]
    chunk_ids = chunks[unit_start][mine]
    return _RankRuns(chunk_ids, bounds, first[entries], sizes[entries], run_starts, single, limit, rng)


def _even_out(
    anchors: np.ndarray, block_starts: np.ndarray, mine: _RankRuns, c: int
) -> tuple[EpochOrder, int]:
    """The rank's order, cut (``uneven="drop"``) or padded (``"pad"``) to the samples every rank
    delivers; and the number of leading blocks that are exactly their runs."""
    return fit_to_limit(anchors, block_starts, mine.chunk_ids, mine.bounds, mine.limit, c)


class EpochUnits:
    """The units of one epoch's permutation (a unit is a chunk and its runs of samples), permuted.

    Every rank's order is cut from the same permutation, so it is made once for
    all the ranks an elastic resume needs (:mod:`insitu.plan.elastic`); each
    rank's shuffle inside its blocks starts from the generator's state after
    the permutation, as it does in that rank's own process.
    """

    def __init__(
        self,
        manifest: SplitManifest,
        split: str,
        *,
        anchor_range: tuple[int, int],
        epoch: int,
        seed: int,
        shuffle: bool,
    ) -> None:
        c = self.chunk_len = manifest.chunk_len
        self.shuffle = shuffle
        span = self._span = _split_span(manifest, split, anchor_range)
        chunks = None
        if not (split == "all" and "all" not in manifest.splits):
            chunks = manifest.chunk_ids(split)
            inside = (
                (chunks >= span[0] // c) & (chunks < -(-span[1] // c)) if span[1] > span[0] else chunks < 0
            )
            if not inside.all():
                chunks = chunks[inside]
            if len(chunks) > 1 and not bool((chunks[1:] != chunks[:-1]).all()):
                chunks = None  # a chunk listed twice in a row: one unit of several entries (general path)
        # One run per chunk, all clipped to one span (``simple``): runs follow from the chunk ids, so
        # nothing per chunk is gathered in permuted order but the ids themselves.
        self.simple = chunks is not None
        if chunks is not None:
            self.ids: np.ndarray = chunks
            self.n_units = len(chunks)
            self.single = True
        else:
            chunks, first, sizes = split_runs(manifest, split, anchor_range)
            keep = sizes > 0
            if not keep.all():
                chunks, first, sizes = chunks[keep], first[keep], sizes[keep]
            self.ids, self._first, self._sizes = chunks, first, sizes
            # The unit of the permutation is a chunk: its entries are adjacent (several only in
            # "all", where a chunk cut by a coordinate range has one run per split).
            self.single = bool((chunks[1:] != chunks[:-1]).all())
            self._unit_start = np.flatnonzero(np.concatenate(([True], chunks[1:] != chunks[:-1])))
            self.n_units = len(self._unit_start) if len(chunks) else 0
            self._unit_entries = np.diff(np.append(self._unit_start, len(chunks)))
        rng = epoch_rng(seed, epoch, split)
        self.perm = rng.permutation(self.n_units) if shuffle else np.arange(self.n_units)
        self._rng_state = rng.bit_generator.state

    def rng(self) -> np.random.Generator:
        """A generator in the state the permutation left it: where every rank's block shuffle starts."""
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = self._rng_state
        return rng

    def sizes_in_order(self) -> np.ndarray:
        """Valid samples of every unit, in permutation order."""
        if self.simple:
            return clip_chunks(self.ids, self.chunk_len, self._span)[1][self.perm]
        return np.add.reduceat(self._sizes, self._unit_start)[self.perm]

    def rank_limit(self, world_size: int, uneven: str) -> int | None:
        """Samples every rank delivers at ``world_size``: the shortest rank's count (``uneven="drop"``) or
        the longest's (``"pad"``); ``None`` on one rank."""
        return _rank_limit(self.sizes_in_order, self.n_units, world_size, uneven)

    def chunk_of(self, positions: np.ndarray) -> np.ndarray:
        """Manifest chunk id of the units at permutation ``positions``."""
        units = self.perm[positions]
        return self.ids[units] if self.simple else self.ids[self._unit_start[units]]

    def runs_of(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The runs ``(first, size)`` of the units at permutation ``positions``, unit after unit."""
        units = self.perm[positions]
        if self.simple:
            return clip_chunks(self.ids[units], self.chunk_len, self._span)
        entries = concat_runs(self._unit_start[units], self._unit_entries[units])
        return self._first[entries], self._sizes[entries]

    def samples_in_order(self) -> np.ndarray:
        """Every sample of the epoch, unit after unit in permutation order (no shuffle inside blocks)."""
        if self.simple:
            first, size = clip_chunks(self.ids[self.perm], self.chunk_len, self._span)
        else:
            entries = concat_runs(self._unit_start[self.perm], self._unit_entries[self.perm])
            first, size = self._first[entries], self._sizes[entries]
        return concat_runs(first, size)

    def rank_order(
        self, rank: int, world_size: int, limit: int | None, block_chunks: int, first_block_chunks: int | None
    ) -> tuple[EpochOrder, EpochRuns]:
        """The order of ``rank``: every ``world_size``-th unit of the permutation, in blocks, fitted
        to ``limit`` samples (:meth:`rank_limit`)."""
        c = self.chunk_len
        mine = self.perm[rank::world_size]
        bounds = _block_bounds(len(mine), block_chunks, first_block_chunks)
        if self.simple:
            chunk_ids = self.ids[mine]
            run_first, run_size = clip_chunks(chunk_ids, c, self._span)
            run_starts = bounds
        else:
            per_unit = self._unit_entries[mine]
            entries = concat_runs(self._unit_start[mine], per_unit)
            run_starts = np.concatenate(([0], np.cumsum(per_unit)))[bounds]
            run_first, run_size = self._first[entries], self._sizes[entries]
            chunk_ids = self.ids[self._unit_start][mine]
        if c == 1:  # every run is one sample: the runs are the anchors
            anchors = run_first.copy()
            block_starts = run_starts.copy()
        else:
            anchors = concat_runs(run_first, run_size)
            block_starts = np.concatenate(([0], np.cumsum(run_size)))[run_starts]
        if self.shuffle:
            _shuffle_within_blocks(anchors, block_starts, self.rng())
        order, regular = fit_to_limit(anchors, block_starts, chunk_ids, bounds, limit, c)
        return order, EpochRuns(
            run_first, run_size, run_starts, regular, c, self.single, padded=order.n_valid >= 0
        )


def fit_to_limit(
    anchors: np.ndarray,
    block_starts: np.ndarray,
    chunk_ids: np.ndarray,
    chunk_starts: np.ndarray,
    limit: int | None,
    chunk_len: int,
    pad_from: np.ndarray | None = None,
) -> tuple[EpochOrder, int]:
    """One rank's order cut to ``limit`` samples (``uneven="drop"``: the shortest rank's count) or
    padded up to it (``"pad"``: repeating the rank's own samples, or ``pad_from`` when it has
    none), and how many blocks stay whole (regular)."""
    regular = len(chunk_starts) - 1
    n_valid = -1
    total = len(anchors)
    if limit is not None and total > limit:  # uneven="drop": cut at the shortest rank's count
        n_blocks = int(np.searchsorted(block_starts, limit, side="left"))
        regular = n_blocks if block_starts[n_blocks] == limit else n_blocks - 1
        block_starts = block_starts[: n_blocks + 1].copy()
        block_starts[n_blocks] = limit
        anchors = anchors[:limit]
        chunk_starts = chunk_starts[: n_blocks + 1]
        chunk_ids = chunk_ids[: chunk_starts[-1]]
    elif limit is not None and total < limit:  # uneven="pad": repeat this rank's own samples
        source = anchors if total or pad_from is None else pad_from
        pad = source[np.arange(limit - total) % len(source)]
        pad_chunks = sorted_unique(pad // chunk_len)
        n_valid = total
        anchors = np.concatenate([anchors, pad])
        block_starts = np.append(block_starts, limit)
        chunk_ids = np.concatenate([chunk_ids, pad_chunks])
        chunk_starts = np.append(chunk_starts, len(chunk_ids))
    return EpochOrder(anchors, block_starts, chunk_ids, chunk_starts, n_valid), regular


def _empty_order() -> tuple[EpochOrder, EpochRuns]:
    empty = np.zeros(0, dtype=np.int64)
    zero = np.zeros(1, dtype=np.int64)
    return EpochOrder(empty, zero, empty, zero), EpochRuns(empty, empty, zero, 0, 1, True, False)


def _check_world(world_size: int, n_units: int, split: str) -> None:
    if world_size > n_units:
        raise ConfigError(
            f"world_size={world_size} exceeds the {n_units} chunk(s) with valid samples in split {split!r}"
        )


def _rank_limit(
    sizes_in_perm_order: Callable[[], np.ndarray], n_units: int, world_size: int, uneven: str
) -> int | None:
    """Samples every rank delivers: the shortest rank's count (``drop``) or the longest's (``pad``);
    None on one rank. Rank r holds positions r, r + world_size, ... of the permutation."""
    if world_size == 1:
        return None
    per_rank = np.bincount(
        np.arange(n_units) % world_size, weights=sizes_in_perm_order(), minlength=world_size
    ).astype(np.int64)
    return int(per_rank.min()) if uneven == "drop" else int(per_rank.max())


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-D integer array: ``np.unique`` as a sort and a compare.

    numpy 2.4's ``unique`` took 10 s for ten million values on the reference machine, and imports
    ``numpy.ma`` on first use."""
    s = np.sort(values)
    if len(s) < 2:
        return s
    return s[np.concatenate(([True], s[1:] != s[:-1]))]


def _shuffle_within_blocks(anchors: np.ndarray, block_starts: np.ndarray, rng: np.random.Generator) -> None:
    """Shuffle each block's anchors in place, independently: consecutive blocks of one length are
    one 2-D ``permuted`` call (blocks are equal but for the ramp at the start and the edges)."""
    lengths = np.diff(block_starts)
    if len(lengths) == 0:
        return
    edges = np.flatnonzero(lengths[1:] != lengths[:-1]) + 1
    for g0, g1 in zip(
        np.concatenate(([0], edges)).tolist(), np.append(edges, len(lengths)).tolist(), strict=False
    ):
        length = int(lengths[g0])
        if length < 2:
            continue
        rows = anchors[block_starts[g0] : block_starts[g1]].reshape(g1 - g0, length)
        rng.permuted(rows, axis=1, out=rows)


def _split_span(manifest: SplitManifest, split: str | None, anchor_range: tuple[int, int]) -> tuple[int, int]:
    """The samples ``split`` may deliver: its range (per-split ranges of coordinate splits, else the
    global ``sample_range``) within ``anchor_range``. For ``"all"`` over several splits, the
    global range."""
    lo, hi = manifest.sample_range_of(None if split == "all" and "all" not in manifest.splits else split)
    return max(lo, anchor_range[0]), min(hi, anchor_range[1])


def _chunk_runs(
    manifest: SplitManifest, chunks: np.ndarray, anchor_range: tuple[int, int], split: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """First valid sample and number of valid samples of each chunk of ``split``
    (``chunk_samples(chunk, split)`` clipped to ``anchor_range``), for all chunks at once.

    The chunk is clipped to the split's own sample range when the manifest has per-split
    ranges (coordinate splits), else to the global ``sample_range``.
    """
    return clip_chunks(chunks, manifest.chunk_len, _split_span(manifest, split, anchor_range))


def _block_bounds(n: int, block_chunks: int, first: int | None) -> np.ndarray:
    """Boundaries ``[0, ..., n]`` of the blocks over ``n`` chunks, ramping up from ``first``
    (doubling each block) to ``block_chunks``."""
    size = block_chunks if first is None else max(1, min(first, block_chunks))
    ramp = [0]
    while size < block_chunks and ramp[-1] < n:
        ramp.append(min(n, ramp[-1] + size))
        size = min(block_chunks, size * 2)
    rest = np.arange(ramp[-1] + block_chunks, n, block_chunks, dtype=np.int64)
    out = np.concatenate([np.asarray(ramp, dtype=np.int64), rest])
    if out[-1] < n:
        out = np.append(out, n)
    return out


# For the elastic resume (:mod:`insitu.plan.elastic`), which deals the rest of an epoch its own way.
block_bounds = _block_bounds
shuffle_within_blocks = _shuffle_within_blocks
