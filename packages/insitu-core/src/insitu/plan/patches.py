"""N-dimensional patch sampling, planned in chunk space.

A sample is a *patch*: a box of the reference array, ``size[d]`` elements along
each dimension the patch names, the whole extent along the others, and one
index along the sample dimension unless it is named. Today's samples are the
patch ``{}``. The planner works in four steps, each its own module:

1. **Positions** (:mod:`insitu.plan.patches_spec`): a :class:`PatchSpec`
   resolved on the reference array is a :class:`PatchGrid`, one arithmetic rule
   per axis (size, stride, edge policy). A position is one index per axis.

   ::

       stride < size: overlap            edges (n = 10, size 4, stride 4)
       [----]                            shift  [0 1 2 3][4 5 6 7]  [6 7 8 9]
          [----]                         pad    [0 1 2 3][4 5 6 7][8 9 . .]  valid extent 2
             [----]                      drop   [0 1 2 3][4 5 6 7]           (8, 9 left out)

2. **Regions** (:mod:`insitu.plan.patches_regions`): the reference chunks
   (``region_chunks`` of them per axis) tile the array; a patch belongs to the
   region holding its origin, so a region holds a box of positions, two
   integers per axis. A :class:`PatchSet` is the patches of one split as such
   boxes: plan memory grows with regions, never with patches (4.2 million
   32 x 32 patches of a 65,536 x 65,536 raster in 512 x 512 chunks are 16,384
   boxes). A patch straddling a region border reads the neighbour's chunks;
   :meth:`PatchSet.chunk_ids` answers which, for any chunking of the arrays
   sampled together.

3. **Splits** (:mod:`insitu.plan.patches_split`): chunk-aligned cells over the
   patch dimensions assigned to train/val/test (:func:`split_by_region`); a
   patch belongs to a split only when it reads nothing but that split's cells.

4. **Order** (:mod:`insitu.plan.patches_order`): blocks of ``block_chunks``
   neighbouring regions, permuted per (seed, epoch), dealt to ranks (disjoint,
   equal counts), patches shuffled across each block's regions; random sampling
   draws ``patches_per_epoch`` positions uniformly, grouped by region. Batch
   ``k`` follows without generating earlier blocks
   (:meth:`PatchOrder.batch`).

What each block reads, and the read amplification a pool budget gives
(decodes per distinct chunk), is :mod:`insitu.plan.patches_reads`.

**Memory model.** The plan holds, per box, a region number and two position
indices per axis (``8 * (2 * ndim + 1)`` bytes); per region a block number; per
block a size; a block's patches (at most ``block_chunks`` regions' worth) exist
only while that block is served. Decoded data: a block pins the chunks its
patches touch, its own regions' plus a halo of neighbour chunks where patches
straddle, so the pool must hold about ``block_chunks * (1 + halo)`` chunks per
block in flight; with room for a block's neighbours until their blocks come up,
every chunk is decoded once per epoch.

**When patches beat whole cross-sections.** When a cross-section does not fit a
batch (a 40,000 x 40,000 mosaic), or the model sees windows anyway: decoding the
whole cross-section and cropping costs ``cross-section / patch`` decodes per
patch, where planning in chunk space decodes each chunk once for all the
patches that touch it.

How the engine consumes a plan (:mod:`insitu.engine.patch_epoch`): per block
entry ``i`` of a :class:`PatchOrder`, it pins the chunks :func:`patch_array_needs`
lists for every array (an :class:`~insitu.plan.reads.ArrayNeeds` of chunk ids
whose next uses keep halo chunks cached for the neighbouring blocks), each chunk
one pool slot (:mod:`insitu.arrays.chunk_units`), then gathers each patch from
the pinned chunks (:mod:`insitu.engine.patch_gather`): the origins are
:meth:`PatchOrder.origins_between`, the valid part of a padded patch
:meth:`PatchGrid.valid_extent`. :mod:`insitu.plan.patch_plans` makes these
plans per (view, epoch) for the dataset.
"""

from __future__ import annotations

from collections.abc import Sequence

from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError
from insitu.plan.patches_order import PATCH_ORDER_VERSION, PatchOrder, block_tile, order_patches
from insitu.plan.patches_reads import (
    ReadAmplification,
    block_chunk_needs,
    patch_array_needs,
    read_amplification,
)
from insitu.plan.patches_regions import PatchSet, RegionLayout
from insitu.plan.patches_spec import AxisPositions, PatchGrid, PatchSpec
from insitu.plan.patches_split import SpatialSplit, split_by_region
from insitu.plan.weighted_draw import WeightedDraw

__all__ = [
    "PATCH_ORDER_VERSION",
    "AxisPositions",
    "PatchGrid",
    "PatchOrder",
    "PatchSet",
    "PatchSpec",
    "ReadAmplification",
    "RegionLayout",
    "SpatialSplit",
    "block_chunk_needs",
    "block_tile",
    "epoch_patches",
    "order_patches",
    "patch_array_needs",
    "plan_patches",
    "read_amplification",
    "split_by_region",
]


def plan_patches(
    geom: ArrayGeometry,
    spec: PatchSpec,
    *,
    region_chunks: Sequence[int] | None = None,
    sample_span: tuple[int, int] | None = None,
    split: SpatialSplit | None = None,
    split_name: str | None = None,
) -> PatchSet:
    """The patches of ``spec`` on the reference array ``geom``, as boxes per region: all of them,
    or with ``split`` those of ``split_name`` that read only its cells.

    ``region_chunks`` sizes a region in reference chunks per axis (default one chunk);
    ``sample_span`` bounds the origins along the sample axis (the anchors a window leaves).
    """
    grid = spec.resolve(geom, sample_span=sample_span)
    layout = RegionLayout.of(grid, geom.chunk_shape, region_chunks)
    if split is None:
        return layout.all_patches()
    if split_name is None:
        raise ConfigError("split_name must name the split to plan when a spatial split is given")
    return split.patches(layout, split_name)


def epoch_patches(
    patches: PatchSet,
    spec: PatchSpec,
    *,
    epoch: int,
    seed: int = 0,
    split: str = "train",
    shuffle: bool = True,
    block_chunks: int = 16,
    first_block_chunks: int | None = None,
    rank: int = 0,
    world_size: int = 1,
    uneven: str = "drop",
    weighted: WeightedDraw | None = None,
) -> PatchOrder:
    """One rank's order of ``patches`` for ``epoch``: every position once (``spec.sampling ==
    "grid"``) or ``spec.epoch_draws`` draws (``"random"``, by default in proportion to the
    positions ``patches`` holds), uniform or by ``weighted``; see :func:`order_patches`."""
    draws = spec.epoch_draws(patches.grid, patches.n_patches) if spec.sampling == "random" else None
    return order_patches(
        patches,
        epoch=epoch,
        seed=seed,
        split=split,
        shuffle=shuffle,
        block_chunks=block_chunks,
        first_block_chunks=first_block_chunks,
        rank=rank,
        world_size=world_size,
        uneven=uneven,
        draws=draws,
        weighted=weighted if draws is not None else None,
    )
