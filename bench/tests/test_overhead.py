"""bench/overhead.py on a tiny store: every engine measured, the table and the JSON well-formed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import overhead
import tiny_chunks

CHUNKS = 300


def test_the_tiny_store_holds_each_sample_uncompressed(tmp_path: Path) -> None:
    root = tiny_chunks.build_store(tmp_path, 12, (2, 3))
    array = zarr.open_array(zarr.storage.LocalStore(root), path=tiny_chunks.ARRAY, mode="r")
    expected = np.arange(12 * 6, dtype="<f4").reshape(12, 2, 3)
    np.testing.assert_array_equal(array[...], expected)
    assert (root / "x" / "c" / "5" / "0" / "0").read_bytes() == expected[5].tobytes()  # raw bytes, no codec
    assert tiny_chunks.build_store(tmp_path, 12, (2, 3)) == root  # built once, then reused
    assert tiny_chunks.chunk_bytes((2, 3)) == 24


def test_each_engine_gets_a_cost_per_chunk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engines = ["insitu", "raw"]  # insitu-stream is the same snippet with another budget
    argv = [
        "--chunks",
        str(CHUNKS),
        "--repeats",
        "1",
        "--work",
        str(tmp_path),
        "--out",
        str(tmp_path / "out"),
    ]
    assert overhead.main([*argv, "--engines", *engines]) == 0
    record = json.loads((tmp_path / "out" / "overhead.json").read_text())
    assert record["chunks"] == CHUNKS
    assert record["chunk_bytes"] == 256
    assert record["command"].startswith("python bench/overhead.py --chunks")
    assert [r["engine"] for r in record["rows"]] == engines
    for row in record["rows"]:
        assert row["chunks"] == CHUNKS  # every chunk delivered once
        assert row["us_cpu_per_chunk"] > 0
        assert row["chunks_per_s"] > 0
        assert len(row["us_cpu_per_chunk_runs"]) == 1
    assert record["skipped"] == {}
    out = capsys.readouterr().out
    assert "CPU us/chunk" in out
    assert "1.00x" in out  # the raw loop against itself


def test_tensorstore_without_its_interpreter_is_skipped_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--chunks", str(CHUNKS), "--repeats", "1", "--work", str(tmp_path), "--out", str(tmp_path)]
    missing = str(tmp_path / "no-such-python")
    assert overhead.main([*argv, "--engines", "tensorstore", "raw", "--tensorstore-python", missing]) == 0
    record = json.loads((tmp_path / "overhead.json").read_text())
    assert [r["engine"] for r in record["rows"]] == ["raw"]
    assert "--tensorstore-python" in record["skipped"]["tensorstore"]
    captured = capsys.readouterr()
    assert "tensorstore skipped" in captured.err
    assert any(line.startswith("tensorstore") and "skipped:" in line for line in captured.out.splitlines())


def test_the_streaming_engine_differs_only_in_its_budget(tmp_path: Path) -> None:
    args = overhead.parse_args([])
    default, streaming = (overhead.ENGINES[n].code(tmp_path, args) for n in ("insitu", "insitu-stream"))
    assert default.replace("**{}", "**{'cache_budget_bytes': 0}") == streaming


def test_a_row_is_the_median_of_its_runs() -> None:
    runs = [
        {"chunks": 1000, "cpu_s": 0.05, "wall_s": 0.1},
        {"chunks": 1000, "cpu_s": 0.09, "wall_s": 0.2},
        {"chunks": 1000, "cpu_s": 0.07, "wall_s": 0.125},
    ]
    row = overhead.summarize("raw", "loop", runs)
    assert row["us_cpu_per_chunk"] == pytest.approx(70.0)  # median of 50, 90, 70 us
    assert row["chunks_per_s"] == pytest.approx(8000.0)  # median of 10,000, 5,000, 8,000
    assert row["cpu_per_wall"] == pytest.approx(0.5)  # median of 0.5, 0.45, 0.56
    table = overhead.format_table([row, {**row, "engine": "insitu", "us_cpu_per_chunk": 140.0}], {})
    assert "2.00x" in table
