"""bench/scale.py on a small metadata-only store: it plans every rank asked for, in fresh processes,
and reports what the targets are stated in (seconds, MB beyond the interpreter, us per chunk)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("insitu")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scale


def test_scale_reports_every_world_size_and_an_epoch_per_chunk(tmp_path: Path, capsys) -> None:
    sys.argv = ["scale.py", "--chunks", "3000", "--world", "1", "8", "--epoch-max", "3000"]
    sys.argv += ["--work", str(tmp_path / "work"), "--out", str(tmp_path)]
    scale.main()
    rows = json.loads((tmp_path / "scale.json").read_text())["rows"]
    assert [(r["chunks"], r["world"]) for r in rows] == [(3000, 1), (3000, 8)]
    one, eight = rows
    assert one["train_chunks"] == 2400  # 0.8 of the chunks
    assert eight["train_chunks"] == 300
    assert one["epoch_samples"] == 2400  # the whole train split, read (absent chunks filled)
    assert one["us_per_chunk"] > 0
    assert "us_per_chunk" not in eight  # epochs run on one rank only
    for r in rows:
        assert r["setup_s"] == pytest.approx(r["split_s"] + r["construct_s"] + r["plan_s"])
        assert r["peak_MB"] >= 0
    assert "3000 chunks: setup" in capsys.readouterr().out


def test_scale_measures_patch_sampling_of_a_raster(tmp_path: Path, capsys) -> None:
    sys.argv = ["scale.py", "--patches", "2048", "--patch", "32", "--patch-chunk", "256", "--world", "1", "4"]
    sys.argv += ["--work", str(tmp_path / "work"), "--out", str(tmp_path)]
    scale.main()
    rows = json.loads((tmp_path / "scale-patches.json").read_text())["rows"]
    assert [r["world"] for r in rows] == [1, 4]
    for r in rows:
        assert r["positions"] == 64 * 64
        assert 0 < r["train_positions"] <= r["positions"]
        assert r["batch_shape"] == [256, 32, 32]
        assert r["construct_s"] > 0
        assert r["peak_MB"] >= 0
    assert "2048" in capsys.readouterr().out
