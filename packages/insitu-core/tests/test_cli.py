"""The ``insitu`` console script, run as a user runs it: a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

SCRIPT = Path(sys.executable).with_name("insitu")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    group = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=3)
    t2m = group.create_array(
        "t2m",
        shape=(24, 8, 16),
        chunks=(6, 8, 8),
        dtype="i2",
        dimension_names=("time", "lat", "lon"),
        attributes={"scale_factor": 0.01, "add_offset": 280.0, "_FillValue": -32767},
    )
    t2m[...] = np.arange(24 * 8 * 16, dtype="i2").reshape(24, 8, 16) % 1000
    lsm = group.create_array("lsm", shape=(8, 16), chunks=(8, 16), dtype="f4", dimension_names=("lat", "lon"))
    lsm[...] = 1.0
    time = group.create_array(
        "time",
        shape=(24,),
        dtype="i8",
        dimension_names=("time",),
        attributes={"units": "hours since 2000-01-01"},
    )
    time[...] = np.arange(24) * 6
    return tmp_path / "s.zarr"


def test_help_lists_every_subcommand() -> None:
    out = run("--help")
    assert out.returncode == 0
    assert "inspect" in out.stdout
    assert run().returncode == 2  # no command: usage, status 2


def test_inspect_describes_the_store(store_path: Path) -> None:
    out = run("inspect", str(store_path), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    t2m = report["arrays"]["t2m"]
    assert t2m["shape"] == [24, 8, 16]
    assert t2m["chunks"] == [6, 8, 8]
    assert t2m["dtype"] == "int16"
    assert t2m["dims"] == ["time", "lat", "lon"]
    assert t2m["cf"]["scale_factor"] == 0.01
    assert t2m["compression_ratio"] > 0
    assert report["batching"]["sample_dim"] == "time"
    assert report["batching"]["arrays"] == {"lsm": "static", "t2m": "time"}
    assert report["batching"]["skipped"] == {"time": "coordinate"}
    assert report["coordinates"]["time"]["first"] == "2000-01-01T00:00:00"
    # One slab of t2m decoded to float32: 6 * 8 * 16 * 4 bytes per chunk of the block, and a
    # block never holds more than the 4 chunks t2m has along time.
    assert report["pool_bytes_per_block_chunks"]["1"] == 6 * 8 * 16 * 4
    assert report["pool_bytes_per_block_chunks"]["16"] == 4 * 6 * 8 * 16 * 4
    text = run("inspect", str(store_path))
    assert "sample dimension 'time'" in text.stdout
    assert "lsm: static" in text.stdout


def test_a_missing_store_is_a_one_line_error(tmp_path: Path) -> None:
    out = run("inspect", str(tmp_path / "nothing.zarr"))
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert "nothing.zarr" in out.stderr


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_inspect_json_of_a_cf_packed_store_written_by_xarray(tmp_path: Path, zarr_format: int) -> None:
    xr = pytest.importorskip("xarray")
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    t2m = (270 + 20 * rng.random((40, 19, 36))).astype("float32")
    ds = xr.Dataset(
        {
            "t2m": (("time", "latitude", "longitude"), t2m),
            "lsm": (("latitude", "longitude"), rng.random((19, 36)).astype("float32")),
        },
        coords={
            "time": pd.date_range("2020-01-01", periods=40, freq="h"),
            "latitude": np.linspace(-90, 90, 19),
            "longitude": np.arange(0, 360, 10.0),
        },
    )
    encoding = {
        "t2m": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 280.0, "_FillValue": -32767},
        "lsm": {"_FillValue": np.nan},
    }
    encoding["t2m"]["chunks"] = (8, 19, 18)
    path = tmp_path / "era5.zarr"
    ds.to_zarr(path, mode="w", zarr_format=zarr_format, encoding=encoding, consolidated=False)

    out = run("inspect", str(path), "--json")
    assert out.returncode == 0, out.stderr
    arrays = json.loads(out.stdout)["arrays"]
    group = zarr.open_group(path, mode="r")
    packed, static = arrays["t2m"], arrays["lsm"]
    assert (packed["dtype"], packed["dtype_delivered"]) == ("int16", "float32")
    assert packed["cf_fill_value"] == -32767  # a number, not base64, on v2 and v3 alike
    assert static["cf_fill_value"] == "NaN"  # JSON has no NaN: named, not base64 ("AAAAAAAA+H8=")
    assert (packed["role"], static["role"]) == ("samples", "static")
    for name, report in arrays.items():
        arr = group[name]
        assert report["chunk_count"] == arr.nchunks, name
        assert report["stored_bytes"] == arr.nbytes_stored(), name
        assert report["decoded_bytes"] == arr.nbytes, name
    assert packed["chunk_count_along_sample_dim"] == 5  # 40 hours in chunks of 8
    assert packed["chunk_count"] == 5 * 2
    assert packed["delivered_bytes"] == 40 * 19 * 36 * 4
