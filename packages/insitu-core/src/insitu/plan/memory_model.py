"""The memory model: every byte count of the pool and of a pass, computed here and only here.

The pool holds decoded slabs in slots of one slab each; a pass holds, besides
the pool, the rows of the batches it fills: the batch being delivered, the
prefetch queue, and the read-ahead blocks whose streamed slabs are decoded
straight into batch rows. The budget (:mod:`insitu.plan.budget`) asks this
module what caching the dataset takes and how many slots a budget admits; the
construction-time size check (:mod:`insitu.plan.limits`) asks what a pass
holds; a pass asks how much it may read ahead (:mod:`insitu.engine.epoch`) and
reports what it holds (``iter(view).readahead_bytes``).

It sits on the plan floor, below the engine that enforces it, because the
budget and the size check run while the dataset is built, before any engine
exists, and planners need the same answers (how many slabs a budget keeps);
everything it reads (geometries, slab specs, options, manifests, epoch plans)
is at or below this floor.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transforms import SlabSpec
from insitu.options import ReadOptions
from insitu.plan.reads import EpochPlan
from insitu.plan.splits import SplitManifest

logger = logging.getLogger("insitu")

#: Bytes of batch rows a remote pass may read ahead of the batch being delivered, per decode
#: thread, when the concurrency controller wants more reads than ``readahead_blocks`` supply (the
#: memory bound of the read-ahead beyond ``readahead_blocks``; local files never read further).
#: Per thread: what must be in flight to keep the decoders fed is their rate times the store's
#: latency, and their rate grows with their number. On 2 threads, 64 MiB instead of the former fixed
#: 256 MiB kept throughput within the noise at 20 and 100 ms per GET, and peak RSS up to 33 MB lower
#: (``bench/revisions.py``, medians of 5).
READAHEAD_CAP_PER_THREAD = 32 << 20
#: The read-ahead cap of a pass with few decode threads.
READAHEAD_CAP_MIN = 64 << 20


# -- one sample, one slot --------------------------------------------------------------------------
def sample_bytes(specs: Iterable[SlabSpec]) -> int:
    """Bytes of one sample over the labels of ``specs``: what one row of a batch holds."""
    return sum(spec.sample_nbytes for spec in specs)


def arena_bytes(spec: SlabSpec, n_slots: int) -> int:
    """Bytes of an arena of ``n_slots`` slots, each one slab of ``spec``."""
    return n_slots * spec.nbytes


# -- what a budget admits --------------------------------------------------------------------------
def dataset_bytes(
    arrays: Mapping[str, ArrayGeometry],
    specs: Mapping[str, SlabSpec],
    labels: Sequence[ArrayGeometry],
    manifest: SplitManifest,
    world_size: int = 1,
) -> dict[str, int]:
    """Per array, the pooled bytes of every slab the manifest's samples read (at the labels'
    offsets), divided among ``world_size`` ranks: what caching the whole dataset takes."""
    lo, hi = manifest.sample_range_of(None)
    by_path: dict[str, list[int]] = {}  # one pass over the labels: 5,000 arrays must not cost 5,000**2
    for lab in labels:
        by_path.setdefault(lab.path, []).append(lab.offset)
    out = {}
    for path, g in arrays.items():
        offsets = by_path.get(path) or [0]
        first = max(0, lo + min(offsets))
        last = min(g.n_samples, hi + max(offsets))
        slabs = max(0, -(-last // g.chunk_len) - first // g.chunk_len)
        out[path] = arena_bytes(specs[path], -(-slabs // world_size))
    return out


def slots_per_array(
    arrays: Mapping[str, ArrayGeometry],
    specs: Mapping[str, SlabSpec],
    budget: int,
    need: Mapping[str, int],
) -> dict[str, int]:
    """Split the byte budget across arrays in proportion to what caching each whole takes, so
    each gets the same share of its slabs; an array never gets more slots than it has slabs.
    An array whose share is smaller than one slab gets none: all of it is streamed."""
    total = sum(need.values())
    slots = {}
    for path, g in arrays.items():
        slot_bytes = max(1, specs[path].nbytes)
        share = budget if total == 0 else budget * need[path] / total
        slots[path] = int(
            min(g.n_slabs, need[path] // slot_bytes if total else g.n_slabs, share // slot_bytes)
        )
        if slots[path] == 0 and budget > 0:
            logger.info(
                "cache_budget_bytes=%d holds no slab of array %r (%d bytes each): every pass streams it",
                budget,
                path,
                slot_bytes,
            )
    return slots


# -- what a pass holds besides the pool ------------------------------------------------------------
def readahead_rows(plan: EpochPlan, *, readahead_blocks: int, prefetch: int) -> int:
    """Batch rows a pass over ``plan`` holds at most besides the pool: the most rows of any run of
    consecutive blocks as long as the blocks one batch draws from plus ``readahead_blocks`` (the
    rows streamed slabs are decoded into), and ``prefetch`` batches waiting in the queue."""
    starts = plan.block_starts
    n = plan.n_blocks
    if n == 0:
        return 0
    window = min(n, plan.batch_span + readahead_blocks)
    widest = int((starts[window:] - starts[: n + 1 - window]).max())
    return widest + prefetch * plan.batch_size


def readahead_bytes(
    plan: EpochPlan, specs: Iterable[SlabSpec], *, readahead_blocks: int, prefetch: int
) -> int:
    """Bytes of the rows :func:`readahead_rows` counts, one sample over the labels of ``specs`` each."""
    rows = readahead_rows(plan, readahead_blocks=readahead_blocks, prefetch=prefetch)
    return rows * sample_bytes(specs)


def readahead_cap_bytes(decode_threads: int) -> int:
    """The most bytes of batch rows a remote pass with ``decode_threads`` threads reads ahead:
    :data:`READAHEAD_CAP_PER_THREAD` per thread, at least :data:`READAHEAD_CAP_MIN`."""
    return max(READAHEAD_CAP_MIN, READAHEAD_CAP_PER_THREAD * decode_threads)


def exceeds_readahead_cap(rows_ahead: int, row_bytes: int, decode_threads: int) -> bool:
    """Whether ``rows_ahead`` batch rows of ``row_bytes`` each pass the read-ahead cap of a pass
    with ``decode_threads`` threads (it reads no further beyond its ``readahead_blocks`` then)."""
    return rows_ahead * row_bytes > readahead_cap_bytes(decode_threads)


@dataclass(frozen=True)
class PassFootprint:
    """What one pass holds at once, known before any plan: the pool's arenas and, besides them,
    ``batches`` batches of ``batch_bytes`` (per label), the read-ahead rows of streamed arrays
    and one decoded slab being copied into them."""

    arenas: int
    batch_bytes: dict[str, int]
    batches: int
    readahead: int
    largest_slab: int

    @property
    def batch(self) -> int:
        """Bytes of one batch over every label."""
        return sum(self.batch_bytes.values())

    @property
    def besides_pool(self) -> int:
        """Bytes held outside the arenas: the batches, the read-ahead rows and one decoded slab."""
        return self.batch * self.batches + self.readahead + self.largest_slab

    @property
    def total(self) -> int:
        """Bytes held at once, arenas included."""
        return self.arenas + self.besides_pool


def pass_footprint(
    arrays: Mapping[str, ArrayGeometry],
    specs: Mapping[str, SlabSpec],
    labels: Sequence[ArrayGeometry],
    slots: Mapping[str, int],
    options: ReadOptions,
    *,
    n_samples: int,
) -> PassFootprint:
    """The :class:`PassFootprint` of a pass of at most ``n_samples`` samples, with ``slots`` pool
    slots per array. Without a plan, the read-ahead is bounded per label: ``readahead_blocks``
    blocks of ``block_chunks`` chunks, counted only for arrays the pool does not hold whole (their
    rows are streamed into batch buffers; a pooled array's rows are in its arena)."""
    rows = min(options.batch_size, n_samples)
    per_label = {g.label: specs[g.path].sample_nbytes * rows for g in labels}
    batches = min(1 + options.prefetch, -(-n_samples // max(1, rows)))
    ahead = 0
    for g in labels:
        if slots[g.path] < arrays[g.path].n_slabs:
            ahead_rows = min(n_samples, options.readahead_blocks * options.block_chunks * g.chunk_len)
            ahead += ahead_rows * specs[g.path].sample_nbytes
    return PassFootprint(
        arenas=sum(arena_bytes(specs[path], slots[path]) for path in specs),
        batch_bytes=per_label,
        batches=batches,
        readahead=ahead,
        largest_slab=max((spec.nbytes for spec in specs.values()), default=0),
    )


__all__ = [
    "READAHEAD_CAP_MIN",
    "READAHEAD_CAP_PER_THREAD",
    "PassFootprint",
    "arena_bytes",
    "dataset_bytes",
    "exceeds_readahead_cap",
    "pass_footprint",
    "readahead_bytes",
    "readahead_cap_bytes",
    "readahead_rows",
    "sample_bytes",
    "slots_per_array",
]
