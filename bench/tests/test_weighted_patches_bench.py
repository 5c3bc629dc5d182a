"""bench/weighted_patches.py --quick: both engines run, insitu's patches all meet the coverage rule,
and the image chunks it reads are all among the positive chunks and their borders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "weighted_patches.py"


def test_the_quick_weighted_benchmark_checks_its_engines(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--work", str(tmp_path / "work"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads((tmp_path / "weighted_patches.json").read_text())
    assert result["ok"]
    insitu = result["runs"]["insitu:1"]
    assert insitu["patches"] == insitu["meeting_rule"] == 256
    assert result["runs"]["rejection:1"]["tries"] > result["runs"]["rejection:1"]["patches"]
    assert (tmp_path / "weighted_patches.md").read_text().startswith("# Mask-weighted patches")
