"""``insitu bench``, run as a user runs it (the console script in a subprocess), on a tiny local store;
and the recommendation rule on made-up numbers."""

from __future__ import annotations

import inspect
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import field, write_array

from insitu import InSituDataset
from insitu.cli.bench import AXES, parse_grid, recommend

SCRIPT = Path(sys.executable).with_name("insitu")
GRID = ("--grid", "block_chunks=1,2", "--grid", "decode_threads=1,2")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=180, cwd=cwd)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    write_array(
        tmp_path / "s.zarr", "t2m", field(64, (6, 8), seed=3), (4, 6, 8), dimension_names=("time", "y", "x")
    )
    return tmp_path / "s.zarr"


def test_bench_sweeps_the_grid_and_recommends_one_of_its_settings(store_path: Path, tmp_path: Path) -> None:
    out_file = tmp_path / "results.json"
    out = run("bench", str(store_path), "--seconds", "2", *GRID, "--json", "--out", str(out_file))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)  # stdout holds the JSON alone
    assert json.loads(out_file.read_text()) == report
    swept = [p["setting"] for p in report["points"]]
    # Local files: max_inflight keeps the engine's value; the named dials take the given values.
    default_cap = inspect.signature(InSituDataset).parameters["max_inflight"].default
    expected = [
        {"max_inflight": default_cap, "block_chunks": b, "decode_threads": t}
        for b, t in itertools.product((1, 2), (1, 2))
    ]
    assert swept == expected
    rec = report["recommendation"]
    assert rec["setting"] in swept
    assert [p["recommended"] for p in report["points"]].count(True) == 1
    best = max(p["samples_per_s"] for p in report["points"])
    assert rec["samples_per_s"] >= best * (1 - rec["tolerance"])
    for p in report["points"]:
        assert p["error"] is None, p
        assert p["runs"], p
        assert p["samples_per_s"] > 0
        assert p["MBps"] > 0
        assert p["ttfb_s"] > 0
        assert p["need_bytes"] > 0
    b = report["baseline"]
    assert b["setting"] == report["defaults"]
    assert b["samples"] > 0
    assert b["ttfb_s"] > 0
    assert 0 <= b["stall_fraction"] <= 1
    assert report["data"]["samples"] == 64
    assert report["data"]["chunks"] == 16
    # A progress line per run on stderr, and the file named there.
    runs = sum(len(p["runs"]) for p in report["points"])
    assert sum(1 for line in out.stderr.splitlines() if line.startswith("[")) == runs
    assert f"results saved to {out_file}" in out.stderr


def test_bench_prints_a_table_of_every_setting_and_saves_json_by_default(
    store_path: Path, tmp_path: Path
) -> None:
    out = run("bench", str(store_path), "--seconds", "2", *GRID, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    saved = json.loads((tmp_path / "insitu-bench.json").read_text())
    lines = out.stdout.splitlines()
    header = next(
        i
        for i, line in enumerate(lines)
        if line.split()[:3] == ["max_inflight", "block_chunks", "decode_threads"]
    )
    rows = [line.split() for line in lines[header + 2 : header + 2 + len(saved["points"])]]
    marks = [r.pop(0) if r[0] in ("*", "=") else "" for r in rows]
    listed = [tuple(int(v) for v in r[:3]) for r in rows]
    assert sorted(listed) == sorted(tuple(p["setting"][a] for a in AXES) for p in saved["points"])
    assert marks.count("*") == 1
    rec = saved["recommendation"]["setting"]
    assert listed[marks.index("*")] == tuple(rec[a] for a in AXES)
    assert "* recommended: " in out.stdout
    assert "time to first batch" in out.stdout
    assert "stall fraction" in out.stdout
    assert "insitu bench:" not in out.stdout  # progress stays on stderr
    assert "insitu bench:" in out.stderr


def test_bad_grids_and_budgets_are_usage_errors(store_path: Path) -> None:
    out = run("bench", str(store_path), "--grid", "prefetch=1,2")
    assert out.returncode == 2
    assert "max_inflight, block_chunks, decode_threads" in out.stderr
    out = run("bench", str(store_path), "--seconds", "0.5", "--out", "/dev/null")
    assert out.returncode == 2
    assert "raise --seconds or narrow the sweep with --grid" in out.stderr
    assert "Traceback" not in out.stderr


def test_parse_grid() -> None:
    assert parse_grid(["max_inflight=32,8", "block-chunks=4", "max_inflight=8,64"]) == {
        "max_inflight": [8, 32, 64],
        "block_chunks": [4],
    }
    for bad in ("block_chunks", "prefetch=2", "block_chunks=", "block_chunks=0", "block_chunks=a"):
        with pytest.raises(ValueError, match="--grid"):
            parse_grid([bad])


def _point(mi: int, bc: int, dt: int, rate: float, need: int) -> dict:
    setting = {"max_inflight": mi, "block_chunks": bc, "decode_threads": dt}
    return {"setting": setting, "samples_per_s": rate, "need_bytes": need, "peak_pool_bytes": need}


def test_recommendation_breaks_ties_towards_less_memory() -> None:
    points = [
        _point(32, 64, 2, 1000.0, 64),  # the fastest
        _point(32, 16, 2, 980.0, 16),  # within 5%, a quarter of the memory
        _point(32, 4, 2, 700.0, 4),  # least memory, but slower than the noise allows
        _point(32, 16, 1, 975.0, 16),  # as much memory, fewer threads: preferred
    ]
    rec = recommend(points, 0.05)
    assert rec is not None
    assert rec["setting"] == {"max_inflight": 32, "block_chunks": 16, "decode_threads": 1}
    assert sorted(rec["tied"]) == [0, 1, 3]
    assert rec["best_index"] == 0
    # Noisier measurements widen the tie; still one of the swept settings.
    assert recommend(points, 0.35)["setting"]["block_chunks"] == 4  # type: ignore[index]
    # Without ties the fastest wins; unless its own repeats spread widely.
    assert recommend(points, 0.0)["setting"]["block_chunks"] == 64  # type: ignore[index]
    points[0]["spread"] = 0.03
    assert recommend(points, 0.0)["setting"]["block_chunks"] == 16  # type: ignore[index]
    assert recommend([{**points[0], "samples_per_s": None}], 0.05) is None
