"""Patch planning at archive scale: a 65,536 x 65,536 raster in 512 x 512 chunks with 32 x 32
patches (4.2 million positions) plans as 16,384 regions, whatever the number of patches, and any
batch of it follows from a single block (``bench/patch_plan_scale.py`` times it)."""

from __future__ import annotations

import tracemalloc

import numpy as np

from insitu.arrays.geometry import ArrayGeometry
from insitu.plan.patches import PatchSpec, block_chunk_needs, epoch_patches, plan_patches, read_amplification

SIDE, CHUNK, PATCH = 65_536, 512, 32


def raster() -> ArrayGeometry:
    return ArrayGeometry(
        name="mosaic",
        path="mosaic",
        shape=(SIDE, SIDE),
        dtype=np.dtype("u1"),
        chunk_shape=(CHUNK, CHUNK),
        dimension_names=("y", "x"),
    )


def test_four_million_positions_plan_in_memory_that_grows_with_regions():
    spec = PatchSpec({"y": PATCH, "x": PATCH})
    tracemalloc.start()
    try:
        patches = plan_patches(raster(), spec)
        order = epoch_patches(patches, spec, epoch=0, seed=1, block_chunks=16)
        last = order.n_batches(256) - 1
        first_batch, last_batch = order.batch(0, 256), order.batch(last, 256)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    regions = (SIDE // CHUNK) ** 2
    assert patches.grid.n_positions == (SIDE // PATCH) ** 2 == 4_194_304
    assert order.n_patches == 4_194_304
    assert patches.n_boxes == regions
    # Plan arrays: per box a region and two indices per axis; per region and block a few integers.
    assert patches.nbytes == regions * 8 * (1 + 2 * 2)
    assert order.nbytes <= regions * 8 * 4
    # Everything planning allocated at its peak: regions' worth of arrays and one block of patches,
    # never a list of 4.2 million positions (33 MB as int64).
    assert peak < 16 << 20, peak
    assert len(first_batch) == len(last_batch) == 256
    assert len(set(first_batch.tolist()) | set(last_batch.tolist())) == 512


def test_many_ranks_shard_the_raster_into_equal_disjoint_shares():
    spec = PatchSpec({"y": PATCH, "x": PATCH})
    patches = plan_patches(raster(), spec)
    orders = [epoch_patches(patches, spec, epoch=0, rank=r, world_size=64) for r in (0, 63)]
    assert orders[0].n_patches == orders[1].n_patches == 4_194_304 // 64
    a, b = (set(o.batch(0, 1024).tolist()) for o in orders)
    assert not a & b


def test_aligned_patches_decode_each_chunk_once_per_epoch():
    spec = PatchSpec({"y": PATCH, "x": PATCH})
    patches = plan_patches(raster(), spec)
    order = epoch_patches(patches, spec, epoch=0, block_chunks=16)
    needs = block_chunk_needs(order, (CHUNK, CHUNK))
    model = read_amplification(needs, 16)
    assert model.distinct == (SIDE // CHUNK) ** 2
    assert model.ratio == 1.0
