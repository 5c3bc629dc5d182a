"""Stores written by xarray itself, read by name: xarray's own decoding is the reference.

An ERA5-like dataset (time/level/latitude/longitude, a packed int16 field
with a fill value, a float field with NaNs, a static land-sea mask, 0–360
longitudes, latitude stored north to south) is written with
``xr.Dataset.to_zarr`` as Zarr v2 and v3, consolidated or not; batches must
equal ``ds.isel(time=batch.sample_indices)`` of the same selection decoded by
xarray, with coordinates, and read only the chunks the selection touches.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

import insitu
from insitu.testing import RecordingStore

xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")

pytestmark = [
    pytest.mark.filterwarnings("ignore:Failed to open Zarr store with consolidated metadata"),
    pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part"),
]

N_TIME = 96
LEVELS = np.array([50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000])
CHUNKS = {"time": 8, "level": 13, "latitude": 8, "longitude": 16}


def era5_like(path: Path, zarr_format: int, consolidated: bool) -> Path:
    """Write the dataset with xarray, as a user's pipeline would."""
    rng = np.random.default_rng(7)
    time = pd.date_range("2015-12-30", periods=N_TIME, freq="6h")
    lat = np.linspace(90, -90, 32)
    lon = np.arange(64) * 5.625
    t2m = (280 + 10 * rng.standard_normal((N_TIME, 32, 64))).astype("float32")
    t2m[3, 0, :5] = np.nan  # written as the packed _FillValue
    z = rng.standard_normal((N_TIME, len(LEVELS), 32, 64)).astype("float32")
    z[5, 2, 10, 10] = np.nan
    lsm = rng.random((32, 64)).astype("float32")
    ds = xr.Dataset(
        {
            "t2m": (("time", "latitude", "longitude"), t2m),
            "z": (("time", "level", "latitude", "longitude"), z),
            "lsm": (("latitude", "longitude"), lsm),
        },
        coords={"time": time, "level": LEVELS, "latitude": lat, "longitude": lon},
    )
    ds.longitude.attrs["units"] = "degrees_east"
    encoding = {
        "t2m": {
            "dtype": "int16",
            "scale_factor": 0.01,
            "add_offset": 280.0,
            "_FillValue": -32767,
            "chunks": (8, 8, 16),
        },
        "z": {"chunks": (8, 13, 8, 16)},
        "lsm": {"chunks": (16, 32)},
        "time": {"units": "hours since 1979-01-01", "dtype": "int64"},
    }
    ds.to_zarr(path, zarr_format=zarr_format, encoding=encoding, consolidated=consolidated)
    return path


@pytest.fixture(params=[(2, True), (2, False), (3, True), (3, False)], ids=["v2-cons", "v2", "v3-cons", "v3"])
def store_path(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    fmt, consolidated = request.param
    return era5_like(tmp_path / "era5.zarr", fmt, consolidated)


def reference(path: Path) -> Any:
    return xr.open_zarr(path, chunks=None)


def assert_matches(got: np.ndarray, want: np.ndarray, *, exact: bool = False) -> None:
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    if exact:
        np.testing.assert_array_equal(got, want)
    else:  # packed int16: insitu decodes to float32, xarray to float64
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


def test_from_xarray_by_names_equals_xarray(store_path: Path) -> None:
    ds = reference(store_path)
    chosen = ds.sel(level=[500, 850, 1000])
    splits = {"train": ("2015", "2016-01-15"), "val": ("2016-01-16", None)}
    with insitu.from_xarray(chosen, splits=splits, batch_size=10, block_chunks=2, seed=3) as data:
        assert data.sample_dim == "time"
        np.testing.assert_array_equal(data.coords["level"], [500, 850, 1000])
        np.testing.assert_array_equal(data.coords["time"], ds.time.values)
        seen: dict[str, list[int]] = {"train": [], "val": []}
        for split in ("train", "val"):
            for batch in data.view(split):
                rows = batch.sample_indices
                seen[split] += rows.tolist()
                want = chosen.isel(time=rows)
                assert batch["t2m"].dtype == np.float32
                assert_matches(batch["t2m"], want.t2m.values)
                assert_matches(batch["z"], want.z.values, exact=True)
                # Static: the whole field once per batch, broadcastable against the batch's rows.
                np.testing.assert_array_equal(batch["lsm"], ds.lsm.values[np.newaxis])
                np.testing.assert_array_equal(batch.coords["time"], ds.time.values[rows])
        times = ds.time.values
        train = np.flatnonzero(times < np.datetime64("2016-01-16"))
        assert sorted(seen["train"]) == train.tolist()  # every sample of the range, exactly once
        assert sorted(seen["val"]) == np.flatnonzero(times >= np.datetime64("2016-01-16")).tolist()


def test_default_discovery_picks_time_and_lists_the_static_field(store_path: Path) -> None:
    store = insitu.open_store(store_path)
    geoms = insitu.open_geometries(store)
    assert geoms.sample_dim == "time"
    assert geoms.chosen_by_default
    assert sorted(geoms) == ["t2m", "z"]
    assert "lsm" in geoms.skipped
    assert "static" in geoms.skipped["lsm"]
    assert {"time", "latitude", "longitude", "level"} <= set(geoms.skipped)  # coordinates, said so
    assert "sample dimension 'time'" in geoms.report()
    with_static = insitu.open_geometries(store, include_static=True)
    assert with_static["lsm"].static
    assert not with_static["t2m"].static
    named = insitu.open_geometries(store, ["t2m", "lsm"], "time")
    assert named["lsm"].static


def count_chunks(store: RecordingStore, name: str) -> dict[tuple[int, ...], int]:
    counts: dict[tuple[int, ...], int] = {}
    for key, n in store.chunk_gets().items():
        head, _, rest = key.partition("/")
        if head != name:
            continue
        coords = tuple(int(c) for c in re.split(r"[./]", rest.removeprefix("c/")))
        counts[coords] = counts.get(coords, 0) + n
    return counts


def test_selection_reads_only_the_chunks_it_touches(store_path: Path) -> None:
    store = RecordingStore(LocalStore(store_path, read_only=True))
    # A lat/lon box crossing the antimeridian (350°E .. 20°E) north of the equator, 3 of 13 levels.
    box = {"latitude": slice(60, 30), "longitude": slice(350, 20), "level": [300, 500, 850]}
    geoms = insitu.open_geometries(store, ["t2m", "z"], "time", sel=box)
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,), names=["all_of_it"])
    ref = reference(store_path)
    lon = ref.longitude.values
    lon_idx = np.concatenate([np.flatnonzero(lon >= 350), np.flatnonzero(lon <= 20)])
    lat_idx = np.flatnonzero((ref.latitude.values <= 60) & (ref.latitude.values >= 30))
    want = ref.isel(longitude=lon_idx, latitude=lat_idx).sel(level=[300, 500, 850])
    store.gets.clear()
    with insitu.InSituDataset(store, manifest, geoms, batch_size=16) as data:
        for batch in data.view("all_of_it"):
            rows = batch.sample_indices
            assert_matches(batch["t2m"], want.t2m.values[rows])
            assert_matches(batch["z"], want.z.values[rows], exact=True)
    lat_chunks = sorted({int(i) // CHUNKS["latitude"] for i in lat_idx})
    lon_chunks = sorted({int(i) // CHUNKS["longitude"] for i in lon_idx})
    expected_t2m = {(t, a, b) for t in range(N_TIME // 8) for a in lat_chunks for b in lon_chunks}
    expected_z = {(t, 0, a, b) for t in range(N_TIME // 8) for a in lat_chunks for b in lon_chunks}
    t2m_reads = count_chunks(store, "t2m")
    assert set(t2m_reads) == expected_t2m  # unselected chunks never read
    assert set(t2m_reads.values()) == {1}  # each selected chunk read once
    assert count_chunks(store, "z") == dict.fromkeys(expected_z, 1)
    assert len(expected_t2m) < (N_TIME // 8) * 4 * 4 / 2  # the box really avoids most chunks


def test_shifted_label_carries_its_own_times(store_path: Path) -> None:
    store = insitu.open_store(store_path)
    geoms = insitu.open_geometries(store, ["t2m"], "time")
    g = geoms["t2m"]
    manifest = insitu.split_by_chunk(g, (1.0,), names=["train"])
    with insitu.InSituDataset(store, manifest, [g, g.shift(4)], batch_size=12) as data:
        batch = next(iter(data.train))
        times = reference(store_path).time.values
        np.testing.assert_array_equal(batch.coords_of("t2m+4")["time"], times[batch.sample_indices + 4])
        assert (batch.coords_of("t2m+4")["time"] - batch.coords["time"] == np.timedelta64(24, "h")).all()


def test_cf_decoding_can_be_turned_off_per_variable(store_path: Path) -> None:
    store = insitu.open_store(store_path)
    geoms = insitu.open_geometries(store, ["t2m", "z"], "time")
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,), names=["train"])
    raw = zarr.open_array(store_path, path="t2m", mode="r")[...]
    with insitu.InSituDataset(store, manifest, geoms, batch_size=8, cf_decode={"t2m": False}) as data:
        batch = next(iter(data.train))
        assert batch["t2m"].dtype == np.int16
        np.testing.assert_array_equal(batch["t2m"], raw[batch.sample_indices])


def test_static_field_counts_against_the_budget(store_path: Path) -> None:
    store = insitu.open_store(store_path)
    geoms = insitu.open_geometries(store, ["t2m", "lsm"], "time")
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,), names=["train"])
    with pytest.raises(insitu.ConfigError, match=r"static field\(s\) \['lsm'\] take 8192 bytes"):
        insitu.InSituDataset(store, manifest, geoms, cache_budget_bytes=8192)
    lsm_box = geoms["lsm"].sel(latitude=slice(45, 0))
    with insitu.InSituDataset(store, manifest, [geoms["t2m"], lsm_box], batch_size=4) as data:
        batch = next(iter(data.train))
        lat = reference(store_path).latitude.values
        keep = (lat <= 45) & (lat >= 0)
        np.testing.assert_array_equal(batch["lsm"][0], reference(store_path).lsm.values[keep])
        np.testing.assert_array_equal(data.label_coords("lsm")["latitude"], lat[keep])


# -- bad input: clear errors naming the value ---------------------------------------------------------
def test_selection_errors_name_the_value(store_path: Path) -> None:
    store = insitu.open_store(store_path)
    geoms = insitu.open_geometries(store, ["z"], "time")
    z = geoms["z"]
    with pytest.raises(insitu.ConfigError, match=r"no coordinate value equals 425"):
        z.sel(level=[500, 425])
    with pytest.raises(insitu.ConfigError, match=r"slice\(95, 100\) selects nothing.*90"):
        z.sel(latitude=slice(95, 100))
    with pytest.raises(insitu.ConfigError, match=r"no dimension 'height'"):
        z.sel(height=3)
    with pytest.raises(insitu.ConfigError, match=r"index 13 is out of range"):
        z.isel(level=13)
    with pytest.raises(insitu.ConfigError, match=r"sample axis .*'time'.* cannot be selected"):
        z.isel(time=slice(0, 8))
    with pytest.raises(insitu.ConfigError, match=r"no array has a dimension 'height'"):
        insitu.open_geometries(store, ["z"], "time", sel={"height": 3})


def test_a_dataset_not_backed_by_zarr_is_refused() -> None:
    memory = xr.Dataset({"t2m": (("time", "x"), np.zeros((4, 3)))})
    with pytest.raises(insitu.ConfigError, match=r"variable 't2m' is not backed by a Zarr store"):
        insitu.from_xarray(memory)
    with pytest.raises(insitu.ConfigError, match=r"expected an xarray Dataset .* got int"):
        insitu.from_xarray(3)


def test_a_dataset_sliced_in_time_is_refused(store_path: Path) -> None:
    ds = reference(store_path).isel(time=slice(0, 40))
    with pytest.raises(insitu.ConfigError, match=r"sliced along the sample dimension 'time'"):
        insitu.from_xarray(ds[["t2m"]])


def test_xarray_selection_is_kept_and_read_narrowly(store_path: Path) -> None:
    ds = reference(store_path)
    chosen = ds[["z"]].isel(level=[0, 12], latitude=slice(0, 8))
    with insitu.from_xarray(chosen, splits=(1.0,), batch_size=16) as data:
        batch = next(iter(data.view("train")))
        assert_matches(batch["z"], chosen.z.values[batch.sample_indices], exact=True)
        np.testing.assert_array_equal(data.coords["level"], [50, 1000])
