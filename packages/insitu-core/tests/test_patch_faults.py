"""Patch passes under the store faults production brings: flaky reads are retried and every patch
still equals the source; a chunk the store refuses fails the pass loudly, naming it, whatever
``on_bad_chunk`` says; a store that stops answering fails it within the retry policy's time."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import write_array
from zarr.storage import LocalStore

import insitu
from insitu.errors import StoreTimeoutError, StoreUnavailableError
from insitu.testing.faults import FaultInjectingStore, FaultPlan

SRC = np.random.default_rng(3).standard_normal((4, 48, 48)).astype("float32")


def _dataset(tmp_path: Path, plan: FaultPlan, **kwargs: Any) -> insitu.InSituDataset:
    path = tmp_path / "f.zarr"
    if not path.exists():
        write_array(path, "f", SRC, (1, 16, 16), dimension_names=("t", "y", "x"))
    store = FaultInjectingStore(LocalStore(str(path), read_only=True), plan)
    (geom,) = insitu.open_geometries(store).values()
    manifest = insitu.split_by_chunk(geom, fractions=(1.0,), names=("train",))
    return insitu.InSituDataset(store, manifest, [geom], patch={"y": 20, "x": 20}, batch_size=6, **kwargs)


def test_flaky_reads_are_retried_and_every_patch_is_right(tmp_path: Path) -> None:
    ds = _dataset(
        tmp_path, FaultPlan(seed=4, transient_rate=0.3), retry=insitu.RetryPolicy(retries=8, backoff_s=0.001)
    )
    n = 0
    for batch in ds.train:
        for row, (t, y, x) in zip(batch[next(iter(batch))], batch.patch_origins.tolist(), strict=True):
            np.testing.assert_array_equal(row, SRC[t, y : y + 20, x : x + 20])
        n += batch.size
    assert n == 4 * 3 * 3
    assert ds.stats["retries"] > 0


@pytest.mark.parametrize("policy", ["raise", "nan", "skip"])
def test_a_refused_chunk_fails_the_pass_naming_it(tmp_path: Path, policy: str) -> None:
    ds = _dataset(tmp_path, FaultPlan(forbidden_keys=("f/c/2/1/1",)), on_bad_chunk=policy)
    with pytest.raises(StoreUnavailableError, match="f/c/2/1/1"):
        for _ in ds.train:
            pass


def test_a_store_that_stops_answering_fails_within_the_policy(tmp_path: Path) -> None:
    ds = _dataset(
        tmp_path,
        FaultPlan(seed=1, stall_rate=1.0, stall_s=60),
        retry=insitu.RetryPolicy(retries=1, backoff_s=0.01, timeout_s=0.3),
    )
    started = time.monotonic()
    with pytest.raises((StoreTimeoutError, StoreUnavailableError)):
        next(iter(ds.train))
    assert time.monotonic() - started < 30  # bounded by the policy, not by the 60 s stall
