"""Epoch planning as whole-array work: the plans the dataset builds (from runs of samples, with the
fast paths for aligned chunks) equal plans worked out sample by sample, and planning a million
chunks allocates a bounded number of bytes per chunk, not a Python object per chunk or block."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import insitu
from insitu.arrays.geometry import ArrayGeometry
from insitu.plan.order import epoch_order, order_with_runs
from insitu.plan.reads import EpochPlan, plan_epoch
from insitu.plan.splits import SplitManifest, split_by_chunk


def geom(name: str, n: int, c: int, offset: int = 0) -> ArrayGeometry:
    return ArrayGeometry(
        name=name, path=name, shape=(n, 2), dtype=np.dtype("f4"), chunk_shape=(c, 2), offset=offset
    )


def brute_force_needs(plan: EpochPlan, labels: list[ArrayGeometry]) -> None:
    """Every block's slabs are exactly those its anchors read, once each; next uses are exact."""
    order = plan.order
    by_path: dict[str, list[ArrayGeometry]] = {}
    for g in labels:
        by_path.setdefault(g.path, []).append(g)
    expected = {
        path: [
            {int(s) for g in gs for s in ((order.block_anchors(b) + g.offset) // g.chunk_len).tolist()}
            for b in range(order.n_blocks)
        ]
        for path, gs in by_path.items()
    }
    for path, per_block in expected.items():
        for b, want in enumerate(per_block):
            need = plan.needs[b][path]
            got = need.slabs.tolist()
            assert len(got) == len(set(got)), (path, b, got)
            assert set(got) == want, (path, b)
            for slab, nxt in zip(got, need.next_use.tolist(), strict=True):
                later = [j for j in range(b + 1, order.n_blocks) if slab in per_block[j]]
                assert nxt == (later[0] if later else -1), (path, b, slab)
        for window in (1, 2, 3):
            most = max(
                (len(set().union(*per_block[b : b + window])) for b in range(len(per_block))), default=0
            )
            assert plan.max_slots(path, window) == most, (path, window)


@st.composite
def epochs(draw):
    c = draw(st.integers(1, 6))
    n = draw(st.integers(c * 2, 90))
    world = draw(st.integers(1, 3))
    if world > -(-n // c):
        world = 1
    # Other arrays: same chunking, a coarser or finer one, and windows on either.
    c2 = draw(st.sampled_from([c, max(1, c // 2), c * 2, draw(st.integers(1, 7))]))
    offsets = draw(st.lists(st.integers(-4, 6), min_size=0, max_size=2))
    window = draw(st.integers(0, 3))
    return dict(
        n=n,
        c=c,
        c2=c2,
        offsets=offsets,
        window=window,
        world=world,
        uneven=draw(st.sampled_from(["drop", "pad"])),
        block_chunks=draw(st.integers(1, 5)),
        batch=draw(st.integers(1, 9)),
        shuffle=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
        epoch=draw(st.integers(0, 3)),
        sample_range=draw(st.sampled_from([None, (1, n - 1), (c, n)])),
    )


@settings(max_examples=200, deadline=None)
@given(epochs())
def test_the_plans_the_dataset_builds_equal_sample_by_sample_plans(e) -> None:
    n, c = e["n"], e["c"]
    x = geom("x", n, c)
    labels = [x, *(x.shift(e["window"]) for _ in [0] if e["window"])]
    labels += [geom("y", n, e["c2"], off) for off in e["offsets"]]
    offs = [g.offset for g in labels]
    lo, hi = max(0, -min(offs)), min(n, n - max(offs))
    if lo >= hi:
        return
    sr = e["sample_range"]
    if sr is not None and not (sr[0] < sr[1]):
        return
    m = split_by_chunk(x, (1.0,), sample_range=sr)
    if e["world"] > len(m.chunk_ids("train")):
        return
    kw = dict(
        anchor_range=(lo, hi),
        epoch=e["epoch"],
        seed=e["seed"],
        shuffle=e["shuffle"],
        block_chunks=e["block_chunks"],
        world_size=e["world"],
        uneven=e["uneven"],
        first_block_chunks=-(-e["batch"] // c),
    )
    try:
        orders = [order_with_runs(m, "train", rank=r, **kw) for r in range(e["world"])]
    except insitu.ConfigError:
        return  # more ranks than chunks with valid samples
    for order, runs in orders:
        assert np.array_equal(order.anchors, epoch_order(m, "train", rank=0, **kw).anchors) or e["world"] > 1
        plan = plan_epoch(order, labels, e["batch"], drop_last=False, runs=runs)
        brute_force_needs(plan, labels)
        # The same plan as one built from the anchors alone.
        plain = plan_epoch(order, labels, e["batch"], drop_last=False)
        for b in range(order.n_blocks):
            for path in plan.arrays:
                assert sorted(plan.needs[b][path].slabs.tolist()) == sorted(
                    plain.needs[b][path].slabs.tolist()
                )
    counts = {len(o.anchors) for o, _ in orders}
    assert len(counts) == 1  # every rank the same number of samples


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 4), st.booleans())
def test_the_all_view_over_chunks_cut_by_ranges_plans_each_chunk_once_a_pass(
    seed, block_chunks, shuffle
) -> None:
    # Chunks of 5 samples; split ranges cut chunks 2 and 5, which then hold runs of two splits.
    x = geom("x", 40, 5)
    m = SplitManifest(
        label="x",
        n_samples=40,
        chunk_len=5,
        splits={"train": np.arange(0, 3), "val": np.arange(2, 6), "test": np.arange(5, 8)},
        sample_range=(0, 40),
        ranges={"train": (0, 12), "val": (12, 27), "test": (27, 40)},
    )
    order, runs = order_with_runs(
        m, "all", anchor_range=(0, 37), epoch=1, seed=seed, shuffle=shuffle, block_chunks=block_chunks
    )
    assert sorted(order.anchors.tolist()) == list(range(37))
    plan = plan_epoch(order, [x, x.shift(3)], 4, drop_last=False, runs=runs)
    brute_force_needs(plan, [x, x.shift(3)])
    assert sorted(order.chunk_ids.tolist()) == list(range(8))  # each chunk one unit of the permutation


def test_block_chunks_still_reads_as_tuples() -> None:
    m = split_by_chunk(geom("x", 30, 3), (1.0,))
    order = epoch_order(m, "train", anchor_range=(0, 30), epoch=0, seed=0, shuffle=True, block_chunks=4)
    blocks = order.block_chunks
    assert len(blocks) == order.n_blocks
    assert all(isinstance(b, tuple) for b in blocks)
    assert sorted(c for b in blocks for c in b) == list(range(10))
    assert blocks[-1] == blocks[len(blocks) - 1]
    with pytest.raises(IndexError):
        blocks[len(blocks)]


def test_an_old_state_is_refused_since_the_order_changed(tmp_path) -> None:
    store = zarr.storage.LocalStore(tmp_path / "d.zarr")
    zarr.create_array(store, name="x", shape=(40, 2), chunks=(4, 2), dtype="f4")[...] = 1.0
    g = insitu.open_geometries(store)["x"]
    ds = insitu.InSituDataset(store, insitu.split_by_chunk(g, (1.0,)), [g], batch_size=4)
    state = ds.train.state_dict()
    del state["order"]  # what a state saved before the order changed holds
    with pytest.raises(insitu.ConfigError, match="orders samples differently"):
        ds.train.load_state_dict(state)
    ds.close()


def metadata_only(tmp_path, n: int) -> tuple[object, ArrayGeometry]:
    """A store of ``n`` one-sample chunks that holds metadata only (every chunk absent: fill value)."""
    root = tmp_path / "meta.zarr"
    zarr.create_array(str(root), name="t", shape=(n, 4, 4), chunks=(1, 4, 4), dtype="f4", fill_value=0.0)
    store = insitu.open_store(str(root))
    return store, insitu.open_geometries(store)["t"]


def test_planning_a_million_chunks_allocates_bytes_per_chunk_not_objects(tmp_path) -> None:
    n = 1_000_000
    store, g = metadata_only(tmp_path, n)
    tracemalloc.start()
    try:
        manifest = insitu.split_by_chunk(g, (0.8, 0.1, 0.1))
        ds = insitu.InSituDataset(store, manifest, [g], batch_size=32)
        it = iter(ds.train)  # the epoch's order, plan and budget check
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # A few int64 arrays the length of the split at once: 47 bytes a chunk measured. A Python int
    # per chunk costs 28-36 bytes more, a dict and two arrays per block hundreds of bytes a block.
    assert peak < 120 * n, f"planning {n} chunks allocated {peak / n:.0f} bytes per chunk at peak"
    batch = next(it)
    assert batch["t"].shape == (32, 4, 4)
    assert not batch["t"].any()
    it.close()
    ds.close()


def test_ranks_of_a_large_world_read_disjoint_chunks_and_equal_counts(tmp_path) -> None:
    n = 200_000
    store, g = metadata_only(tmp_path, n)
    manifest = insitu.split_by_chunk(g, (1.0,), names=("train",))
    ds = insitu.InSituDataset(store, manifest, [g], batch_size=8, world_size=1024)
    ranks = [0, 1, 511, 1023]
    plans = [ds.plan("train", True, rank=r, world_size=1024) for r in ranks]
    assert len({len(p.order.anchors) for p in plans}) == 1
    assert len({p.n_batches for p in plans}) == 1
    chunks = [set(p.order.chunk_ids.tolist()) for p in plans]
    for i in range(len(chunks)):
        for j in range(i + 1, len(chunks)):
            assert not chunks[i] & chunks[j]
    ds.close()
