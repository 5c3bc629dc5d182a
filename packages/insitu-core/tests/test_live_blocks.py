"""A live block of a pass: what it pins, what it streams, the waiter the emitter awaits, and its
release with each slab's next use."""

from __future__ import annotations

import asyncio

import numpy as np

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transforms import source_spec
from insitu.engine.blocks import LiveBlock, StreamedSlabs, find_slabs
from insitu.engine.pool import ArrayPool, Slab, allocate_arena
from insitu.engine.scatter import Destinations
from insitu.plan.reads import ArrayNeeds


def _pool(n_slabs: int, n_slots: int) -> ArrayPool:
    geom = ArrayGeometry(name="a", path="a", shape=(n_slabs, 4), dtype=np.dtype("f4"), chunk_shape=(1, 4))
    return ArrayPool(geom, n_slots, allocate_arena(geom, n_slots), source_spec(geom))


def _loaded(apool: ArrayPool, slab: int) -> Slab:
    """A slab resident in the pool, unpinned, with no planned use."""
    entry = apool.reserve(slab)
    assert entry is not None
    entry.finish(None)
    apool.mark_ready(entry)
    apool.unpin(entry, None)
    return entry


def test_find_slabs_gives_each_slab_its_place_among_sorted_ids() -> None:
    ids = np.array([2, 5, 9], dtype=np.int64)
    at, found = find_slabs(ids, np.array([5, 3, 9, 12, 2]))
    assert found.tolist() == [True, False, True, False, True]
    assert at[found].tolist() == [1, 2, 0]
    assert (at < len(ids)).all()  # an absent slab still indexes the ids (clamped to the last)


def test_streamed_slabs_report_bad_flags_only_when_one_is_bad() -> None:
    entries = [Slab.streamed(s, Destinations()) for s in (3, 4)]
    assert StreamedSlabs(np.array([3, 4], dtype=np.int64), entries).bad_flags() is None
    entries[1].bad = True
    stream = StreamedSlabs(np.array([3, 4], dtype=np.int64), entries)
    flags = stream.bad_flags()
    assert stream.bad_flags() is flags  # worked out once: asked again by every batch of the block
    assert flags is not None
    assert flags.tolist() == [False, True]
    at, hit = stream.locate(np.array([4, 7]))
    assert hit.tolist() == [True, False]
    assert at[0] == 1


def test_resident_slabs_are_pinned_first_and_the_missing_are_reported() -> None:
    apool = _pool(n_slabs=8, n_slots=2)
    resident = _loaded(apool, 5)
    block = LiveBlock(0)
    missing = block.pin_resident("a", apool, [1, 5, 6])
    assert missing == [0, 2]
    held = block.pinned["a"][1]
    assert block.pinned["a"] == [None, held, None]
    assert held is not None
    assert (held.slab, held.slot, held.pins) == (5, resident.slot, 1)
    # One free slot left: the first missing slab takes it; the pinned one cannot be evicted.
    fresh, streamed = block.reserve_missing("a", apool, [1, 5, 6], missing, None)
    assert [e.slab for e in fresh] == [1]
    assert streamed == [6]
    assert block.pinned["a"][0] is fresh[0]
    assert fresh[0].pins == 2  # the load pin and the block's


def test_a_slab_needed_again_may_evict_one_nobody_needs() -> None:
    apool = _pool(n_slabs=8, n_slots=1)
    spare = _loaded(apool, 7)
    block = LiveBlock(0)
    slabs = [2, 3]
    missing = block.pin_resident("a", apool, slabs)
    fresh, streamed = block.reserve_missing("a", apool, slabs, missing, [-1, 4])
    assert [e.slab for e in fresh] == [3]  # slab 2 is not needed again: it only takes a free slot
    assert streamed == [2]
    assert apool.get(spare.slab) is None


def test_release_unpins_each_slab_with_its_next_use() -> None:
    apool = _pool(n_slabs=8, n_slots=4)
    a, b = _loaded(apool, 0), _loaded(apool, 1)
    # Block 0 needs slabs 0 and 1, block 1 needs slab 1 again.
    needs = ArrayNeeds(
        slabs=np.array([0, 1, 1], dtype=np.int64),
        starts=np.array([0, 2, 3], dtype=np.int64),
        next_use=np.array([-1, 1, -1], dtype=np.int64),
        prev_use=np.array([-1, -1, 0], dtype=np.int64),
    )
    block = LiveBlock(0)
    assert block.pin_resident("a", apool, [0, 1]) == []
    block.release({"a": apool}, {"a": needs})
    assert (a.pins, apool.planned_use(0)) == (0, None)
    assert (b.pins, apool.planned_use(1)) == (0, 1)


def test_release_skips_slabs_never_pinned() -> None:
    apool = _pool(n_slabs=8, n_slots=4)
    entry = _loaded(apool, 0)
    needs = ArrayNeeds(np.array([0, 1], dtype=np.int64), np.array([0, 2], dtype=np.int64), None, None)
    block = LiveBlock(0)
    block.pin_resident("a", apool, [0, 1])  # slab 1 missing: never pinned
    block.release({"a": apool}, {"a": needs})
    assert entry.pins == 0
    assert apool.has_spare


def test_the_waiter_counts_loading_slabs_and_is_handed_over_once() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        apool = _pool(n_slabs=8, n_slots=4)
        _loaded(apool, 0)
        block = LiveBlock(0)
        block.pin_resident("a", apool, [0])
        ready = block.pinned["a"][0]
        assert block.watch(loop) is None  # every slab ready: nothing to wait for
        loading = apool.reserve(1)
        assert loading is not None
        block.pinned["a"].append(loading)
        streamed = Slab.streamed(6, Destinations())
        block.streams["a"] = StreamedSlabs(np.array([6], dtype=np.int64), [streamed])
        assert block.entries() == [ready, loading, streamed]
        waiter = block.watch(loop)
        assert waiter is not None
        assert waiter.remaining == 2
        assert block.take_waiter() is waiter
        assert block.take_waiter() is None
        loading.finish(None)
        streamed.finish(None)
        await asyncio.wait_for(waiter.future, 5)

    asyncio.run(run())


def test_the_first_failed_slab_is_the_error_of_the_block() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        block = LiveBlock(3)
        first, second = Slab(1, -1), Slab(2, -1)
        first.finish(OSError("first"))
        second.finish(OSError("second"))
        block.pinned["a"] = [first]
        block.streams["a"] = StreamedSlabs(np.array([2], dtype=np.int64), [second])
        waiter = block.watch(loop)
        assert waiter is not None
        error = waiter.future.exception()
        assert isinstance(error, OSError)
        assert str(error) == "first"

    asyncio.run(run())
