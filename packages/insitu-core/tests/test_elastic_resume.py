"""Elastic resume over simulated ranks: an epoch stopped at world size W1 and resumed at W2 delivers
every sample of the epoch exactly once, ranks disjoint, batch counts equal.

Ranks are simulated with the planner alone (no data, no threads): the states
are what each old rank's view would save, the new ranks' orders are what each
new rank's view would plan from them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError
from insitu.options import read_options, shard_options
from insitu.plan.order import ORDER_VERSION
from insitu.plan.plans import EpochPlans
from insitu.plan.reads import EpochPlan
from insitu.plan.resume_state import STATE_FORMAT, resume_point
from insitu.plan.splits import split_by_chunk

IDENTITY = {"split": "s", "order": ORDER_VERSION}


def geom(n: int, c: int, offset: int = 0) -> ArrayGeometry:
    return ArrayGeometry(
        name="x", path="x", shape=(n, 2), dtype=np.dtype("f4"), chunk_shape=(c, 2), offset=offset
    )


def _plans(n: int, c: int, window: int, fractions, *, batch: int, block: int, uneven: str, drop_last: bool):
    g = geom(n, c)
    labels = [g] if window == 0 else [g, g.shift(window)]
    manifest = split_by_chunk(g, fractions, names=["train", "val", "test"][: len(fractions)])
    opts = read_options(
        batch_size=batch,
        block_chunks=block,
        max_inflight=1,
        prefetch=1,
        readahead_blocks=1,
        decode_threads=1,
        seed=7,
        shuffle=True,
        drop_last=drop_last,
    )
    anchors = (0, n - window)  # a label read `window` steps ahead must stay inside the array
    return EpochPlans(manifest, labels, anchors, opts, shard_options(rank=0, world_size=1, uneven=uneven))


def _state(rank: int, world: int, done: int, history=()) -> dict:
    return {
        "format": STATE_FORMAT,
        **IDENTITY,
        "epoch": 3,
        "rank": rank,
        "world_size": world,
        "batches_done": done,
        "resumed_from": [s.to_json() for s in history],
    }


def _delivered(plan: EpochPlan, batches: int, start: int = 0) -> list[int]:
    """The real samples of batches ``start`` to ``batches`` of ``plan`` (padding left out)."""
    order = plan.order
    real = order.anchors if order.n_valid < 0 else order.anchors[: order.n_valid]
    return real[start * plan.batch_size : batches * plan.batch_size].tolist()


def _epoch_samples(plans: EpochPlans, split: str, shuffle: bool, world: int) -> set[int]:
    out: set[int] = set()
    for r in range(world):
        plan = plans.get(split, shuffle, 3, rank=r, world_size=world)
        out.update(_delivered(plan, plan.n_batches + 1))
    return out


@st.composite
def runs(draw):
    c = draw(st.integers(1, 6))
    n = draw(st.integers(c * 4, 300))
    window = draw(st.sampled_from([0, 0, 1, c + 1]))
    fractions = draw(st.sampled_from([(1.0,), (0.6, 0.2, 0.2), (0.5, 0.5)]))
    split = draw(st.sampled_from(["train", "train", "val", "all"]))
    if split == "val" and len(fractions) == 1:
        split = "train"
    return n, c, window, fractions, split


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    runs(),
    st.integers(1, 64),
    st.integers(1, 64),
    st.integers(1, 9),
    st.integers(1, 5),
    st.sampled_from(["drop", "pad"]),
    st.booleans(),
    st.floats(0, 1),
    st.booleans(),
    st.data(),
)
def test_the_rest_of_an_epoch_is_delivered_once_at_another_world_size(
    run, w1, w2, batch, block, uneven, lockstep, stop, drop_last, data
) -> None:
    n, c, window, fractions, split = run
    shuffle = split == "train"
    plans = _plans(n, c, window, fractions, batch=batch, block=block, uneven=uneven, drop_last=drop_last)
    n_chunks = len(np.unique(np.asarray(plans.get(split, shuffle, 3).order.anchors) // c))
    if w1 > n_chunks:
        return  # a fresh epoch refuses more ranks than chunks
    old = [plans.get(split, shuffle, 3, rank=r, world_size=w1) for r in range(w1)]
    assert len({p.n_batches for p in old}) == 1
    length = old[0].n_batches
    if lockstep:
        done = [round(stop * length)] * w1
        states = _state(data.draw(st.integers(0, w1 - 1)), w1, done[0])
    else:
        done = [data.draw(st.integers(0, length)) for _ in range(w1)]
        states = [_state(r, w1, d) for r, d in enumerate(done)]
    before = [s for p, d in zip(old, done, strict=True) for s in _delivered(p, d)]

    after: list[int] = []
    fresh = not any(done)  # nothing handed out: the epoch starts over as a fresh one at W2
    counts = set()
    chunk_sets = []
    for r2 in range(w2):
        point = resume_point(states, IDENTITY, rank=r2, world_size=w2)
        if not point.resumed_from and w2 > n_chunks:  # nothing handed out: a fresh epoch at W2
            with pytest.raises(ConfigError, match=f"world_size={w2} exceeds"):
                plans.get(split, shuffle, 3, rank=r2, world_size=w2)
            return
        plan = plans.get(split, shuffle, 3, rank=r2, world_size=w2, resumed_from=point.resumed_from)
        if w1 == w2:  # the same world: each rank continues its own order, as before
            assert point.resumed_from == ()
            assert point.start == done[r2]  # one state stands for every rank moving in lockstep
            assert plan is plans.get(split, shuffle, 3, rank=r2, world_size=w2)
            mine = _delivered(plan, plan.n_batches, point.start)
        else:
            assert point.start == 0
            mine = _delivered(plan, plan.n_batches)
        counts.add(plan.n_batches - point.start if w1 == w2 else plan.n_batches)
        chunk_sets.append({a // c for a in plan.order.anchors[: plan.order.n_valid].tolist()})
        after += mine

    everything = before + after
    assert len(everything) == len(set(everything)), "no sample twice, before and after the restart"
    if w1 != w2:
        assert len(counts) == 1, "every new rank yields the same number of batches"
        for i in range(w2):
            for j in range(i + 1, w2):
                if uneven == "drop":
                    assert not chunk_sets[i] & chunk_sets[j], "no chunk read by two new ranks"
    epoch = _epoch_samples(plans, split, shuffle, w2 if fresh else w1)
    assert set(everything) <= epoch
    missing = len(epoch) - len(everything)
    # What is never delivered: the new ranks' "drop" remainder (less than a chunk per rank), and a
    # short last batch with drop_last; "pad" without drop_last delivers every sample.
    allowed = (w2 * c if uneven == "drop" and w1 != w2 and not fresh else 0) + (
        w2 * batch if drop_last else 0
    )
    assert missing <= allowed


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    runs(), st.lists(st.integers(1, 12), min_size=2, max_size=4), st.sampled_from(["drop", "pad"]), st.data()
)
def test_several_restarts_in_one_epoch(run, worlds, uneven, data) -> None:
    """W1 -> W2 -> W3...: each restart re-shards what the previous ones left."""
    n, c, window, fractions, split = run
    shuffle = split == "train"
    plans = _plans(n, c, window, fractions, batch=3, block=2, uneven=uneven, drop_last=False)
    n_chunks = len(np.unique(np.asarray(plans.get(split, shuffle, 3).order.anchors) // c))
    if worlds[0] > n_chunks:
        return
    history: tuple = ()
    first_world = worlds[0]  # the world whose epoch it is: the first that handed anything out
    delivered: list[int] = []
    states: object = None
    for k, world in enumerate(worlds):
        last = k == len(worlds) - 1
        segment_done = []
        if (
            states is not None
            and world > n_chunks
            and not any(resume_point(states, IDENTITY, rank=0, world_size=world).resumed_from)
        ):
            return  # nothing handed out: a fresh epoch, which refuses more ranks than chunks
        for r in range(world):
            start = 0
            if states is None:
                plan = plans.get(split, shuffle, 3, rank=r, world_size=world)
            else:
                point = resume_point(states, IDENTITY, rank=r, world_size=world)
                history, start = point.resumed_from, point.start
                plan = plans.get(split, shuffle, 3, rank=r, world_size=world, resumed_from=history)
            done = plan.n_batches if last else data.draw(st.integers(start, plan.n_batches))
            if not delivered and not history:
                first_world = world
            segment_done.append(done)
            delivered += _delivered(plan, done, start)
        states = [_state(r, world, d, history) for r, d in enumerate(segment_done)]
    assert len(delivered) == len(set(delivered))
    epoch = _epoch_samples(plans, split, shuffle, first_world)
    assert set(delivered) <= epoch
    if uneven == "pad":
        # Each restart at a new size delivers all it was left; one at the same size continues.
        assert set(delivered) == epoch


@settings(max_examples=100, deadline=None)
@given(runs(), st.integers(1, 9), st.integers(1, 5), st.sampled_from(["drop", "pad"]), st.integers(0, 99))
def test_the_old_ranks_orders_are_rebuilt_exactly(run, world, block, uneven, seed) -> None:
    """What an elastic resume takes each old rank to have delivered is that rank's own order."""
    from insitu.plan.order import EpochUnits, order_with_runs

    n, c, window, fractions, split = run
    m = split_by_chunk(geom(n, c), fractions, names=["train", "val", "test"][: len(fractions)])
    kw = dict(anchor_range=(0, n - window), epoch=1, seed=seed, shuffle=split == "train")
    units = EpochUnits(m, split, **kw)
    if world > units.n_units:
        return
    limit = units.rank_limit(world, uneven)
    for r in range(world):
        mine = units.rank_order(r, world, limit, block, 2)[0]
        theirs = order_with_runs(
            m, split, rank=r, world_size=world, block_chunks=block, first_block_chunks=2, uneven=uneven, **kw
        )[0]
        assert np.array_equal(mine.anchors, theirs.anchors)
        assert np.array_equal(mine.block_starts, theirs.block_starts)
        assert mine.n_valid == theirs.n_valid


def test_drop_says_how_many_samples_a_resume_leaves_out(caplog: pytest.LogCaptureFixture) -> None:
    """Near the end of an epoch, fewer chunks than new ranks are left: under "drop" every new rank
    yields nothing more, which is logged as a warning naming the samples left out."""
    plans = _plans(40, 4, 0, (1.0,), batch=2, block=2, uneven="drop", drop_last=False)
    old = plans.get("train", True, 3, rank=0, world_size=2)
    point = resume_point(
        _state(0, 2, old.n_batches - 1), IDENTITY | {"order": ORDER_VERSION}, rank=0, world_size=8
    )
    with caplog.at_level("INFO", logger="insitu.plan.elastic"):
        plan = plans.get("train", True, 3, rank=0, world_size=8, resumed_from=point.resumed_from)
    assert plan.n_batches == 0
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert "4 sample(s) were left" in message, message
    assert "leaves out 4 of them" in message, message
