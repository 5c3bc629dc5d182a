"""bench/store_cost.py on a tiny case: every store reads the same data, and each gets a rate."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import store_cost


def test_every_store_is_measured_against_the_local_directory(tmp_path: Path, capsys) -> None:
    root = tmp_path / "n16" / "c1.zarr"
    group = zarr.open_group(zarr.storage.LocalStore(root), mode="w")
    values = np.arange(16 * 4 * 4, dtype="float32").reshape(16, 4, 4)
    group.create_array("t2m", shape=values.shape, chunks=(1, 4, 4), dtype="float32")[...] = values
    assert (
        store_cost.main(
            [
                "--work",
                str(tmp_path),
                "--samples",
                "16",
                "--epochs",
                "1",
                "--repeats",
                "1",
                "--latency-ms",
                "5",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for label in ("file ", "memory ", "file+5 ms", "memory+5 ms"):
        assert label in out
    assert "1.00x" in out  # the local directory against itself


def test_a_case_that_was_not_built_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        store_cost.main(["--work", str(tmp_path), "--case", "c8"])
