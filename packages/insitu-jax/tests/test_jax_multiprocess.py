"""A real two-process ``jax.distributed`` run on CPU (loopback coordinator, gloo collectives)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax_workers
import numpy as np
import pytest
import zarr

WORKERS = Path(jax_workers.__file__)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_two_processes(store: Path, out: Path) -> list[dict[str, Any]]:
    """Start both JAX processes, wait for them, and return what each one recorded."""
    out.mkdir()
    port = _free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKERS), "distributed", str(i), str(port), str(store), str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    logs = []
    for proc in procs:
        try:
            logs.append(proc.communicate(timeout=180)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
    for i, proc in enumerate(procs):
        assert proc.returncode == 0, f"JAX process {i} failed:\n{logs[i][-4000:]}"
    results = []
    for i in range(2):
        record = json.loads((out / f"process{i}.json").read_text())
        record["local"] = np.load(out / f"local{i}.npy")
        record["global"] = np.load(out / f"global{i}.npy")
        results.append(record)
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[np.ndarray, list[list[dict[str, Any]]]]:
    """The source rows, and two complete two-process runs over the same store."""
    root = tmp_path_factory.mktemp("jax-distributed")
    store = root / "store"
    jax_workers.write_store(store)
    source = np.asarray(zarr.open_group(store, mode="r")["x"][:])
    return source, [_run_two_processes(store, root / f"run{n}") for n in range(2)]


def _row_ids(source: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Index in ``source`` of each row of ``rows`` (rows of the synthetic x are distinct)."""
    lookup = {row.tobytes(): i for i, row in enumerate(source)}
    assert len(lookup) == len(source), "source rows must be distinct for this check"
    return np.array([lookup[row.tobytes()] for row in rows.reshape(-1, source.shape[1])])


def test_each_process_reads_its_own_chunks(runs: Any) -> None:
    _, (first, _) = runs
    assert [p["rank"] for p in first] == [0, 1]
    assert all(p["world_size"] == 2 for p in first)
    keys0, keys1 = (set(p["keys"]) for p in first)
    assert keys0
    assert keys1
    assert not keys0 & keys1, f"chunks read by both processes: {sorted(keys0 & keys1)}"
    n_chunks = jax_workers.N_SAMPLES // jax_workers.CHUNK
    assert keys0 | keys1 == {f"{name}/c/{i}/0" for name in ("x", "y") for i in range(n_chunks)}
    assert all(p["max_gets"] == 1 for p in first), "a chunk was fetched twice by one process"
    # The plans agree with the reads: each process's epoch order names only its own chunks.
    chunks0, chunks1 = (set(p["plan_chunks"]) for p in first)
    assert not chunks0 & chunks1
    assert chunks0 | chunks1 == set(range(n_chunks))
    assert keys0 == {f"{name}/c/{i}/0" for name in ("x", "y") for i in chunks0}


def test_processes_yield_equal_batch_counts(runs: Any) -> None:
    _, (first, _) = runs
    counts = [p["n_batches"] for p in first]
    assert counts[0] == counts[1] > 0
    assert [len(p["shapes"]) for p in first] == counts


def test_every_sample_is_seen_exactly_once_across_processes(runs: Any) -> None:
    source, (first, _) = runs
    ids = np.concatenate([_row_ids(source, p["local"]) for p in first])
    assert np.array_equal(np.sort(ids), np.arange(len(source)))


def test_global_arrays_hold_both_processes_rows(runs: Any) -> None:
    source, (first, _) = runs
    batch = jax_workers.BATCH
    # Global shape: both processes' batches stacked on the batch axis, and not addressable
    # from one process alone.
    for p in first:
        assert p["shapes"] == [[2 * batch, jax_workers.N_FEATURES]] * p["n_batches"]
        assert not p["fully_addressable"]
    local0, local1 = first[0]["local"], first[1]["local"]
    expected = np.concatenate([local0, local1], axis=1)  # process 0's rows first, as the mesh orders devices
    for p in first:
        np.testing.assert_array_equal(p["global"], expected)
        # Every row is a source row, and over the epoch the global batches hold each sample once.
        ids = _row_ids(source, p["global"])
        assert np.array_equal(np.sort(ids), np.arange(len(source)))
        # A jitted reduction over the global array sees both processes' rows.
        np.testing.assert_allclose(p["means"], expected.mean(axis=(1, 2)), rtol=1e-5, atol=1e-6)


def test_two_runs_are_identical(runs: Any) -> None:
    _, (first, second) = runs
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a["local"], b["local"])
        np.testing.assert_array_equal(a["global"], b["global"])
        assert a["keys"] == b["keys"]


def test_a_view_sharded_for_another_process_is_refused(runs: Any) -> None:
    _, (first, _) = runs
    for i, p in enumerate(first):
        assert p["wrong_shard_error"] == (
            f"the view is already sharded as rank {1 - i} of 2, but jax.process_index()/process_count() "
            f"says rank {i} of 2; pass the unsharded view"
        )
        assert p["own_shard_rank"] == i
