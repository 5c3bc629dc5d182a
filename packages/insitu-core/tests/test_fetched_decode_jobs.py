"""Chunks fetched from a remote store in the same turn of the loop go to the decode threads as a
few jobs, not one each; every sample still arrives once, equal to the source, and a chunk that
fails reaches its own samples only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

import insitu
from insitu.engine import jobs as jobs_mod
from insitu.testing.faults import FaultInjectingStore, FaultPlan, Latency


def _remote(tmp_path: Path, n: int, plan: FaultPlan) -> tuple[np.ndarray, FaultInjectingStore]:
    data = np.arange(n * 16, dtype=np.float32).reshape(n, 4, 4)
    root = str(tmp_path / "d.zarr")
    arr = zarr.create_array(root, name="x", shape=data.shape, chunks=(1, 4, 4), dtype="f4")
    arr[:] = data
    return data, FaultInjectingStore(zarr.storage.LocalStore(root, read_only=True), plan)


def _count_jobs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Items per decode job made from here on."""
    sizes: list[int] = []
    real = jobs_mod.DecodeJob.__init__

    def spy(self, reader, items, *args, **kwargs):  # type: ignore[no-untyped-def]
        sizes.append(len(items))
        real(self, reader, items, *args, **kwargs)

    monkeypatch.setattr(jobs_mod.DecodeJob, "__init__", spy)
    return sizes


def test_chunks_answered_together_are_decoded_a_few_jobs_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every GET waits the same 20 ms: the answers of a round trip arrive in one turn of the loop.
    data, store = _remote(tmp_path, 512, FaultPlan(latency=Latency.fixed(0.02)))
    geom = insitu.open_geometries(store, ["x"])["x"]
    manifest = insitu.split_by_chunk(geom, (1.0,), names=("train",))
    sizes = _count_jobs(monkeypatch)
    with insitu.InSituDataset(store, manifest, [geom], seed=5, batch_size=32) as ds:
        rows = np.concatenate([b[geom.label] for b in ds.train])
        assert ds.stats["chunks_decoded"] == 512
    order = np.argsort(rows[:, 0, 0])
    np.testing.assert_array_equal(rows[order], data)  # every sample once, as stored
    assert sum(sizes) == 512  # each fetched chunk decoded once
    assert len(sizes) <= 512 // 2  # not a job per chunk
    assert max(sizes) > 1


def test_a_chunk_that_fails_in_a_shared_job_fails_only_its_own_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, store = _remote(
        tmp_path, 128, FaultPlan(latency=Latency.fixed(0.01), corrupt_keys=("x/c/7/0/0", "x/c/90/0/0"))
    )
    geom = insitu.open_geometries(store, ["x"])["x"]
    manifest = insitu.split_by_chunk(geom, (1.0,), names=("train",))
    sizes = _count_jobs(monkeypatch)
    with insitu.InSituDataset(store, manifest, [geom], seed=1, batch_size=16, on_bad_chunk="skip") as ds:
        rows = np.concatenate([b[geom.label] for b in ds.train])
        assert ds.stats["bad_chunks"] == 2
    assert max(sizes) > 1  # the damaged chunks shared jobs with sound ones
    expected = np.delete(data, [7, 90], axis=0)
    order = np.argsort(rows[:, 0, 0])
    np.testing.assert_array_equal(rows[order], expected)
