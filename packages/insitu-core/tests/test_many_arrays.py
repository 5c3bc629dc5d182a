"""Per-load bookkeeping does not grow with the number of arrays (a group of 5,000 arrays took
minutes to its first batch when each load summed the memory of every array)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import insitu
from insitu.engine.pool import ArrayPool


def _group(root: Path, n_arrays: int) -> Path:
    group = zarr.open_group(str(root), mode="w")
    for i in range(n_arrays):
        a = group.create_array(
            f"v{i:03d}", shape=(32, 2), chunks=(4, 2), dtype="f4", dimension_names=("t", "x")
        )
        a[...] = np.arange(64, dtype="f4").reshape(32, 2) + 1000 * i
    return root


def _epoch_counting(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, dict[str, Any]]:
    """(reads of one array's slot count during an epoch, slabs loaded, stats), every sample checked."""
    store = insitu.open_store(root)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(next(iter(geoms.values())), (1.0,))
    reads = 0
    real = ArrayPool.slots_in_use

    def counted(self: ArrayPool) -> int:
        nonlocal reads
        reads += 1
        return real.fget(self)  # type: ignore[attr-defined,no-any-return]

    with insitu.InSituDataset(store, manifest, batch_size=4, block_chunks=2) as ds:
        monkeypatch.setattr(ArrayPool, "slots_in_use", property(counted))
        seen = 0
        for b in ds.train:
            for i, name in enumerate(geoms):
                np.testing.assert_array_equal(b[name][:, 0], b.sample_indices * 2 + 1000 * i)
            seen += len(b.sample_indices)
        monkeypatch.undo()
        assert seen == 32
        stats = ds.stats
        # The running totals equal what summing every array says.
        assert ds.pool.resident_bytes == sum(p.slots_in_use * p.slot_nbytes for p in ds.pool.arrays.values())
        assert 0 < stats["peak_resident_bytes"] <= stats["budget_bytes"]
        assert stats["peak_resident_bytes"] >= stats["resident_bytes"]
    return reads, stats["slabs_loaded"], stats


def test_work_per_load_does_not_grow_with_the_number_of_arrays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    few_reads, few_loads, _ = _epoch_counting(_group(tmp_path / "few", 2), monkeypatch)
    many_reads, many_loads, _ = _epoch_counting(_group(tmp_path / "many", 40), monkeypatch)
    assert many_loads == 20 * few_loads  # every array's every slab, once
    # Summing over the arrays on each load reads every array's slot count: loads x arrays.
    assert many_reads / many_loads <= few_reads / few_loads + 1
