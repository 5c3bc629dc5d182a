"""Opening a store and taking the first batch do not wait for coordinate values; whatever needs
them (batch.coords, a selection by value, the sample dimension chosen by its time axis) waits."""

from __future__ import annotations

import asyncio
import pickle
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import finishes
from zarr.storage import LocalStore, WrapperStore

import insitu
from insitu.store.loop import get_loop

HANG_S = 60


class GatedStore(WrapperStore[Any]):
    """Reads of the coordinate arrays (their metadata and chunks) wait until ``open()``; anything
    else passes. ``fail=True`` makes them fail instead, once opened."""

    def __init__(self, store: Any, names: tuple[str, ...] = ("time", "lat"), fail: bool = False) -> None:
        super().__init__(store)
        self.names = names
        self.fail = fail
        self.gate = asyncio.Event()  # used on the engine loop only
        self.waiting = 0

    def _with_store(self, store: Any) -> GatedStore:
        return type(self)(store, self.names, self.fail)

    def open(self) -> None:
        get_loop().call_soon_threadsafe(self.gate.set)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        if key.split("/")[0] in self.names:
            self.waiting += 1
            await self.gate.wait()
            if self.fail:
                raise PermissionError(f"no access to {key}")
        return await self._store.get(key, prototype, byte_range)


def _finishes(work: Any) -> Any:
    return finishes(work, HANG_S, hang="waited for coordinates that nothing needed")


@pytest.fixture
def store_path(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    root = tmp_path / "d.zarr"
    group = zarr.open_group(root, mode="w")
    data = np.arange(24 * 3 * 4, dtype="f4").reshape(24, 3, 4)
    t2m = group.create_array(
        "t2m", shape=data.shape, chunks=(4, 3, 4), dtype="f4", dimension_names=("time", "lat", "lon")
    )
    t2m[...] = data
    hours = np.arange(24, dtype="i8")
    time = group.create_array("time", shape=(24,), chunks=(24,), dtype="i8", dimension_names=("time",))
    time[...] = hours
    time.attrs.update({"units": "hours since 2000-01-01", "calendar": "standard"})
    lat = group.create_array("lat", shape=(3,), chunks=(3,), dtype="f4", dimension_names=("lat",))
    lat[...] = [10.0, 0.0, -10.0]
    expected = np.datetime64("2000-01-01T00", "ns") + hours.astype("timedelta64[h]")
    return root, data, expected


def test_the_first_batch_does_not_wait_for_coordinates(store_path) -> None:
    root, data, times = store_path
    store = GatedStore(LocalStore(root, read_only=True))
    geoms = _finishes(lambda: insitu.open_geometries(store, ["t2m"]))
    g = geoms["t2m"]
    assert g.sample_dim == "time"  # the only leading dimension: no need to look at the values
    manifest = insitu.split_by_chunk(g, (1.0,))
    with insitu.InSituDataset(store, manifest, [g], batch_size=4) as ds:
        batch = _finishes(lambda: next(iter(ds.train)))
        np.testing.assert_array_equal(batch["t2m"], data[batch.sample_indices])
        assert store.waiting > 0  # the coordinate read is still held at the gate
        store.open()
        np.testing.assert_array_equal(batch.coords["time"], times[batch.sample_indices])
        assert ds.coords["lat"].tolist() == [10.0, 0.0, -10.0]


def test_a_selection_by_value_waits_for_the_coordinates(store_path) -> None:
    root, _, _ = store_path
    store = GatedStore(LocalStore(root, read_only=True))
    geoms = _finishes(lambda: insitu.open_geometries(store, ["t2m"]))
    threading.Timer(0.05, store.open).start()  # opened from elsewhere while sel waits
    chosen = geoms["t2m"].sel(lat=slice(5, -5))
    assert chosen.sample_shape == (1, 4)


def test_coordinates_survive_pickling_and_a_failed_read_is_raised_where_they_are_used(store_path) -> None:
    root, _, times = store_path
    ok = GatedStore(LocalStore(root, read_only=True))
    ok.open()
    g = insitu.open_geometries(ok, ["t2m"])["t2m"]
    again = pickle.loads(pickle.dumps(g))
    np.testing.assert_array_equal(again.coords["time"], times)
    bad = GatedStore(LocalStore(root, read_only=True), fail=True)
    geoms = _finishes(lambda: insitu.open_geometries(bad, ["t2m"]))  # opening does not fail
    bad.open()
    with pytest.raises(PermissionError, match=r"no access to (time|lat)"):
        geoms["t2m"].sel(lat=0.0)
