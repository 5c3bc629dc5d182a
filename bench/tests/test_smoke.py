"""The regression guard's arithmetic: ratios from a suite.json, and what counts as a regression."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from smoke import compare, main, ratios


def _suite(insitu: float, stream: float, ib: float, ceiling: float) -> dict:
    best = []
    for cond in ("local", "latency"):
        for engine, mbps in (("insitu", insitu), ("insitu_stream", stream), ("insitubatch", ib)):
            best.append({"condition": cond, "case": "c8", "engine": engine, "MBps": mbps})
    best.append({"condition": "local", "case": "c8", "engine": "ceiling_decode", "MBps": ceiling})
    return {"best": best}


def test_ratios_pair_each_insitu_row_with_insitubatch_and_the_local_ceiling() -> None:
    got = ratios(_suite(1000, 1200, 500, 2000))
    assert got == {
        "latency/c8/insitu:insitubatch": 2.0,
        "latency/c8/insitu_stream:insitubatch": 2.4,
        "local/c8/insitu:ceiling_decode": 0.5,
        "local/c8/insitu:insitubatch": 2.0,
        "local/c8/insitu_stream:ceiling_decode": 0.6,
        "local/c8/insitu_stream:insitubatch": 2.4,
    }


def test_a_drop_beyond_the_tolerance_fails_and_a_gain_does_not() -> None:
    base = {"local/c8/insitu:insitubatch": 2.0, "local/c8/insitu:ceiling_decode": 0.5}
    assert (
        compare({"local/c8/insitu:insitubatch": 1.75, "local/c8/insitu:ceiling_decode": 0.9}, base, 0.15)
        == []
    )
    failed = compare({"local/c8/insitu:insitubatch": 1.6}, base, 0.15)
    assert failed[0].startswith("local/c8/insitu:ceiling_decode: not measured")
    assert "1.60 vs baseline 2.00 (-20%)" in failed[1]


def test_the_guard_exits_one_on_a_regression(tmp_path: Path) -> None:
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(_suite(1000, 1200, 500, 2000)))
    baseline = tmp_path / "baseline.json"
    assert main(["--from", str(suite), "--baseline", str(baseline), "--update"]) == 0
    assert main(["--from", str(suite), "--baseline", str(baseline)]) == 0
    suite.write_text(json.dumps(_suite(700, 1200, 500, 2000)))  # insitu lost 30% against both
    assert main(["--from", str(suite), "--baseline", str(baseline)]) == 1


def test_a_second_run_can_only_lower_the_baseline(tmp_path: Path) -> None:
    suite = tmp_path / "suite.json"
    baseline = tmp_path / "baseline.json"
    suite.write_text(json.dumps(_suite(1000, 1200, 500, 2000)))
    assert main(["--from", str(suite), "--baseline", str(baseline), "--update"]) == 0
    suite.write_text(json.dumps(_suite(900, 1500, 500, 2000)))  # insitu lower, insitu_stream higher
    assert main(["--from", str(suite), "--baseline", str(baseline), "--update-lower"]) == 0
    kept = json.loads(baseline.read_text())["ratios"]
    assert kept["local/c8/insitu:insitubatch"] == 1.8  # the lower run's
    assert kept["local/c8/insitu_stream:insitubatch"] == 2.4  # the first run's, lower than 3.0
    assert "--update-lower" in json.loads(baseline.read_text())["command"]
