"""Gathering batches out of the pool: arena rows of each (sample, label), one ``np.take`` per label.

Index computation runs on the event loop while the slabs a batch needs are
pinned (slot numbers cannot change under it); the copy runs on one gather
thread into recycled, 64-byte aligned batch buffers, then the batch
transforms run there too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from insitu.batch import Batch
from insitu.buffers import BufferPool
from insitu.geometry import ArrayGeometry
from insitu.pool import ChunkPool

BatchTransform = Callable[[Batch], Batch]


class BatchRows:
    """Where the rows of one batch live: anchors, arena row per label, and the padding mask."""

    __slots__ = ("anchors", "rows", "skipped", "valid")

    def __init__(
        self, anchors: np.ndarray, rows: dict[str, np.ndarray], valid: np.ndarray | None, skipped: int
    ) -> None:
        self.anchors = anchors
        self.rows = rows
        self.valid = valid
        self.skipped = skipped


class Gatherer:
    """Copies batches out of one dataset's pool; shared by every view of the dataset."""

    def __init__(
        self,
        pool: ChunkPool,
        labels: Sequence[ArrayGeometry],
        batch_transforms: Sequence[BatchTransform],
        *,
        statics: Mapping[str, np.ndarray] | None = None,
        sample_coord: tuple[str, np.ndarray] | None = None,
    ) -> None:
        self.pool = pool
        self.labels = tuple(labels)
        self.statics = dict(statics or {})
        self.sample_dim: str | None = None
        self.sample_coord: np.ndarray | None = None
        if sample_coord is not None:
            self.sample_dim, self.sample_coord = sample_coord
        self.batch_transforms = tuple(batch_transforms)
        self.buffers = BufferPool()
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="insitu-gather")
        self.specs = {g.label: pool.arrays[g.path].spec for g in self.labels}

    def rows(self, anchors: np.ndarray, valid: np.ndarray | None, *, skip_bad: bool) -> BatchRows:
        """Arena row of every (anchor, label); with ``skip_bad``, anchors touching a bad slab are dropped.

        Call on the loop thread while every slab involved is pinned."""
        pools = self.pool.arrays
        skipped = 0
        if skip_bad:
            keep = np.ones(len(anchors), dtype=bool)
            for g in self.labels:
                keep &= ~pools[g.path].bad[(anchors + g.offset) // g.chunk_len]
            if not keep.all():
                skipped = int((~keep).sum())
                anchors = anchors[keep]
                valid = valid[keep] if valid is not None else None
        rows: dict[str, np.ndarray] = {}
        for g in self.labels:
            pos = anchors + g.offset
            slab = pos // g.chunk_len
            slot = pools[g.path].slab_to_slot[slab].astype(np.int64)
            if len(slot) and slot.min() < 0:
                raise RuntimeError(f"internal error: slab of {g.label!r} not resident at gather time")
            rows[g.label] = slot * g.chunk_len + (pos - slab * g.chunk_len)
        return BatchRows(anchors, rows, valid, skipped)

    def gather(self, where: BatchRows, *, split: str, epoch: int, index: int) -> Batch:
        """The batch at ``where`` (runs on the gather thread), batch transforms applied."""
        data = {}
        reads = {}
        pools = self.pool.arrays
        n = len(where.anchors)
        for g in self.labels:
            spec = self.specs[g.label]
            out = self.buffers.empty((n, *spec.sample_shape), spec.dtype)
            np.take(
                pools[g.path].arena, where.rows[g.label], axis=0, out=out, mode="clip"
            )  # 'clip': no extra buffer
            data[g.label] = out
            reads[g.label] = where.anchors + g.offset
        for label, value in self.statics.items():
            data[label] = value.copy()  # resident once; each batch gets its own, free to modify
        batch = Batch(
            data,
            where.anchors.copy(),
            reads,
            split,
            epoch,
            index,
            where.valid,
            sample_dim=self.sample_dim,
            sample_coord=self.sample_coord,
        )
        for t in self.batch_transforms:
            batch = t(batch)
        return batch

    def shutdown(self, wait: bool = True) -> None:
        self.executor.shutdown(wait=wait, cancel_futures=not wait)
