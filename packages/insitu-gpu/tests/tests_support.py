"""A small Zarr store with named dimensions and coordinates, and datasets over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import insitu

N_TIME, N_LAT, N_LON = 40, 12, 16


def write_store(path: Path, *, with_nan: bool = True) -> dict[str, np.ndarray]:
    """Arrays ``t2m`` (float32, some NaN) and ``z`` (int16), dims (time, lat, lon), 4 steps a chunk."""
    import zarr

    rng = np.random.default_rng(7)
    t2m = rng.normal(280.0, 10.0, size=(N_TIME, N_LAT, N_LON)).astype("float32")
    if with_nan:
        t2m[rng.random(t2m.shape) < 0.05] = np.nan
    z = rng.integers(-500, 500, size=(N_TIME, N_LAT, N_LON)).astype("int16")
    group = zarr.open_group(path, mode="w")
    for name, values in (("t2m", t2m), ("z", z)):
        arr = group.create_array(
            name,
            shape=values.shape,
            chunks=(4, N_LAT, N_LON),
            dtype=values.dtype,
            dimension_names=("time", "lat", "lon"),
        )
        arr[...] = values
    lat = np.linspace(55.0, -55.0, N_LAT)
    lon = np.linspace(0.0, 360.0, N_LON, endpoint=False)
    for name, values in (("lat", lat), ("lon", lon), ("time", np.arange(N_TIME, dtype="int64"))):
        group.create_array(name, shape=values.shape, dtype=values.dtype, dimension_names=(name,))[...] = (
            values
        )
    return {"t2m": t2m, "z": z, "lat": lat, "lon": lon}


@pytest.fixture(scope="session")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gpu-store") / "store.zarr"
    write_store(path)
    return path


@pytest.fixture(scope="session")
def store_data(store_path: Path) -> dict[str, np.ndarray]:
    import zarr

    group = zarr.open_group(store_path, mode="r")
    return {name: np.asarray(group[name][...]) for name in ("t2m", "z", "lat", "lon")}


def open_dataset(store_path: Path, **options: Any) -> insitu.InSituDataset:
    """A dataset over ``t2m`` and ``z`` (one split, shuffled), batch size 6, last batch kept."""
    geoms = insitu.open_geometries(f"file://{store_path}")
    chosen = [geoms["t2m"], geoms["z"]]
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
    settings: dict[str, Any] = dict(batch_size=6, block_chunks=2, seed=3)
    settings.update(options)
    return insitu.InSituDataset(f"file://{store_path}", manifest, chosen, **settings)


@pytest.fixture
def dataset(store_path: Path) -> Iterator[insitu.InSituDataset]:
    with open_dataset(store_path) as ds:
        yield ds


@pytest.fixture(autouse=True)
def _private_weight_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Regrid stores its weights under XDG_CACHE_HOME: never the user's.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
