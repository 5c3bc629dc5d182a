"""The WeatherBench2 loader walk-through: its reads, its normalisation, its runs on both store layouts.

The real-bucket path (``--store URL --storage-options ...``) is run on a
local copy shaped like WeatherBench2's ERA5 (whole fields in every chunk,
Zarr v2 consolidated), written by xarray.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import insitu
from examples import wb2_dataloader as walk
from examples.advection.data import simulate, write_wb2_like
from insitu_transforms import StandardScaler

NAMES = [walk.TEMPERATURE, *walk.WINDS, walk.STATIC]


@pytest.fixture(scope="module")
def tiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The walk-through's own synthetic store: 16 x 16 tiles, one level per chunk."""
    return walk.synthetic_store(tmp_path_factory.mktemp("wb2"), smoke=True, seed=0)


@pytest.fixture(scope="module")
def wb2_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shaped like the real store: whole fields in every chunk."""
    path = tmp_path_factory.mktemp("wb2") / "wb2.zarr"
    write_wb2_like(simulate(years=2, seed=1), path)
    return path


def test_the_region_reads_only_the_chunks_it_touches(tiled: Path) -> None:
    store = insitu.open_store(str(tiled))
    full = insitu.open_geometries(store, variables=NAMES)
    geoms = insitu.open_geometries(store, variables=NAMES, sel={"level": walk.LEVELS, **walk.REGION})
    t = geoms[walk.TEMPERATURE]
    # 2 of 3 levels; latitude 30..75 N is inside one of two latitude tiles; longitude 320..60 E
    # crosses the seam: the last and the first of four longitude tiles.
    assert walk.chunks_touched(t) == (2 * 1 * 2, 3 * 4 * 2)
    assert t.delivered_dims == ("level", "longitude", "latitude")
    lat, lon = t.coord("latitude"), t.coord("longitude")
    assert lat is not None
    assert lon is not None
    assert lat.min() >= 30
    assert lat.max() <= 75
    assert lon[0] >= 320
    assert lon[-1] <= 60
    start = full[walk.TEMPERATURE].coords["time"][0]
    whole = walk.probe_reads(store, full[walk.TEMPERATURE], start)
    region = walk.probe_reads(store, t, start)
    time_chunks = math.ceil(walk.PROBE_DAYS * 4 / t.chunk_len)  # 6-hourly, starting on a chunk boundary
    assert whole["reads"] == time_chunks * 24
    assert region["reads"] == time_chunks * 4
    assert region["bytes_read"] < whole["bytes_read"] / 4


def test_the_batches_and_the_per_level_statistics_match_the_source(tiled: Path) -> None:
    store = insitu.open_store(str(tiled))
    geoms = insitu.open_geometries(store, variables=NAMES, sel={"level": walk.LEVELS, **walk.REGION})
    t = geoms[walk.TEMPERATURE]
    manifest = insitu.split_by_coord(t, walk.SMOKE_SPLITS)
    with insitu.InSituDataset(store, manifest, geoms, batch_size=64) as ds:
        scaler = StandardScaler.fit(ds, per="level")
    source = xr.open_zarr(tiled).sel(level=walk.LEVELS)
    lat, lon = t.coord("latitude"), t.coord("longitude")
    assert lat is not None
    assert lon is not None
    region = source.sel(latitude=lat, longitude=lon)  # the delivered coordinates, in delivery order
    train = region.temperature.sel(time=slice(*walk.SMOKE_SPLITS["train"])).values
    found = scaler.stats(walk.TEMPERATURE)
    assert found is not None
    mean, std = found
    assert mean.shape == (2, 1, 1)
    np.testing.assert_allclose(mean.ravel(), train.mean(axis=(0, 2, 3)), rtol=1e-6)
    np.testing.assert_allclose(std.ravel(), train.std(axis=(0, 2, 3)), rtol=1e-4)
    static = scaler.stats(walk.STATIC)
    assert static is not None
    assert static[0].size == 1  # no level dimension: one mean
    # The target is the same array 24 h later, normalised with the same per-level statistics.
    with insitu.InSituDataset(
        store, manifest, [*geoms.values(), t.shift("24h")], batch_size=64, batch_transforms=[scaler]
    ) as ds:
        batch = next(iter(ds.test))
    times = batch.coords["time"]
    assert (batch.coords_of("temperature+4")["time"] - times == np.timedelta64(24, "h")).all()
    expected = region.temperature.sel(time=times + np.timedelta64(24, "h")).values
    np.testing.assert_allclose(scaler.inverse("temperature+4", batch["temperature+4"]), expected, atol=1e-3)
    assert batch[walk.STATIC].shape == (1, len(lon), len(lat))


def result_of(out: str) -> dict[str, Any]:
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_smoke_walk_through_beats_persistence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert walk.main(["--smoke", "--workdir", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    for number in range(1, 8):
        assert f"== Step {number}:" in out
    assert "as planned" in out
    result = result_of(out)
    assert result["beats_baseline"]
    assert result["model"] < 0.7 * result["baseline"]  # a margin, not luck


def test_the_real_store_flags_on_a_wb2_shaped_copy(
    wb2_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    splits = {
        "train": ["2015-01-01", "2015-12-30"],
        "val": ["2016-01-01", "2016-03-30"],
        "test": ["2016-04", "2016-12"],
    }
    argv = ["--store", str(wb2_copy), "--splits", json.dumps(splits), "--epochs", "3", "--json"]
    assert walk.main(argv) == 0
    out = capsys.readouterr().out
    assert "every chunk of this store holds whole fields" in out
    assert result_of(out)["beats_baseline"]
