"""A corrupt or failing chunk is named, filled or skipped as asked; never a hang."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import FaultyStore, field, write_array
from zarr.storage import LocalStore

import insitu
from insitu.errors import BadChunkError
from insitu.store.retry import RetryPolicy


def _setup(tmp_path: Path, **faults) -> tuple[FaultyStore, np.ndarray, insitu.SplitManifest]:
    data = field(24, (3, 4), seed=5)
    write_array(tmp_path, "x", data, (4, 3, 4))
    store = FaultyStore(LocalStore(tmp_path, read_only=True), **faults)
    geoms = insitu.open_geometries(store)
    return store, data, insitu.split_by_chunk(geoms["x"], (1.0,))


@pytest.mark.timeout(30)
def test_corrupt_chunk_raises_naming_array_and_key(tmp_path: Path) -> None:
    store, _, manifest = _setup(tmp_path, corrupt={"x/c/2/0/0"})
    with insitu.InSituDataset(store, manifest, batch_size=4) as ds:
        with pytest.raises(BadChunkError, match=r"array 'x', chunk 'x/c/2/0/0'") as info:
            for _ in ds.train:
                pass
        assert info.value.array == "x"
        assert info.value.key == "x/c/2/0/0"
        # The dataset stays usable: a later epoch fails the same way rather than hanging.
        with pytest.raises(BadChunkError):
            for _ in ds.train:
                pass


def test_nan_policy_fills_and_counts(tmp_path: Path) -> None:
    store, data, manifest = _setup(tmp_path, corrupt={"x/c/1/0/0"})
    with insitu.InSituDataset(store, manifest, batch_size=4, on_bad_chunk="nan", shuffle=False) as ds:
        rows = {int(i): r for b in ds.train for i, r in zip(b.sample_indices, b["x"], strict=True)}
        assert sorted(rows) == list(range(24))
        for i, r in rows.items():
            if 4 <= i < 8:
                assert np.isnan(r).all()
            else:
                np.testing.assert_array_equal(r, data[i])
        assert ds.stats["bad_chunks"] == 1


def test_skip_policy_drops_the_samples_of_bad_chunks(tmp_path: Path) -> None:
    store, data, manifest = _setup(tmp_path, corrupt={"x/c/3/0/0"})
    with insitu.InSituDataset(store, manifest, batch_size=5, on_bad_chunk="skip") as ds:
        seen = []
        for b in ds.train:
            np.testing.assert_array_equal(b["x"], data[b.sample_indices])
            seen.extend(b.sample_indices.tolist())
        assert sorted(seen) == [i for i in range(24) if not 12 <= i < 16]
        assert ds.stats["skipped_samples"] == 4


def test_transient_errors_are_retried(tmp_path: Path) -> None:
    flaky = [ConnectionError("reset"), TimeoutError("slow")]
    store, data, manifest = _setup(tmp_path, fail={"x/c/0/0/0": flaky})
    retry = RetryPolicy(retries=3, backoff_s=0.001)
    with insitu.InSituDataset(store, manifest, batch_size=4, retry=retry) as ds:
        for b in ds.train:
            np.testing.assert_array_equal(b["x"], data[b.sample_indices])
    assert store.calls["x/c/0/0/0"] == 3


def test_permanent_errors_fail_fast(tmp_path: Path) -> None:
    store, _, manifest = _setup(tmp_path, fail={"x/c/0/0/0": PermissionError("403 Forbidden")})
    with (
        insitu.InSituDataset(store, manifest, batch_size=4) as ds,
        pytest.raises(insitu.StoreUnavailableError, match="403 Forbidden"),
    ):
        list(ds.train)
    assert store.calls["x/c/0/0/0"] == 1


def test_chunk_transform_runs_once_per_chunk(tmp_path: Path) -> None:
    store, data, manifest = _setup(tmp_path)
    calls = []

    def scale(name: str, block: np.ndarray) -> np.ndarray:
        calls.append(block.shape)
        return block * 2

    with insitu.InSituDataset(store, manifest, batch_size=4, chunk_transforms=[scale]) as ds:
        probed = len(calls)  # no out_spec: called on two slabs of zeros to find its output
        for epoch in range(2):
            ds.set_epoch(epoch)
            for b in ds.train:
                np.testing.assert_array_equal(b["x"], data[b.sample_indices] * 2)
    assert probed == 2
    assert len(calls) - probed == 6  # six chunk rows, each transformed once, cached for epoch 1


def test_batch_transform_runs_after_gather(tmp_path: Path) -> None:
    store, data, manifest = _setup(tmp_path)

    def add_mean(batch: insitu.Batch) -> insitu.Batch:
        return batch.replace({**batch, "mean": batch["x"].mean(axis=(1, 2))})

    with insitu.InSituDataset(store, manifest, batch_size=4, batch_transforms=[add_mean]) as ds:
        for b in ds.train:
            np.testing.assert_allclose(b["mean"], data[b.sample_indices].mean(axis=(1, 2)), rtol=1e-6)
