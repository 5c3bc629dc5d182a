from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.storage import MemoryStore

from insitu.testing.synthetic import ERA5_VARIABLES, make_era5_like, make_linear_regression

SMALL = {"n_time": 48, "shape": (8, 16), "chunks_time": 12}


def test_layout_dims_coords_and_attributes(tmp_path: Path) -> None:
    group = make_era5_like(tmp_path / "era5.zarr", **SMALL)
    for name in ("t2m", "u10", "v10"):
        array = group[name]
        assert isinstance(array, zarr.Array)
        assert array.shape == (48, 8, 16)
        assert array.chunks == (12, 8, 16)
        assert array.dtype == np.float32
        assert array.metadata.dimension_names == ("time", "lat", "lon")
        assert array.attrs["units"] == ERA5_VARIABLES[name].units
    np.testing.assert_array_equal(group["time"][:], np.arange(48))
    lat, lon = group["lat"][:], group["lon"][:]
    assert lat[0] > lat[-1]  # north to south, as ERA5 stores it
    assert lat.min() > -90
    assert lat.max() < 90
    assert lon[0] == 0
    assert lon[-1] < 360
    assert group["time"].attrs["units"].startswith("hours since")


def test_values_are_physically_plausible() -> None:
    group = make_era5_like(MemoryStore(), n_time=96, variables=("t2m", "u10", "v10", "msl"))
    t2m, u10, msl = group["t2m"][:], group["u10"][:], group["msl"][:]
    assert np.isfinite(t2m).all()
    assert t2m.min() > 200
    assert t2m.max() < 330
    assert np.abs(u10).max() < 60
    assert msl.min() > 95_000
    assert msl.max() < 106_000
    lat = group["lat"][:]
    tropics, poles = np.abs(lat) < 20, np.abs(lat) > 60
    assert t2m[:, tropics].mean() > t2m[:, poles].mean() + 10


def test_fields_evolve_smoothly_in_time() -> None:
    t2m = make_era5_like(MemoryStore(), **SMALL)["t2m"][:].astype(np.float64)
    anomaly = t2m - t2m.mean(axis=0)
    hourly = np.corrcoef(anomaly[:-1].ravel(), anomaly[1:].ravel())[0, 1]
    assert hourly > 0.9  # weather persists hour to hour
    assert not np.allclose(t2m[0], t2m[-1], atol=0.5)  # but it does change


def test_diurnal_cycle_follows_local_solar_time() -> None:
    group = make_era5_like(MemoryStore(), n_time=24 * 4, shape=(16, 24))
    t2m = group["t2m"][:]
    # At longitude 0 local noon is 12 UTC; 15:00 local (warmest) beats 03:00 local (coolest).
    days = t2m.reshape(4, 24, 16, 24)[:, :, :, 0].mean(axis=(0, 2))
    assert days[15] > days[3]


def test_same_seed_same_values_whatever_the_layout() -> None:
    base = make_era5_like(MemoryStore(), **SMALL)["t2m"][:]
    v2 = make_era5_like(MemoryStore(), **SMALL, zarr_format=2)["t2m"][:]
    sharded = make_era5_like(MemoryStore(), **{**SMALL, "chunks_time": 6}, shards_time=24)["t2m"][:]
    raw = make_era5_like(MemoryStore(), **SMALL, compressor=None, variables=("t2m",))["t2m"][:]
    for other in (v2, sharded, raw):
        np.testing.assert_array_equal(base, other)
    different = make_era5_like(MemoryStore(), **SMALL, seed=1)["t2m"][:]
    assert not np.array_equal(base, different)


def test_zarr_v2_and_sharded_v3_metadata() -> None:
    v2 = make_era5_like(MemoryStore(), **SMALL, zarr_format=2)
    assert v2.metadata.zarr_format == 2
    assert v2["t2m"].attrs["_ARRAY_DIMENSIONS"] == ["time", "lat", "lon"]
    sharded = make_era5_like(MemoryStore(), **{**SMALL, "chunks_time": 6}, shards_time=24)
    assert sharded["u10"].shards == (24, 8, 16)
    assert sharded["u10"].chunks == (6, 8, 16)


def test_zstd_compresses_like_packed_reanalysis() -> None:
    group = make_era5_like(MemoryStore(), **SMALL)
    for name in ("t2m", "u10", "v10"):
        ratio = group[name].nbytes_stored() / group[name].nbytes
        assert ratio < 0.75, f"{name} barely compresses ({ratio:.2f})"


def test_existing_store_is_not_overwritten_by_default(tmp_path: Path) -> None:
    path = tmp_path / "era5.zarr"
    make_era5_like(path, **SMALL)
    with pytest.raises(FileExistsError):
        make_era5_like(path, **SMALL)
    again = make_era5_like(path, **SMALL, seed=3, overwrite=True)
    assert again.attrs["seed"] == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"variables": ("t2m", "sst")}, "unknown variables"),
        ({"variables": ("t2m", "t2m")}, "unique"),
        ({"zarr_format": 2, "shards_time": 24}, "zarr_format=3"),
        ({"shards_time": 30}, "multiple of chunks_time"),
        ({"compressor": "lz4"}, "compressor"),
        ({"n_time": 0}, "positive"),
    ],
)
def test_invalid_arguments_are_rejected(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_era5_like(MemoryStore(), **{**SMALL, **kwargs})  # type: ignore[arg-type]


def test_linear_regression_has_the_stated_answer() -> None:
    group = make_linear_regression(MemoryStore(), n_samples=200, n_features=3, n_targets=2, chunks=64)
    x, y = group["x"][:], group["y"][:]
    assert x.shape == (200, 3)
    assert y.shape == (200, 2)
    assert group["x"].chunks == (64, 3)
    weights, bias = np.array(group.attrs["weights"]), np.array(group.attrs["bias"])
    np.testing.assert_allclose(y, x @ weights + bias, rtol=1e-4, atol=1e-4)
    again = make_linear_regression(MemoryStore(), n_samples=200, n_features=3, n_targets=2, chunks=64)
    np.testing.assert_array_equal(again["x"][:], x)
