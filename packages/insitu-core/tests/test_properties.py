"""Property tests for the planners: splits, epoch order and read plans."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from insitu.arrays.geometry import ArrayGeometry
from insitu.plan.order import epoch_order
from insitu.plan.reads import plan_epoch
from insitu.plan.splits import split_by_chunk


def geom(n: int, c: int, offset: int = 0) -> ArrayGeometry:
    return ArrayGeometry(
        name="x", path="x", shape=(n, 2), dtype=np.dtype("f4"), chunk_shape=(c, 2), offset=offset
    )


fractions = st.lists(st.integers(1, 10), min_size=1, max_size=3).map(lambda w: tuple(x / sum(w) for x in w))


@st.composite
def layouts(draw):
    c = draw(st.integers(1, 8))
    n = draw(st.integers(c * 3, 120))
    fr = draw(fractions)
    return n, c, fr


@settings(max_examples=150, deadline=None)
@given(layouts(), st.booleans(), st.integers(0, 2**16))
def test_splits_are_disjoint_chunk_aligned_and_cover(layout, contiguous, seed) -> None:
    n, c, fr = layout
    nchunks = -(-n // c)
    if nchunks < len(fr) or min(fr) * nchunks < 0.5:
        return  # a split would be empty: covered by the error tests
    try:
        m = split_by_chunk(geom(n, c), fr, contiguous=contiguous, seed=seed)
    except ValueError:
        return
    chunks = [set(m.chunks(s)) for s in m.names]
    assert sum(len(x) for x in chunks) == nchunks
    assert set().union(*chunks) == set(range(nchunks))
    samples = np.concatenate([m.samples(s) for s in m.names])
    assert np.array_equal(np.sort(samples), np.arange(n))
    if contiguous:
        for ch in chunks:
            assert max(ch) - min(ch) + 1 == len(ch)


@settings(max_examples=150, deadline=None)
@given(
    layouts(),
    st.integers(1, 6),
    st.integers(0, 3),
    st.integers(0, 2**16),
    st.booleans(),
    st.integers(1, 3),
)
def test_order_is_a_deterministic_permutation_of_the_split(
    layout, block_chunks, epoch, seed, shuffle, world
) -> None:
    n, c, _ = layout
    m = split_by_chunk(geom(n, c), (1.0,))
    if world > -(-n // c):
        return
    kw = dict(anchor_range=(0, n), epoch=epoch, seed=seed, shuffle=shuffle, block_chunks=block_chunks)
    orders = [epoch_order(m, "train", rank=r, world_size=world, **kw) for r in range(world)]
    again = epoch_order(m, "train", rank=0, world_size=world, **kw)
    assert np.array_equal(orders[0].anchors, again.anchors)
    flat = np.concatenate([o.anchors for o in orders])
    assert len(np.unique(flat)) == len(flat)  # nobody twice, across ranks too
    assert len({len(o.anchors) for o in orders}) == 1  # equal counts per rank
    if world == 1:
        assert np.array_equal(np.sort(flat), np.arange(n))
        if not shuffle:
            assert np.array_equal(flat, np.arange(n))
    for o in orders:
        for b in range(o.n_blocks):  # each block's samples come from its own chunks
            assert set((o.block_anchors(b) // c).tolist()) <= set(o.block_chunks[b])
    chunk_sets = [set((o.anchors // c).tolist()) for o in orders]
    for i in range(world):
        for j in range(i + 1, world):
            assert not chunk_sets[i] & chunk_sets[j]  # no chunk read by two ranks


@settings(max_examples=100, deadline=None)
@given(
    layouts(), st.integers(1, 5), st.integers(1, 9), st.integers(-5, 5), st.integers(1, 5), st.integers(0, 99)
)
def test_plan_covers_every_read_and_next_uses_are_exact(layout, block_chunks, batch, off, c2, seed) -> None:
    n, c, _ = layout
    a = geom(n, c)
    b = ArrayGeometry(name="y", path="y", shape=(n, 2), dtype=np.dtype("f4"), chunk_shape=(c2, 2), offset=off)
    lo, hi = max(0, -off), min(n, n - off)
    if lo >= hi:
        return
    m = split_by_chunk(a, (1.0,))
    order = epoch_order(
        m, "train", anchor_range=(lo, hi), epoch=0, seed=seed, shuffle=True, block_chunks=block_chunks
    )
    plan = plan_epoch(order, [a, b], batch, drop_last=False)
    for blk in range(order.n_blocks):
        anchors = order.block_anchors(blk)
        assert set(((anchors + off) // c2).tolist()) == set(plan.needs[blk]["y"].slabs.tolist())
        assert set((anchors // c).tolist()) == set(plan.needs[blk]["x"].slabs.tolist())
        for path in ("x", "y"):
            need = plan.needs[blk][path]
            for slab, nxt in zip(need.slabs.tolist(), need.next_use.tolist(), strict=True):
                later = [
                    j
                    for j in range(blk + 1, order.n_blocks)
                    if slab in set(plan.needs[j][path].slabs.tolist())
                ]
                assert nxt == (later[0] if later else -1)
    assert plan.n_batches == -(-len(order.anchors) // batch)
