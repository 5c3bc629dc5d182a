"""Gathering batches out of the pool: arena rows of each (sample, label), one ``np.take`` per label.

Index computation runs on the event loop while the slabs a batch needs are
pinned (slot numbers cannot change under it); the copy runs on one gather
thread into recycled, 64-byte aligned batch buffers, then the batch
transforms run there too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.lazycoords import LazyValues
from insitu.arrays.transform_config import transforms_from_config
from insitu.batch import Batch, BatchPatches
from insitu.engine.buffers import BufferPool
from insitu.engine.pool import ChunkPool
from insitu.errors import ConfigError

BatchTransform = Callable[[Batch], Batch]
logger = logging.getLogger("insitu.epoch")


class BatchRows:
    """Where the rows of one batch live: anchors, and per label the arena rows of the rows taken
    from the pool (``pool_at``: their positions, None for all rows); ``keep`` drops rows of bad
    chunks (``on_bad_chunk="skip"``); ``valid`` is the padding mask."""

    __slots__ = ("anchors", "keep", "pool_at", "rows", "skipped", "valid")

    def __init__(
        self,
        anchors: np.ndarray,
        rows: dict[str, np.ndarray],
        pool_at: dict[str, np.ndarray | None],
        valid: np.ndarray | None,
        keep: np.ndarray | None,
    ) -> None:
        self.anchors = anchors
        self.rows = rows
        self.pool_at = pool_at
        self.valid = valid
        self.keep = keep
        self.skipped = 0 if keep is None else int((~keep).sum())


#: A batch of at most this many bytes is gathered on the event loop instead of the gather thread:
#: the hop there and back (a queued work item, a future, a wake-up of the loop through its
#: self-pipe) cost more CPU than copying it, and at one small sample per chunk a hop per batch
#: made the consumer's batches of 32 take about a third more CPU per sample than batches of 256
#: on the 2-core reference machine. Copying 256 KiB takes the loop some tens of microseconds.
INLINE_GATHER_BYTES = 256 << 10


class Gatherer:
    """Copies batches out of one dataset's pool; shared by every view of the dataset."""

    def __init__(
        self,
        pool: ChunkPool,
        labels: Sequence[ArrayGeometry],
        batch_transforms: Sequence[BatchTransform],
        *,
        statics: Mapping[str, np.ndarray] | None = None,
        sample_coord: tuple[str, np.ndarray | LazyValues] | None = None,
    ) -> None:
        self.pool = pool
        self.labels = tuple(labels)
        self.statics = dict(statics or {})
        self.sample_dim: str | None = None
        self.sample_coord: np.ndarray | LazyValues | None = None
        if sample_coord is not None:
            self.sample_dim, self.sample_coord = sample_coord
        self.batch_transforms = tuple(batch_transforms)
        self.buffers = BufferPool()
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="insitu-gather")
        self.specs = {g.label: pool.arrays[g.path].spec for g in self.labels}

    def gathers_inline(self, batch_size: int) -> bool:
        """Whether a batch of ``batch_size`` rows is small enough to gather on the loop itself: with
        no batch transform (user code, of unknown cost) and at most :data:`INLINE_GATHER_BYTES`
        over every label and static array."""
        if self.batch_transforms:
            return False
        nbytes = batch_size * sum(spec.sample_nbytes for spec in self.specs.values())
        nbytes += sum(int(v.nbytes) for v in self.statics.values())
        return nbytes <= INLINE_GATHER_BYTES

    def empty_batch(self, n: int) -> dict[str, np.ndarray]:
        """Recycled arrays for a batch of ``n`` rows, one per label (streamed slabs fill them)."""
        return {
            label: self.buffers.empty((n, *spec.sample_shape), spec.dtype)
            for label, spec in self.specs.items()
        }

    def rows(
        self,
        anchors: np.ndarray,
        valid: np.ndarray | None,
        *,
        skip_bad: bool,
        streamed: Mapping[str, np.ndarray] | None = None,
        streamed_bad: Mapping[str, np.ndarray] | None = None,
    ) -> BatchRows:
        """Arena row of every (anchor, label) read from the pool; ``streamed[label]`` marks rows
        already in the batch's buffers (``streamed_bad``: those of bad streamed chunks). With
        ``skip_bad``, anchors touching a bad chunk are dropped.

        Call on the loop thread while every pooled slab involved is pinned."""
        pools = self.pool.arrays
        streamed = streamed or {}
        streamed_bad = streamed_bad or {}
        keep: np.ndarray | None = None
        rows: dict[str, np.ndarray] = {}
        pool_at: dict[str, np.ndarray | None] = {}
        for g in self.labels:
            pos = anchors + g.offset
            slab = pos // g.chunk_len
            mask = streamed.get(g.label)
            at = None if mask is None else np.flatnonzero(~mask)
            pos_p, slab_p = (pos, slab) if at is None else (pos[at], slab[at])
            slot = pools[g.path].slab_to_slot[slab_p].astype(np.int64)
            if len(slot) and slot.min() < 0:
                raise RuntimeError(f"internal error: slab of {g.label!r} not resident at gather time")
            rows[g.label] = slot * g.chunk_len + (pos_p - slab_p * g.chunk_len)
            pool_at[g.label] = at
            if skip_bad:
                bad = np.zeros(len(anchors), dtype=bool)
                bad_pool = pools[g.path].bad[slab_p]
                if at is None:
                    bad |= bad_pool
                else:
                    bad[at] = bad_pool
                if g.label in streamed_bad:
                    bad |= streamed_bad[g.label]
                if bad.any():
                    keep = ~bad if keep is None else keep & ~bad
        if keep is not None and keep.all():
            keep = None
        return BatchRows(anchors, rows, pool_at, valid, keep)

    def gather(
        self,
        where: BatchRows,
        *,
        split: str,
        epoch: int,
        index: int,
        buffers: Mapping[str, np.ndarray] | None = None,
    ) -> Batch:
        """The batch at ``where`` (runs on the gather thread), batch transforms applied. ``buffers``:
        the batch's arrays with its streamed rows already in place (else new ones are taken)."""
        data = {}
        reads = {}
        pools = self.pool.arrays
        n = len(where.anchors)
        anchors, valid, keep = where.anchors, where.valid, where.keep
        for g in self.labels:
            spec = self.specs[g.label]
            out = buffers[g.label] if buffers is not None else None
            if out is None:
                out = self.buffers.empty((n, *spec.sample_shape), spec.dtype)
            at, arena = where.pool_at[g.label], pools[g.path].arena
            if at is None:  # every row from the pool: one take, no extra buffer ('clip')
                np.take(arena, where.rows[g.label], axis=0, out=out, mode="clip")
            elif len(at):
                out[at] = np.take(arena, where.rows[g.label], axis=0)
            data[g.label] = out if keep is None else out[keep]
        if keep is not None:
            anchors = anchors[keep]
            valid = valid[keep] if valid is not None else None
        for g in self.labels:
            reads[g.label] = anchors + g.offset
        for label, value in self.statics.items():
            data[label] = value.copy()  # resident once; each batch gets its own, free to modify
        return self.finish(data, anchors.copy(), reads, valid, split=split, epoch=epoch, index=index)

    def finish(
        self,
        data: dict[str, np.ndarray],
        anchors: np.ndarray,
        reads: dict[str, np.ndarray],
        valid: np.ndarray | None,
        *,
        split: str,
        epoch: int,
        index: int,
        patches: BatchPatches | None = None,
    ) -> Batch:
        """The :class:`Batch` of gathered ``data``, with its provenance, batch transforms applied."""
        batch = Batch(
            data,
            anchors,
            reads,
            split,
            epoch,
            index,
            valid,
            sample_dim=self.sample_dim,
            sample_coord=self.sample_coord,
            patches=patches,
        )
        for t in self.batch_transforms:
            batch = t(batch)
        return batch

    def static_shape(self, label: str) -> tuple[int, ...]:
        """The shape a batch holds static field ``label`` in (the field, whole, once)."""
        return tuple(self.statics[label].shape[1:])

    def static_rows(self, label: str, n: int) -> int:
        """Rows of static field ``label`` in a batch of ``n``: one, the field whole."""
        return 1

    def describe(
        self, anchor: int, sample_dim: str | None
    ) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
        """``{label: (sample shape, dtype)}`` of the arrays batches deliver, batch transforms included:
        found by running the batch transforms once on a batch of zeros of the pooled shapes, its
        samples anchored at ``anchor``. A transform that fails on zeros leaves the description of
        the pooled arrays."""
        pooled: dict[str, tuple[tuple[int, ...], np.dtype[Any]]] = {
            label: (spec.sample_shape, spec.dtype) for label, spec in self.specs.items()
        }
        pooled |= {label: (self.static_shape(label), v.dtype) for label, v in self.statics.items()}
        if not self.batch_transforms:
            return pooled
        n = 2
        anchors = np.full(n, anchor, dtype=np.int64)
        data = {
            label: np.zeros((self.static_rows(label, n) if label in self.statics else n, *shape), dtype)
            for label, (shape, dtype) in pooled.items()
        }
        reads = {g.label: anchors + g.offset for g in self.labels}
        batch = Batch(data, anchors, reads, "describe", 0, 0, None, sample_dim=sample_dim)
        try:
            for t in self.batch_transforms:
                batch = t(batch)
        except Exception:
            logger.debug("batch transforms fail on zeros; describing the pooled arrays", exc_info=True)
            return pooled
        return {label: (tuple(np.shape(v)[1:]), np.asarray(v).dtype) for label, v in batch.items()}

    def shutdown(self, wait: bool = True) -> None:
        """Stop the gather thread; ``wait=False`` cancels queued gathers instead of finishing them."""
        self.executor.shutdown(wait=wait, cancel_futures=not wait)


def batch_transform_chain(spec: Sequence[BatchTransform | Mapping[str, Any]]) -> tuple[BatchTransform, ...]:
    """Batch transforms as given, configurations (``{"name": ...}``) resolved through the registry;
    anything not callable is refused by name."""
    chain = tuple(transforms_from_config(spec))
    for t in chain:
        if not callable(t):
            raise ConfigError(f"batch transform {t!r} is not callable")
    return chain
