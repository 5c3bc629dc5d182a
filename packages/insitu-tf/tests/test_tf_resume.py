"""Exact resume with ``as_tf_dataset``: stop, save to disk, rebuild in a new process, continue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tf_workers
from zarr.storage import LocalStore

from insitu_tf import as_tf_dataset, consumed_state

WORKERS = Path(tf_workers.__file__)
EPOCH = 2
# (name, shuffle, rank, world_size, where): where = "boundary" (a block starts at the stop) or
# "middle" (the stop falls inside a block).
CASES = [
    ("shuffled-boundary", True, 0, 1, "boundary"),
    ("shuffled-middle", True, 0, 1, "middle"),
    ("ordered-boundary", False, 0, 1, "boundary"),
    ("ordered-middle", False, 0, 1, "middle"),
    ("rank1of2-middle", True, 1, 2, "middle"),
]


def _stop(plan: Any, where: str) -> int:
    """Batches done at the stop: block 3's first batch, or the one after it (same block)."""
    start = int(plan.order.block_starts[3])
    assert start % tf_workers.BATCH == 0, "the test layout puts a block start on a batch start"
    k = start // tf_workers.BATCH + (where == "middle")
    if where == "middle":
        assert plan.block_of(k * tf_workers.BATCH - 1) == plan.block_of(k * tf_workers.BATCH) == 3
    return k


@pytest.fixture(scope="module")
def resumed(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[list[np.ndarray], list[np.ndarray], int]]:
    """Per case: the uninterrupted epoch, the batches before the stop plus the resumed rest, and k.

    The stops run here; every resume runs in one new Python process.
    """
    root = tmp_path_factory.mktemp("tf-resume")
    store = root / "store"
    tf_workers.write_store(store)
    runs: dict[str, Any] = {}
    jobs: list[str] = []
    for name, shuffle, rank, world_size, where in CASES:
        ranks = {"rank": rank, "world_size": world_size}
        with tf_workers.open_dataset(LocalStore(store, read_only=True), shuffle=shuffle) as ds:
            ds.set_epoch(EPOCH)
            whole = [e["x"].numpy() for e in as_tf_dataset(ds.train, **ranks)]
            k = _stop(ds.train.shard(rank, world_size).plan(), where)
            iterator = iter(as_tf_dataset(ds.train, **ranks))  # AUTOTUNE read-ahead
            head = [next(iterator)["x"].numpy() for _ in range(k)]
            state = consumed_state(ds.train, k, **ranks)
            del iterator
        assert (state["epoch"], state["batches_done"], state["rank"]) == (EPOCH, k, rank)
        (root / f"{name}.json").write_text(json.dumps(state))
        jobs += [str(root / f"{name}.json"), str(root / f"{name}.npy")]
        runs[name] = (whole, head, k)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    cmd = [sys.executable, str(WORKERS), "resume", str(store), *jobs]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {
        name: (whole, head + list(np.load(root / f"{name}.npy")), k)
        for name, (whole, head, k) in runs.items()
    }


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_resumed_run_equals_the_uninterrupted_one(resumed: Any, case: str) -> None:
    whole, stitched, k = resumed[case]
    assert 0 < k < len(whole)
    assert len(stitched) == len(whole)
    for index, (want, have) in enumerate(zip(whole, stitched, strict=True)):
        np.testing.assert_array_equal(have, want, err_msg=f"batch {index} (stopped after {k})")


def test_read_ahead_is_not_counted_as_consumed(tmp_path: Path) -> None:
    tf_workers.write_store(tmp_path / "store")
    with tf_workers.open_dataset(LocalStore(tmp_path / "store", read_only=True)) as ds:
        # No read-ahead: the view's own state is what the loop consumed.
        iterator = iter(as_tf_dataset(ds.train, prefetch=0))
        for _ in range(3):
            next(iterator)
        assert ds.train.state_dict()["batches_done"] == 3
        assert consumed_state(ds.train, 3) == ds.train.state_dict()
        del iterator
        # With read-ahead the view has handed out at least as many; consumed_state says 3.
        iterator = iter(as_tf_dataset(ds.train, prefetch=4))
        for _ in range(3):
            next(iterator)
        assert ds.train.state_dict()["batches_done"] >= 3
        assert consumed_state(ds.train, 3)["batches_done"] == 3
