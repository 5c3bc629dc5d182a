"""Elastic resume through ``as_tf_dataset``: states of a run with N input pipelines (one per
worker of a ``tf.distribute`` strategy) finish the epoch with another number of pipelines, every
sample exactly once; the same ``tf.data.Dataset`` then runs whole epochs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import tf_workers
import zarr
from zarr.storage import LocalStore

from insitu_tf import as_tf_dataset, consumed_state, rank_view


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tf-elastic") / "store"
    tf_workers.write_store(path)
    return path


def _row_ids(source: np.ndarray, batches: list[Any]) -> list[int]:
    """Index in ``source`` of each row delivered (the synthetic x rows are distinct)."""
    lookup = {row.tobytes(): i for i, row in enumerate(source)}
    assert len(lookup) == len(source)
    return [
        lookup[row.tobytes()] for batch in batches for row in np.asarray(batch).reshape(-1, source.shape[1])
    ]


def _context(pipeline: int, pipelines: int) -> tf.distribute.InputContext:
    return tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipeline)


def _stop_on(store_path: Path, pipelines: int, epoch: int) -> tuple[list[int], list[dict[str, Any]]]:
    """A run over ``pipelines`` input pipelines stopped at different batches per pipeline (with
    read-ahead): the rows the model consumed, and each pipeline's consumed state."""
    source = np.asarray(zarr.open_group(store_path, mode="r")["x"][:])
    heads: list[int] = []
    states = []
    with tf_workers.open_dataset(LocalStore(store_path, read_only=True)) as ds:
        ds.set_epoch(epoch)
        for pipeline in range(pipelines):
            ctx = _context(pipeline, pipelines)
            iterator = iter(as_tf_dataset(ds.train, input_context=ctx))  # AUTOTUNE read-ahead
            stop = 1 + 2 * pipeline
            heads += _row_ids(source, [next(iterator)["x"] for _ in range(stop)])
            states.append(consumed_state(ds.train, stop, input_context=ctx))
            del iterator
    return heads, json.loads(json.dumps(states))  # as a checkpoint holds them


@pytest.mark.parametrize(("w1", "w2"), [(2, 3), (3, 2), (2, 1)])
def test_states_of_one_pipeline_count_finish_the_epoch_on_another(store_path: Path, w1: int, w2: int) -> None:
    source = np.asarray(zarr.open_group(store_path, mode="r")["x"][:])
    heads, states = _stop_on(store_path, w1, epoch=2)
    rest: list[list[int]] = []
    with tf_workers.open_dataset(LocalStore(store_path, read_only=True)) as ds:
        for pipeline in range(w2):
            ranks = {"input_context": _context(pipeline, w2)} if w2 > 1 else {}
            rank_view(ds.train, **ranks).load_state_dict(states)
            rest.append(_row_ids(source, [e["x"] for e in as_tf_dataset(ds.train, **ranks)]))
    delivered = heads + [i for pipeline in rest for i in pipeline]
    assert len(delivered) == len(set(delivered)), "no sample twice"
    # uneven="drop" (the default) leaves out fewer than w1 chunks' worth of the epoch at w1 (as
    # any epoch at w1) and fewer than w2 of the rest at w2; everything else is delivered.
    missing = set(range(tf_workers.N_SAMPLES)) - set(delivered)
    assert len(missing) < (w1 + w2) * tf_workers.CHUNK, f"{len(missing)} samples left out"
    if w2 == 1:
        assert len(missing) < w1 * tf_workers.CHUNK, "one pipeline delivers all the rest"
    counts = {len(pipeline) for pipeline in rest}
    assert len(counts) == 1, f"every pipeline yields the same number of samples, got {counts}"


def test_the_same_dataset_runs_the_rest_then_whole_epochs(store_path: Path) -> None:
    """The rest of an epoch is shorter than an epoch: the dataset must not declare one cardinality
    for both (TensorFlow would fail the next epoch)."""
    _, states = _stop_on(store_path, 2, epoch=0)
    with tf_workers.open_dataset(LocalStore(store_path, read_only=True)) as ds:
        ds.train.load_state_dict(states)
        dataset = as_tf_dataset(ds.train)
        rest = sum(1 for _ in dataset)
        assert 0 < rest < tf_workers.N_SAMPLES // tf_workers.BATCH
        ds.set_epoch(1)
        assert sum(1 for _ in dataset) == tf_workers.N_SAMPLES // tf_workers.BATCH


def test_consumed_state_after_an_elastic_resume_resumes_again(store_path: Path) -> None:
    """A state saved during the rest records where the epoch came from: resumed again at another
    size, the three stretches together are the epoch exactly once."""
    source = np.asarray(zarr.open_group(store_path, mode="r")["x"][:])
    heads, states = _stop_on(store_path, 3, epoch=4)
    second: list[int] = []
    again = []
    with tf_workers.open_dataset(LocalStore(store_path, read_only=True)) as ds:
        for pipeline in range(2):
            ctx = _context(pipeline, 2)
            rank_view(ds.train, input_context=ctx).load_state_dict(states)
            iterator = iter(as_tf_dataset(ds.train, input_context=ctx))
            second += _row_ids(source, [next(iterator)["x"] for _ in range(2)])
            again.append(consumed_state(ds.train, 2, input_context=ctx))
            del iterator
    with tf_workers.open_dataset(LocalStore(store_path, read_only=True)) as ds:
        ds.train.load_state_dict(json.loads(json.dumps(again)))
        third = _row_ids(source, [e["x"] for e in as_tf_dataset(ds.train)])
    delivered = heads + second + third
    assert len(delivered) == len(set(delivered)), "no sample twice"
    # Three pipelines, then two, dropped fewer than 3 and 2 chunks' worth; the last one nothing.
    assert len(set(range(tf_workers.N_SAMPLES)) - set(delivered)) < (3 + 2) * tf_workers.CHUNK
