"""The advection example: its synthetic store, its data definition against the source arrays, and its runs.

The real-store path is checked on a local copy shaped like WeatherBench2's
ERA5 (names, dimension order, latitude order, float32, Zarr v2
consolidated, hours since 1959), written by xarray from the same simulated
fields: it must give the same batches as the ERA5-like store, through the
same functions.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

import insitu
from examples.advection import data, shared, train_torch

SPLITS = data.SMOKE_SPLITS


@pytest.fixture(scope="module")
def years() -> list[xr.Dataset]:
    return list(data.simulate(years=2, seed=0))


@pytest.fixture(scope="module")
def era5_path(tmp_path_factory: pytest.TempPathFactory, years: list[xr.Dataset]) -> Path:
    path = tmp_path_factory.mktemp("advection") / "era5.zarr"
    data.write_era5_like(years, path)
    return path


@pytest.fixture(scope="module")
def wb2_path(tmp_path_factory: pytest.TempPathFactory, years: list[xr.Dataset]) -> Path:
    path = tmp_path_factory.mktemp("advection") / "wb2.zarr"
    data.write_wb2_like(years, path)
    return path


def era5_source(path: Path) -> data.Source:
    return dataclasses.replace(data.SYNTHETIC, store=str(path), splits=SPLITS)


def wb2_source(path: Path) -> data.Source:
    return dataclasses.replace(data.WB2, store=str(path), storage_options=None, splits=SPLITS)


def region_indices(lat: np.ndarray, lon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of data.REGION, in delivery order (longitude 280..355 then 0..40)."""
    rows = np.flatnonzero((lat >= 15) & (lat <= 75))
    cols = np.concatenate([np.flatnonzero(lon >= 280), np.flatnonzero(lon <= 40)])
    return rows, cols


# -- the simulation ---------------------------------------------------------------------------------
def test_simulation_is_deterministic_and_physically_plausible() -> None:
    first = next(data.simulate(years=1, shape=(16, 32), seed=3))
    again = next(data.simulate(years=1, shape=(16, 32), seed=3))
    other = next(data.simulate(years=1, shape=(16, 32), seed=4))
    xr.testing.assert_identical(first, again)
    assert not np.array_equal(first.t.values, other.t.values)
    assert first.sizes["time"] == 1460  # 2015, 6-hourly
    t850 = first.t.sel(level=850).values
    assert t850.min() > 200
    assert t850.max() < 320
    zonal_mean = t850.mean(axis=(0, 2))
    assert zonal_mean[len(zonal_mean) // 2] > zonal_mean[0] + 10  # warmer at the equator than near the pole
    assert float(first.t.sel(level=500).mean()) < float(first.t.sel(level=850).mean())  # colder aloft
    # The wind comes from a streamfunction: far less divergence than vorticity.
    u, v = first.u.sel(level=850).values[100], first.v.sel(level=850).values[100]
    cos_phi = np.cos(np.radians(first.latitude.values))[:, None]

    def d_dx(f: np.ndarray) -> np.ndarray:  # per radian of longitude, periodic
        return (np.roll(f, -1, 1) - np.roll(f, 1, 1)) / (2 * np.radians(360 / 32))

    def d_dy(f: np.ndarray) -> np.ndarray:  # per radian of latitude; rows run north to south
        return np.gradient(f, -np.radians(180 / 16), axis=0)

    divergence = (d_dx(u) + d_dy(v * cos_phi)) / cos_phi
    vorticity = (d_dx(v) - d_dy(u * cos_phi)) / cos_phi
    inner = slice(2, -2)  # away from the one-sided differences at the poles
    assert np.abs(divergence[inner]).mean() < 0.05 * np.abs(vorticity[inner]).mean()
    # A sizeable 24 h change for a model to predict.
    change = t850[4:] - t850[:-4]
    assert 0.5 < float(np.sqrt(np.mean(change**2))) < 5.0


def test_era5_like_store_is_packed_and_cf_encoded(era5_path: Path) -> None:
    group: Any = zarr.open_group(era5_path, mode="r")
    t = group["t"]
    assert t.dtype == np.int16
    assert t.attrs["scale_factor"] == 0.002
    assert t.attrs["add_offset"] == 260.0
    assert t.attrs["_FillValue"] == -32767
    assert group["time"].attrs["units"].startswith("hours since 1900-01-01")
    assert tuple(group["lsm"].metadata.dimension_names) == ("latitude", "longitude")
    assert tuple(t.metadata.dimension_names) == ("time", "level", "latitude", "longitude")
    assert group["latitude"][0] > group["latitude"][-1]  # north to south, as ERA5


def test_wb2_copy_is_shaped_like_the_real_store(wb2_path: Path) -> None:
    group: Any = zarr.open_group(wb2_path, mode="r")
    assert group.metadata.zarr_format == 2
    assert (wb2_path / ".zmetadata").exists()  # consolidated
    for name in ("temperature", "u_component_of_wind", "v_component_of_wind"):
        assert group[name].dtype == np.float32
        assert group[name].attrs["_ARRAY_DIMENSIONS"] == ["time", "level", "longitude", "latitude"]
        assert group[name].chunks[2:] == (64, 32)  # whole fields in every chunk
    assert group["land_sea_mask"].attrs["_ARRAY_DIMENSIONS"] == ["longitude", "latitude"]
    assert group["time"].dtype == np.int64
    assert group["time"].attrs["units"] == "hours since 1959-01-01"
    lat = group["latitude"][:]
    assert lat[0] == pytest.approx(-87.1875)
    assert lat[-1] == pytest.approx(87.1875)
    assert group["longitude"][:][[0, -1]].tolist() == [0.0, 354.375]


# -- the data definition against the source arrays --------------------------------------------------
def raw_batches(fields: data.Fields, split: str) -> list[insitu.Batch]:
    with insitu.InSituDataset(fields.store, fields.manifest, fields.geometries, batch_size=64) as ds:
        return list(ds.view(split))


def test_batches_are_the_source_arrays_at_t_and_24h_later(era5_path: Path) -> None:
    fields = data.open_fields(era5_source(era5_path))
    assert fields.target.label == "t+4"  # "24h" on 6-hourly data is 4 steps
    source = xr.open_zarr(era5_path, consolidated=False).sel(
        level=850
    )  # xarray's own CF decoding, for reference
    rows, cols = region_indices(source.latitude.values, source.longitude.values)
    t_ref = source.t.values[:, rows][:, :, cols]
    u_ref = source.u.values[:, rows][:, :, cols]
    times = source.time.values
    batches = raw_batches(fields, "val")
    assert sum(b.size for b in batches) == len(fields.manifest.samples("val"))
    for batch in batches:
        i = batch.sample_indices
        np.testing.assert_allclose(batch["t"], t_ref[i], atol=1e-3)  # int16 decoded to float32
        np.testing.assert_allclose(batch["t+4"], t_ref[i + 4], atol=1e-3)
        np.testing.assert_array_equal(batch["u"], u_ref[i])
        assert batch["t"].dtype == np.float32
        np.testing.assert_array_equal(batch.coords["time"], times[i])
        lag = batch.coords_of("t+4")["time"] - batch.coords["time"]
        assert (lag == np.timedelta64(24, "h")).all()
        # The static land-sea mask: once per batch, (1, lat, lon).
        lsm = source.lsm.values[rows][:, cols]
        np.testing.assert_array_equal(batch["lsm"], lsm[None])


def test_splits_are_disjoint_by_date_and_targets_stay_in_their_period(era5_path: Path) -> None:
    fields = data.open_fields(era5_source(era5_path))
    times = fields.inputs[0].coords["time"]
    delivered: dict[str, np.ndarray] = {}
    for split, (start, stop) in SPLITS.items():
        anchors = np.concatenate([b.sample_indices for b in raw_batches(fields, split)])
        assert len(np.unique(anchors)) == len(anchors)
        when = times[anchors]
        assert when.min() >= np.datetime64(start)
        assert when.max() < np.datetime64(stop) + np.timedelta64(1, "D")
        delivered[split] = when
    assert not set(delivered["train"].tolist()) & set(delivered["val"].tolist())
    assert not set(delivered["val"].tolist()) & set(delivered["test"].tolist())
    # No target (24 h ahead) of one period is an input time of the next.
    target = {k: v + np.timedelta64(24, "h") for k, v in delivered.items()}
    assert target["train"].max() < delivered["val"].min()
    assert target["val"].max() < delivered["test"].min()
    # The last test anchors have no target in the store: they are not delivered.
    assert target["test"].max() == times[-1]


def test_model_batches_stack_the_scaled_inputs_and_the_change(era5_path: Path) -> None:
    fields = data.open_fields(era5_source(era5_path))
    scaler = data.fit_scaler(fields)
    mean, std = (float(v) for v in scaler.stats(data.CHANGE))
    raw = raw_batches(fields, "test")
    for layout in ("NCHW", "NHWC"):
        with data.build_dataset(fields, scaler, batch_size=64, seed=0, layout=layout) as ds:
            model_batches = list(ds.test)
        assert len(model_batches) == len(raw)
        for before, after in zip(raw, model_batches, strict=True):
            x = after["x"] if layout == "NCHW" else np.moveaxis(after["x"], -1, 1)
            y = after["y"] if layout == "NCHW" else np.moveaxis(after["y"], -1, 1)
            assert x.shape == (before.size, 4, 10, 22)
            assert x.dtype == np.float32
            np.testing.assert_allclose(after["dt"], before["t+4"] - before["t"], atol=1e-5)
            np.testing.assert_allclose(y[:, 0] * std + mean, after["dt"], atol=1e-4)
            for channel, label in enumerate(("t", "u", "v")):
                np.testing.assert_allclose(x[:, channel], scaler.transform(label, before[label]), atol=1e-5)
            np.testing.assert_allclose(
                x[:, 3], np.broadcast_to(scaler.transform("lsm", before["lsm"]), x[:, 3].shape)
            )


def test_the_real_store_path_gives_the_same_batches_on_a_wb2_shaped_copy(
    era5_path: Path, wb2_path: Path
) -> None:
    era5 = data.open_fields(era5_source(era5_path))
    wb2 = data.open_fields(wb2_source(wb2_path))
    assert wb2.inputs[0].delivered_dims == ("longitude", "latitude")  # stored lon first, lat ascending
    assert np.array_equal(era5.manifest.samples("test"), wb2.manifest.samples("test"))
    scaler = data.fit_scaler(era5)
    wb2_scaler = data.fit_scaler(wb2)
    assert wb2_scaler.labels == (
        "temperature",
        "u_component_of_wind",
        "v_component_of_wind",
        "land_sea_mask",
        "dt",
    )
    with (
        data.build_dataset(era5, scaler, batch_size=64, seed=0) as a,
        data.build_dataset(wb2, wb2_scaler, batch_size=64, seed=0) as b,
    ):
        for ours, theirs in zip(a.test, b.test, strict=True):
            np.testing.assert_array_equal(ours.sample_indices, theirs.sample_indices)
            # Same orientation (north up, lat x lon) whatever the layout; int16 packing costs < 2 mK.
            np.testing.assert_allclose(ours["dt"], theirs["dt"], atol=2.5e-3)
            assert ours["x"].shape == theirs["x"].shape


# -- the runs ---------------------------------------------------------------------------------------
def result_of(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    lines = capsys.readouterr().out.strip().splitlines()
    return dict(json.loads(lines[-1]))


def test_smoke_run_beats_persistence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert train_torch.main(["--smoke", "--workdir", str(tmp_path), "--json"]) == 0
    result = result_of(capsys)
    assert result["beats_baseline"]
    assert result["baseline_name"] == "persistence"
    assert result["model"] < 0.7 * result["baseline"]  # a margin, not luck


def test_real_store_run_on_the_wb2_shaped_copy(wb2_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--store", str(wb2_path), "--splits", json.dumps(SPLITS), "--epochs", "3", "--json"]
    assert train_torch.main(argv) == 0
    assert result_of(capsys)["beats_baseline"]


def test_settings_keep_smoke_small() -> None:
    args = shared.arguments("x").parse_args(["--smoke"])
    run = shared.settings(args)
    assert run.years == 2
    assert run.epochs <= 6
    assert run.splits == data.SMOKE_SPLITS
