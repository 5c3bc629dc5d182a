"""A real S3 server (moto, its own process) killed or stopped mid-epoch: the pass fails with
``StoreUnavailableError`` / ``StoreTimeoutError`` after the policy, never skipped or filled."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import zarr

import insitu
from insitu.store.retry import RetryPolicy
from insitu_stores import obstore_store

pytest.importorskip("moto")
N, CHUNK = 256, 4


class MotoProcess:
    """moto's server in a process of its own, so that it can be stopped or killed."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        exe = os.path.join(os.path.dirname(sys.executable), "moto_server")
        self.proc = subprocess.Popen(
            [exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(
                    urllib.request.Request(f"{self.endpoint}/outages", method="PUT"), timeout=5
                )
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def moto() -> Iterator[MotoProcess]:
    server = MotoProcess()
    try:
        yield server
    finally:
        server.close()


def _store(endpoint: str, **kwargs: Any) -> Any:
    return obstore_store(
        "s3://outages/a.zarr",
        endpoint=endpoint,
        access_key_id="x",
        secret_access_key="x",
        region="us-east-1",
        **kwargs,
    )


def _dataset(moto: MotoProcess, retry: RetryPolicy | None = None, **kwargs: Any) -> insitu.InSituDataset:
    group = zarr.open_group(zarr.storage.ObjectStore(_store(moto.endpoint, read_only=False).store), mode="w")
    group.create_array("x", shape=(N, 16), chunks=(CHUNK, 16), dtype="f4")[...] = np.arange(N * 16).reshape(
        N, 16
    )
    store = _store(moto.endpoint, retry=retry)
    geoms = insitu.open_geometries(store)
    return insitu.InSituDataset(
        store, insitu.split_by_chunk(geoms["x"], (1.0,)), geoms, batch_size=8, **kwargs
    )


def _epoch_after_first_batch(
    ds: insitu.InSituDataset, fault: Any, within_s: float = 120.0
) -> tuple[int, Any]:
    """Take one batch, apply ``fault``, take the rest; (batches taken, the error), in a thread with a
    bounded join so that a hang fails the test."""
    out: dict[str, Any] = {"batches": 0}

    def work() -> None:
        try:
            for i, _ in enumerate(ds.train):
                out["batches"] += 1
                if i == 0:
                    fault()
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(within_s)
    assert not t.is_alive(), f"still iterating after {within_s} s"
    return out["batches"], out.get("error")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("policy", ["raise", "skip", "nan"])
def test_a_killed_server_fails_the_pass_whatever_on_bad_chunk_says(moto: MotoProcess, policy: str) -> None:
    with _dataset(moto, on_bad_chunk=policy) as ds:
        batches, error = _epoch_after_first_batch(ds, moto.proc.kill)
        stats = ds.stats
    assert isinstance(error, insitu.StoreUnavailableError), repr(error)
    assert "s3://outages/a.zarr" in str(error)
    assert error.key is not None
    assert error.key.startswith("x/c/")
    assert batches < N // 8, "the outage ended the pass"
    assert stats["skipped_samples"] == 0
    assert stats["bad_chunks"] == 0


@pytest.mark.timeout(240)
def test_a_stopped_server_times_out_after_the_policy_and_counts(moto: MotoProcess) -> None:
    retry = RetryPolicy(retries=1, backoff_s=0.01, timeout_s=1.0, connect_timeout_s=1.0)
    with _dataset(moto):
        pass  # writes the data
    store = _store(moto.endpoint, retry=retry)
    geoms = insitu.open_geometries(store)
    with insitu.InSituDataset(store, insitu.split_by_chunk(geoms["x"], (1.0,)), geoms, batch_size=8) as ds:
        started = time.monotonic()
        _, error = _epoch_after_first_batch(ds, lambda: moto.proc.send_signal(signal.SIGSTOP))
        took = time.monotonic() - started
        stats = ds.stats
    assert isinstance(error, insitu.StoreTimeoutError), repr(error)
    assert isinstance(error, TimeoutError)
    assert "no answer within 1 s per attempt, 2 attempts" in str(error)
    assert error.limit_s == 1.0
    assert took < 60, f"{took:.1f} s for two 1 s attempts"
    assert stats["timeouts"] >= 2
    assert stats["retries"] >= 1


@pytest.mark.timeout(120)
def test_a_dataset_retry_policy_a_self_retrying_store_would_ignore_is_refused(moto: MotoProcess) -> None:
    with _dataset(moto):
        pass
    store = _store(moto.endpoint)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
    with pytest.raises(
        insitu.ConfigError, match=r"retry=.*would not apply.*retries by itself.*open_store\(url, retry="
    ):
        insitu.InSituDataset(store, manifest, geoms, batch_size=8, retry=RetryPolicy(timeout_s=2))
    # The store's own policy, given again, is no conflict.
    insitu.InSituDataset(store, manifest, geoms, batch_size=8, retry=store.insitu_retry_policy).close()
