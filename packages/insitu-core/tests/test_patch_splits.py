"""Spatial splits: chunk-aligned cells assigned to splits, a patch kept only where it reads its own
split's cells (so no validation patch overlaps a training cell), and a JSON round-trip."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError
from insitu.plan.patches import PatchSpec, SpatialSplit, epoch_patches, plan_patches, split_by_region
from insitu.plan.splits import split_by_chunk, split_by_coord


def geom(shape, chunks, dims) -> ArrayGeometry:
    return ArrayGeometry(
        name="img",
        path="img",
        shape=tuple(shape),
        dtype=np.dtype("u1"),
        chunk_shape=tuple(chunks),
        dimension_names=tuple(dims),
    )


def footprint_cells(split: SpatialSplit, origin, patch_shape) -> list[int]:
    """The cells (flat ids) one patch reads, worked out element range by element range."""
    ranges = []
    for a, e in zip(split.axes, split.cell_extent, strict=True):
        last = min(origin[a] + patch_shape[a], split.shape[a]) - 1
        ranges.append(range(origin[a] // e, last // e + 1))
    return [int(np.ravel_multi_index(c, split.cell_grid)) for c in itertools.product(*ranges)]


def kept_by_rule(split: SpatialSplit, grid, name: str) -> set[int]:
    mine = set(split.splits[name].tolist())
    origins = grid.origins(np.arange(grid.n_positions))
    return {
        p for p, o in enumerate(origins.tolist()) if set(footprint_cells(split, o, grid.patch_shape)) <= mine
    }


@st.composite
def cases(draw):
    ndim = draw(st.sampled_from([2, 3]))
    dims = ("z", "y", "x")[-ndim:]
    shape = [draw(st.integers(6, 30 if ndim == 2 else 14)) for _ in range(ndim)]
    chunks = [draw(st.integers(2, 8)) for _ in range(ndim)]
    edge = draw(st.sampled_from(["shift", "pad", "drop"]))
    patch_dims = dims[-2:] if ndim == 2 or draw(st.booleans()) else dims
    size = {d: draw(st.integers(1, min(shape[dims.index(d)], 12))) for d in patch_dims}
    stride = {d: draw(st.integers(1, size[d] + 2)) for d in patch_dims}
    split_dims = [d for d in patch_dims if draw(st.booleans())] or [patch_dims[-1]]
    region = [draw(st.integers(1, 2)) for _ in range(ndim)]
    cell = {d: region[dims.index(d)] * draw(st.integers(1, 3)) for d in split_dims}
    return dict(
        dims=dims,
        shape=shape,
        chunks=chunks,
        edge=edge,
        size=size,
        stride=stride,
        split_dims=split_dims,
        region=region,
        cell=cell,
        layout=draw(st.sampled_from(["blocks", "checkerboard"])),
        seed=draw(st.integers(0, 99)),
    )


@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_a_split_keeps_exactly_the_patches_that_read_only_its_cells(case):
    g = geom(case["shape"], case["chunks"], case["dims"])
    spec = PatchSpec(case["size"], stride=case["stride"], edge=case["edge"])
    n_cells = 1
    for d in case["split_dims"]:
        a = case["dims"].index(d)
        n_cells *= -(-case["shape"][a] // min(case["cell"][d] * case["chunks"][a], case["shape"][a]))
    assume(n_cells >= 2)
    # A patch as long as a split dimension crosses every cell of it: refused by name (tested below).
    assume(all(case["size"][d] < case["shape"][case["dims"].index(d)] for d in case["split_dims"]))
    split = split_by_region(
        g,
        (0.5, 0.5),
        names=("train", "val"),
        dims=case["split_dims"],
        cell_chunks=case["cell"],
        layout=case["layout"],
        seed=case["seed"],
    )
    kept = {}
    for name in split.names:
        ps = plan_patches(g, spec, region_chunks=case["region"], split=split, split_name=name)
        got = ps.positions(range(ps.n_boxes)).tolist()
        assert len(got) == len(set(got))
        assert set(got) == kept_by_rule(split, ps.grid, name)
        kept[name] = set(got)
    assert not kept["train"] & kept["val"]
    assert SpatialSplit.from_json(split.to_json()) == split


def test_no_validation_patch_overlaps_a_training_cell():
    g = geom((256, 256), (32, 32), ("y", "x"))
    split = split_by_region(g, (0.6, 0.2, 0.2), dims=("y", "x"), cell_chunks=2, layout="checkerboard", seed=4)
    spec = PatchSpec({"y": 24, "x": 24}, stride={"y": 16, "x": 16})
    train_cells = set(split.splits["train"].tolist())
    val = plan_patches(g, spec, split=split, split_name="val")
    order = epoch_patches(val, spec, epoch=0)
    origins = val.grid.origins(order.patches_between(0, order.n_patches))
    assert len(origins)
    for o in origins.tolist():
        assert not set(footprint_cells(split, o, val.grid.patch_shape)) & train_cells
    whole = plan_patches(g, spec)
    parts = sum(plan_patches(g, spec, split=split, split_name=n).n_patches for n in split.names)
    assert parts < whole.n_patches, "patches across a split border are left out"


def test_blocks_are_contiguous_runs_of_cells_and_the_json_round_trips():
    g = geom((64, 64), (8, 8), ("y", "x"))
    split = split_by_region(
        g, (0.75, 0.25), names=("train", "test"), dims=("y", "x"), cell_chunks={"y": 2, "x": 2}
    )
    assert split.cell_grid == (4, 4)
    assert split.splits["train"].tolist() == list(range(12))
    assert split.splits["test"].tolist() == list(range(12, 16))
    again = SpatialSplit.from_json(split.to_json())
    assert again == split
    assert again.cell_map().tolist() == [[0] * 4, [0] * 4, [0] * 4, [1] * 4]


def test_spatial_split_errors_name_the_value():
    g = geom((64, 64), (8, 8), ("y", "x"))
    with pytest.raises(ConfigError, match=r"dimension 'q'"):
        split_by_region(g, dims=("q",))
    with pytest.raises(ConfigError, match=r"layout='stripes'"):
        split_by_region(g, dims=("y",), layout="stripes")
    with pytest.raises(ConfigError, match=r"cell_chunks for 'x' must be a positive integer, got 0"):
        split_by_region(g, dims=("x",), cell_chunks=0)
    with pytest.raises(ConfigError, match=r"would get no cell"):
        split_by_region(g, dims=("x",), cell_chunks=8)
    split = split_by_region(g, (0.5, 0.5), names=("a", "b"), dims=("x",), cell_chunks=3)
    with pytest.raises(ConfigError, match=r"not a whole number of regions"):
        plan_patches(g, PatchSpec({"y": 4, "x": 4}), region_chunks=(1, 2), split=split, split_name="a")
    with pytest.raises(ConfigError, match=r"patch spans all of axis 1"):
        plan_patches(g, PatchSpec({"y": 4}), split=split, split_name="a")
    with pytest.raises(ConfigError, match=r"unknown split 'c'"):
        plan_patches(g, PatchSpec({"x": 4}), split=split, split_name="c")
    with pytest.raises(ConfigError, match=r"not a spatial split"):
        SpatialSplit.from_json('{"format": "insitu.SplitManifest/1"}')


def test_splits_along_time_keep_working_with_patches():
    g = geom((40, 32, 32), (4, 16, 16), ("time", "y", "x"))
    manifest = split_by_chunk(g, (0.8, 0.2), names=("train", "val"))  # chunks 0..7 | 8, 9
    split = SpatialSplit.along_samples(manifest, g)
    tiles = PatchSpec({"y": 8, "x": 8})
    val = plan_patches(g, tiles, split=split, split_name="val")
    times = val.grid.origins(val.positions(range(val.n_boxes)))[:, 0]
    assert sorted(set(times.tolist())) == list(range(32, 40))
    assert val.n_patches == 8 * 16
    # Three consecutive frames: a clip starting in the last two samples of a train chunk
    # would read val's first samples, so it belongs to neither split.
    clips = PatchSpec({"time": 3, "y": 8, "x": 8}, stride={"time": 1})
    train = plan_patches(g, clips, split=split, split_name="train")
    last = train.grid.origins(train.positions(range(train.n_boxes)))[:, 0] + 2
    assert last.max() == 31
    assert SpatialSplit.from_json(split.to_json()) == split


def test_a_split_by_coordinate_is_refused_for_patches():
    g = ArrayGeometry(
        name="t",
        path="t",
        shape=(10, 4),
        dtype=np.dtype("f4"),
        chunk_shape=(4, 4),
        dimension_names=("time", "x"),
        coords={"time": np.arange(10)},
    )
    manifest = split_by_coord(g, {"train": (0, 5), "val": (6, None)})
    with pytest.raises(ConfigError, match="may cut a chunk"):
        SpatialSplit.along_samples(manifest, g)
