"""The read plans of a dataset that samples patches, made per (view, epoch) like
:class:`~insitu.plan.plans.EpochPlans` makes them for whole cross-sections.

Per split, the patch positions are planned once as boxes per region
(:func:`~insitu.plan.patches.plan_patches`: the split's chunks along the
sample axis are cells, so a patch that would read another split's chunk is
left out); per (split, shuffle, rank, world size, epoch) they are ordered in
blocks (:func:`~insitu.plan.patches.epoch_patches`) and each pooled array's
chunks per block listed (:func:`~insitu.plan.patches_reads.patch_array_needs`),
which is the :class:`~insitu.plan.reads.EpochPlan` a pass runs.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError
from insitu.options import ReadOptions, ShardOptions
from insitu.plan.elastic import Segment
from insitu.plan.patches import epoch_patches, plan_patches
from insitu.plan.patches_elastic import PatchEpochSettings, elastic_patch_order
from insitu.plan.patches_order import PATCH_ORDER_VERSION
from insitu.plan.patches_reads import patch_array_needs
from insitu.plan.patches_regions import PatchSet
from insitu.plan.patches_spec import PatchGrid, PatchSpec
from insitu.plan.patches_split import SpatialSplit
from insitu.plan.reads import EpochPlan
from insitu.plan.splits import SplitManifest
from insitu.plan.temporaries import without_hugepage_hint

__all__ = ["PatchPlans", "check_patch_labels"]


def check_patch_labels(labels: Sequence[ArrayGeometry]) -> ArrayGeometry:
    """The reference array of a patch dataset (the first label, unshifted), after checking that
    every sampled array lies on its grid: same shape and sample axis (chunkings may differ)."""
    if not labels:
        raise ConfigError("patch sampling needs at least one array with the sample dimension")
    ref = labels[0].shift(-labels[0].offset)
    for g in labels[1:]:
        if tuple(g.shape) != tuple(ref.shape) or g.sample_axis != ref.sample_axis:
            raise ConfigError(
                f"array {g.name!r} (shape {tuple(g.shape)}, sample axis {g.sample_axis}) is not on the "
                f"grid of {ref.name!r} (shape {tuple(ref.shape)}, sample axis {ref.sample_axis}); arrays "
                "sampled together in patches must have the same shape (their chunkings may differ)"
            )
        if g.selection != ref.selection:
            raise ConfigError(
                f"array {g.name!r} selects other indices than {ref.name!r}; arrays sampled together "
                "in patches read the same box: give them the same selection"
            )
    return ref


class PatchPlans:
    """Patch plans of ``manifest``'s splits for the labels, made once per (split, order, rank,
    epoch); the positions of each split are planned once."""

    def __init__(
        self,
        manifest: SplitManifest,
        labels: Sequence[ArrayGeometry],
        anchors: tuple[int, int],
        spec: PatchSpec,
        options: ReadOptions,
        sharding: ShardOptions,
        *,
        unused_anchors: dict[str, int] | None = None,
        spatial: SpatialSplit | None = None,
    ) -> None:
        self.manifest = manifest
        self.labels = tuple(labels)
        self.reference = check_patch_labels(self.labels)
        self.anchors = anchors
        self.unused_anchors = dict(unused_anchors or {})
        self.spec = spec
        self.options = options
        self.sharding = sharding
        # Which patches are whose: cells in space, or the manifest's chunks along the sample axis.
        self.spatial = spatial
        if spatial is not None:
            spatial.check_reference(self.reference)
        # A split by coordinate value may cut a chunk, which no cell can: its samples are a range,
        # and its patches lie inside that range along the sample axis.
        by_range = spatial is None and manifest.ranges is not None
        self.cells = None if by_range else (spatial or SpatialSplit.along_samples(manifest, self.reference))
        self.grid: PatchGrid = spec.resolve(self.reference, sample_span=anchors)
        self._offsets: dict[str, list[int]] = {}
        self._chunks: dict[str, tuple[int, ...]] = {}
        for g in self.labels:
            self._offsets.setdefault(g.path, []).append(g.offset)
            self._chunks[g.path] = tuple(g.chunk_shape)
        self._lock = threading.Lock()
        self._sets: dict[str, PatchSet] = {}
        self._plans: dict[tuple[tuple[object, ...], int], EpochPlan] = {}

    def describe(self) -> dict[str, Any]:
        """What a resume state records of the patches (a state of other patches is refused)."""
        spec = self.spec
        return {
            "size": {str(k): v for k, v in spec.size.items()},
            "stride": [spec.stride_of(d) for d in spec.size],
            "sampling": spec.sampling,
            "patches_per_epoch": spec.patches_per_epoch,
            "edge": spec.edge,
            "order": PATCH_ORDER_VERSION,
            "spatial_split": None
            if self.spatial is None
            else hashlib.sha256(self.spatial.to_json().encode()).hexdigest()[:16],
        }

    def patch_set(self, split: str) -> PatchSet:
        """The positions of ``split`` (``"all"``: every position), planned once."""
        with self._lock:
            found = self._sets.get(split)
            if found is None:
                with without_hugepage_hint():
                    found = self._sets[split] = self._plan_set(split)
        return found

    def _plan_set(self, split: str) -> PatchSet:
        if split == "all":
            return plan_patches(self.reference, self.spec, sample_span=self.anchors)
        if self.cells is None:  # a split by coordinate value: its range along the sample axis
            lo, hi = self.manifest.sample_range_of(split)
            start = max(lo, self.anchors[0])
            span = (start, max(start, min(hi, self.anchors[1])))
            size = self.grid.axes[self.grid.sample_axis].size
            if span[1] - span[0] < size:
                raise ConfigError(
                    f"split {split!r} holds samples {span[0]}..{span[1]} where the labels can be read: "
                    f"too few for a patch of {size} along the sample axis"
                )
            return plan_patches(self.reference, self.spec, sample_span=span)
        patches = plan_patches(
            self.reference, self.spec, sample_span=self.anchors, split=self.cells, split_name=split
        )
        if patches.n_patches == 0:
            where = (
                "its cells in space"
                if self.spatial is not None
                else f"its chunks along the sample axis (chunks of {self.manifest.chunk_len} samples)"
            )
            raise ConfigError(
                f"split {split!r} holds no patch position: no patch of {dict(self.spec.size)} fits inside {where}"
            )
        return patches

    def get(
        self,
        split: str,
        shuffle: bool,
        epoch: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        resumed_from: tuple[Segment, ...] = (),
    ) -> EpochPlan:
        """The plan of ``split`` for ``epoch`` on one rank; plans of other epochs are dropped. With
        ``resumed_from`` (the epoch's earlier segments at other world sizes), the plan of this
        rank's share of what they left (:mod:`insitu.plan.patches_elastic`)."""
        patches = self.patch_set(split)
        key = ((split, shuffle, rank, world_size, resumed_from), epoch)
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                with without_hugepage_hint():
                    plan = self._make(patches, split, shuffle, epoch, rank, world_size, resumed_from)
                self._plans = {k: p for k, p in self._plans.items() if k[1] == epoch}
                self._plans[key] = plan
        return plan

    def _make(
        self,
        patches: PatchSet,
        split: str,
        shuffle: bool,
        epoch: int,
        rank: int,
        world_size: int,
        resumed_from: tuple[Segment, ...],
    ) -> EpochPlan:
        opts = self.options
        settings = PatchEpochSettings(
            spec=self.spec,
            epoch=epoch,
            seed=opts.seed,
            split=split,
            shuffle=shuffle,
            block_chunks=opts.block_chunks,
            first_block_chunks=_first_block_regions(patches, opts.batch_size),
            uneven=self.sharding.uneven,
            batch_size=opts.batch_size,
        )
        if resumed_from:
            order = elastic_patch_order(patches, settings, resumed_from, rank=rank, world_size=world_size)
        else:
            order = epoch_patches(
                patches,
                self.spec,
                epoch=epoch,
                seed=opts.seed,
                split=split,
                shuffle=shuffle,
                block_chunks=opts.block_chunks,
                first_block_chunks=settings.first_block_chunks,
                rank=rank,
                world_size=world_size,
                uneven=self.sharding.uneven,
            )
        arrays = {
            path: patch_array_needs(order, self._chunks[path], offsets)
            for path, offsets in self._offsets.items()
        }
        n = order.n_patches
        n_batches = n // opts.batch_size if opts.drop_last else -(-n // opts.batch_size)
        return EpochPlan(order, opts.batch_size, n_batches, arrays)


def _first_block_regions(patches: PatchSet, batch_size: int) -> int:
    """Regions whose patches fill about one batch: the first block is served in parts that large,
    so the first batch waits for few chunks."""
    holding = int(np.count_nonzero(patches.region_counts))
    per_region = max(1, patches.n_patches // max(1, holding))
    return max(1, -(-batch_size // per_region))
