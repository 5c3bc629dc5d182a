"""Resident decoded bytes stay within the budget; read-ahead is bounded whatever the budget."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import field, write_array

import insitu


def _dataset(tmp_path: Path, budget: int, **kw) -> tuple[insitu.InSituDataset, np.ndarray]:
    data = field(200, (16, 16), seed=9)
    write_array(tmp_path, "x", data, (2, 16, 16))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["x"], (0.8, 0.2))
    return insitu.InSituDataset(store, manifest, batch_size=8, cache_budget_bytes=budget, **kw), data


@pytest.mark.parametrize("block_chunks", [1, 4])
def test_resident_bytes_never_exceed_budget(tmp_path: Path, block_chunks: int) -> None:
    slab = 2 * 16 * 16 * 4
    budget = 12 * slab + 100  # not a multiple of the slot size on purpose
    ds, data = _dataset(tmp_path, budget, block_chunks=block_chunks)
    samples: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # sample residency while the engine runs
        while not stop.is_set():
            samples.append(ds.pool.resident_bytes)
            time.sleep(0.0005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for epoch in range(3):
            ds.set_epoch(epoch)
            for b in ds.train:
                np.testing.assert_array_equal(b["x"], data[b.sample_indices])
                samples.append(ds.pool.resident_bytes)
            samples.extend(ds.pool.resident_bytes for _ in ds.val)
    finally:
        stop.set()
        watcher.join()
        ds.close()
    assert max(samples) <= budget
    assert ds.stats["peak_resident_bytes"] <= budget
    assert ds.stats["peak_resident_bytes"] > 0


def test_large_budget_does_not_delay_the_first_batch(tmp_path: Path) -> None:
    """With room for the whole array, the first batch still needs only the first blocks."""
    ds, _ = _dataset(tmp_path, 1 << 30, block_chunks=2, readahead_blocks=1, prefetch=1)
    with ds:
        it = iter(ds.train)
        next(it)
        time.sleep(0.2)  # give a runaway read-ahead time to show itself
        loaded = ds.stats["slabs_loaded"]
        it.close()
    # Batch 0 is with the consumer, batch 1 waits in the queue (prefetch=1): blocks 0-3, plus one
    # block of read-ahead = 5 blocks of 2 chunks. The train split alone has 80 chunk rows.
    assert loaded <= 5 * 2, loaded


@pytest.mark.parametrize("budget", [0, 100, 3 * 2048])
def test_a_budget_below_what_blocks_need_streams_the_rest(tmp_path: Path, budget: int) -> None:
    # 0 and 100 bytes hold no slab (2048 bytes each); 3 slabs hold less than one block of 4 chunks.
    ds, data = _dataset(tmp_path, budget, block_chunks=4)
    with ds:
        for epoch in range(2):
            ds.set_epoch(epoch)
            seen = []
            for b in ds.train:
                np.testing.assert_array_equal(b["x"], data[b.sample_indices])
                seen.extend(b.sample_indices.tolist())
            assert sorted(seen) == list(range(160))
        slots = budget // 2048
        assert ds.stats["peak_resident_bytes"] <= budget
        # The slabs the pool took stay cached for the second epoch; the others are read again.
        assert ds.stats["slabs_loaded"] == slots
        assert ds.stats["slab_hits"] == slots
        assert ds.stats["slabs_streamed"] == 2 * 80 - 2 * slots
        assert ds.stats["chunks_decoded"] == 2 * 80 - slots


def test_the_auto_budget_caches_a_dataset_that_fits(tmp_path: Path) -> None:
    ds, data = _dataset(tmp_path, "auto")  # 400 KB of slabs: far below a quarter of any machine
    with ds:
        for epoch in range(2):
            ds.set_epoch(epoch)
            for b in ds.train:
                np.testing.assert_array_equal(b["x"], data[b.sample_indices])
        assert ds.stats["budget_bytes"] == 100 * 2048  # every slab of the array, not more
        assert ds.stats["reads"] == 80  # the second epoch was served from memory
        assert ds.stats["slabs_streamed"] == 0


def test_the_auto_budget_is_a_quarter_of_available_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from insitu.plan import budget

    monkeypatch.setattr(budget, "available_memory", lambda: 4 << 20)
    assert budget.auto_budget({"x": 3 << 20}) == 1 << 20  # the dataset does not fit: a quarter
    assert budget.auto_budget({"x": 512 << 10}) == 512 << 10  # it fits: all of it
    assert budget.auto_budget({"x": 3 << 20}, static_bytes=256 << 10) == 768 << 10
    monkeypatch.setattr(budget, "available_memory", lambda: None)
    assert budget.auto_budget({"x": 2 << 30}) == budget.FALLBACK_CAP
