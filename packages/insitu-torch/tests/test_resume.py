"""Exact resume: stop after k batches, save the state as JSON, finish the epoch in a new process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _support import CHUNK, as_list, open_dataset, record, write_store
from torch.utils.data import DataLoader

import insitu
from insitu_torch import as_torch

SUPPORT = Path(__file__).with_name("_support.py")
EPOCH = 1  # not the default: the state must carry the epoch to the new process


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_store(tmp_path_factory.mktemp("resume") / "store.zarr")


def _stop_at(plan: Any, where: str) -> int:
    """A batch count k, inside the epoch, whose first unread sample starts a block or lies inside one."""
    starts = set(plan.order.block_starts.tolist())
    candidates = [
        k
        for k in range(2, plan.n_batches - 1)
        if (k * plan.batch_size in starts) == (where == "block boundary")
        and (
            where == "block boundary"
            or plan.block_of(k * plan.batch_size - 1) == plan.block_of(k * plan.batch_size)
        )
    ]
    assert candidates, f"the test store has no {where} to stop at"
    return candidates[len(candidates) // 2]


def _first(loader: Iterable[Any], k: int) -> list[Any]:
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == k:
            break
    return batches


def _resume_in_new_process(store: Path, state: dict[str, Any], tmp_path: Path, *flags: str) -> list[Any]:
    state_file, out = tmp_path / "state.json", tmp_path / "rest.npz"
    state_file.write_text(json.dumps(state))  # JSON on disk: what a checkpoint would hold
    cmd = [sys.executable, str(SUPPORT), str(store), str(state_file), str(out), *flags]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    with np.load(out) as rest:
        return as_list(dict(rest))


def _assert_same_run(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want), f"{len(got)} batches instead of {len(want)}"
    for n, ((gi, gx, gy), (wi, wx, wy)) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_array_equal(gi, wi, err_msg=f"batch {n}: sample indices")
        np.testing.assert_array_equal(gx, wx, err_msg=f"batch {n}: x")
        np.testing.assert_array_equal(gy, wy, err_msg=f"batch {n}: y")


def _uninterrupted(store: Path, shuffle: bool) -> list[Any]:
    with open_dataset(store, shuffle=shuffle) as ds:
        dataset = as_torch(ds.train)
        dataset.set_epoch(EPOCH)
        return as_list(record(DataLoader(dataset, batch_size=None, num_workers=0)))


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "in-order"])
@pytest.mark.parametrize("where", ["block boundary", "mid-block"])
def test_resume_in_a_new_process_continues_exactly(
    store: Path, tmp_path: Path, shuffle: bool, where: str
) -> None:
    want = _uninterrupted(store, shuffle)
    with open_dataset(store, shuffle=shuffle) as ds:
        dataset = as_torch(ds.train)
        dataset.set_epoch(EPOCH)
        k = _stop_at(dataset.view.plan(), where)
        head = as_list(record(_first(DataLoader(dataset, batch_size=None, num_workers=0), k)))
        state = dataset.state_dict()
    assert state["batches_done"] == k
    assert state["epoch"] == EPOCH
    rest = _resume_in_new_process(store, state, tmp_path, *([] if shuffle else ["--no-shuffle"]))
    assert len(rest) == len(want) - k
    _assert_same_run(head + rest, want)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.parametrize("where", ["block boundary", "mid-block"])
def test_resume_through_torchdata_stateful_dataloader(store: Path, tmp_path: Path, where: str) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    want = _uninterrupted(store, shuffle=True)
    with open_dataset(store) as ds:
        dataset = as_torch(ds.train)
        dataset.set_epoch(EPOCH)
        k = _stop_at(dataset.view.plan(), where)
        loader = stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=0)
        head = as_list(record(_first(loader, k)))
        state = loader.state_dict()  # the loader's own state, with the dataset's inside
    assert state["dataset_state"]["batches_done"] == k
    rest = _resume_in_new_process(store, state, tmp_path, "--stateful-loader")
    _assert_same_run(head + rest, want)


def test_a_state_saved_at_the_end_of_an_epoch_resumes_with_nothing_left(store: Path) -> None:
    with open_dataset(store) as ds:
        dataset = as_torch(ds.train)
        n = len(list(DataLoader(dataset, batch_size=None, num_workers=0)))
        state = dataset.state_dict()
    assert state["batches_done"] == n
    with open_dataset(store) as ds:
        dataset = as_torch(ds.train)
        dataset.load_state_dict(state)
        assert list(DataLoader(dataset, batch_size=None, num_workers=0)) == []
        dataset.set_epoch(state["epoch"] + 1)  # the next epoch starts from its first batch
        assert len(list(DataLoader(dataset, batch_size=None, num_workers=0))) == n


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"seed": 8}, "seed"),
        ({"batch_size": 8}, "batch_size"),
        ({"block_chunks": 2}, "block_chunks"),
    ],
)
def test_a_state_from_a_differently_built_dataset_is_refused(
    store: Path, change: dict[str, Any], field: str
) -> None:
    with open_dataset(store) as ds:
        state = as_torch(ds.train).state_dict()
    with open_dataset(store, **change) as ds, pytest.raises(insitu.ConfigError, match=field):
        as_torch(ds.train).load_state_dict(state)


def test_a_state_from_one_process_finishes_the_epoch_on_two(store: Path) -> None:
    """Elastic resume through the adapter: the two new ranks share what the one old rank left."""
    with open_dataset(store) as ds:
        it = iter(as_torch(ds.train))
        before = [i for _ in range(3) for i in next(it).sample_indices.tolist()]
        it.close()
        state = as_torch(ds.train).state_dict()
        assert state["batches_done"] == 3
        after: list[int] = []
        counts = set()
        for rank in range(2):
            sharded = as_torch(ds.train, rank=rank, world_size=2)
            sharded.load_state_dict(state)
            batches = list(sharded)
            assert len(batches) == len(sharded)
            counts.add(len(batches))
            after += [i for b in batches for i in b.sample_indices.tolist()]
    assert len(counts) == 1, "both new ranks yield the same number of batches"
    everything = before + after
    assert len(everything) == len(set(everything)), "no sample twice"
    train = len(ds.manifest.samples("train"))
    assert len(everything) > train - 2 * CHUNK, "less than a chunk per new rank dropped"


def test_a_state_from_another_manifest_is_refused(store: Path) -> None:
    with open_dataset(store) as ds:
        state = as_torch(ds.train).state_dict()
    geoms = insitu.open_geometries(insitu.open_store(store), variables=["x", "y"])
    manifest = insitu.split_by_chunk(geoms["x"], (0.5, 0.5), names=("train", "val"))
    with (
        insitu.InSituDataset(
            str(store), manifest, [geoms["x"], geoms["y"]], batch_size=16, block_chunks=4, seed=7
        ) as ds,
        pytest.raises(insitu.ConfigError, match="manifest"),
    ):
        as_torch(ds.train).load_state_dict(state)
    with open_dataset(store) as ds, pytest.raises(insitu.ConfigError, match="not an insitu view state"):
        as_torch(ds.train).load_state_dict({"epoch": 0})
