"""The read plans of one dataset, made on demand per (view, epoch) and kept for the current
epoch only: at millions of chunks each plan is hundreds of MB, and epochs go forward."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from insitu.arrays.geometry import ArrayGeometry
from insitu.options import ReadOptions, ShardOptions
from insitu.plan.anchors import anchor_range, unused_anchors
from insitu.plan.elastic import ElasticSettings, Segment, elastic_order
from insitu.plan.order import order_with_runs
from insitu.plan.patch_plans import PatchPlans, check_patch_labels
from insitu.plan.patch_weights import PositionWeighting, weighting_from_options
from insitu.plan.patches_spec import PatchSpec
from insitu.plan.patches_split import SpatialSplit
from insitu.plan.reads import EpochPlan, plan_epoch
from insitu.plan.splits import SplitManifest
from insitu.plan.temporaries import without_hugepage_hint

# EpochPlan and Segment are what EpochPlans.get returns and takes: listed so that a caller
# forwarding it (the dataset's plan()) names them from here.
__all__ = [
    "EpochPlan",
    "EpochPlans",
    "PatchPlans",
    "PatchSpec",
    "Segment",
    "SpatialSplit",
    "dataset_plans",
    "sample_splits",
    "weighting_from_options",
]


def dataset_plans(
    manifest: SplitManifest,
    labels: Sequence[ArrayGeometry],
    options: ReadOptions,
    sharding: ShardOptions,
    *,
    patch: PatchSpec | None = None,
    spatial: SpatialSplit | None = None,
    weighting: PositionWeighting | None = None,
) -> EpochPlans | PatchPlans:
    """The plans of a dataset's labels, anchored where every label reads inside its array; what each
    split loses to that at the ends of the data is logged (a split left with nothing is refused).
    With ``patch``, plans of patches (:class:`~insitu.plan.patch_plans.PatchPlans`)."""
    anchors = anchor_range(labels, manifest)
    unused = unused_anchors(manifest, anchors, labels)
    if patch is not None:
        return PatchPlans(
            manifest,
            labels,
            anchors,
            patch,
            options,
            sharding,
            unused_anchors=unused,
            spatial=spatial,
            weighting=weighting,
        )
    return EpochPlans(manifest, labels, anchors, options, sharding, unused_anchors=unused)


def sample_splits(
    manifest: SplitManifest | SpatialSplit, labels: Sequence[ArrayGeometry]
) -> tuple[SplitManifest, SpatialSplit | None]:
    """The splits along the sample axis, and the split in space when ``manifest`` is one (patches
    only: every split then holds every chunk along the sample axis, the cells decide)."""
    if isinstance(manifest, SpatialSplit):
        return manifest.sample_manifest(check_patch_labels(labels)), manifest
    return manifest, None


class EpochPlans:
    """Plans of ``manifest``'s splits for the labels, made once per (split, order, rank, epoch)."""

    def __init__(
        self,
        manifest: SplitManifest,
        labels: Sequence[ArrayGeometry],
        anchors: tuple[int, int],
        options: ReadOptions,
        sharding: ShardOptions,
        *,
        unused_anchors: dict[str, int] | None = None,
    ) -> None:
        self.manifest = manifest
        self.labels = tuple(labels)
        self.anchors = anchors
        self.unused_anchors = dict(unused_anchors or {})  # per split, its samples that cannot anchor
        self.options = options
        self.sharding = sharding
        self._lock = threading.Lock()
        self._plans: dict[tuple[tuple[object, ...], int], EpochPlan] = {}

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
        """The plan of ``split`` for ``epoch`` on one rank; plans of other epochs are dropped (a
        running pass keeps its own). With ``resumed_from`` (the epoch's earlier segments at other
        world sizes), the plan of what they left (:mod:`insitu.plan.elastic`)."""
        key = ((split, shuffle, rank, world_size, resumed_from), epoch)
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                if resumed_from:
                    plan = self._make_resumed(split, shuffle, epoch, rank, world_size, resumed_from)
                else:
                    plan = self._make(split, shuffle, epoch, rank, world_size)
                self._plans = {k: p for k, p in self._plans.items() if k[1] == epoch}
                self._plans[key] = plan
        return plan

    def _first_block_chunks(self) -> int:
        # The first block holds one batch's worth of chunks, so the first batch waits for no more.
        return -(-self.options.batch_size // self.manifest.chunk_len)

    def _make_resumed(
        self, split: str, shuffle: bool, epoch: int, rank: int, world_size: int, history: tuple[Segment, ...]
    ) -> EpochPlan:
        opts = self.options
        settings = ElasticSettings(
            anchor_range=self.anchors,
            epoch=epoch,
            seed=opts.seed,
            shuffle=shuffle,
            block_chunks=opts.block_chunks,
            first_block_chunks=self._first_block_chunks(),
            uneven=self.sharding.uneven,
            batch_size=opts.batch_size,
            drop_last=opts.drop_last,
        )
        with without_hugepage_hint():
            order = elastic_order(self.manifest, split, settings, history, rank=rank, world_size=world_size)
            return plan_epoch(order, self.labels, opts.batch_size, opts.drop_last)

    def _make(self, split: str, shuffle: bool, epoch: int, rank: int, world_size: int) -> EpochPlan:
        opts = self.options
        with without_hugepage_hint():
            order, runs = order_with_runs(
                self.manifest,
                split,
                anchor_range=self.anchors,
                epoch=epoch,
                seed=opts.seed,
                shuffle=shuffle,
                block_chunks=opts.block_chunks,
                rank=rank,
                world_size=world_size,
                uneven=self.sharding.uneven,
                first_block_chunks=self._first_block_chunks(),
            )
            return plan_epoch(order, self.labels, opts.batch_size, opts.drop_last, runs)
