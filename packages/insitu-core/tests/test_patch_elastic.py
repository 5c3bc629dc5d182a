"""Elastic resume of patch sampling: an epoch stopped at world size W1 and resumed at W2 (and again
at W3) delivers every patch of the epoch exactly once, ranks disjoint, batch counts equal.

Ranks are simulated with the planner (what each rank's view would plan); one test runs the
dataset end to end, states saved by two ranks loaded by three.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import write_array
from hypothesis import given, settings
from hypothesis import strategies as st

import insitu
from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError
from insitu.options import read_options, shard_options
from insitu.plan.elastic import Segment
from insitu.plan.patch_plans import PatchPlans
from insitu.plan.patches_spec import PatchSpec
from insitu.plan.reads import EpochPlan
from insitu.plan.splits import split_by_chunk


def _plans(sampling: str, *, batch: int, block: int, uneven: str, stride: int) -> PatchPlans:
    g = ArrayGeometry(
        name="x",
        path="x",
        shape=(6, 40, 36),
        dtype=np.dtype("f4"),
        chunk_shape=(2, 8, 8),
        dimension_names=("t", "y", "x"),
    )
    manifest = split_by_chunk(g, (1.0,), names=["train"])
    opts = read_options(
        batch_size=batch,
        block_chunks=block,
        max_inflight=1,
        prefetch=1,
        readahead_blocks=1,
        decode_threads=1,
        seed=5,
        shuffle=True,
        drop_last=False,
    )
    per_epoch = 150 if sampling == "random" else None
    spec = PatchSpec(
        {"y": 6, "x": 6}, stride={"y": stride, "x": stride}, sampling=sampling, patches_per_epoch=per_epoch
    )
    return PatchPlans(manifest, [g], (0, 6), spec, opts, shard_options(rank=0, world_size=1, uneven=uneven))


def _real(plan: EpochPlan, start: int, stop: int) -> list[int]:
    order = plan.patches
    assert order is not None
    end = order.n_valid if order.n_valid >= 0 else order.n_patches
    return order.patches_between(start * plan.batch_size, min(stop * plan.batch_size, end)).tolist()


def _epoch(plans: PatchPlans, world: int, history: tuple[Segment, ...] = ()) -> list[EpochPlan]:
    return [plans.get("train", True, 3, rank=r, world_size=world, resumed_from=history) for r in range(world)]


@settings(max_examples=40, deadline=None)
@given(
    sampling=st.sampled_from(["grid", "random"]),
    w1=st.integers(1, 4),
    w2=st.integers(1, 5),
    w3=st.integers(1, 3),
    batch=st.integers(1, 9),
    block=st.integers(1, 6),
    stride=st.sampled_from([3, 6]),
    fractions=st.lists(st.floats(0, 1), min_size=10, max_size=10),
)
def test_every_patch_once_across_two_changes_of_world_size(
    sampling: str, w1: int, w2: int, w3: int, batch: int, block: int, stride: int, fractions: list[float]
) -> None:
    plans = _plans(sampling, batch=batch, block=block, uneven="pad", stride=stride)
    fresh = _epoch(plans, w1)
    whole = Counter(p for plan in fresh for p in _real(plan, 0, plan.n_batches))
    delivered: Counter[int] = Counter()
    done1 = tuple(int(f * plan.n_batches) for f, plan in zip(fractions, fresh, strict=False))
    for plan, d in zip(fresh, done1, strict=True):
        delivered.update(_real(plan, 0, d))
    history = (Segment(w1, done1),)
    second = _epoch(plans, w2, history)
    assert len({plan.n_batches for plan in second}) == 1  # equal batch counts
    done2 = tuple(int(f * plan.n_batches) for f, plan in zip(fractions[5:], second, strict=False))
    for plan, d in zip(second, done2, strict=True):
        delivered.update(_real(plan, 0, d))
    third = _epoch(plans, w3, (*history, Segment(w2, done2)))
    assert len({plan.n_batches for plan in third}) == 1
    for plan in third:
        delivered.update(_real(plan, 0, plan.n_batches))
    assert delivered == whole  # every patch of the epoch once (random draws: as often as drawn)


def test_a_resumed_plan_reads_the_chunks_of_its_patches() -> None:
    plans = _plans("grid", batch=4, block=2, uneven="drop", stride=6)
    fresh = _epoch(plans, 2)
    history = (Segment(2, (3, 1)),)
    for plan in _epoch(plans, 3, history):
        order = plan.patches
        assert order is not None
        needs = plan.arrays["x"]
        for i in range(order.n_blocks):
            chunks = set(needs.slabs[needs.starts[i] : needs.starts[i + 1]].tolist())
            want = set(order.patches.patch_chunk_ids(order.block_positions(i), (2, 8, 8)).tolist())
            assert chunks == want
    assert fresh[0].n_batches > 3


def test_a_state_past_the_old_ranks_order_is_refused() -> None:
    plans = _plans("grid", batch=4, block=2, uneven="drop", stride=6)
    n = _epoch(plans, 2)[0].n_batches
    with pytest.raises(ConfigError, match=rf"batches_done={n + 5} for rank 0 of 2"):
        plans.get("train", True, 3, rank=0, world_size=3, resumed_from=(Segment(2, (n + 5, 0)),))


def test_states_of_two_ranks_resume_on_three_with_the_source_values(tmp_path: Path) -> None:
    src = np.random.default_rng(1).standard_normal((4, 48, 48)).astype("float32")
    write_array(tmp_path / "e.zarr", "e", src, (1, 16, 16), dimension_names=("t", "y", "x"))
    store = insitu.open_store(str(tmp_path / "e.zarr"))
    (geom,) = insitu.open_geometries(store).values()
    manifest = insitu.split_by_chunk(geom, fractions=(1.0,), names=("train",))
    kwargs: dict[str, Any] = {
        "patch": {"y": 12, "x": 12},
        "batch_size": 5,
        "block_chunks": 2,
        "uneven": "pad",
    }

    def origins(batch: Any) -> list[tuple[int, ...]]:
        real = batch.patch_origins if batch.valid is None else batch.patch_origins[batch.valid]
        for row, (t, y, x) in zip(batch[geom.label], batch.patch_origins.tolist(), strict=True):
            np.testing.assert_array_equal(row, src[t, y : y + 12, x : x + 12])
        return [tuple(o) for o in real.tolist()]

    old = insitu.InSituDataset(store, manifest, [geom], world_size=2, **kwargs)
    old.set_epoch(1)
    seen: list[tuple[int, ...]] = []
    states = []
    for rank, take in ((0, 3), (1, 2)):
        view = old.view("train", rank=rank, world_size=2)
        it = iter(view)
        for _ in range(take):
            seen += origins(next(it))
        states.append(view.state_dict())
        it.close()
    new = insitu.InSituDataset(store, manifest, [geom], world_size=3, **kwargs)
    counts = set()
    for rank in range(3):
        view = new.view("train", rank=rank, world_size=3)
        view.load_state_dict(states)
        batches = list(view)
        counts.add(len(batches))
        for batch in batches:
            seen += origins(batch)
    assert len(counts) == 1
    assert sorted(seen) == sorted(
        {(t, y, x) for t in range(4) for y in (0, 12, 24, 36) for x in (0, 12, 24, 36)}
    )


@settings(max_examples=30, deadline=None)
@given(
    w1=st.integers(1, 4),
    w2=st.integers(1, 5),
    batch=st.integers(1, 9),
    block=st.integers(1, 6),
    fractions=st.lists(st.floats(0, 1), min_size=4, max_size=4),
)
def test_drop_resumes_never_repeat_a_patch_and_leave_out_less_than_a_unit_per_rank(
    w1: int, w2: int, batch: int, block: int, fractions: list[float]
) -> None:
    plans = _plans("grid", batch=batch, block=block, uneven="drop", stride=6)
    fresh = _epoch(plans, w1)
    whole = Counter(p for plan in fresh for p in _real(plan, 0, plan.n_batches))
    done = tuple(int(f * plan.n_batches) for f, plan in zip(fractions, fresh, strict=False))
    delivered: Counter[int] = Counter()
    for plan, d in zip(fresh, done, strict=True):
        delivered.update(_real(plan, 0, d))
    second = _epoch(plans, w2, (Segment(w1, done),))
    assert len({plan.n_batches for plan in second}) == 1
    assert len({plan.n_positions for plan in second}) == 1
    for plan in second:
        delivered.update(_real(plan, 0, plan.n_batches))
    assert max(delivered.values(), default=1) == 1
    assert not (delivered - whole)
