"""Two views iterated at once (zip, or two threads) complete with every sample once, whatever the
budget: a pass never waits for pool slots (a slab the pool cannot take is streamed), so two passes
taking turns cannot wait on each other."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import finishes, write_array
from zarr.storage import LocalStore

import insitu

SLAB_BYTES = 4 * 2 * 2 * 4  # chunk (4, 2, 2) of float32
HANG_S = 60  # far beyond the milliseconds a pass takes, even on a loaded machine


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    root = tmp_path_factory.mktemp("zip")
    data = np.arange(64 * 2 * 2, dtype="f4").reshape(64, 2, 2)
    write_array(root, "v", data, (4, 2, 2))
    return root, data


def _dataset(root: Path, slabs: int) -> insitu.InSituDataset:
    store = LocalStore(root, read_only=True)
    g = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(g["v"], (0.5, 0.5), names=("train", "val"))
    return insitu.InSituDataset(
        store, manifest, batch_size=4, block_chunks=2, cache_budget_bytes=slabs * SLAB_BYTES
    )


def _finishes(work: Callable[[], Any]) -> Any:
    return finishes(work, HANG_S)


def _check(batches: list[insitu.Batch], data: np.ndarray, expected: np.ndarray) -> None:
    seen = np.concatenate([b.sample_indices for b in batches])
    np.testing.assert_array_equal(np.sort(seen), expected)
    for b in batches:
        np.testing.assert_array_equal(b["v"], data[b.sample_indices])


@pytest.mark.parametrize("slabs", range(13))
def test_zip_train_val_completes_at_every_budget(source: tuple[Path, np.ndarray], slabs: int) -> None:
    root, data = source
    with _dataset(root, slabs) as ds:

        def zipped() -> tuple[list[insitu.Batch], list[insitu.Batch]]:
            train, val = [], []
            for a, b in zip(ds.train, ds.val, strict=True):
                train.append(a)
                val.append(b)
            return train, val

        train, val = _finishes(zipped)
        _check(train, data, np.arange(32))
        _check(val, data, np.arange(32, 64))
        assert ds.stats["peak_resident_bytes"] <= slabs * SLAB_BYTES
        # What the pool could not hold was streamed; each chunk of both splits was decoded once.
        assert ds.stats["chunks_decoded"] == 16
        assert ds.stats["slabs_loaded"] == min(slabs, 16)
        assert ds.stats["slabs_streamed"] == 16 - min(slabs, 16)


@pytest.mark.parametrize("slabs", [0, 2, 4, 8, 12, 16])
def test_two_threads_iterating_at_once_complete(source: tuple[Path, np.ndarray], slabs: int) -> None:
    root, data = source
    with _dataset(root, slabs) as ds:
        results: dict[str, Any] = {}
        gate = threading.Barrier(2)

        def consume(split: str) -> None:
            it = iter(ds.view(split))
            gate.wait()  # both iterators exist before either moves
            results[split] = list(it)

        threads = [threading.Thread(target=consume, args=(s,), daemon=True) for s in ("train", "val")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(HANG_S)
        assert not any(t.is_alive() for t in threads), "deadlock between two iterating threads"
        for split, expected in (("train", np.arange(32)), ("val", np.arange(32, 64))):
            _check(results[split], data, expected)


def test_a_second_iterator_beside_a_running_one_delivers_both(source: tuple[Path, np.ndarray]) -> None:
    root, data = source
    with _dataset(root, 4) as ds:
        train = iter(ds.train)
        first = next(train)
        val = list(ds.val)  # a whole pass of another view while train is mid-epoch
        _check(val, data, np.arange(32, 64))
        _check([first, *train], data, np.arange(32))
