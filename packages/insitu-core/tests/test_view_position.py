"""A view's position as named records, the state written from them, and the narrow seam views see:
the iteration service, never the engine or the gatherer."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import field, write_array

import insitu
from insitu.engine.passes import END
from insitu.plan.elastic import Segment
from insitu.plan.position import ElasticEpoch, PassProgress, view_state
from insitu.plan.resume_state import STATE_FORMAT, ResumePoint, resume_point
from insitu.views import PassTally, ViewTotals

SOURCE = Path(insitu.__file__).parent
IDENTITY = {"split": "train", "seed": 0, "batch_size": 5, "rank": 0, "world_size": 1}


def test_progress_advances_as_a_new_record_and_keeps_its_epoch_and_segments() -> None:
    history = (Segment(2, (3, 3)),)
    start = PassProgress(4, 0, history)
    later = start.advanced_to(7)
    assert (later.epoch, later.batches_done, later.resumed_from) == (4, 7, history)
    assert start.batches_done == 0, "advancing never changes the record it started from"
    with pytest.raises(dataclasses.FrozenInstanceError):
        later.batches_done = 8  # type: ignore[misc]


def test_a_state_written_from_a_progress_reads_back_as_the_same_point() -> None:
    progress = PassProgress(3, 6, (Segment(2, (1, 2)),))
    state = view_state(progress, IDENTITY)
    assert list(state)[:4] == ["format", "epoch", "batches_done", "resumed_from"]
    assert state["format"] == STATE_FORMAT
    json.dumps(state)
    point = resume_point(json.loads(json.dumps(state)), IDENTITY, rank=0, world_size=1)
    assert point == ResumePoint(3, 6, progress.resumed_from)
    assert PassProgress.resumed(point) == progress


def test_an_elastic_epoch_lasts_for_its_epoch_only() -> None:
    assert ElasticEpoch.of(ResumePoint(2, 4, ())) is None, "no earlier segments: an ordinary epoch"
    history = (Segment(4, (2, 2, 2, 1)),)
    elastic = ElasticEpoch.of(ResumePoint(2, 0, history))
    assert elastic is not None
    assert elastic.segments_in(2) == history
    assert elastic.segments_in(3) == ()


def test_totals_and_tallies_are_named_fields() -> None:
    tally = PassTally()
    tally.delivered(5)
    tally.delivered(3)
    tally.waiting_s += 0.25
    assert (tally.batches, tally.samples, tally.waiting_s) == (2, 8, 0.25)
    assert list(ViewTotals().as_dict()) == ["passes", "batches", "samples", "seconds", "waiting_s"]


@pytest.fixture
def ds(tmp_path: Path) -> Any:
    write_array(tmp_path, "x", field(48, (4,)), (6, 4))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, ["x"])
    manifest = insitu.split_by_chunk(geoms["x"], (0.75, 0.25), names=["train", "val"])
    with insitu.InSituDataset(store, manifest, geoms, batch_size=5) as data:
        yield data


def test_the_view_state_follows_its_iterator_batch_by_batch(ds: Any) -> None:
    view = ds.train
    assert view.state_dict()["batches_done"] == 0
    it = iter(view)
    for k in range(1, 4):
        next(it)
        assert it.batches_done == k
        assert view.state_dict()["batches_done"] == k
    it.close()
    totals = view.totals
    assert {k: totals[k] for k in ("passes", "batches", "samples")} == {
        "passes": 1,
        "batches": 3,
        "samples": 15,
    }
    assert isinstance(totals, dict)
    assert totals["seconds"] >= totals["waiting_s"] >= 0
    assert view.last_pass is not None
    assert view.last_pass.batches == 3


def test_a_pass_started_through_the_iteration_service_delivers_the_plan(ds: Any) -> None:
    plan = ds.train.plan()
    running = ds.passes.start(plan, split="train", epoch=ds.epoch, start_batch=0)
    future = running.launch()
    anchors = []
    while (item := running.next_item(timeout=30)) is not END:
        anchors.append(item.sample_indices)
        running.took_batch()
    running.wait_stopped(future)
    np.testing.assert_array_equal(np.concatenate(anchors), ds.train.sample_order())


def _attributes(path: Path) -> set[str]:
    return {node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)}


def test_views_reach_neither_the_engine_nor_the_gatherer() -> None:
    touched = _attributes(SOURCE / "views.py")
    assert not touched & {"engine", "gatherer", "loop", "_engine", "_loop"}


def _insitu_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("insitu."):
            found.add(node.module)
    return found


def test_the_dataset_imports_at_most_half_the_modules_it_did() -> None:
    # 28 before the assembly steps moved to the floors that own them (TYPE_CHECKING included).
    assert len(_insitu_modules(SOURCE / "dataset.py")) <= 14
