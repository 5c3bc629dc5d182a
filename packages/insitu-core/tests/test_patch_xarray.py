"""Patches of stores written by xarray: CF-decoded values, each patch's coordinates, statics cropped.

Written with ``to_zarr`` as a user's pipeline would (packed int16 with scale,
offset and _FillValue; CF time; a land-sea mask without time), read back with
``from_xarray(ds, patch=...)``: every patch equals xarray's own decoding of
the same box, and ``batch.coords`` carries each patch's latitudes and
longitudes beside the time of each row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import insitu

xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")

pytestmark = [
    pytest.mark.filterwarnings("ignore:Failed to open Zarr store with consolidated metadata"),
    pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part"),
]


def _write(path: Path, zarr_format: int) -> Path:
    rng = np.random.default_rng(3)
    time = pd.date_range("2020-01-01", periods=24, freq="6h")
    lat = np.linspace(90, -90, 30)
    lon = np.arange(40) * 9.0
    t2m = (280 + 10 * rng.standard_normal((24, 30, 40))).astype("float32")
    t2m[5, 0, :3] = np.nan
    lsm = rng.random((30, 40)).astype("float32")
    ds = xr.Dataset(
        {"t2m": (("time", "latitude", "longitude"), t2m), "lsm": (("latitude", "longitude"), lsm)},
        coords={"time": time, "latitude": lat, "longitude": lon},
    )
    encoding = {
        "t2m": {
            "dtype": "int16",
            "scale_factor": 0.01,
            "add_offset": 280.0,
            "_FillValue": -32767,
            "chunks": (4, 8, 16),
        },
        "lsm": {"chunks": (15, 20)},
        "time": {"units": "hours since 1979-01-01", "dtype": "int64"},
    }
    ds.to_zarr(path, zarr_format=zarr_format, encoding=encoding)
    return path


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_patches_of_an_xarray_store_equal_xarrays_decoding_with_their_coordinates(
    tmp_path: Path, zarr_format: int
) -> None:
    path = _write(tmp_path / "era5.zarr", zarr_format)
    ds = xr.open_zarr(path)
    data = insitu.from_xarray(
        ds[["t2m", "lsm"]], patch={"latitude": 12, "longitude": 12}, splits=(1.0,), batch_size=16
    )
    want = ds.t2m.values
    n = 0
    for batch in data.view("train"):
        assert batch["t2m"].dtype == np.float32
        coords = batch.coords
        assert coords["latitude"].shape == (batch.size, 12)
        for i, (t, y, x) in enumerate(batch.patch_origins.tolist()):
            box = want[t, y : y + 12, x : x + 12]
            np.testing.assert_allclose(batch["t2m"][i], box, rtol=0, atol=1e-4, equal_nan=True)
            np.testing.assert_array_equal(batch["lsm"][i], ds.lsm.values[y : y + 12, x : x + 12])
            np.testing.assert_array_equal(coords["latitude"][i], ds.latitude.values[y : y + 12])
            np.testing.assert_array_equal(coords["longitude"][i], ds.longitude.values[x : x + 12])
            assert coords["time"][i] == ds.time.values[t]
        n += batch.size
    assert n == 24 * 3 * 4  # 30 = 12 + 12 + 6 (shifted), 40 = 12 + 12 + 12 + 4 (shifted)
    assert np.isnan(want[5, 0, :3]).all()


def test_padded_patch_coordinates_are_missing_past_the_end(tmp_path: Path) -> None:
    path = _write(tmp_path / "era5.zarr", 3)
    ds = xr.open_zarr(path)
    data = insitu.from_xarray(
        ds[["t2m"]], patch={"latitude": 12, "longitude": 12}, patch_edge="pad", splits=(1.0,), batch_size=200
    )
    batch = next(iter(data.view("train")))
    lat = batch.coords["latitude"]
    inside = batch.patch_mask("t2m")[:, :, 0]  # along latitude
    assert np.isnan(lat[~inside]).all()
    assert not np.isnan(lat[inside]).any()


def test_patches_inside_a_latitude_longitude_box_selected_by_value(tmp_path: Path) -> None:
    path = _write(tmp_path / "era5.zarr", 3)
    ds = xr.open_zarr(path)
    box = {"latitude": slice(60, -30), "longitude": slice(45, 270)}
    data = insitu.from_xarray(
        ds[["t2m"]], sel=box, patch={"latitude": 8, "longitude": 8}, splits=(1.0,), batch_size=64
    )
    want = ds.t2m.sel(box)
    lat_in, lon_in = set(want.latitude.values.tolist()), set(want.longitude.values.tolist())
    n = 0
    for batch in data.view("train"):
        for i, (t, y, x) in enumerate(batch.patch_origins.tolist()):
            np.testing.assert_allclose(
                batch["t2m"][i], ds.t2m.values[t, y : y + 8, x : x + 8], atol=1e-4, equal_nan=True
            )
            assert set(batch.coords["latitude"][i].tolist()) <= lat_in
            assert set(batch.coords["longitude"][i].tolist()) <= lon_in
        n += batch.size
    per_lat = -(-want.sizes["latitude"] // 8)
    per_lon = -(-want.sizes["longitude"] // 8)
    assert n == 24 * per_lat * per_lon


def test_date_splits_cut_inside_a_chunk_keep_each_patch_in_its_own_dates(tmp_path: Path) -> None:
    path = _write(tmp_path / "era5.zarr", 3)
    ds = xr.open_zarr(path)
    splits = {"train": ("2020-01-01", "2020-01-03T12"), "val": ("2020-01-03T18", None)}  # cuts a 4-step chunk
    data = insitu.from_xarray(
        ds[["t2m"]], splits=splits, patch={"latitude": 15, "longitude": 20}, batch_size=32
    )
    times = ds.time.values
    seen: dict[str, set[tuple[int, int, int]]] = {}
    for name in ("train", "val"):
        seen[name] = set()
        for batch in data.view(name):
            for i, (t, y, x) in enumerate(batch.patch_origins.tolist()):
                np.testing.assert_allclose(
                    batch["t2m"][i], ds.t2m.values[t, y : y + 15, x : x + 20], atol=1e-4, equal_nan=True
                )
                seen[name].add((t, y, x))
    train_t = {t for t, _, _ in seen["train"]}
    val_t = {t for t, _, _ in seen["val"]}
    assert max(times[sorted(train_t)]) <= np.datetime64("2020-01-03T12")
    assert min(times[sorted(val_t)]) >= np.datetime64("2020-01-03T18")
    assert train_t | val_t == set(range(24))
    assert len(seen["train"]) + len(seen["val"]) == 24 * 2 * 2
