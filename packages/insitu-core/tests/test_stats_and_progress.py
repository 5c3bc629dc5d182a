"""Typed statistics, one report per pass (logged and handed to callbacks), and opt-in progress."""

from __future__ import annotations

import itertools
import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import field, write_array

import insitu
from insitu.stats import PassReport, Stats


@pytest.fixture
def data(tmp_path: Path) -> Any:
    write_array(tmp_path, "x", field(48, (4,)), (6, 4))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, ["x"])
    manifest = insitu.split_by_chunk(geoms["x"], (0.75, 0.25), names=["train", "val"])
    with insitu.InSituDataset(store, manifest, geoms, batch_size=5) as ds:
        yield ds


def test_stats_are_a_typed_snapshot_whose_counters_never_go_back(data: Any) -> None:
    before = data.stats
    assert isinstance(before, Stats)
    assert before["reads"] == before.reads == 0  # a mapping and a dataclass
    json.dumps(before.as_dict())
    seen = []
    for epoch in range(3):
        data.set_epoch(epoch)
        seen += [data.stats for _ in data.train]
    counters = ["reads", "bytes_read", "chunks_decoded", "batches", "samples", "slab_hits", "iterating_s"]
    for earlier, later in itertools.pairwise(seen):
        assert all(later[k] >= earlier[k] for k in counters)
    assert seen[-1].samples == 3 * 36


def test_each_pass_is_logged_once_and_reported_to_callbacks(data: Any, caplog: Any) -> None:
    reports: list[PassReport] = []
    data.add_stats_callback(reports.append)
    data.add_stats_callback(lambda r: 1 / 0)  # a broken exporter is logged, never fatal
    with caplog.at_level(logging.INFO, logger="insitu.epoch"):
        for _ in data.train:
            pass
        it = iter(data.val)
        next(it)
        it.close()
    assert [(r.split, r.completed) for r in reports] == [("train", True), ("val", False)]
    train = reports[0]
    assert train.samples == 36
    assert train.batches == len(data.train)
    assert train.engine["chunks_decoded"] == 6  # the pass's own work, not the dataset's total
    assert reports[1].samples == 5
    lines = [r.getMessage() for r in caplog.records if r.name == "insitu.epoch" and r.levelno == logging.INFO]
    assert len(lines) == 2
    assert lines[0].startswith("train epoch 0: 36 samples in 8 batches")
    assert "stall" in lines[0]
    assert "hit rate" in lines[0]
    assert any("stats callback" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert data.train.last_pass is train
    assert data.train.totals["samples"] == 36


def test_progress_is_opt_in_and_takes_a_callback(data: Any, capsys: Any) -> None:
    list(data.train.iter())
    assert capsys.readouterr().err == ""  # nothing unless asked
    calls: list[tuple[int, int | None]] = []
    list(data.train.iter(progress=lambda done, total: calls.append((done, total))))
    assert calls == [(i, 8) for i in range(1, 9)]


def test_progress_without_tqdm_prints_lines(data: Any, capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # as if tqdm were not installed
    batches = list(data.train.iter(progress=True))
    assert len(batches) == 8
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("train epoch 0: 8/8 batches, ")
    assert len(err) == 8  # at most one line per tenth of the pass


PROGRESS_SCRIPT = """
import sys, time
sys.path.insert(0, {tests!r})
from conftest import field, write_array
import insitu
write_array({path!r}, "x", field(400, (4,)), (10, 4))
store = insitu.open_store({path!r})
geoms = insitu.open_geometries(store, ["x"])
manifest = insitu.split_by_chunk(geoms["x"], (1.0,), names=["train"])
ds = insitu.InSituDataset(store, manifest, geoms, batch_size=10)
for batch in ds.train.iter(progress=True):
    time.sleep(0.05)
print("DONE-MARKER")
"""


def _screen_of(script_text: str, tmp_path: Path, *, width: int = 100) -> tuple[list[str], str]:
    """The non-empty lines a ``width`` x 20 terminal (tmux) shows after running the script, and the pane."""
    script = tmp_path / "progress.py"
    script.write_text(script_text)
    session = f"insitu-progress-{time.monotonic_ns()}"
    command = f"{sys.executable} {script}; echo EXIT=$?; sleep 30"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", str(width), "-y", "20", command], check=True
    )
    try:
        deadline = time.monotonic() + 60
        pane = ""
        while time.monotonic() < deadline:
            pane = subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout
            if "EXIT=" in pane:
                break
            time.sleep(0.2)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    return [line.rstrip() for line in pane.splitlines() if line.strip()], pane


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_progress_bar_renders_in_a_terminal_and_ends_cleanly(tmp_path: Path) -> None:
    pytest.importorskip("tqdm")
    script = PROGRESS_SCRIPT.format(tests=str(Path(__file__).parent), path=str(tmp_path / "s.zarr"))
    lines, pane = _screen_of(script, tmp_path)
    assert "EXIT=0" in lines, pane
    bar = [line for line in lines if line.startswith("train epoch 0:")]
    assert len(bar) == 1, pane  # one bar, redrawn in place: no trail of partial bars
    assert "100%" in bar[0], pane
    assert "40/40" in bar[0], pane
    assert lines.index(bar[0]) < lines.index("DONE-MARKER"), pane  # the bar ended before the script went on
    assert not any("\x1b" in line for line in lines), pane  # no stray escape codes left on screen
    np.testing.assert_equal(len(lines), lines.index("EXIT=0") + 1)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_pass_summary_logged_at_info_does_not_collide_with_the_bar(tmp_path: Path) -> None:
    pytest.importorskip("tqdm")
    script = PROGRESS_SCRIPT.format(tests=str(Path(__file__).parent), path=str(tmp_path / "s.zarr"))
    script = "import logging\nlogging.basicConfig(level=logging.INFO)\n" + script
    lines, pane = _screen_of(script, tmp_path, width=200)  # wide enough for the summary on one line
    assert "EXIT=0" in lines, pane
    bar = [line for line in lines if line.startswith("train epoch 0:")]
    summary = [line for line in lines if line.startswith("INFO:insitu.epoch:train epoch 0:")]
    assert len(bar) == 1, pane  # drawn once, in place, and not broken by the log line
    assert "100%" in bar[0], pane
    assert "40/40" in bar[0], pane
    assert "INFO" not in bar[0], pane
    assert len(summary) == 1, pane  # on a line of its own, whole
    assert "400 samples in 40 batches" in summary[0], pane
    assert "%|" not in summary[0], pane
    assert lines.index("DONE-MARKER") > max(lines.index(bar[0]), lines.index(summary[0])), pane


def test_progress_without_tqdm_prints_at_most_ten_lines_a_pass(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # as if tqdm were not installed
    write_array(tmp_path, "x", field(45, (4,)), (1, 4))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, ["x"])
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,), names=["train"])
    with insitu.InSituDataset(store, manifest, geoms, batch_size=1) as ds:
        assert len(list(ds.train.iter(progress=True))) == 45
    err = capsys.readouterr().err.splitlines()
    assert 1 <= len(err) <= 10, err
    assert err[-1].startswith("train epoch 0: 45/45 batches, "), err
