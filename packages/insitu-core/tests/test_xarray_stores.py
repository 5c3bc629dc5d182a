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
    store.reads.clear()
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
        np.testing.assert_array_equal(data.coords_of("lsm")["latitude"], lat[keep])


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


def test_a_dask_backed_dataset_maps_to_its_store(store_path: Path) -> None:
    pytest.importorskip("dask")
    lazy = xr.open_zarr(store_path)  # dask-backed, as xr.open_zarr gives by default
    assert lazy.t2m.chunks is not None
    with insitu.from_xarray(lazy[["t2m"]], splits=(1.0,), batch_size=8) as data:
        batch = next(iter(data.view("train")))
        assert_matches(batch["t2m"], reference(store_path).t2m.values[batch.sample_indices])
    sliced = lazy[["z"]].isel(level=[1, 2])
    with pytest.raises(insitu.ConfigError, match=r"variable 'z' is a dask array sliced after opening"):
        insitu.from_xarray(sliced)


def test_the_accessor_is_the_same_entry_point(store_path: Path) -> None:
    insitu.register_xarray_accessor()
    insitu.register_xarray_accessor()  # idempotent
    ds = reference(store_path)[["t2m", "lsm"]]
    assert ds.insitu.geometries()["lsm"].static
    with ds.insitu.dataset(splits={"train": (None, "2016-01-05")}, batch_size=8) as data:
        batch = next(iter(data.view("train")))
        assert (batch.coords["time"] <= np.datetime64("2016-01-05T18")).all()
        assert batch["lsm"].shape == (1, 32, 64)


def test_a_sharded_array_reads_only_the_selected_inner_chunks(tmp_path: Path) -> None:
    """Selections reach inside shards: only the inner chunks the box touches are fetched (as byte
    ranges, never the whole shard) and decoded."""
    group = zarr.open_group(tmp_path / "sharded.zarr", mode="w", zarr_format=3)
    values = np.random.default_rng(1).standard_normal((16, 32, 64)).astype("float32")
    arr = group.create_array(
        "t2m",
        shape=values.shape,
        chunks=(4, 8, 8),
        shards=(8, 32, 64),
        dtype="f4",
        dimension_names=("time", "latitude", "longitude"),
    )
    arr[...] = values
    for name, coord in (("latitude", np.linspace(90, -90, 32)), ("longitude", np.arange(64) * 5.625)):
        c = group.create_array(name, shape=coord.shape, dtype="f8", dimension_names=(name,))
        c[...] = coord
    store = RecordingStore(LocalStore(tmp_path / "sharded.zarr", read_only=True))
    geoms = insitu.open_geometries(
        store, ["t2m"], "time", sel={"latitude": slice(60, 20), "longitude": slice(0, 40)}
    )
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,), names=["train"])
    lat = np.flatnonzero((np.linspace(90, -90, 32) <= 60) & (np.linspace(90, -90, 32) >= 20))
    lon = np.flatnonzero(np.arange(64) * 5.625 <= 40)
    store.reads.clear()
    with insitu.InSituDataset(store, manifest, geoms, batch_size=4) as data:
        got = {int(i): row for b in data.train for i, row in zip(b.sample_indices, b["t2m"], strict=True)}
        inner = len({i // 8 for i in lat}) * len({i // 8 for i in lon})
        assert data.stats["chunks_decoded"] == inner * (
            16 // 4
        )  # per time chunk, only the box's inner chunks
    np.testing.assert_array_equal(np.stack([got[i] for i in range(16)]), values[:, lat][:, :, lon])
    shard_reads = [r for k, r in store.reads if k.startswith("t2m/c/")]
    assert shard_reads
    assert all(r is not None for r in shard_reads)  # index and inner chunks by range, never the whole shard


def test_a_persisted_cache_keeps_selections_apart(tmp_path: Path, store_path: Path) -> None:
    """A different selection is different data: the persisted cache refuses to serve one level list's
    slabs for another, and rebuilds them when told to."""
    store = insitu.open_store(store_path)
    geoms = insitu.open_geometries(store, ["z"], "time")
    manifest = insitu.split_by_chunk(geoms["z"], (1.0,), names=["train"])
    ref = reference(store_path)

    def check(levels: list[int], persist: bool | str) -> int:
        chosen = geoms["z"].sel(level=levels)
        with insitu.InSituDataset(
            store, manifest, [chosen], batch_size=8, cache_dir=tmp_path / "cache", persist=persist
        ) as data:
            for batch in data.train:
                assert_matches(batch["z"], ref.z.sel(level=levels).values[batch.sample_indices], exact=True)
            return int(data.stats["chunks_decoded"])

    assert check([500, 850], True) == N_TIME // 8 * 4 * 4
    assert check([500, 850], True) == 0  # reused
    with pytest.raises(insitu.StaleCacheError, match=r"array 'z' built from other data"):
        check([50, 100], True)
    assert check([50, 100], "rebuild") == N_TIME // 8 * 4 * 4


def test_the_time_axis_wins_over_many_static_fields(tmp_path: Path) -> None:
    """Three static fields lead with latitude, one field with time: time is still the sample axis."""
    lat, lon = np.linspace(90, -90, 8), np.arange(16) * 22.5
    grid = np.zeros((8, 16), "f4")
    ds = xr.Dataset(
        {
            "t2m": (("time", "latitude", "longitude"), np.zeros((12, 8, 16), "f4")),
            **dict.fromkeys(("lsm", "orography", "soil_type"), (("latitude", "longitude"), grid)),
        },
        coords={"time": pd.date_range("2000", periods=12, freq="D"), "latitude": lat, "longitude": lon},
    )
    ds.to_zarr(tmp_path / "s.zarr", zarr_format=3)
    geoms = insitu.open_geometries(insitu.open_store(tmp_path / "s.zarr"), include_static=True)
    assert geoms.sample_dim == "time"
    assert sorted(n for n, g in geoms.items() if g.static) == ["lsm", "orography", "soil_type"]


def test_shift_by_a_time_span(store_path: Path) -> None:
    t2m = insitu.open_geometries(insitu.open_store(store_path), ["t2m"], "time")["t2m"]
    assert t2m.shift("24h") == t2m.shift(4)  # 6-hourly data
    assert t2m.shift(np.timedelta64(-1, "D")).offset == -4
    assert t2m.shift("24h").label == "t2m+4"
    with pytest.raises(insitu.ConfigError, match=r"shift\('5h'\) is not a whole number of 'time' steps"):
        t2m.shift("5h")
    with pytest.raises(insitu.ConfigError, match=r"a time span is a whole number and a unit.*'soon'"):
        t2m.shift("soon")


def test_a_dataset_handed_where_a_store_goes_says_what_to_use(store_path: Path) -> None:
    ds = reference(store_path)
    with pytest.raises(TypeError, match=r"use insitu.from_xarray\(ds\)"):
        insitu.open_store(ds)
    manifest = insitu.split_by_chunk(
        insitu.open_geometries(insitu.open_store(store_path), ["t2m"], "time")["t2m"], (1.0,), names=["train"]
    )
    with pytest.raises(TypeError, match=r"use insitu.from_xarray\(ds\)"):
        insitu.InSituDataset(ds, manifest)


def test_samples_a_window_cannot_serve_are_reported_not_silently_dropped(
    store_path: Path, caplog: Any
) -> None:
    """The last day has no +24 h target inside the store: the split keeps its range, and the samples
    it cannot deliver are counted and warned about (a date split the user bounded)."""
    import logging

    t2m = insitu.open_geometries(insitu.open_store(store_path), ["t2m"], "time")["t2m"]
    manifest = insitu.split_by_coord(t2m, {"train": (None, "2016-01-15"), "test": ("2016-01-16", None)})
    with caplog.at_level(logging.INFO, logger="insitu"):
        data = insitu.InSituDataset(
            insitu.open_store(store_path), manifest, [t2m, t2m.shift("24h")], batch_size=8
        )
    with data:
        assert data.unused_anchors == {"test": 4}
        delivered = sorted(i for b in data.view("test") for i in b.sample_indices.tolist())
        assert delivered == manifest.samples("test")[:-4].tolist()  # all but the last day
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "not delivered" in r.getMessage()]
    assert len(warned) == 1
    assert "split 'test': 4 of its 28 samples are not delivered" in warned[0].getMessage()
