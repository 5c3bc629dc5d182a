"""bench/transforms.py on a tiny store: it runs, checks the values, and refuses wrong data.

Needs insitu-core, insitu-transforms (scipy), zarr and psutil
(``.nox/tests-transforms/bin/python -m pytest bench/tests -p no:cacheprovider``); skipped under a
Python without them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("insitu")
pytest.importorskip("insitu_transforms")
pytest.importorskip("psutil")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import transforms

# 37 x 72 (5°, poles included) regridded to 9 x 18 (20°); 16 samples in chunks of 4.
TINY = ["--n-time", "16", "--grid", "37", "72", "--crop", "8", "8", "--repeats", "2"]
TINY += ["--batch-size", "4", "--block-chunks", "2", "--warm-epochs", "2", "--weight-repeats", "1"]
TINY += ["--chunks-timed", "2"]


def run(tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "transforms.json"
    transforms.main([*TINY, "--work", str(tmp_path / "work"), "--out", str(out), *extra])
    return json.loads(out.read_text())


def test_every_pipeline_checked_and_compared(tmp_path: Path) -> None:
    results = run(tmp_path)
    assert not results["problems"]
    assert results["values_equal"]
    assert results["grid"]["source"] == [37, 72]
    assert results["grid"]["target"] == [9, 18]
    assert not results["grid"]["era5_full"]
    summary = results["summary"]
    assert set(summary) == set(transforms.ENGINES)
    shapes = {"plain": [37, 72], "conservative": [9, 18], "bilinear": [9, 18], "crop": [8, 8]}
    for engine, shape in shapes.items():
        for phase in transforms.PHASES:
            s = summary[engine][phase]
            assert s["sample_shape"] == shape
            assert s["ratio"] > 0
            assert s["cpu_ratio"] > 0
            lo, hi = s["paired_ratio_range"]
            assert 0 < lo <= hi
        # Every chunk decoded once, in the cold epoch; the warm ones are served by the pool.
        assert summary[engine]["cold"]["chunks_decoded"] == 4
        assert summary[engine]["warm"]["chunks_decoded"] == 0
    # The pool holds the regridded slabs: 16 samples of 9 x 18 float32.
    assert summary["conservative"]["pooled_sample_shape"] == [9, 18]
    assert summary["plain"]["cold"]["ratio"] == pytest.approx(1.0)
    for row in results["rows"]["plain"]:
        assert row["cold"]["samples"] == 16
        assert row["warm"]["samples"] == 32
    weights = results["weights"]
    assert set(weights) == set(transforms.METHODS)
    for w in weights.values():
        assert w["nnz"] > 0
        assert w["file_bytes"] > 0
        assert w["shape"] == [9 * 18, 37 * 72]
        assert w["build_s"] > 0
        assert w["load_s"] > 0
    chunks = results["chunk_costs"]
    assert chunks["chunk_shape"] == [4, 37, 72]
    assert set(chunks["regrid_over_decode"]) == set(transforms.METHODS)
    for method in transforms.METHODS:
        assert results["check_transform"][method]["ok"]
        assert results["check_transform"][method]["output_shape"] == [4, 9, 18]
    assert results["command"].startswith("python bench/transforms.py --n-time 16")


def test_scaled_down_grid_needs_poles(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="both poles"):
        run(tmp_path, "--grid", "36", "72")


def test_wrong_regrid_fails_without_a_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = transforms.direct_regrid

    def off(root: Path, target: str, method: str) -> Any:
        regrid = original(root, target, method)

        def shifted(name: str, block: np.ndarray) -> np.ndarray:
            out = regrid(name, block)
            out[:, 0, 0] += 1
            return out

        return shifted

    monkeypatch.setattr(transforms, "direct_regrid", off)
    with pytest.raises(SystemExit, match="values differ"):
        run(tmp_path)
    results = json.loads((tmp_path / "transforms.json").read_text())
    assert results["summary"]["conservative"]["cold"]["ratio"] is None
    assert any("conservative cold first batch" in p for p in results["problems"])


def test_wrong_crop_offsets_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def other_seed(args: Any, geoms: Any) -> transforms.RandomCrop:
        return transforms.RandomCrop(size={"latitude": 8, "longitude": 8}, dims=geoms, seed=1)

    # The pipeline crops with seed 0 (its own make_crop); the check recomputes offsets with seed 1.
    original = transforms.make_crop
    monkeypatch.setattr(transforms, "pipeline", _pipeline_with(original))
    monkeypatch.setattr(transforms, "make_crop", other_seed)
    with pytest.raises(SystemExit, match="values differ"):
        run(tmp_path)
    results = json.loads((tmp_path / "transforms.json").read_text())
    assert any(p.startswith("crop cold first batch") for p in results["problems"])


def _pipeline_with(make_crop: Any) -> Any:
    original = transforms.pipeline

    def pipeline(engine: str, args: Any, target: str, weights_dir: Path, geoms: Any) -> Any:
        if engine == "crop":
            return [], [make_crop(args, geoms)]
        return original(engine, args, target, weights_dir, geoms)

    return pipeline
