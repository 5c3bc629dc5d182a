"""Sample order for one epoch of one split view.

The order depends only on (seed, epoch, split, rank, world_size): chunks are
permuted, grouped into blocks of ``block_chunks`` consecutive chunks of that
permutation, and samples are shuffled inside each block. A block is the unit
of residency: its chunks are decoded together and its samples gathered from
the pool, so memory scales with ``block_chunks``, not with the dataset.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import numpy.random

from insitu.errors import ConfigError
from insitu.splits import SplitManifest


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
    """Chunk ids of a split; ``"all"`` is every split's chunks, ascending."""
    if split == "all" and "all" not in manifest.splits:
        return tuple(sorted(c for chunks in manifest.splits.values() for c in chunks))
    return manifest.chunks(split)


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
    chunks = np.asarray(split_chunks(manifest, split), dtype=np.int64)
    if len(chunks) == 0:  # a split made with fraction 0: it exists and yields nothing, on every rank
        return EpochOrder(np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64), ())
    # Each chunk's valid samples are one run [first, first + size): computed for every chunk at
    # once, since a per-chunk loop costs seconds at a million chunks (and shows in time to first batch).
    first, sizes = _chunk_runs(manifest, chunks, anchor_range)
    keep = sizes > 0
    chunks, first, sizes = chunks[keep], first[keep], sizes[keep]
    if world_size > len(chunks):
        raise ConfigError(
            f"world_size={world_size} exceeds the {len(chunks)} chunk(s) with valid samples in split {split!r}"
        )

    rng = epoch_rng(seed, epoch, split)
    perm = rng.permutation(len(chunks)) if shuffle else np.arange(len(chunks))
    mine = perm[rank::world_size]
    limit = None
    if world_size > 1:
        per_rank = [int(sizes[perm[r::world_size]].sum()) for r in range(world_size)]
        limit = min(per_rank) if uneven == "drop" else max(per_rank)

    anchors: list[np.ndarray] = []
    starts = [0]
    groups: list[tuple[int, ...]] = []
    total = 0
    for b0, b1 in _block_bounds(len(mine), block_chunks, first_block_chunks):
        idx = mine[b0:b1]
        block = _runs(first[idx], sizes[idx])
        if shuffle:
            block = block[rng.permutation(len(block))]
        if limit is not None and total + len(block) > limit:
            block = block[: limit - total]
        if len(block) == 0:
            break
        anchors.append(block)
        total += len(block)
        starts.append(total)
        groups.append(tuple(int(chunks[i]) for i in idx))
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
    manifest: SplitManifest, chunks: np.ndarray, anchor_range: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """First valid sample and number of valid samples of each chunk (``chunk_samples`` clipped
    to ``anchor_range``), for all chunks at once."""
    length = manifest.chunk_len
    lo = max(manifest.sample_range[0], anchor_range[0])
    hi = min(manifest.sample_range[1], manifest.n_samples, anchor_range[1])
    first = np.maximum(chunks * length, lo)
    stop = np.minimum((chunks + 1) * length, hi)
    return first, np.maximum(stop - first, 0)


def _runs(first: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(f, f + n)`` for each (f, n), without a Python loop."""
    total = int(sizes.sum())
    ends = np.cumsum(sizes)
    # Position k of the output belongs to run r: value = first[r] + (k - start of run r).
    return np.repeat(first - (ends - sizes), sizes) + np.arange(total, dtype=np.int64)


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
