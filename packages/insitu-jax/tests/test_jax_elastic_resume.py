"""Elastic resume through ``jax_iterator``: iterator states saved at one process count finish the
epoch at another, every sample exactly once.

Each JAX process reads ``view.shard(process_index, process_count)``, and ``jax_iterator``
takes a view already sharded that way as it is; so the processes of a run at N processes are
simulated here by N iterators over the N shards of one view (one JAX process, no collective).
"""

from __future__ import annotations

import json
from pathlib import Path

import jax_workers
import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

from insitu_jax import jax_iterator

PREFETCH = 2


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("jax-elastic") / "store"
    jax_workers.write_store(path)
    return path


def _row_ids(source: np.ndarray, batches: list[np.ndarray]) -> list[int]:
    """Index in ``source`` of each row delivered (the synthetic x rows are distinct)."""
    lookup = {row.tobytes(): i for i, row in enumerate(source)}
    assert len(lookup) == len(source)
    return [lookup[row.tobytes()] for batch in batches for row in batch.reshape(-1, source.shape[1])]


def _run(store_path: Path, world: int, states: object, epoch: int) -> tuple[list[list[int]], list[int]]:
    """Every process of a run at ``world`` processes from ``states`` (None: the epoch's start), to
    the end of the epoch: rows per process, and batches per process."""
    source = np.asarray(zarr.open_group(store_path, mode="r")["x"][:])
    rows, counts = [], []
    with jax_workers.open_dataset(LocalStore(store_path, read_only=True)) as ds:
        for process in range(world):
            view = ds.train.shard(process, world) if world > 1 else ds.train
            iterator = jax_iterator(view, prefetch=PREFETCH)
            if states is None:
                ds.set_epoch(epoch)
            else:
                iterator.load_state_dict(json.loads(json.dumps(states)))  # as a checkpoint holds it
            batches = [np.asarray(b["x"]) for b in iterator]
            rows.append(_row_ids(source, batches))
            counts.append(len(batches))
    return rows, counts


@pytest.mark.parametrize(("w1", "w2"), [(2, 1), (2, 3), (4, 3)])
def test_states_saved_at_one_process_count_finish_the_epoch_at_another(
    store_path: Path, w1: int, w2: int
) -> None:
    source = np.asarray(zarr.open_group(store_path, mode="r")["x"][:])
    heads: list[int] = []
    states = []
    with jax_workers.open_dataset(LocalStore(store_path, read_only=True)) as ds:
        ds.set_epoch(3)
        for process in range(w1):
            iterator = jax_iterator(ds.train.shard(process, w1), prefetch=PREFETCH)
            # Processes stopped at different batches (a list of every process's states).
            stop = 2 + process
            heads += _row_ids(source, [np.asarray(next(iterator)["x"]) for _ in range(stop)])
            state = iterator.state_dict()
            assert state["batches_done"] == stop, "batches converted ahead are not counted"
            states.append(state)
        full_epoch = len(ds.train)
    rest, counts = _run(store_path, w2, states, epoch=3)
    delivered = heads + [i for process in rest for i in process]
    assert len(delivered) == len(set(delivered)), "no sample twice"
    # uneven="drop" (the default) leaves out fewer than w1 chunks' worth of the epoch at w1 (as
    # any epoch at w1) and fewer than w2 of the rest at w2; everything else is delivered.
    missing = set(range(jax_workers.N_SAMPLES)) - set(delivered)
    assert len(missing) < (w1 + w2) * jax_workers.CHUNK, f"{len(missing)} samples left out"
    if w2 == 1:
        assert len(missing) < w1 * jax_workers.CHUNK, "one process delivers all the rest"
    assert len(set(counts)) == 1, f"every process yields the same number of batches, got {counts}"
    for a in range(w2):
        for b in range(a + 1, w2):
            chunks_a = {i // jax_workers.CHUNK for i in rest[a]}
            assert chunks_a.isdisjoint(i // jax_workers.CHUNK for i in rest[b]), "no chunk read twice"
    assert full_epoch * jax_workers.BATCH == jax_workers.N_SAMPLES


def test_one_process_state_in_lockstep_resumes_on_fewer_processes(store_path: Path) -> None:
    """One process's state stands for all when they moved in lockstep (as a jitted step makes them)."""
    source = np.asarray(zarr.open_group(store_path, mode="r")["x"][:])
    heads: list[int] = []
    with jax_workers.open_dataset(LocalStore(store_path, read_only=True)) as ds:
        ds.set_epoch(1)
        for process in range(4):
            iterator = jax_iterator(ds.train.shard(process, 4), prefetch=PREFETCH)
            heads += _row_ids(source, [np.asarray(next(iterator)["x"]) for _ in range(3)])
            if process == 0:
                state = iterator.state_dict()
    rest, _ = _run(store_path, 2, state, epoch=1)
    delivered = heads + [i for process in rest for i in process]
    assert len(delivered) == len(set(delivered)), "no sample twice"
    assert len(set(range(jax_workers.N_SAMPLES)) - set(delivered)) < 2 * jax_workers.CHUNK


def test_the_epoch_after_an_elastic_resume_is_a_whole_epoch(store_path: Path) -> None:
    with jax_workers.open_dataset(LocalStore(store_path, read_only=True)) as ds:
        ds.set_epoch(0)
        iterator = jax_iterator(ds.train.shard(0, 2), prefetch=PREFETCH)
        next(iterator)
        state = iterator.state_dict()
    with jax_workers.open_dataset(LocalStore(store_path, read_only=True)) as ds:
        resumed = jax_iterator(ds.train, prefetch=PREFETCH)
        resumed.load_state_dict(state)
        rest = sum(1 for _ in resumed)
        assert rest == len(ds.train) > 0
        ds.set_epoch(1)
        assert sum(1 for _ in jax_iterator(ds.train)) == jax_workers.N_SAMPLES // jax_workers.BATCH
