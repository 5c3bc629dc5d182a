"""bench/selection.py on a tiny store: it runs, avoids the chunks it should, and refuses wrong data.

Needs insitu-core, zarr and psutil (``.nox/tests-core-3-11/bin/python -m pytest bench/tests
-p no:cacheprovider``); skipped under a Python without them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("insitu")
pytest.importorskip("psutil")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import selection

# 16 x 32 grid in 4 x 8 chunks: the quarter-globe box covers 2 x 2 of the 4 x 4 lat/lon chunks.
TINY = ["--n-time", "16", "--grid", "16", "32", "--chunk-grid", "4", "8", "--repeats", "1"]
TINY += ["--batch-size", "4", "--block-chunks", "2"]


def run(tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "selection.json"
    selection.main([*TINY, "--work", str(tmp_path / "work"), "--out", str(out), *extra])
    return json.loads(out.read_text())


def test_both_layouts_with_and_without_latency(tmp_path: Path) -> None:
    results = run(tmp_path, "--latency-ms", "0", "2")
    assert not results["problems"]
    by_case = {(r["layout"], r["latency_ms"]): r for r in results["results"]}
    assert set(by_case) == {(layout, ms) for layout in selection.LAYOUTS for ms in (0.0, 2.0)}
    for (layout, _), r in by_case.items():
        assert r["values_equal"]
        assert r["ratio"] > 0
        for engine in selection.ENGINES:
            assert r["summary"][engine]["sample_shape"] == [3, 8, 16]
        # Levels in one chunk: the box alone avoids 3/4 of the chunks; one level per chunk: 49/52.
        expected = 3 / 4 if layout == "z" else 1 - 3 / 52
        assert r["chunks_avoided"] == pytest.approx(expected)
        whole = r["summary"]["whole+slice"]["chunks_decoded"]
        assert whole == 4 * 16 * (1 if layout == "z" else 13)
    assert results["command"].startswith("python bench/selection.py --n-time 16")


def test_different_values_fail_without_a_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = selection.user_slice

    def off_by_one(root: Path, name: str) -> Any:
        take = original(root, name)

        def wrong(batch: Any) -> Any:
            out = take(batch)
            x = out[name].copy()
            x[:, 0, 0, 0] += 1
            return out.replace({name: x})

        return wrong

    monkeypatch.setattr(selection, "user_slice", off_by_one)
    with pytest.raises(SystemExit, match="values differ"):
        run(tmp_path, "--latency-ms", "0", "--layouts", "z")
    results = json.loads((tmp_path / "selection.json").read_text())
    assert results["results"][0]["ratio"] is None
    assert results["problems"]
