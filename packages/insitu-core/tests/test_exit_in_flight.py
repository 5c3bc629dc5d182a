"""Collecting an unclosed dataset and ending the main thread while a user thread iterates: quiet,
and the thread finishes (subprocesses: interpreter exit is what is tested)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SOURCE = """
import gc, tempfile, threading, time, weakref
import numpy as np, zarr
import insitu
from insitu.store.retry import RetryPolicy
from insitu.testing.faults import FaultInjectingStore, FaultPlan

root = tempfile.mkdtemp()
zarr.create_array(zarr.storage.LocalStore(root), name="x", shape=(256, 64), chunks=(4, 64), dtype="f4")[...] = (
    np.arange(256 * 64, dtype="f4").reshape(256, 64)
)
geoms = insitu.open_geometries(root)
manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
"""


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(SOURCE + textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.timeout(180)
def test_collecting_an_unclosed_dataset_whose_epochs_retried_logs_nothing(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        """
        import logging
        logging.basicConfig(level=logging.WARNING)
        store = FaultInjectingStore(
            zarr.storage.LocalStore(root, read_only=True), FaultPlan(seed=1, transient_rate=0.3)
        )
        engines = []

        def train_without_closing(epochs):
            ds = insitu.InSituDataset(store, manifest, geoms, batch_size=8, retry=RetryPolicy(retries=8, backoff_s=0.001))
            for epoch in range(epochs):
                ds.set_epoch(epoch)
                assert sum(b.size for b in ds.train) == 256
            assert ds.stats["retries"] > 0
            engines.append(weakref.ref(ds.engine))

        for epochs in (1, 1, 3):  # never closed: each is dropped when the function returns
            train_without_closing(epochs)
        for _ in range(50):  # the finalisers cancel the engines' tasks on the loop; then they are freed
            gc.collect()
            if all(e() is None for e in engines):
                break
            time.sleep(0.1)
        print("engine freed:", all(e() is None for e in engines), flush=True)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert "engine freed: True" in done.stdout
    assert "Task was destroyed" not in done.stderr, done.stderr
    assert "ERROR" not in done.stderr, done.stderr


@pytest.mark.timeout(180)
def test_a_user_thread_still_iterating_when_the_main_thread_ends_finishes(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        """
        ds = insitu.InSituDataset(root, manifest, geoms, batch_size=8)
        started = threading.Event()

        def user():
            n = 0
            for epoch in range(10):
                ds.set_epoch(epoch)
                for b in ds.train:
                    n += b.size
                    started.set()
                    time.sleep(0.005)
            print("thread finished", n, flush=True)

        threading.Thread(target=user).start()  # not a daemon: the interpreter waits for it
        started.wait()
        print("main ends", flush=True)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert "thread finished 2560" in done.stdout, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
