"""Ready, unpinned slabs are kept as plain integers (their slot, their place in the eviction
order), not as one object each; pinning one makes its entry again, with what it held."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import insitu
from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transforms import source_spec
from insitu.engine.pool import READY, ArrayPool, Slab, allocate_arena


def _pool(n_slabs: int, n_slots: int) -> ArrayPool:
    geom = ArrayGeometry(name="a", path="a", shape=(n_slabs, 4), dtype=np.dtype("f4"), chunk_shape=(1, 4))
    return ArrayPool(geom, n_slots, allocate_arena(geom, n_slots), source_spec(geom))


def _load(apool: ArrayPool, slab: int, next_use: int | None = None, *, bad: bool = False) -> int:
    entry = apool.reserve(slab)
    assert entry is not None
    entry.bad = bad
    apool.view(entry.slot)[:] = slab
    entry.finish(None)
    apool.mark_ready(entry)
    if bad:
        apool.bad[slab] = True
    apool.unpin(entry, next_use)
    return entry.slot


def _slab_objects_of(apool: ArrayPool) -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, Slab) and apool.entries.get(o.slab) is o)


def test_a_ready_unpinned_slab_keeps_no_entry_and_gets_one_when_pinned() -> None:
    apool = _pool(n_slabs=500, n_slots=500)
    slots = {s: _load(apool, s) for s in range(500)}
    assert apool.entries == {}
    assert _slab_objects_of(apool) == 0
    assert apool.slots_in_use == 500
    entry = apool.get(123)
    assert entry is not None
    assert (entry.slab, entry.slot, entry.state, entry.pins) == (123, slots[123], READY, 0)
    assert (apool.view(entry.slot) == 123).all()
    apool.pin(entry)
    assert apool.get(123) is entry  # pinned: the same entry for every block that asks
    apool.unpin(entry, None)
    assert apool.entries == {}
    assert apool.get(777 % 500) is not None
    assert _pool(n_slabs=4, n_slots=1).get(2) is None  # never loaded


def test_a_bad_slab_is_still_bad_when_pinned_again() -> None:
    apool = _pool(n_slabs=4, n_slots=4)
    _load(apool, 1, bad=True)
    _load(apool, 2)
    bad, good = apool.get(1), apool.get(2)
    assert bad is not None
    assert good is not None
    assert (bad.bad, good.bad) == (True, False)


def test_eviction_takes_slabs_nobody_needs_first_then_the_one_needed_last() -> None:
    apool = _pool(n_slabs=16, n_slots=5)
    _load(apool, 0, next_use=3)
    _load(apool, 1)  # no planned use: least recently used of the spares
    _load(apool, 2, next_use=9)
    _load(apool, 3)
    _load(apool, 4, next_use=5)
    order: list[int] = []
    for s in range(10, 15):
        _load(apool, s, next_use=0)  # wanted at once: evicted after every older slab
        order.append(next(old for old in range(5) if apool.slab_to_slot[old] < 0 and old not in order))
    assert order == [1, 3, 2, 4, 0]


def test_a_pinned_slab_is_never_evicted_and_a_repin_cancels_its_planned_use() -> None:
    apool = _pool(n_slabs=8, n_slots=2)
    _load(apool, 0, next_use=7)
    _load(apool, 1, next_use=2)
    held = apool.get(0)
    assert held is not None
    apool.pin(held)
    assert apool.planned_use(0) is None
    fresh = apool.reserve(5)
    assert fresh is not None
    assert apool.slab_to_slot[1] < 0  # slab 0 would have gone first, but it is pinned
    assert apool.get(0) is held
    assert apool.reserve(6) is None  # both slots pinned now


def test_a_cached_pass_keeps_no_object_per_slab_and_serves_the_next_epoch(tmp_path) -> None:
    import zarr

    n = 3000
    data = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    arr = zarr.create_array(str(tmp_path / "d.zarr"), name="x", shape=data.shape, chunks=(1, 4), dtype="f4")
    arr[:] = data
    store = insitu.open_store(str(tmp_path / "d.zarr"))
    geom = insitu.open_geometries(store, ["x"])["x"]
    manifest = insitu.split_by_chunk(geom, (1.0,), names=("train",))
    ds = insitu.InSituDataset(store, manifest, [geom], batch_size=64, seed=0)
    try:
        for epoch in range(2):
            ds.set_epoch(epoch)
            rows = np.concatenate([b[geom.label] for b in ds.train])
            assert np.array_equal(rows[np.argsort(rows[:, 0])], data)  # every sample once, as stored
            apool = ds.pool.arrays["x"]
            assert apool.slots_in_use == n  # every slab cached ...
            assert len(apool.entries) == 0  # ... with no entry left once the pass released it
        assert ds.stats.slab_hits >= n  # the second epoch came from the cache
    finally:
        ds.close()


def test_a_block_reserves_its_free_slots_in_one_step() -> None:
    apool = _pool(n_slabs=16, n_slots=6)
    _load(apool, 0)
    _load(apool, 1)
    gone = apool.get(0)
    assert gone is not None
    apool.discard(gone)  # slot given back: taken again first
    assert apool.free_slots == 5
    entries = apool.reserve_free([4, 5, 6], pins=2)
    assert [e.slab for e in entries] == [4, 5, 6]
    assert all(e.pins == 2 and e.state != READY for e in entries)
    assert len({e.slot for e in entries} | {int(apool.slab_to_slot[1])}) == 4  # no slot twice
    assert entries[0].slot == gone.slot
    assert apool.free_slots == 2
    assert apool.resident.now == 4 * apool.slot_nbytes
    with pytest.raises(ValueError, match="3 slabs for 2 free slots"):
        apool.reserve_free([7, 8, 9])
    assert apool.free_slots == 2  # refused whole: nothing taken
