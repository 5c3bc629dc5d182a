"""bench/pool_bookkeeping.py at a small size: each measure present and sane, the JSON written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pool_bookkeeping


def test_a_small_pool_is_measured_and_reported(tmp_path: Path, capsys) -> None:
    assert pool_bookkeeping.main(["--slabs", "2000", "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "pool_bookkeeping.json").read_text())
    assert row["slabs"] == 2000
    assert row["side"] == "this checkout"
    # A ready slab keeps its slot and its place in the eviction order, not an object of its own:
    # well under the ~330 bytes a slab cost with one.
    assert 0 < row["bytes_per_slab"] < 250
    assert row["full_gc_ms"] > 0
    assert row["fill_us"] > 0
    assert "bytes/slab" in capsys.readouterr().out
