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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from insitu.arrays.coregistration import Scale, check_on_grid, index_scale
from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError
from insitu.options import ReadOptions, ShardOptions
from insitu.plan.elastic import Segment
from insitu.plan.patch_weights import PositionWeighting, RegionSummary
from insitu.plan.patches import plan_patches
from insitu.plan.patches_elastic import PatchEpochSettings, segment_order
from insitu.plan.patches_order import PATCH_ORDER_VERSION
from insitu.plan.patches_reads import patch_array_needs
from insitu.plan.patches_regions import PatchSet
from insitu.plan.patches_spec import PatchGrid, PatchSpec
from insitu.plan.patches_split import SpatialSplit
from insitu.plan.reads import EpochPlan
from insitu.plan.splits import SplitManifest
from insitu.plan.temporaries import without_hugepage_hint
from insitu.plan.weighted_draw import WeightedDraw

__all__ = ["ChunkMapping", "PatchPlans", "check_patch_labels", "scaled_reads"]


def check_patch_labels(labels: Sequence[ArrayGeometry]) -> ArrayGeometry:
    """The reference array of a patch dataset (the first label, unshifted), after checking that
    every sampled array lies on its grid: the same shape and sample axis, or a shape scaled by
    the arrays' spacings (:mod:`insitu.arrays.coregistration`); chunkings may differ."""
    if not labels:
        raise ConfigError("patch sampling needs at least one array with the sample dimension")
    ref = labels[0].shift(-labels[0].offset)
    for g in labels[1:]:
        scale = check_on_grid(ref, g)
        scaled = any(k != 1 for k in scale)
        if scaled and (g.selection is not None or ref.selection is not None):
            raise ConfigError(
                f"array {g.name!r} is at another resolution than {ref.name!r}; selections on arrays at "
                "other resolutions are not supported with patches: select on neither, or resample"
            )
        if not scaled and g.selection != ref.selection:
            raise ConfigError(
                f"array {g.name!r} selects other indices than {ref.name!r}; arrays sampled together "
                "in patches read the same box: give them the same selection"
            )
    return ref


def _weighting_label(labels: Sequence[ArrayGeometry], weighting: PositionWeighting) -> ArrayGeometry:
    """The sampled array a weighting reads, after refusing a name that is none of them."""
    for g in labels:
        if weighting.label in (g.label, g.name, g.path) and g.offset == 0:
            return g
    option = "balance" if weighting.mode == "balance" else "patch_weights"
    names = sorted({g.label for g in labels})
    raise ConfigError(
        f"{option}={weighting.label!r} names no array sampled with the patches (arrays: {names}); "
        "add the mask or label array to the dataset's arrays"
    )


#: Makes or loads one split's region summary: (split, its positions, the weighting array, its
#: index scale, the box a patch reads in it) -> the summary.
SummarySource = Callable[[str, PatchSet, ArrayGeometry, Scale, tuple[int, ...]], RegionSummary]


def scaled_reads(
    grid: PatchGrid, reference: ArrayGeometry, geom: ArrayGeometry
) -> tuple[Scale, tuple[int, ...]]:
    """The index scale of ``geom`` and the box a patch of ``grid`` reads in it per axis (the
    patch's size times the scale along a named axis, the whole axis along the others), after
    refusing a patch size that is no whole number of ``geom``'s indices."""
    scale = index_scale(reference, geom)
    box = []
    for d, (axis, k) in enumerate(zip(grid.axes, scale, strict=True)):
        if k == 1:
            box.append(axis.size)
        elif d not in grid.named:
            box.append(geom.shape[d])
        elif (axis.size * k).denominator != 1:
            raise ConfigError(
                f"a patch of {axis.size} along axis {d} ({grid.dims[d]!r}) is {axis.size * k} indices of array "
                f"{geom.name!r} at {k} of the resolution of {reference.name!r}: choose a size that is a "
                f"multiple of {k.denominator}"
            )
        else:
            box.append(int(axis.size * k))
    return scale, tuple(box)


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
        weighting: PositionWeighting | None = None,
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
        self._chunks: dict[str, ChunkMapping] = {}
        for g in self.labels:
            scaled_reads(self.grid, self.reference, g)  # refuses a patch no whole number of its indices
            self._offsets.setdefault(g.path, []).append(g.offset)
            self._chunks[g.path] = ChunkMapping.of(self.reference, g)
        self.weighting = weighting
        self.weighting_label = None if weighting is None else _weighting_label(self.labels, weighting)
        self._summaries: SummarySource | None = None
        self._weighted: dict[str, WeightedDraw] = {}
        self._lock = threading.Lock()
        self._sets: dict[str, PatchSet] = {}
        self._plans: dict[tuple[tuple[object, ...], int], EpochPlan] = {}

    def use_summaries(self, source: SummarySource) -> None:
        """Where the region summaries of a weighted draw come from (the dataset's summary pass)."""
        self._summaries = source

    def weighted_draw(self, split: str) -> WeightedDraw | None:
        """The weighted draw of ``split`` (its region summary made or loaded once), or None."""
        if self.weighting is None or self.weighting_label is None:
            return None
        with self._lock:
            found = self._weighted.get(split)
        if found is not None:
            return found
        if self._summaries is None:
            raise RuntimeError("internal error: a weighted patch plan was given no summary source")
        patches = self.patch_set(split)
        geom = self.weighting_label
        scale, own_box = scaled_reads(self.grid, self.reference, geom)
        summary = self._summaries(split, patches, geom, scale, own_box)
        weighting = replace(self.weighting, label=geom.label)  # the batch's name for the array
        found = WeightedDraw(weighting, summary, scale, own_box, tuple(geom.shape))
        with self._lock:
            return self._weighted.setdefault(split, found)

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
            **({} if self.weighting is None else {"weighting": self.weighting.describe()}),
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
        weighted = self.weighted_draw(split)  # its summary made or loaded once, outside the lock
        key = ((split, shuffle, rank, world_size, resumed_from), epoch)
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                with without_hugepage_hint():
                    plan = self._make(
                        patches, split, shuffle, epoch, rank, world_size, resumed_from, weighted
                    )
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
        weighted: WeightedDraw | None,
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
            weighted=weighted,
        )
        order = segment_order(patches, settings, resumed_from, rank, world_size)
        arrays = {
            path: patch_array_needs(order, self._chunks[path].chunk_shape, offsets, self._chunks[path].mapper)
            for path, offsets in self._offsets.items()
        }
        n = order.n_patches
        n_batches = n // opts.batch_size if opts.drop_last else -(-n // opts.batch_size)
        return EpochPlan(order, opts.batch_size, n_batches, arrays)


@dataclass(frozen=True)
class ChunkMapping:
    """An array's chunks seen from the reference's index space: its chunk shape in reference
    indices, and (when the two grids differ in chunk count, a pyramid level rounded down) how a
    chunk id of that grid maps onto the array's own chunk ids."""

    chunk_shape: tuple[int, ...]
    ref_grid: tuple[int, ...]
    own_grid: tuple[int, ...]

    @classmethod
    def of(cls, reference: ArrayGeometry, geom: ArrayGeometry) -> ChunkMapping:
        """The mapping of ``geom``'s chunks (refused, by name, when a chunk is no whole number of
        reference indices)."""
        scale = index_scale(reference, geom)
        chunks = []
        for d, (c, k) in enumerate(zip(geom.chunk_shape, scale, strict=True)):
            in_ref = Fraction(c) / k
            if in_ref.denominator != 1:
                raise ConfigError(
                    f"array {geom.name!r} has chunks of {c} along axis {d}, {in_ref} indices of {reference.name!r} "
                    f"at its resolution ({k}); patches need chunks of a whole number of reference indices"
                )
            chunks.append(int(in_ref))
        ref_grid = tuple(-(-n // c) for n, c in zip(reference.shape, chunks, strict=True))
        own_grid = tuple(-(-n // c) for n, c in zip(geom.shape, geom.chunk_shape, strict=True))
        return cls(tuple(chunks), ref_grid, own_grid)

    @property
    def mapper(self) -> Callable[[np.ndarray], np.ndarray] | None:
        """:meth:`to_array` where the grids differ; None where ids are the array's own already."""
        return None if self.ref_grid == self.own_grid else self.to_array

    def to_array(self, ids: np.ndarray) -> np.ndarray:
        """Chunk ids of the reference-space grid as the array's own (the same when the grids agree;
        a chunk past the array's last one, where the reference's length rounds up, is its last)."""
        if self.ref_grid == self.own_grid:
            return ids
        coords = np.unravel_index(ids, self.ref_grid)
        clipped = tuple(np.minimum(c, g - 1) for c, g in zip(coords, self.own_grid, strict=True))
        return np.ravel_multi_index(clipped, self.own_grid).astype(np.int64)


def _first_block_regions(patches: PatchSet, batch_size: int) -> int:
    """Regions whose patches fill about one batch: the first block is served in parts that large,
    so the first batch waits for few chunks."""
    holding = int(np.count_nonzero(patches.region_counts))
    per_region = max(1, patches.n_patches // max(1, holding))
    return max(1, -(-batch_size // per_region))
