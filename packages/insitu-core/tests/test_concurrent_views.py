"""Two views iterated at once (zip, or two threads) complete or are refused up front: never a hang."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import write_array
from zarr.storage import LocalStore

import insitu
from insitu.errors import ConfigError

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
    """Run ``work`` in a thread; its result, its exception re-raised, or a failure if it hangs."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = work()
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(HANG_S)
    assert not t.is_alive(), f"still running after {HANG_S} s: a deadlock"
    if "error" in out:
        raise out["error"]
    return out["value"]


def _check(batches: list[insitu.Batch], data: np.ndarray, expected: np.ndarray) -> None:
    seen = np.concatenate([b.sample_indices for b in batches])
    np.testing.assert_array_equal(np.sort(seen), expected)
    for b in batches:
        np.testing.assert_array_equal(b["v"], data[b.sample_indices])


@pytest.mark.parametrize("slabs", range(1, 13))
def test_zip_train_val_completes_or_is_refused(source: tuple[Path, np.ndarray], slabs: int) -> None:
    root, data = source
    with _dataset(root, slabs) as ds:

        def zipped() -> tuple[list[insitu.Batch], list[insitu.Batch]]:
            train, val = [], []
            for a, b in zip(ds.train, ds.val, strict=True):
                train.append(a)
                val.append(b)
            return train, val

        if slabs < 8:  # each view's 2 current slots + the other's 6 with read-ahead need 8
            # (one slot cannot even hold the two chunks of one view's first block alone)
            beside = "" if slabs < 2 else ".*other iteration"
            with pytest.raises(ConfigError, match=f"cache_budget_bytes={slabs * SLAB_BYTES}{beside}"):
                _finishes(zipped)
            return
        train, val = _finishes(zipped)
        _check(train, data, np.arange(32))
        _check(val, data, np.arange(32, 64))


def test_zip_with_enough_budget_completes(source: tuple[Path, np.ndarray]) -> None:
    root, data = source
    with _dataset(root, 12) as ds:
        pairs = _finishes(lambda: list(zip(ds.train, ds.val, strict=True)))
    _check([a for a, _ in pairs], data, np.arange(32))
    _check([b for _, b in pairs], data, np.arange(32, 64))


@pytest.mark.parametrize("slabs", [2, 4, 8, 12, 16])
def test_two_threads_iterating_at_once_complete_or_one_is_refused(
    source: tuple[Path, np.ndarray], slabs: int
) -> None:
    root, data = source
    with _dataset(root, slabs) as ds:
        results: dict[str, Any] = {}
        gate = threading.Barrier(2)

        def consume(split: str) -> None:
            try:
                it = iter(ds.view(split))
            except ConfigError as exc:
                results[split] = exc
                gate.wait()
                return
            gate.wait()  # both iterators exist before either moves
            results[split] = list(it)

        threads = [threading.Thread(target=consume, args=(s,), daemon=True) for s in ("train", "val")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(HANG_S)
        assert not any(t.is_alive() for t in threads), "deadlock between two iterating threads"
        for split, expected in (("train", np.arange(32)), ("val", np.arange(32, 64))):
            got = results[split]
            if isinstance(got, ConfigError):
                assert "other iteration" in str(got)
            else:
                _check(got, data, expected)
        assert not all(isinstance(r, ConfigError) for r in results.values())


def test_a_refused_iterator_leaves_the_running_one_intact(source: tuple[Path, np.ndarray]) -> None:
    root, data = source
    with _dataset(root, 4) as ds:
        train = iter(ds.train)
        with pytest.raises(ConfigError, match="beside 1 other iteration"):
            iter(ds.val)
        _check(list(train), data, np.arange(32))
        _check(list(ds.val), data, np.arange(32, 64))  # alone now: fits
