"""Sample order for one epoch of one split view.

The order depends only on (seed, epoch, split, rank, world_size): chunks are
permuted, grouped into blocks of ``block_chunks`` consecutive chunks of that
permutation, and samples are shuffled inside each block. A block is the unit
of residency: its chunks are decoded together and its samples gathered from
the pool, so memory scales with ``block_chunks``, not with the dataset.

A split holds a run of samples of each of its chunks: the chunk clipped to the
split's sample range. In the ``"all"`` view a chunk shared by two splits (a
coordinate range cut it, see :func:`insitu.splits.split_by_coord`) carries one
run per split; it is still one unit of the permutation, so it is read once per
pass, by one rank, and each split's samples of it are delivered once.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import numpy.random

from insitu.errors import ConfigError
from insitu.splits import SplitManifest, clip_chunks, concat_runs


@dataclass(frozen=True)
class EpochOrder:
    """Anchors (sample indices) in delivery order, cut into blocks."""

    anchors: np.ndarray  # int64, delivery order
    block_starts: np.ndarray  # int64, len = n_blocks + 1; block b is anchors[starts[b]:starts[b+1]]
    block_chunks: tuple[tuple[int, ...], ...]  # manifest chunk ids per block
    n_valid: int = -1  # anchors before this position are real; after it, padding (-1: all real)

    @property
    def n_blocks(self) -> int:
        return len(self.block_chunks)

    def block_anchors(self, b: int) -> np.ndarray:
        return self.anchors[self.block_starts[b] : self.block_starts[b + 1]]


def epoch_rng(seed: int, epoch: int, split: str) -> np.random.Generator:
    """The generator for one (seed, epoch, split); PCG64 is platform-independent."""
    salt = zlib.crc32(split.encode())
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(epoch), salt]))


def split_chunks(manifest: SplitManifest, split: str) -> tuple[int, ...]:
    """Chunk ids of a split; ``"all"`` is every split's chunks, ascending, each once."""
    if split == "all" and "all" not in manifest.splits:
        return tuple(sorted({c for chunks in manifest.splits.values() for c in chunks}))
    return manifest.chunks(split)


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
            chunks = np.asarray(manifest.splits[name], dtype=np.int64)
            parts.append((chunks, *_chunk_runs(manifest, chunks, anchor_range, name)))
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        chunks, first, sizes = (np.concatenate([p[k] for p in parts]) for k in range(3))
        order = np.lexsort((first, chunks))
        return chunks[order], first[order], sizes[order]
    chunks = np.asarray(manifest.chunks(split), dtype=np.int64)
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
    chunks, first, sizes = split_runs(manifest, split, anchor_range)
    if len(chunks) == 0:  # a split made with fraction 0: it exists and yields nothing, on every rank
        return EpochOrder(np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64), ())
    keep = sizes > 0
    chunks, first, sizes = chunks[keep], first[keep], sizes[keep]
    # The unit of the permutation is a chunk: its entries are adjacent (several only in "all",
    # where a chunk cut by a coordinate range has one run per split).
    unit_start = (
        np.flatnonzero(np.concatenate(([True], chunks[1:] != chunks[:-1]))) if len(chunks) else chunks
    )
    n_units = len(unit_start)
    if world_size > n_units:
        raise ConfigError(
            f"world_size={world_size} exceeds the {n_units} chunk(s) with valid samples in split {split!r}"
        )
    single = n_units == len(chunks)  # one entry per chunk: every split but "all" over shared chunks
    unit_entries = np.diff(np.append(unit_start, len(chunks)))
    unit_chunk = chunks if single else chunks[unit_start]
    unit_size = sizes if single else np.add.reduceat(sizes, unit_start)

    rng = epoch_rng(seed, epoch, split)
    perm = rng.permutation(n_units) if shuffle else np.arange(n_units)
    mine = perm[rank::world_size]
    limit = None
    if world_size > 1:
        per_rank = [int(unit_size[perm[r::world_size]].sum()) for r in range(world_size)]
        limit = min(per_rank) if uneven == "drop" else max(per_rank)

    anchors: list[np.ndarray] = []
    starts = [0]
    groups: list[tuple[int, ...]] = []
    total = 0
    for b0, b1 in _block_bounds(len(mine), block_chunks, first_block_chunks):
        idx = mine[b0:b1]
        entries = idx if single else concat_runs(unit_start[idx], unit_entries[idx])
        block = concat_runs(first[entries], sizes[entries])
        if shuffle:
            block = block[rng.permutation(len(block))]
        if limit is not None and total + len(block) > limit:
            block = block[: limit - total]
        if len(block) == 0:
            break
        anchors.append(block)
        total += len(block)
        starts.append(total)
        groups.append(tuple(unit_chunk[idx].tolist()))
    n_valid = -1
    if limit is not None and total < limit:  # uneven="pad": repeat this rank's own samples
        own = np.concatenate(anchors)
        pad = own[np.arange(limit - total) % len(own)]
        n_valid = total
        anchors.append(pad)
        starts.append(limit)
        groups.append(tuple(sorted({int(c) for c in pad // manifest.chunk_len})))
    flat = np.concatenate(anchors) if anchors else np.zeros(0, dtype=np.int64)
    return EpochOrder(flat, np.asarray(starts, dtype=np.int64), tuple(groups), n_valid)


def _chunk_runs(
    manifest: SplitManifest, chunks: np.ndarray, anchor_range: tuple[int, int], split: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """First valid sample and number of valid samples of each chunk of ``split``
    (``chunk_samples(chunk, split)`` clipped to ``anchor_range``), for all chunks at once.

    The chunk is clipped to the split's own sample range when the manifest has per-split
    ranges (coordinate splits), else to the global ``sample_range``.
    """
    lo, hi = manifest.sample_range_of(split)
    return clip_chunks(chunks, manifest.chunk_len, (max(lo, anchor_range[0]), min(hi, anchor_range[1])))


def _block_bounds(n: int, block_chunks: int, first: int | None) -> list[tuple[int, int]]:
    """``[start, stop)`` of each block over ``n`` chunks, ramping up from ``first``."""
    size = block_chunks if first is None else max(1, min(first, block_chunks))
    out = []
    start = 0
    while start < n:
        out.append((start, min(n, start + size)))
        start += size
        size = min(block_chunks, size * 2)
    return out
