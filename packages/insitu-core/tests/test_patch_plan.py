"""The patch planner: positions per edge policy, regions and the chunks they read, the epoch order
(every grid position once, deterministic per (seed, epoch), disjoint equal ranks, batch k without
earlier blocks), random draws uniform over positions, and errors that name the bad value."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError
from insitu.plan.patches import (
    AxisPositions,
    PatchSpec,
    block_chunk_needs,
    epoch_patches,
    order_patches,
    patch_array_needs,
    plan_patches,
    read_amplification,
)


def geom(shape, chunks, dims=None, sample_axis=0) -> ArrayGeometry:
    if dims is None and len(shape) <= 3:
        dims = tuple("zyx"[-len(shape) :])
    return ArrayGeometry(
        name="a",
        path="a",
        shape=tuple(shape),
        dtype=np.dtype("f4"),
        chunk_shape=tuple(chunks),
        sample_axis=sample_axis,
        dimension_names=dims,
    )


def reference_origins(n: int, size: int, stride: int, edge: str) -> list[int]:
    """The origins along one axis, written out the long way."""
    if size > n:
        return [0]
    complete = list(range(0, n - size + 1, stride))
    if edge == "drop":
        return complete
    if edge == "shift":
        return complete + ([n - size] if complete[-1] + size < n else [])
    out = []
    for o in range(0, n, stride):
        out.append(o)
        if o + size >= n:
            break
    return out


def every_position(order) -> np.ndarray:
    return order.patches_between(0, order.n_patches)


# -- positions along one axis ------------------------------------------------------------------------
@settings(deadline=None)  # a shared CI machine can stall any one example
@given(
    n=st.integers(1, 60),
    size=st.integers(1, 20),
    stride=st.integers(1, 25),
    edge=st.sampled_from(["shift", "pad", "drop"]),
)
def test_axis_positions_match_the_written_out_rule(n, size, stride, edge):
    assume(size <= n or edge == "pad")
    axis = AxisPositions.of(n, size, stride, edge)
    want = reference_origins(n, size, stride, edge)
    assert axis.all_origins().tolist() == want
    # count_below: the positions starting before each element
    xs = np.arange(n + 2)
    assert axis.count_below(xs).tolist() == [sum(o < x for o in want) for x in xs.tolist()]
    if edge in ("shift", "pad") and stride <= size:
        covered = np.zeros(n, dtype=bool)
        for o, v in zip(want, axis.valid_extent(np.array(want)).tolist(), strict=True):
            covered[o : o + v] = True
        assert covered.all(), "shift and pad cover every element"
    if edge != "pad":
        assert (np.array(want) + size <= n).all(), "only pad runs past the edge"


def test_pad_reports_the_valid_extent_of_each_patch():
    g = geom((10, 7), (4, 4), dims=("y", "x"))
    grid = PatchSpec({"y": 4, "x": 4}, edge="pad").resolve(g)
    origins = grid.origins(np.arange(grid.n_positions))
    assert sorted({tuple(o) for o in origins.tolist()}) == [(y, x) for y in (0, 4, 8) for x in (0, 4)]
    valid = grid.valid_extent(origins)
    assert {tuple(v) for v in valid.tolist()} == {(4, 4), (4, 3), (2, 4), (2, 3)}


def test_a_patch_larger_than_its_dimension_is_one_padded_patch():
    grid = PatchSpec({"y": 8, "x": 3}, edge="pad").resolve(geom((5, 6), (5, 3), dims=("y", "x")))
    assert grid.counts == (1, 2)
    assert grid.valid_extent(grid.origins(np.arange(2))).tolist() == [[5, 3], [5, 3]]


def test_unnamed_dimensions_keep_their_extent_and_the_sample_axis_is_one_index():
    g = geom((6, 20, 30, 3), (2, 10, 10, 3), dims=("time", "lat", "lon", "band"))
    grid = PatchSpec({"lat": 10, "lon": 15}).resolve(g)
    assert grid.patch_shape == (1, 10, 15, 3)
    assert grid.counts == (6, 2, 2, 1)
    assert grid.n_positions == 24


# -- errors name the value --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "shape", "message"),
    [
        (dict(size={"y": 300}), (200, 10), r"patch size 300 along 'y' is larger than the dimension \(200"),
        (dict(size={"q": 3}), (20, 10), r"dimension 'q'.*dimensions: \['y', 'x'\]"),
        (
            dict(size={"y": 4}, stride={"y": 0}),
            (20, 10),
            r"patch_stride\['y'\] must be a positive integer, got 0",
        ),
        (dict(size={"y": 4}, stride={"y": -2}), (20, 10), r"got -2"),
        (dict(size={"y": 4}, stride={"x": 2}), (20, 10), r"patch_stride names \['x'\]"),
        (dict(size={"y": 0}), (20, 10), r"patch\['y'\] must be a positive integer, got 0"),
        (
            dict(size={"y": 4}, patches_per_epoch=10),
            (20, 10),
            r"patches_per_epoch=10 needs patch_sampling='random'",
        ),
        (dict(size={"y": 4}, sampling="grid-ish"), (20, 10), r"patch_sampling='grid-ish'"),
        (dict(size={"y": 4}, edge="wrap"), (20, 10), r"patch_edge='wrap'"),
        (dict(size={"y": 30}, edge="drop"), (20, 10), r"larger than the dimension \(20"),
    ],
)
def test_bad_patches_are_refused_by_name(kwargs, shape, message):
    with pytest.raises(ConfigError, match=message):
        PatchSpec(**kwargs).resolve(geom(shape, (10, 10), dims=("y", "x")))


def test_a_patch_larger_than_its_dimension_is_accepted_with_pad():
    grid = PatchSpec({"y": 300}, edge="pad").resolve(geom((200, 10), (10, 10), dims=("y", "x")))
    assert grid.counts == (1, 1)


# -- regions and the chunks they read --------------------------------------------------------------------
@st.composite
def layouts(draw):
    ndim = draw(st.integers(1, 3))
    shape = [draw(st.integers(3, 16)) for _ in range(ndim)]
    chunks = [draw(st.integers(1, s)) for s in shape]
    named = [d for d in range(ndim) if draw(st.booleans())] or [ndim - 1]
    edge = draw(st.sampled_from(["shift", "pad", "drop"]))
    size, stride = {}, {}
    for d in named:
        size[d] = draw(st.integers(1, shape[d] if edge != "pad" else shape[d] + 3))
        if draw(st.booleans()):
            stride[d] = draw(st.integers(1, size[d] + 2))
    region = [draw(st.integers(1, 3)) for _ in range(ndim)]
    other = [draw(st.integers(1, s)) for s in shape]  # another array's chunking, same grid
    return dict(
        shape=shape, chunks=chunks, size=size, stride=stride or None, edge=edge, region=region, other=other
    )


def build(case):
    g = geom(case["shape"], case["chunks"], dims=None)
    spec = PatchSpec(case["size"], stride=case["stride"], edge=case["edge"])
    return spec, plan_patches(g, spec, region_chunks=case["region"])


def brute_chunks(grid, positions, chunks) -> set[int]:
    """The flat chunk ids the patches at ``positions`` read, patch by patch."""
    per_axis = [-(-n // c) for n, c in zip(grid.shape, chunks, strict=True)]
    out = set()
    for origin in grid.origins(positions).tolist():
        ranges = []
        for o, axis, c in zip(origin, grid.axes, chunks, strict=True):
            last = min(o + axis.size, axis.length) - 1
            ranges.append(range(o // c, last // c + 1))
        out.update(int(np.ravel_multi_index(idx, per_axis)) for idx in itertools.product(*ranges))
    return out


@settings(max_examples=60, deadline=None)
@given(case=layouts())
def test_every_box_holds_the_positions_whose_origin_is_in_its_region(case):
    _, ps = build(case)
    layout = ps.layout
    seen = []
    for b in range(ps.n_boxes):
        positions = ps.box_positions(b)
        seen.append(positions)
        origins = ps.grid.origins(positions)
        region = np.ravel_multi_index(
            tuple(origins[:, d] // layout.extent[d] for d in range(ps.grid.ndim)), layout.n_regions_per_axis
        )
        assert (region == ps.region[b]).all()
    got = np.sort(np.concatenate(seen)) if seen else np.zeros(0)
    assert got.tolist() == list(range(ps.grid.n_positions))


@settings(max_examples=60, deadline=None)
@given(case=layouts())
def test_chunks_read_per_box_equal_the_patches_footprints_in_any_chunking(case):
    _, ps = build(case)
    for chunks in (case["chunks"], case["other"]):
        for b in range(ps.n_boxes):
            want = brute_chunks(ps.grid, ps.box_positions(b), chunks)
            assert set(ps.chunk_ids([b], chunks).tolist()) == want
            assert set(ps.patch_chunk_ids(ps.box_positions(b), chunks).tolist()) == want


# -- the epoch order -----------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    case=layouts(),
    block_chunks=st.integers(1, 6),
    first=st.none() | st.integers(1, 3),
    world=st.integers(1, 3),
    uneven=st.sampled_from(["drop", "pad"]),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**16),
    epoch=st.integers(0, 3),
)
def test_grid_order_delivers_every_position_once_over_disjoint_equal_ranks(
    case, block_chunks, first, world, uneven, shuffle, seed, epoch
):
    spec, ps = build(case)
    holding = int((ps.region_counts > 0).sum())
    world = min(world, holding)
    orders = [
        epoch_patches(
            ps,
            spec,
            epoch=epoch,
            seed=seed,
            shuffle=shuffle,
            block_chunks=block_chunks,
            first_block_chunks=first,
            rank=r,
            world_size=world,
            uneven=uneven,
        )
        for r in range(world)
    ]
    assert len({o.n_patches for o in orders}) == 1, "every rank delivers as many patches"
    real = []
    for o in orders:
        got = every_position(o)
        assert len(got) == o.n_patches
        real.append(got if o.n_valid < 0 else got[: o.n_valid])
        if o.n_valid >= 0:  # padding repeats the rank's own patches
            assert set(got[o.n_valid :].tolist()) <= set(got[: o.n_valid].tolist())
    flat = np.concatenate(real)
    assert len(flat) == len(set(flat.tolist())), "no position twice, on one rank or across ranks"
    if uneven == "pad":
        assert max(len(r) for r in real) == orders[0].n_patches, "padded up to the longest rank, no further"
    regions = [set(np.concatenate([o.block_regions(i) for i in range(o.n_blocks)]).tolist()) for o in orders]
    for a, b in itertools.combinations(regions, 2):
        assert not a & b, "ranks read disjoint regions"
    if world == 1 or uneven == "pad":
        assert sorted(flat.tolist()) == list(range(ps.grid.n_positions))
    # Block after block: a block's patches come from its own regions.
    o = orders[0]
    for i in range(o.n_blocks):
        mine = set(o.block_regions(i).tolist())
        origins = ps.grid.origins(o.block_positions(i))
        region = np.ravel_multi_index(
            tuple(origins[:, d] // ps.layout.extent[d] for d in range(ps.grid.ndim)),
            ps.layout.n_regions_per_axis,
        )
        assert set(region.tolist()) <= mine
        assert len(mine) <= block_chunks


@settings(max_examples=40, deadline=None)
@given(case=layouts(), batch=st.integers(1, 7), block_chunks=st.integers(1, 4))
def test_batch_k_is_the_same_patches_without_generating_earlier_blocks(case, batch, block_chunks):
    spec, ps = build(case)
    full = every_position(epoch_patches(ps, spec, epoch=2, seed=5, block_chunks=block_chunks))
    fresh = epoch_patches(ps, spec, epoch=2, seed=5, block_chunks=block_chunks)
    n = fresh.n_batches(batch)
    for k in reversed(range(n)):  # a resume reads batch k first
        assert fresh.batch(k, batch).tolist() == full[k * batch : (k + 1) * batch].tolist()


@settings(max_examples=30, deadline=None)
@given(case=layouts(), block_chunks=st.integers(1, 4))
def test_block_chunk_needs_are_the_footprints_of_each_blocks_patches(case, block_chunks):
    spec, ps = build(case)
    holding = int((ps.region_counts > 0).sum())
    o = epoch_patches(ps, spec, epoch=1, block_chunks=block_chunks, world_size=min(2, holding), uneven="drop")
    for chunks in (case["chunks"], case["other"]):
        needs = block_chunk_needs(o, chunks)
        for i in range(o.n_blocks):
            assert set(needs[i]) == brute_chunks(ps.grid, o.block_positions(i), chunks)


def test_the_order_is_a_function_of_seed_and_epoch():
    g = geom((64, 64), (16, 16), dims=("y", "x"))
    spec = PatchSpec({"y": 8, "x": 8}, stride={"y": 6, "x": 6})
    ps = plan_patches(g, spec)
    one = every_position(epoch_patches(ps, spec, epoch=0, seed=3, block_chunks=4))
    again = every_position(epoch_patches(ps, spec, epoch=0, seed=3, block_chunks=4))
    other_epoch = every_position(epoch_patches(ps, spec, epoch=1, seed=3, block_chunks=4))
    other_seed = every_position(epoch_patches(ps, spec, epoch=0, seed=4, block_chunks=4))
    assert one.tolist() == again.tolist()
    assert one.tolist() != other_epoch.tolist()
    assert one.tolist() != other_seed.tolist()
    assert sorted(one.tolist()) == sorted(other_epoch.tolist()) == list(range(ps.grid.n_positions))
    unshuffled = every_position(epoch_patches(ps, spec, epoch=0, shuffle=False, block_chunks=4))
    assert (
        unshuffled.tolist()
        == every_position(epoch_patches(ps, spec, epoch=7, shuffle=False, block_chunks=4)).tolist()
    )


def test_a_block_mixes_patches_across_its_regions():
    g = geom((64, 64), (16, 16), dims=("y", "x"))
    spec = PatchSpec({"y": 4, "x": 4})
    o = epoch_patches(plan_patches(g, spec), spec, epoch=0, block_chunks=4)
    assert o.tile == (2, 2)
    positions = o.block_positions(0)
    origins = o.patches.grid.origins(positions[:16])
    regions = {(y // 16, x // 16) for y, x in origins.tolist()}
    assert len(regions) > 1, "the first 16 patches of a 4-region block come from more than one region"


def test_window_offsets_move_the_chunks_read_along_the_sample_axis():
    g = geom((40, 32, 32), (4, 16, 16), dims=("time", "y", "x"))
    spec = PatchSpec({"y": 16, "x": 16})
    ps = plan_patches(g, spec, sample_span=(0, 36))  # a +4 target leaves anchors 0..35
    assert ps.grid.counts == (36, 2, 2)
    o = order_patches(ps, epoch=0, shuffle=False, block_chunks=1)
    now = block_chunk_needs(o, (4, 16, 16))
    ahead = block_chunk_needs(o, (4, 16, 16), offset=4)
    per_time_chunk = 2 * 2
    assert (ahead.values - now.values == per_time_chunk).all()


def test_more_ranks_than_blocks_shrink_the_blocks_and_more_than_regions_is_an_error():
    g = geom((32, 32), (16, 16), dims=("y", "x"))
    spec = PatchSpec({"y": 8, "x": 8})
    ps = plan_patches(g, spec)
    orders = [order_patches(ps, epoch=0, block_chunks=16, rank=r, world_size=4) for r in range(4)]
    assert all(o.n_patches == 4 for o in orders)
    with pytest.raises(ConfigError, match=r"world_size=5 exceeds the 4 region\(s\)"):
        order_patches(ps, epoch=0, world_size=5)


# -- random positions ----------------------------------------------------------------------------------------
def test_random_draws_are_deterministic_valid_and_differ_by_epoch():
    g = geom((50, 70), (16, 16), dims=("y", "x"))
    spec = PatchSpec({"y": 10, "x": 12}, sampling="random", patches_per_epoch=500)
    ps = plan_patches(g, spec)
    a = every_position(epoch_patches(ps, spec, epoch=0, seed=1))
    b = every_position(epoch_patches(ps, spec, epoch=0, seed=1))
    c = every_position(epoch_patches(ps, spec, epoch=1, seed=1))
    assert len(a) == 500
    assert a.tolist() == b.tolist()
    assert a.tolist() != c.tolist()
    origins = ps.grid.origins(a)
    assert (origins >= 0).all()
    assert (origins + np.array([10, 12]) <= np.array([50, 70])).all(), (
        "stride 1: every origin where the patch fits"
    )


def test_random_draws_are_uniform_over_regions():
    """Chi-square over the regions' draw counts against positions-proportional expectations:
    with a fixed seed, the statistic must stay below df + 4 * sqrt(2 df) (about p = 1e-4 for
    this df, by the normal approximation of the chi-square law)."""
    g = geom((300, 200), (32, 32), dims=("y", "x"))  # edge regions hold fewer positions
    spec = PatchSpec({"y": 20, "x": 24}, sampling="random", patches_per_epoch=200_000)
    ps = plan_patches(g, spec)
    o = epoch_patches(ps, spec, epoch=3, seed=11)
    origins = ps.grid.origins(every_position(o))
    region = np.ravel_multi_index((origins[:, 0] // 32, origins[:, 1] // 32), ps.layout.n_regions_per_axis)
    observed = np.bincount(region, minlength=ps.layout.n_regions)
    weights = ps.region_counts
    held = weights > 0
    expected = 200_000 * weights[held] / weights.sum()
    chi2 = float(((observed[held] - expected) ** 2 / expected).sum())
    df = int(held.sum()) - 1
    assert chi2 < df + 4 * math.sqrt(2 * df), (chi2, df)
    assert observed[~held].sum() == 0


def test_random_ranks_draw_from_disjoint_regions_in_equal_numbers():
    g = geom((64, 64), (16, 16), dims=("y", "x"))
    spec = PatchSpec({"y": 8, "x": 8}, sampling="random", patches_per_epoch=1000)
    ps = plan_patches(g, spec)
    orders = [epoch_patches(ps, spec, epoch=0, rank=r, world_size=3, block_chunks=2) for r in range(3)]
    assert len({o.n_patches for o in orders}) == 1
    regions = [set(np.concatenate([o.block_regions(i) for i in range(o.n_blocks)]).tolist()) for o in orders]
    for a, b in itertools.combinations(regions, 2):
        assert not a & b


def test_random_draws_default_to_the_non_overlapping_grids_count():
    g = geom((64, 48), (16, 16), dims=("y", "x"))
    spec = PatchSpec({"y": 8, "x": 8}, sampling="random")
    ps = plan_patches(g, spec)
    assert epoch_patches(ps, spec, epoch=0).n_patches == 8 * 6


# -- read amplification ----------------------------------------------------------------------------------------
def test_read_amplification_is_one_when_the_pool_holds_every_chunk_and_grows_as_it_shrinks():
    g = geom((256, 256), (32, 32), dims=("y", "x"))
    spec = PatchSpec({"y": 24, "x": 24}, stride={"y": 20, "x": 20})  # straddles chunk borders
    ps = plan_patches(g, spec)
    o = epoch_patches(ps, spec, epoch=0, block_chunks=4)
    needs = block_chunk_needs(o, (32, 32))
    everything = read_amplification(needs, 64)
    assert everything.distinct == 64
    assert everything.ratio == 1.0
    ratios = [read_amplification(needs, b).ratio for b in (1, 4, 9, 16, 32, 64)]
    assert ratios == sorted(ratios, reverse=True)
    assert ratios[0] > 1.0


# -- named cases: every position once and every element covered -------------------------------------------
CASES = {
    "2d-aligned": ((64, 48), (16, 16), ("y", "x"), {"y": 16, "x": 16}, None),
    "2d-straddling": ((60, 50), (16, 16), ("y", "x"), {"y": 12, "x": 10}, None),
    "2d-overlap": ((60, 50), (16, 16), ("y", "x"), {"y": 12, "x": 10}, {"y": 8, "x": 6}),
    "3d-volume": (
        (20, 40, 36),
        (8, 16, 16),
        ("z", "y", "x"),
        {"z": 6, "y": 12, "x": 10},
        {"z": 4, "y": 12, "x": 7},
    ),
    "3d-time-window-of-lat-lon": (
        (9, 30, 40),
        (2, 16, 16),
        ("time", "lat", "lon"),
        {"lat": 8, "lon": 12},
        None,
    ),
}


@pytest.mark.parametrize("edge", ["shift", "pad", "drop"])
@pytest.mark.parametrize("name", list(CASES))
def test_named_cases_deliver_every_position_once_and_cover_the_array(name, edge):
    shape, chunks, dims, size, stride = CASES[name]
    g = geom(shape, chunks, dims)
    spec = PatchSpec(size, stride=stride, edge=edge)
    ps = plan_patches(g, spec)
    order = epoch_patches(ps, spec, epoch=1, seed=9, block_chunks=4)
    got = every_position(order)
    assert sorted(got.tolist()) == list(range(ps.grid.n_positions))
    covered = np.zeros(shape, dtype=bool)
    origins = ps.grid.origins(got)
    for o, v in zip(origins.tolist(), ps.grid.valid_extent(origins).tolist(), strict=True):
        covered[tuple(slice(a, a + n) for a, n in zip(o, v, strict=True))] = True
    assert covered.all() == (
        edge != "drop"
        or all(
            (n - s) % t == 0
            for n, s, t in zip(shape, ps.grid.patch_shape, (a.stride for a in ps.grid.axes), strict=True)
        )
    )


@pytest.mark.parametrize(("patch", "stride"), [(384, 384), (384, 256), (96, 80)])
def test_read_amplification_at_a_tenth_of_the_array_stays_low_for_patches_under_a_chunk(patch, stride):
    """Patches up to three quarters of a chunk wide, straddling chunk borders, at a pool of a tenth
    of the array's chunks: the model gives 1.07-1.12 with blocks of 16 regions (1.3-1.5 with 4);
    the bound asserted is the issue's 1.5."""
    g = geom((8192, 8192), (512, 512), ("y", "x"))
    spec = PatchSpec({"y": patch, "x": patch}, stride={"y": stride, "x": stride})
    ps = plan_patches(g, spec)
    order = epoch_patches(ps, spec, epoch=0, block_chunks=16)
    model = read_amplification(block_chunk_needs(order, (512, 512)), 256 // 10)
    assert model.distinct == 256
    assert model.ratio <= 1.5, model


def test_array_needs_union_the_offsets_and_give_each_chunks_next_and_previous_block():
    g = geom((24, 32, 32), (4, 16, 16), dims=("time", "y", "x"))
    spec = PatchSpec({"y": 12, "x": 12}, stride={"y": 10, "x": 10})  # straddles y and x chunks
    ps = plan_patches(g, spec, sample_span=(0, 18))  # a +6 target leaves anchors 0..17
    order = epoch_patches(ps, spec, epoch=2, seed=1, block_chunks=4)
    needs = patch_array_needs(order, (2, 16, 16), offsets=(0, 6, 0))
    per_block = [
        set(block_chunk_needs(order, (2, 16, 16))[b]) | set(block_chunk_needs(order, (2, 16, 16), 6)[b])
        for b in range(order.n_blocks)
    ]
    assert needs.next_use is not None
    assert needs.prev_use is not None
    for b, want in enumerate(per_block):
        got = needs.block(b).slabs.tolist()
        assert len(got) == len(set(got))
        assert set(got) == want
        for chunk, nxt in zip(got, needs.block(b).next_use.tolist(), strict=True):
            later = [j for j in range(b + 1, order.n_blocks) if chunk in per_block[j]]
            assert nxt == (later[0] if later else -1)
    assert read_amplification(needs, 10_000).ratio == 1.0


def test_the_first_block_ramps_up_so_the_first_batch_waits_for_few_chunks():
    g = geom((128, 128), (16, 16), dims=("y", "x"))
    spec = PatchSpec({"y": 8, "x": 8})
    ps = plan_patches(g, spec)
    plain = epoch_patches(ps, spec, epoch=0, block_chunks=16)
    ramped = epoch_patches(ps, spec, epoch=0, block_chunks=16, first_block_chunks=1)
    sizes = [len(ramped.block_regions(i)) for i in range(6)]
    assert sizes == [1, 2, 4, 8, 1, 16], "1, 2, 4, 8 regions of the first block, then whole blocks"
    assert len(block_chunk_needs(ramped, (16, 16))[0]) == 1
    assert set(ramped.batch(0, 4).tolist()) <= set(ramped.block_positions(0).tolist())
    assert sorted(every_position(ramped).tolist()) == sorted(every_position(plain).tolist())
    assert (
        ramped.patches_between(4 * 16, ramped.n_patches).tolist()[-64:]
        == every_position(plain).tolist()[-64:]
    )
