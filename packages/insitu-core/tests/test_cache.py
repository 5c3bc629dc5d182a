"""Decoded chunks persist across runs, and a stale or corrupted cache is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import CountingStore, field, write_array
from zarr.storage import LocalStore

import insitu
from insitu.errors import StaleCacheError


def _run(root: Path, cache: Path, persist, transforms=()) -> tuple[CountingStore, dict]:
    store = CountingStore(LocalStore(root, read_only=True))
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["x"], (0.75, 0.25))
    src = np.asarray(insitu_open(root))
    with insitu.InSituDataset(
        store, manifest, batch_size=4, cache_dir=cache, persist=persist, chunk_transforms=transforms
    ) as ds:
        for split in ("train", "val"):
            for b in ds.view(split):
                expect = src[b.sample_indices]
                for t in transforms:
                    expect = t("x", expect)
                np.testing.assert_array_equal(b["x"], expect)
        stats = ds.stats
    return store, stats


def insitu_open(root: Path) -> np.ndarray:
    import zarr

    return zarr.open_array(LocalStore(root, read_only=True), path="x", mode="r")[...]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_array(tmp_path / "data", "x", field(40, (3, 5), seed=6), (4, 3, 5))
    return tmp_path / "data"


def test_second_run_reads_nothing(root: Path, tmp_path: Path) -> None:
    first, _ = _run(root, tmp_path / "cache", True)
    assert sum(first.chunk_gets().values()) == 10
    second, stats = _run(root, tmp_path / "cache", True)
    assert sum(second.chunk_gets().values()) == 0
    assert stats["slab_hits"] > 0
    assert stats["slabs_loaded"] == 0


def test_a_run_that_read_nothing_keeps_the_whole_cache_for_the_next(root: Path, tmp_path: Path) -> None:
    # The second run adopts every slab and keeps them without per-slab entries; its index must
    # still list them all, or the third run would read them again.
    _run(root, tmp_path / "cache", True)
    for _ in range(2):
        again, stats = _run(root, tmp_path / "cache", True)
        assert sum(again.chunk_gets().values()) == 0
        assert stats["slabs_loaded"] == 0


def test_cache_dir_without_persist_leaves_nothing_behind(root: Path, tmp_path: Path) -> None:
    _run(root, tmp_path / "scratch", False)
    assert list((tmp_path / "scratch").iterdir()) == []


def test_stale_cache_is_refused_then_rebuilt(root: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _run(root, cache, True)

    def double(name: str, block: np.ndarray) -> np.ndarray:
        return block * 2

    double.fingerprint = lambda: "double-v1"  # type: ignore[attr-defined]
    with pytest.raises(StaleCacheError, match="persist='rebuild'"):
        _run(root, cache, True, transforms=(double,))
    store, _ = _run(root, cache, "rebuild", transforms=(double,))
    assert sum(store.chunk_gets().values()) == 10
    store, _ = _run(root, cache, True, transforms=(double,))  # the rebuilt cache now serves
    assert sum(store.chunk_gets().values()) == 0


def test_changed_data_is_a_stale_cache(root: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _run(root, cache, True)
    import zarr

    zarr.open_array(LocalStore(root), path="x", mode="r+").attrs["units"] = "K"
    with pytest.raises(StaleCacheError):
        _run(root, cache, True)


def test_corrupted_cache_is_detected(root: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _run(root, cache, True)
    arena = next(cache.glob("arena-*.bin"))
    raw = bytearray(arena.read_bytes())
    raw[100] ^= 0xFF
    arena.write_bytes(bytes(raw))
    with pytest.raises(StaleCacheError, match="corrupted"):
        _run(root, cache, True)
    # the refused run removed no data; a rebuild drops only the bad row and re-reads it
    store, _ = _run(root, cache, "rebuild")
    assert sum(store.chunk_gets().values()) == 1
