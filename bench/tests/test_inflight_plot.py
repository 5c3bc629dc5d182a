"""insitu's in-flight limit in the suite: the runner's compact trajectory, the report's
``inflight.png`` (drawn from the runs that recorded one, skipped for results without any) and its
caption in the docs section."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suite"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suite" / "engines"))

import report
from run_insitu import trajectory_points


@dataclass(frozen=True)
class Change:
    """The fields of ``insitu``'s ``LimitChange`` the runner reads."""

    at_s: float
    limit: int


def _row(
    condition: str,
    case: str,
    trajectory: list[list[float]] | None,
    *,
    tuning: dict[str, Any] | None = None,
    repeat: int = 0,
) -> dict[str, Any]:
    """One ok insitu row as the driver records it; ``None``: a result file from before trajectories."""
    tuning = tuning or {}
    extra: dict[str, Any] = {"stall_fraction": 0.1}
    if trajectory is not None:
        extra["inflight_trajectory"] = trajectory
    label = " ".join(f"{k}={v}" for k, v in tuning.items()) or "defaults"
    return {
        "condition": condition,
        "case": case,
        "engine": "insitu",
        "tuning": tuning,
        "tuning_label": label,
        "repeat": repeat,
        "status": "ok",
        "extra": extra,
    }


def _results(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema": 1, "rows": rows, "summary": [], "best": []}


def test_the_runner_keeps_at_most_its_points_with_the_first_and_the_last() -> None:
    changes = [Change(i * 0.0123456, 32 + i) for i in range(1000)]
    points = trajectory_points(changes, most=100)
    assert len(points) == 100
    assert points[0] == (0.0, 32)
    assert points[-1] == (round(999 * 0.0123456, 3), 32 + 999)
    assert [p[0] for p in points] == sorted(p[0] for p in points)
    # Short trajectories are kept whole, rounded to the millisecond; they survive the JSON line.
    short = trajectory_points([Change(0.0, 32), Change(0.01234, 64), Change(0.5, 32)])
    assert short == [(0.0, 32), (0.012, 64), (0.5, 32)]
    assert json.loads(json.dumps(short)) == [[0.0, 32], [0.012, 64], [0.5, 32]]


def test_the_plot_takes_the_default_run_and_its_first_repeat() -> None:
    results = _results(
        [
            _row("latency", "c8", [[0.0, 32], [0.2, 64]], repeat=1),
            _row("latency", "c8", [[0.0, 32], [0.1, 64], [0.4, 128]], repeat=0),
            _row("latency", "c8", [[0.0, 32]], tuning={"max_inflight": 64}),
            _row("local", "c8", []),  # local files: read without a limit
        ]
    )
    found = report._trajectories(results)
    assert list(found) == ["latency"]
    assert found["latency"]["c8"].label == "defaults"
    assert found["latency"]["c8"].points == [[0.0, 32], [0.1, 64], [0.4, 128]]


def test_the_last_limit_lasts_until_the_epoch_ends_at_the_earliest() -> None:
    row = {**_row("latency", "c8", [[0.0, 32], [0.4, 64]]), "elapsed_s": 2.0, "ttfb_s": 0.1}
    (found,) = report._trajectories(_results([row]))["latency"].values()
    # Timed from construction, the epoch ends 1.9 s after its first batch, its first read before it.
    assert found.end_s == pytest.approx(1.9)
    # An older row without timings, or a change after that bound: the line ends at the last change.
    assert report._epoch_end({}, [[0.0, 32], [0.4, 64]]) == 0.4
    assert report._epoch_end({"elapsed_s": 0.3, "ttfb_s": 0.1}, [[0.0, 32], [0.4, 64]]) == 0.4


def test_a_sweep_without_defaults_plots_its_best_tuning() -> None:
    results = _results(
        [
            _row("http", "c1", [[0.0, 32]], tuning={"max_inflight": 64}),
            _row("http", "c1", [[0.0, 32], [0.3, 64]], tuning={"max_inflight": 256}),
        ]
    )
    results["best"] = [
        {"condition": "http", "case": "c1", "engine": "insitu", "tuning_label": "max_inflight=256"}
    ]
    found = report._trajectories(results)["http"]["c1"]
    assert (found.label, found.points) == ("max_inflight=256", [[0.0, 32], [0.3, 64]])


def test_plots_draw_inflight_png_from_recorded_trajectories(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [
        _row(cond, case, [[0.0, 32], [0.05 * n, 64], [0.1 * n, 128], [0.15 * n, 64]])
        for cond in ("latency", "http")
        for n, case in enumerate(("c1", "c8", "c32"), start=1)
    ]
    written = report.plots(_results([*rows, _row("local", "c8", [])]), tmp_path)
    png = tmp_path / "inflight.png"
    assert png in written
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_skip_inflight_png_for_results_without_trajectories(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    results = _results([_row("latency", "c8", None), _row("local", "c8", [])])
    written = report.plots(results, tmp_path)
    assert not (tmp_path / "inflight.png").exists()
    assert all(p.name != "inflight.png" for p in written)


def test_the_docs_show_the_figure_with_its_caption_only_when_it_exists(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\n{report.START}\nold\n{report.END}\n")
    img = tmp_path / "img" / "bench"
    img.mkdir(parents=True)
    caption = report.CAPTIONS["inflight.png"]
    assert report.update_docs(_results([]), doc, img)
    assert "inflight" not in doc.read_text()
    (img / "inflight.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    assert report.update_docs(_results([]), doc, img)
    text = doc.read_text()
    assert f"![inflight](img/bench/inflight.png)\n\n{caption}\n" in text
