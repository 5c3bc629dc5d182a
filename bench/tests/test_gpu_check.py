"""bench/gpu_check.py --dry-run: the whole device check on the CPU, as a fresh GPU machine would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.py"


def test_dry_run_runs_every_check_and_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    # As on the registry-less machine: insitu-gpu need not be installed, the script finds packages/*/src.
    env = {**os.environ, "PYTHONPATH": ""}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["dry_run"] is True
    assert report["failed"] == []
    names = [t["transform"] for t in report["transforms"]]
    assert names == [
        "Cast(float16)",
        "FillNaN(0)",
        "Crop",
        "Coarsen(mean)",
        "Coarsen(max)",
        "Regrid(bilinear)",
        "Regrid(conservative)",
        "StandardScaler",
    ]
    for t in report["transforms"]:  # the device code on numpy against the host transforms
        assert t["max_rel_err"] <= 1e-6, t
        assert t["nan_pattern_equal"], t
        assert t["shape_dtype_equal"], t
    assert report["h2d"]["ring_stats"]["pinned_allocations"] == report["h2d"]["ring_stats"]["pinned_slots"]
    assert [d["codec"] for d in report["decode"]] == ["zstd", "lz4", "gzip"]
    assert all(d["cpu_core_GBps"] > 0 for d in report["decode"])
    train = report["train"]
    assert train["steps"] > 0
    assert 0.0 <= train["stall"] <= 1.0
    # One short table on stdout, one row per measurement, no failure rows.
    assert "insitu-gpu device check" in done.stdout
    assert "transform Regrid(conservative)" in done.stdout
    assert "FAIL" not in done.stdout


def test_help_names_the_one_install_line_for_a_fresh_cuda_12_machine() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert text.count("pip install") == 1
    assert 'pip install "cupy-cuda12x>=13" nvidia-nvcomp-cu12 torch ./packages/insitu-core' in text
