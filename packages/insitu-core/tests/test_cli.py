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
    # One slab of t2m decoded to float32: 6 * 8 * 16 * 4 bytes per chunk of the block.
    assert report["pool_bytes_per_block_chunks"]["16"] == 16 * 6 * 8 * 16 * 4
    text = run("inspect", str(store_path))
    assert "sample dimension 'time'" in text.stdout
    assert "lsm: static" in text.stdout


def test_a_missing_store_is_a_one_line_error(tmp_path: Path) -> None:
    out = run("inspect", str(tmp_path / "nothing.zarr"))
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert "nothing.zarr" in out.stderr
