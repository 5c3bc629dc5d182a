"""A real 2-process torch.distributed run: gloo on loopback, DDP training through ``as_torch``."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import _ddp_worker
import numpy as np
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from _ddp_worker import EPOCHS, chunk_id
from _support import CHUNK, N_SAMPLES, write_store

WORLD_SIZE = 2

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="this torch build has no gloo backend"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spawn(store: Path, out: Path) -> dict[str, list[dict[str, Any]]]:
    """Run both ranks to completion; ``{uneven: [rank 0 result, rank 1 result]}``."""
    out.mkdir()
    mp.spawn(
        _ddp_worker.run_rank,
        args=(WORLD_SIZE, _free_port(), str(store), str(out)),
        nprocs=WORLD_SIZE,
        join=True,
    )
    return {
        uneven: [json.loads((out / f"rank{r}-{uneven}.json").read_text()) for r in range(WORLD_SIZE)]
        for uneven in ("drop", "pad")
    }


def _chunk_size(chunk: int) -> int:
    return min(CHUNK, N_SAMPLES - chunk * CHUNK)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two independent 2-process runs over the same store."""
    root = tmp_path_factory.mktemp("ddp")
    store = write_store(root / "store.zarr")
    return _spawn(store, root / "run1"), _spawn(store, root / "run2")


@pytest.mark.parametrize("uneven", ["drop", "pad"])
def test_each_rank_reads_its_own_chunks(runs: Any, uneven: str) -> None:
    ranks = runs[0][uneven]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["world_size"] == WORLD_SIZE for r in ranks)
    n_chunks = -(-N_SAMPLES // CHUNK)
    for epoch in range(EPOCHS):
        planned = [set(r["epochs"][epoch]["planned_chunks"]) for r in ranks]
        assert planned[0].isdisjoint(planned[1])
        assert planned[0] | planned[1] == set(range(n_chunks))
        keys = [set(r["epochs"][epoch]["chunk_keys"]) for r in ranks]
        assert keys[0].isdisjoint(keys[1]), f"epoch {epoch}: a chunk was read by both ranks"
        for rank_keys, rank_plan in zip(keys, planned, strict=True):
            # What reached the store: only this rank's chunks (later epochs reuse what is cached).
            assert {chunk_id(k) for k in rank_keys} <= rank_plan
    # Cold cache in epoch 0: every planned chunk of both arrays was read from the store, once per rank.
    for r in ranks:
        first = r["epochs"][0]
        assert {chunk_id(k) for k in first["chunk_keys"]} == set(first["planned_chunks"])
        assert {k.split("/", 1)[0] for k in first["chunk_keys"]} == {"x", "y"}


@pytest.mark.parametrize("uneven", ["drop", "pad"])
def test_ranks_yield_equal_batch_counts(runs: Any, uneven: str) -> None:
    for epoch in range(EPOCHS):
        counts = [r["epochs"][epoch]["batches"] for r in runs[0][uneven]]
        assert counts[0] == counts[1] > 0
        assert all(r["epochs"][epoch]["len"] == counts[0] for r in runs[0][uneven])


def test_pad_covers_every_sample_once_and_marks_padding(runs: Any) -> None:
    ranks = runs[0]["pad"]
    for epoch in range(EPOCHS):
        samples = [r["epochs"][epoch]["samples"] for r in ranks]
        union = samples[0] + samples[1]
        assert sorted(union) == list(range(N_SAMPLES)), "real rows must be every sample exactly once"
        rows = [len(s) + len(r["epochs"][epoch]["padding"]) for s, r in zip(samples, ranks, strict=True)]
        assert rows[0] == rows[1], "padding evens out the rows per rank"
        for r, own in zip(ranks, samples, strict=True):
            # Padding repeats the rank's own samples, and only as many as needed.
            assert set(r["epochs"][epoch]["padding"]) <= set(own)
        assert sum(len(r["epochs"][epoch]["padding"]) for r in ranks) == abs(
            len(samples[0]) - len(samples[1])
        )
        # The uneven split is real: the half-filled last chunk makes one rank shorter.
        assert any(r["epochs"][epoch]["padding"] for r in ranks)


def test_drop_never_duplicates_and_drops_only_the_longer_ranks_tail(runs: Any) -> None:
    ranks = runs[0]["drop"]
    for epoch in range(EPOCHS):
        samples = [r["epochs"][epoch]["samples"] for r in ranks]
        assert all(not r["epochs"][epoch]["padding"] for r in ranks)
        union = samples[0] + samples[1]
        assert len(set(union)) == len(union), "no sample twice in one epoch"
        own = [sum(_chunk_size(c) for c in r["epochs"][epoch]["planned_chunks"]) for r in ranks]
        # Every rank stops at the shortest rank's sample count; the rest of a longer rank is dropped.
        assert [len(s) for s in samples] == [min(own)] * WORLD_SIZE
        assert N_SAMPLES - len(union) == sum(own) - WORLD_SIZE * min(own) > 0
        for r, rank_samples in zip(ranks, samples, strict=True):
            assert {s // CHUNK for s in rank_samples} <= set(r["epochs"][epoch]["planned_chunks"])


@pytest.mark.parametrize("uneven", ["drop", "pad"])
def test_ddp_training_keeps_ranks_in_sync_and_learns(runs: Any, uneven: str) -> None:
    ranks = runs[0][uneven]
    # Different data per rank, identical weights: the gradients were all-reduced every step.
    np.testing.assert_array_equal(np.concatenate(ranks[0]["weights"]), np.concatenate(ranks[1]["weights"]))
    for r in ranks:
        losses = [e["mean_loss"] for e in r["epochs"]]
        assert losses[-1] < 0.5 * losses[0], losses
    # The epochs differ in order (the shared shuffle follows set_epoch on every rank).
    assert ranks[0]["epochs"][0]["samples"] != ranks[0]["epochs"][1]["samples"]


def test_two_runs_are_identical(runs: Any) -> None:
    first, second = runs
    for uneven in ("drop", "pad"):
        for a, b in zip(first[uneven], second[uneven], strict=True):
            for ea, eb in zip(a["epochs"], b["epochs"], strict=True):
                for key in ("samples", "padding", "batches", "chunk_keys", "planned_chunks"):
                    assert ea[key] == eb[key], f"{uneven}, rank {a['rank']}: {key} differs between runs"
            np.testing.assert_allclose(np.concatenate(a["weights"]), np.concatenate(b["weights"]), rtol=1e-6)
