"""check_transform: one real chunk, the declared output checked, the cost and GIL behaviour measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import insitu
from insitu_transforms.checker import check_transform


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    group = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=3)
    arr = group.create_array(
        "t2m", shape=(40, 16, 32), chunks=(10, 16, 32), dtype="f4", dimension_names=("time", "lat", "lon")
    )
    arr[...] = np.arange(40 * 16 * 32, dtype="f4").reshape(40, 16, 32)
    return tmp_path / "s.zarr"


class Half:
    """Declares its dtype change: a well-behaved chunk transform."""

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        return block.astype(np.float16)

    def out_spec(self, shape: tuple[int, ...], dtype: Any) -> tuple[tuple[int, ...], Any]:
        return shape, np.float16

    def fingerprint(self) -> str:
        return "Half"


def undeclared_half(name: str, block: np.ndarray) -> np.ndarray:
    return block.astype(np.float16)


def python_loop(name: str, block: np.ndarray) -> np.ndarray:
    """Holds the GIL throughout: a per-element Python loop."""
    out = block.copy()
    flat = out.reshape(-1)
    for _ in range(4):  # long enough (a few ms) for the thread comparison to be made
        for i in range(flat.size):
            flat[i] = flat[i] + 1.0
    return out


def test_a_declared_transform_passes_with_its_cost(store_path: Path) -> None:
    report = check_transform(Half(), str(store_path), "t2m", measure_threads=False)
    assert report.ok, str(report)
    assert report.input_shape == (10, 16, 32)
    assert report.declared_shape == report.output_shape == (10, 16, 32)
    assert report.declared_dtype == report.output_dtype == "float16"
    assert report.fingerprint == "Half"
    assert report.seconds_per_chunk is not None
    assert report.seconds_per_chunk > 0
    assert json.loads(report.to_json())["ok"] is True
    assert "OK" in str(report)


def test_an_undeclared_dtype_change_is_found_by_the_probe(store_path: Path) -> None:
    report = check_transform(undeclared_half, str(store_path), "t2m", measure_threads=False)
    assert report.ok, str(report)
    assert report.probed
    assert report.declared_dtype == report.output_dtype == "float16"
    assert "probed output" in str(report)


def widens_positive(name: str, block: np.ndarray) -> np.ndarray:
    """float64 for slabs holding a positive value: zeros cannot show it."""
    return block.astype(np.float64) if block.max() > 0 else block


def test_an_output_that_depends_on_the_values_is_the_engines_error(store_path: Path) -> None:
    report = check_transform(widens_positive, str(store_path), "t2m", measure_threads=False)
    assert not report.ok
    assert report.probed
    assert report.declared_dtype == "float32"  # the probe on zeros
    assert report.output_dtype == "float64"  # the real chunk
    assert any("must define out_spec" in p for p in report.problems)


def test_unpicklable_state_is_reported_as_not_persistable(store_path: Path) -> None:
    lock = threading.Lock()

    def holds_a_lock(name: str, block: np.ndarray) -> np.ndarray:
        with lock:
            return block

    report = check_transform(holds_a_lock, str(store_path), "t2m", measure_threads=False)
    assert report.fingerprint is None
    assert any("define a fingerprint()" in p for p in report.problems)


def test_a_python_loop_is_reported_as_holding_the_gil(store_path: Path) -> None:
    report = check_transform(python_loop, str(store_path), "t2m", repeats=2)
    if report.two_thread_speedup is None:
        pytest.skip("one core: two threads cannot be compared with one")
    assert report.releases_gil is False  # a GIL-bound loop cannot run faster on two threads


def test_a_view_checks_the_selected_region(store_path: Path) -> None:
    store = insitu.open_store(store_path)
    geoms = insitu.open_geometries(store, ["t2m"], "time")
    chosen = geoms["t2m"].isel(lat=slice(0, 4), lon=[1, 5, 9])
    manifest = insitu.split_by_chunk(chosen, (1.0,), names=["train"])
    with insitu.InSituDataset(store, manifest, [chosen]) as data:
        report = check_transform(Half(), data.train, "t2m", measure_threads=False)
    assert report.input_shape == (10, 4, 3)
    with pytest.raises(insitu.ConfigError, match=r"unknown label 'u10'"):
        check_transform(Half(), data, "u10")


def test_the_command_line_runs_the_checker(store_path: Path) -> None:
    """``insitu check-transform`` is contributed by this package through the commands hook."""
    script = Path(sys.executable).with_name("insitu")
    ok = subprocess.run(
        [
            str(script),
            "check-transform",
            '{"name": "cast", "dtype": "float16"}',
            str(store_path),
            "t2m",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["ok"] is True
    assert report["output_dtype"] == "float16"
    bad = subprocess.run(
        [str(script), "check-transform", "tests_checker_helpers:value_dependent", str(store_path), "t2m"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
    )
    assert bad.returncode == 1, bad.stderr
    assert "must define out_spec" in bad.stdout


def test_a_transform_that_binds_is_bound_before_checking(store_path: Path) -> None:
    """Crop takes dimension names from the array, as the dataset binds it."""
    from insitu_transforms import Crop

    report = check_transform(
        Crop(lat=slice(0, 4), lon=slice(2, 10)), str(store_path), "t2m", measure_threads=False
    )
    assert report.ok, str(report)
    assert report.output_shape == (10, 4, 8)


def test_scaler_fit_reports_progress(store_path: Path) -> None:
    from insitu_transforms import StandardScaler

    store = insitu.open_store(store_path)
    geoms = insitu.open_geometries(store, ["t2m"], "time")
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,), names=["train"])
    calls: list[tuple[int, int | None]] = []
    with insitu.InSituDataset(store, manifest, geoms, batch_size=10) as data:
        StandardScaler.fit(data, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]
