"""Exact resume through ``jax_iterator``: stop, save to disk, resume in a new process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax_workers
import numpy as np
import pytest
from zarr.storage import LocalStore

from insitu_jax import jax_iterator

WORKERS = Path(jax_workers.__file__)
PREFETCH = 2


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("jax-resume") / "store"
    jax_workers.write_store(path)
    return path


def _stop_points(store_path: Path) -> dict[str, int]:
    """A stop at a block boundary and one in the middle of a block (batches done)."""
    with jax_workers.open_dataset(LocalStore(store_path, read_only=True)) as ds:
        plan = ds.train.plan()
    starts = plan.order.block_starts
    boundary = int(starts[3])
    assert boundary % jax_workers.BATCH == 0, "the test layout puts a block start on a batch start"
    middle = boundary + jax_workers.BATCH
    assert plan.block_of(middle - 1) == plan.block_of(middle) == 3, "the middle stop is inside block 3"
    return {"block-boundary": boundary // jax_workers.BATCH, "mid-block": middle // jax_workers.BATCH}


@pytest.mark.parametrize("where", ["block-boundary", "mid-block"])
@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "ordered"])
def test_resume_in_a_new_process_continues_exactly(
    store_path: Path, tmp_path: Path, where: str, shuffle: bool
) -> None:
    k = _stop_points(store_path)[where]
    with jax_workers.open_dataset(LocalStore(store_path, read_only=True), shuffle=shuffle) as ds:
        ds.set_epoch(2)
        uninterrupted = [np.asarray(batch["x"]) for batch in jax_iterator(ds.train)]
        ds.set_epoch(2)
        iterator = jax_iterator(ds.train, prefetch=PREFETCH)
        head = [np.asarray(next(iterator)["x"]) for _ in range(k)]
        state = iterator.state_dict()
        # The view has handed out the batches being converted ahead; the iterator's state does
        # not count them, so nothing is skipped on resume.
        assert ds.train.state_dict()["batches_done"] == k + PREFETCH
    assert (state["epoch"], state["batches_done"]) == (2, k)
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(state))

    out = tmp_path / "rest.npy"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, str(WORKERS), "resume", str(store_path), str(state_file), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rest = list(np.load(out))

    assert 0 < k < len(uninterrupted)
    assert len(head) + len(rest) == len(uninterrupted)
    for index, (want, have) in enumerate(zip(uninterrupted, head + rest, strict=True)):
        np.testing.assert_array_equal(have, want, err_msg=f"batch {index}")


def test_state_before_iterating_is_the_loaded_state(store_path: Path) -> None:
    with jax_workers.open_dataset(LocalStore(store_path, read_only=True)) as ds:
        saved = {**ds.train.state_dict(), "epoch": 1, "batches_done": 5}
        iterator = jax_iterator(ds.train)
        iterator.load_state_dict(saved)
        assert iterator.state_dict() == saved
        next(iterator)
        assert iterator.state_dict()["batches_done"] == 6


def test_state_after_the_last_batch_counts_every_batch(store_path: Path) -> None:
    with jax_workers.open_dataset(LocalStore(store_path, read_only=True)) as ds:
        iterator = jax_iterator(ds.train, prefetch=3)
        n = sum(1 for _ in iterator)
        assert n == len(ds.train)
        assert iterator.state_dict()["batches_done"] == n
