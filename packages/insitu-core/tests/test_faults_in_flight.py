"""Faults while data is in flight: every stage's failure reaches ``next()``, outages are errors
(never skipped or filled), skipping never delivers an empty batch, and hung reads time out."""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import field, finishes, write_array
from zarr.storage import LocalStore

import insitu
from insitu.engine import buffers as batch_buffers
from insitu.engine.epoch import EpochRun
from insitu.engine.gather import Gatherer
from insitu.engine.jobs import DecodeJob
from insitu.errors import BadChunkError, StoreTimeoutError, StoreUnavailableError
from insitu.store.retry import RetryPolicy
from insitu.testing.faults import FaultInjectingStore, FaultPlan

N, CHUNK = 32, 4
SAMPLE = (128, 256)  # 128 KiB a float32 sample: a batch of 8 is a pooled mapping (>= 1 MiB)
QUICK = RetryPolicy(retries=2, backoff_s=0.001, max_backoff_s=0.01, timeout_s=2.0)


class StageFailure(Exception):
    """The failure a test injects; the consumer must see this very exception."""


def _source(root: Path) -> np.ndarray:
    data = field(N, SAMPLE, seed=3)
    write_array(root, "x", data, (CHUNK, *SAMPLE))
    return data


def _dataset(store: Any, **kwargs: Any) -> insitu.InSituDataset:
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
    kwargs.setdefault("batch_size", 8)
    kwargs.setdefault("retry", QUICK)
    return insitu.InSituDataset(store, manifest, geoms, **kwargs)


def _fail(*_: Any, **__: Any) -> Any:
    raise StageFailure("injected")


class FailingTransform:
    """A chunk transform that declares its output (so construction does not call it) and fails."""

    def out_spec(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[tuple[int, ...], np.dtype[Any]]:
        return shape, dtype

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        raise StageFailure("injected")


def _enomem(nbytes: int) -> Any:
    raise OSError(errno.ENOMEM, "Cannot allocate memory")


# Each stage, and how to make it fail: (monkeypatch target, replacement) or dataset arguments.
STAGES: dict[str, dict[str, Any]] = {
    "producer": {"patch": (EpochRun, "_produce_block", _fail)},
    "buffer allocation": {"patch": (batch_buffers, "_mapping", _enomem), "error": MemoryError},
    "decode job (scatter)": {"patch": (DecodeJob, "run", _fail), "policy": "skip"},
    "gather": {"patch": (Gatherer, "gather", _fail)},
    "chunk transform": {"kwargs": {"chunk_transforms": [FailingTransform()]}},
    "batch transform": {"kwargs": {"batch_transforms": [_fail]}},
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("streamed", [False, True], ids=["pooled", "streamed"])
@pytest.mark.parametrize("stage", list(STAGES))
def test_a_failure_at_any_stage_is_raised_from_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str, streamed: bool
) -> None:
    _source(tmp_path)
    spec = STAGES[stage]
    if "patch" in spec:
        monkeypatch.setattr(*spec["patch"])
    kwargs = dict(spec.get("kwargs", {}))
    if streamed:  # no room in the pool: slabs decode straight into batch buffers the producer takes
        kwargs["cache_budget_bytes"] = 1
    kwargs["on_bad_chunk"] = spec.get("policy", "raise")
    ds = _dataset(LocalStore(tmp_path, read_only=True), **kwargs)
    try:
        with pytest.raises(spec.get("error", StageFailure)) as info:
            finishes(lambda: list(ds.train), within_s=60, hang=f"a {stage} failure left next() waiting")
        if stage == "buffer allocation":
            assert "cannot map 1,048,576 bytes for a batch array of shape (8, 128, 256)" in str(info.value)
            assert isinstance(info.value.__cause__, OSError)
            assert info.value.__cause__.errno == errno.ENOMEM
        # The dataset stays usable: the next pass fails the same way instead of hanging.
        with pytest.raises(spec.get("error", StageFailure)):
            finishes(lambda: list(ds.train), within_s=60, hang=f"a second pass after a {stage} failure")
    finally:
        finishes(ds.close, within_s=60, hang="close after a failed pass")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("policy", ["raise", "skip", "nan"])
def test_a_store_that_refuses_is_an_error_whatever_on_bad_chunk_says(tmp_path: Path, policy: str) -> None:
    _source(tmp_path)
    plan = FaultPlan(seed=1, transient_rate=1.0)  # every chunk GET fails: the server is down
    store = FaultInjectingStore(LocalStore(tmp_path, read_only=True), plan)
    with _dataset(store, on_bad_chunk=policy) as ds:
        with pytest.raises(StoreUnavailableError, match=r"is unavailable: reading 'x/c/\d+/0/0'") as info:
            finishes(lambda: list(ds.train), within_s=60, hang="an outage")
        stats = ds.stats
    assert info.value.key is not None
    assert info.value.key.startswith("x/c/")
    assert info.value.array == "x"
    assert str(store) in str(info.value)
    assert store.attempts(info.value.key) == QUICK.attempts, "raised after the retry policy, not before"
    assert stats["bad_chunks"] == 0
    assert stats["skipped_samples"] == 0
    assert stats["samples"] == 0


@pytest.mark.timeout(120)
def test_a_hung_store_raises_store_timeout_error_naming_the_key_and_limit(tmp_path: Path) -> None:
    _source(tmp_path)
    store = FaultInjectingStore(LocalStore(tmp_path, read_only=True), FaultPlan(stall_rate=1.0, stall_s=600))
    policy = RetryPolicy(retries=1, backoff_s=0.001, timeout_s=0.5)
    with _dataset(store, on_bad_chunk="skip", retry=policy) as ds:
        with pytest.raises(
            StoreTimeoutError,
            match=r"reading 'x/c/\d+/0/0'.*no answer within 0\.5 s per attempt, 2 attempts$",
        ) as info:
            finishes(lambda: list(ds.train), within_s=60, hang="a hung store")
        stats = ds.stats
    assert isinstance(info.value, TimeoutError)
    assert info.value.limit_s == 0.5
    assert stats["timeouts"] >= 2
    assert stats["retries"] >= 1
    assert stats["skipped_samples"] == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("drop_last", [False, True])
def test_skipping_never_delivers_an_empty_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, drop_last: bool
) -> None:
    data = _source(tmp_path)
    # Batches of 4 over chunks of 4, in order: the batch of a corrupt chunk loses every sample.
    bad = ("x/c/2/0/0", "x/c/5/0/0")
    store = FaultInjectingStore(LocalStore(tmp_path, read_only=True), FaultPlan(corrupt_keys=bad))
    caplog.set_level(logging.INFO, logger="insitu")
    with _dataset(store, on_bad_chunk="skip", batch_size=4, drop_last=drop_last) as ds:
        batches = finishes(lambda: list(ds.view("all")), within_s=60, hang="skipping")
        stats = ds.stats
    sizes = [b.size for b in batches]
    assert sizes == [4] * 6, sizes
    got = np.concatenate([b.sample_indices for b in batches])
    expected = sorted(set(range(N)) - set(range(8, 12)) - set(range(20, 24)))
    assert sorted(got.tolist()) == expected, "every readable sample once, no other"
    for b in batches:
        np.testing.assert_array_equal(b["x"], data[b.sample_indices])
    assert stats["dropped_batches"] == 2
    assert stats["skipped_samples"] == 8
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, [r.getMessage() for r in warnings]  # the first skip, then the summary
    assert "bad chunks found" in warnings[0].getMessage()
    assert "8 samples skipped, 2 batches dropped" in warnings[1].getMessage()


@pytest.mark.timeout(120)
def test_with_drop_last_a_batch_skipping_left_short_is_dropped(tmp_path: Path) -> None:
    _source(tmp_path)
    store = FaultInjectingStore(LocalStore(tmp_path, read_only=True), FaultPlan(corrupt_keys=("x/c/2/0/0",)))
    for drop_last, sizes in ((False, [8, 4, 8, 8]), (True, [8, 8, 8])):
        with _dataset(store, on_bad_chunk="skip", batch_size=8, drop_last=drop_last) as ds:
            batches = finishes(lambda ds=ds: list(ds.view("all")), within_s=60, hang="skip")
        assert [b.size for b in batches] == sizes, f"drop_last={drop_last}"


@pytest.mark.timeout(120)
def test_a_damaged_chunk_is_still_governed_by_on_bad_chunk(tmp_path: Path) -> None:
    _source(tmp_path)
    store = FaultInjectingStore(LocalStore(tmp_path, read_only=True), FaultPlan(corrupt_keys=("x/c/1/0/0",)))
    with _dataset(store) as ds, pytest.raises(BadChunkError, match="x/c/1/0/0"):
        finishes(lambda: list(ds.train), within_s=60, hang="a damaged chunk")
    with _dataset(store, on_bad_chunk="nan") as ds:
        batches = finishes(lambda: list(ds.view("all")), within_s=60, hang="nan fill")
    assert sum(b.size for b in batches) == N
    assert np.isnan(batches[0]["x"][4:8]).all()
