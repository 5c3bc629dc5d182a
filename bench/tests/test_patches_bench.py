"""bench/patches.py in quick mode: it runs, counts decodes, cross-checks the engines and refuses
wrong data. The DataLoader peers need torch (and xbatcher); without them they are skipped with a
note and the insitu passes are checked alone.

Needs insitu-core, zarr and psutil (``.nox/tests-bench/bin/python -m pytest bench/tests -p
no:cacheprovider``); skipped under a Python without them.
"""

from __future__ import annotations

import importlib.util
import json
import math
import multiprocessing
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("insitu")
pytest.importorskip("psutil")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import patches
import shared

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_XBATCHER = HAS_TORCH and all(importlib.util.find_spec(m) for m in ("xarray", "xbatcher"))


def run(tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "out"
    code = patches.main(["--quick", "--work", str(tmp_path / "work"), "--out", str(out), *extra])
    return code, json.loads((out / "patches.json").read_text())


def best(record: dict[str, Any], case: str, engine: str) -> dict[str, Any] | None:
    return next((b for b in record["best"] if b["case"] == case and b["engine"] == engine), None)


def test_quick_run_measures_every_engine_it_can(tmp_path: Path) -> None:
    code, record = run(tmp_path)
    assert code == 0, record["problems"]
    assert record["problems"] == []
    assert record["command"].startswith("python bench/patches.py --quick")
    assert (tmp_path / "out" / "patches.md").read_text().count("| p32 | insitu |") >= 1
    assert set(record["cases"]) == {"p32", "p16"}
    for case, info in record["cases"].items():
        per_chunk = info["patches_per_chunk"]
        assert per_chunk == {"p32": 4, "p16": 16}[case]
        for engine in ("insitu", "insitu_section", "decode_ceiling"):
            b = best(record, case, engine)
            assert b is not None
            assert b["MBps"] > 0
            assert b["peak_rss_MB"] > 0
            assert b["decodes_per_chunk"] == 1.0  # every chunk decoded once
        assert best(record, case, "insitu")["patches"] == 4 * (128 // info["patch"][0]) ** 2
        assert best(record, case, "insitu_section")["patches"] == 4
        assert best(record, case, "decode_ceiling")["patches"] == 4
        assert record["ratios"][case]["vs_ceiling"] > 0
        expected = {"zarr_reader": HAS_TORCH, "xbatcher": HAS_XBATCHER}
        for engine, present in expected.items():
            b = best(record, case, engine)
            if present:
                # A patch read decodes its whole chunk: every chunk once per patch in it.
                assert b is not None
                assert b["decodes_per_chunk"] == per_chunk
                assert b["distinct_chunks"] == 4 * 4
            else:
                assert b is None
                assert "skipped" in record["notes"][engine]
        ratio = record["ratios"][case]
        assert ratio["vs_section"] > 0
        assert ratio["vs_section_target"] == 0.8
        assert ("vs_best_peer" in ratio) == HAS_TORCH
    insitu_rows = [r for r in record["rows"] if r["engine"] == "insitu"]
    assert all(r["extra"]["origins_are_the_grid"] for r in insitu_rows)
    # One checksum per case across engines: the cross-section pass and the decode ceiling read
    # what the patches do.
    for case in record["cases"]:
        sums = {round(r["checksum"], 3) for r in record["rows"] if r["case"] == case and r["status"] == "ok"}
        assert len(sums) == 1


def test_random_positions_and_a_second_repeat_at_the_chosen_tuning(tmp_path: Path) -> None:
    engines = ["insitu", "zarr_reader"] if HAS_TORCH else ["insitu"]
    extra = ["--sampling", "random", "--patches", "32", "--repeats", "2", "--insitu-runs", "2"]
    code, record = run(tmp_path, *extra, "--engines", *engines)
    assert code == 0, record["problems"]
    b = best(record, "p32", "insitu")
    assert b["patches"] == 4 * 16  # as many draws as the grid has positions, by default
    assert b["decodes_per_chunk"] == 1.0
    assert b["runs"] == 4  # two per repeat
    chosen = {(case, engine): tuning for case, engine, tuning in record["chosen_tunings"]}
    if HAS_TORCH:
        # Unaligned patches straddle chunks: more decodes than the grid's 4 per chunk.
        peer = best(record, "p32", "zarr_reader")
        assert peer["decodes_per_chunk"] > 4
        # Repeat 0 sweeps the workers; repeat 1 runs the best of them, the one reported.
        swept = [r["tuning"] for r in record["rows"] if r["engine"] == "zarr_reader" and r["repeat"] == 0]
        again = [r["tuning"] for r in record["rows"] if r["engine"] == "zarr_reader" and r["repeat"] == 1]
        assert sorted(swept) == ["workers=0", "workers=2"]
        assert again == [chosen[("p32", "zarr_reader")]] == [peer["tuning"]]


def test_wrong_checksums_and_counts_are_problems() -> None:
    def row(engine: str, checksum: float, n: int = 64) -> dict[str, Any]:
        return dict(case="p32", engine=engine, tuning="t", repeat=0, status="ok", truncated=False) | {
            "checksum": checksum,
            "patches": n,
            "expected_patches": 64,
            "extra": {},
        }

    assert patches.check([row("insitu", 10.0), row("zarr_reader", 10.0)], "grid") == []
    problems = patches.check([row("insitu", 10.0), row("zarr_reader", 10.5)], "grid")
    assert len(problems) == 1
    assert "checksum of p32 zarr_reader" in problems[0]
    assert patches.check([row("insitu", 10.0), row("zarr_reader", 10.5)], "random") == []
    assert "delivered 63 samples" in patches.check([row("insitu", 10.0, n=63)], "grid")[0]


def test_section_checksum_reads_what_the_tiling_patches_read() -> None:
    rng = np.random.default_rng(0)
    sections = rng.normal(size=(3, 48, 64)).astype("float32")
    patch = (16, 32)
    tiles = [
        sections[:, y : y + patch[0], x : x + patch[1]]
        for y in range(0, 48, patch[0])
        for x in range(0, 64, patch[1])
    ]
    by_patches = sum(shared.patch_checksum(t) for t in tiles)
    index = shared.section_checksum_index((48, 64), patch)
    assert index is not None
    by_section = float(sections.reshape(3, -1)[:, index].sum(dtype=np.float64))
    assert by_section == pytest.approx(by_patches, rel=1e-12)
    assert shared.section_checksum_index((48, 60), patch) is None  # does not tile


def test_touched_chunks_counts_straddling_patches() -> None:
    spec = shared.PatchSpec(
        engine="zarr_reader",
        root="",
        array="image",
        dims=["t", "y", "x"],
        shape=[2, 8, 8],
        chunks=[1, 4, 4],
        patch=[4, 4],
    )
    assert shared.touched_chunks(spec, shared.grid_origins(spec)) == 8
    assert shared.touched_chunks(spec, np.array([[0, 2, 2]])) == 4  # across both chunk borders
    assert shared.touched_chunks(spec, np.array([[1, 0, 2]])) == 2
    assert len(shared.grid_origins(spec)) == 2 * 2 * 2


def _count_in_child(counts: shared.SharedCounts) -> None:
    counts.add("image/c/1/0/1", "image")
    counts.add("image/zarr.json", "image")


def test_get_counts_are_shared_with_forked_workers() -> None:
    counts = shared.SharedCounts((2, 2, 2))
    counts.add("image/c/1/0/1", "image")
    child = multiprocessing.get_context("fork").Process(target=_count_in_child, args=(counts,))
    child.start()
    child.join()
    assert child.exitcode == 0
    assert counts.summary() == {
        "chunk_gets": 2,
        "distinct_chunks": 1,
        "max_decodes_one_chunk": 2,
        "other_gets": 1,
    }
    assert int(counts.counts[1, 0, 1]) == 2
    assert math.prod(counts.counts.shape) == 8


def test_a_run_on_a_busy_machine_runs_again(tmp_path: Path) -> None:
    # Any load is more than -1 core: every run is discarded once, then kept (one retry).
    extra = ["--engines", "insitu", "--patches", "32", "--max-other-load", "-1", "--busy-retries", "1"]
    code, record = run(tmp_path, *extra)
    assert code == 0, record["problems"]
    statuses = [(r["attempt"], r["status"]) for r in record["rows"]]
    assert statuses == [(0, "busy"), (1, "ok")]
    assert all(r["other_load"] >= 0 for r in record["rows"])
    assert best(record, "p32", "insitu")["ok"] == 1
