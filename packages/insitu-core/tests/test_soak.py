"""A bounded soak drill: many epochs through injected faults, two ranks in two processes at once,
one cache directory refused to a second process, and a source rewritten between runs.

Each rank runs in its own process (``_soak_worker.py``) with its own persisted
cache directory, over the fault-injecting store: seeded transient errors,
long-tailed latency, stalls that the per-request timeout cuts, and a few
corrupt, oversized and truncated chunks read with ``on_bad_chunk="skip"``.
Every epoch must deliver exactly the planned anchors less those touching a
damaged chunk, once each, with the source's values, within the budget, and
with no growth in threads or memory. Between the two runs, chunks that the
first run persisted are rewritten in place; the second run must re-read
exactly those and serve the new values.

Counts and bounds only: nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import zarr
from conftest import field, write_array
from zarr.storage import LocalStore

import insitu
from insitu.errors import CacheInUseError
from insitu.testing.faults import FAULT_KINDS, FaultInjectingStore, FaultPlan, Latency

WORKER = Path(__file__).with_name("_soak_worker.py")
N = 384
X_CHUNK, Y_CHUNK = 4, 6
LABELS = [("x", 0), ("x", 3), ("y", 0)]  # x, a window 3 steps ahead, and y chunked otherwise
WORLD = 2
EPOCHS, RERUN_EPOCHS = 40, 3
DAMAGED = {
    "x/c/5/0/0": "corrupted",
    "y/c/20/1/0": "corrupted",
    "x/c/41/0/0": "oversized",
    "y/c/50/0/0": "oversized",
    "x/c/70/0/0": "truncated",
}
PLAN = FaultPlan(
    seed=2024,
    latency=Latency.lognormal(0.0003, 1.5, max_s=0.05),  # median 0.3 ms, 1% beyond 10 ms
    transient_rate=0.05,
    stall_rate=0.01,
    stall_s=30.0,  # never served: the request timeout cuts every stall
    corrupt_keys=tuple(k for k, v in DAMAGED.items() if v == "corrupted"),
    oversize_keys=tuple(k for k, v in DAMAGED.items() if v == "oversized"),
    truncate_keys=tuple(k for k, v in DAMAGED.items() if v == "truncated"),
)
RETRY = {"retries": 10, "backoff_s": 0.001, "max_backoff_s": 0.02, "timeout_s": 0.25}
DATASET = {
    "batch_size": 16,
    "block_chunks": 4,
    "seed": 7,
    "cache_budget_bytes": 64 << 10,  # ~a quarter of a rank's data: every epoch reads through the faults
    "decode_threads": 2,
    "max_inflight": 8,
}
# Threads besides the engine's own: the main thread, zarr's event-loop thread, and the default
# executors of zarr's loop and of the engine's (where zarr's LocalStore reads files), each started
# lazily up to min(32, cpus + 4) threads.
OTHER_THREADS_CEILING = 2 + 2 * min(32, (os.cpu_count() or 1) + 4)
RSS_GROWTH_BOUND = 8 << 20  # after the warm-up epoch


def _write_source(root: Path) -> None:
    write_array(root, "x", field(N, (8, 16), seed=1), (X_CHUNK, 8, 16))
    write_array(root, "y", field(N, (4, 8), seed=2) * -1, (Y_CHUNK, 2, 8))  # two chunks per slab


def _start(tmp: Path, rank: int, cache: Path, epochs: int, first_epoch: int, tag: str) -> dict[str, Any]:
    cfg = {
        "root": str(tmp / "data"),
        "plan": PLAN.to_json(),
        "labels": LABELS,
        "rank": rank,
        "world_size": WORLD,
        "cache_dir": str(cache),
        "retry": RETRY,
        "dataset": DATASET,
        "epochs": epochs,
        "first_epoch": first_epoch,
        "damaged": sorted(DAMAGED),
        "out": str(tmp / f"{tag}-rank{rank}.json"),
    }
    config = tmp / f"{tag}-rank{rank}.config.json"
    config.write_text(json.dumps(cfg))
    stderr = (tmp / f"{tag}-rank{rank}.stderr").open("w")
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    return {"proc": proc, "cfg": cfg, "stderr": stderr}


def _wait_ready(worker: dict[str, Any]) -> int:
    line = worker["proc"].stdout.readline()
    if not line.startswith("ready "):
        worker["proc"].wait(timeout=60)
        worker["stderr"].close()
        raise AssertionError(f"worker did not start: {Path(worker['stderr'].name).read_text()[-3000:]}")
    return int(line.split()[1])


def _finish(worker: dict[str, Any]) -> dict[str, Any]:
    proc = worker["proc"]
    with contextlib.suppress(BrokenPipeError):  # the worker already exited: its stderr says why
        proc.stdin.close()
    rc = proc.wait(timeout=240)
    worker["stderr"].close()
    err = Path(worker["stderr"].name).read_text()
    assert rc == 0, f"rank {worker['cfg']['rank']} failed (exit {rc}):\n{err[-4000:]}"
    return json.loads(Path(worker["cfg"]["out"]).read_text())


def _run_ranks(
    tmp: Path, epochs: int, first_epoch: int, tag: str, while_running: Any = None
) -> list[dict[str, Any]]:
    workers = [_start(tmp, r, tmp / f"cache-{r}", epochs, first_epoch, tag) for r in range(WORLD)]
    try:
        pids = [_wait_ready(w) for w in workers]
        if while_running is not None:
            while_running(pids)
        for w in workers:
            w["proc"].stdin.write("go\n")
            w["proc"].stdin.flush()
        return [_finish(w) for w in workers]
    finally:
        for w in workers:
            if w["proc"].poll() is None:
                w["proc"].kill()
                w["proc"].wait()


def _persisted(cache: Path) -> dict[str, set[int]]:
    """The slabs of each array that a closed run left in the cache's index."""
    doc = json.loads((cache / "index.json").read_text())
    return {array: {int(s) for s in entry["slabs"]} for array, entry in doc["arrays"].items()}


def _check_epochs(results: list[dict[str, Any]]) -> None:
    """Across ranks: disjoint plans of equal length covering the anchors (less a short remainder)."""
    valid = set(range(N - max(off for _, off in LABELS)))
    for e in range(len(results[0]["epochs"])):
        plans = [set(r["epochs"][e]["planned"]) for r in results]
        sizes = {len(r["epochs"][e]["planned"]) for r in results}
        assert len(sizes) == 1, f"epoch {e}: ranks plan {sizes} samples"
        union = set().union(*plans)
        assert len(union) == sum(len(p) for p in plans), f"epoch {e}: a sample planned on two ranks"
        assert union <= valid
        assert len(valid - union) < WORLD * X_CHUNK, f"epoch {e}: {len(valid - union)} anchors dropped"


def _check_steady(result: dict[str, Any]) -> tuple[list[int], int]:
    """No growth in threads or memory across epochs; returns (threads per epoch, RSS growth)."""
    epochs = result["epochs"]
    threads = [e["threads"] for e in epochs]
    engine = [{k: v for k, v in e["thread_groups"].items() if k.startswith("insitu")} for e in epochs]
    assert all(g == engine[0] for g in engine), f"the engine's threads changed across epochs: {engine}"
    others = [t - sum(g.values()) for t, g in zip(threads, engine, strict=True)]
    assert max(others) <= OTHER_THREADS_CEILING, [e["thread_groups"] for e in epochs]
    rss = [e["rss"] for e in epochs]
    growth = max(rss[1:]) - rss[1]
    assert growth <= RSS_GROWTH_BOUND, f"RSS grew by {growth} bytes after the warm-up epoch: {rss}"
    return threads, growth


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_soak_two_ranks_through_faults_then_a_rewritten_source(tmp_path: Path) -> None:
    _write_source(tmp_path / "data")
    refused: list[str] = []

    def second_process_on_rank0_cache(pids: list[int]) -> None:
        # This process asks for rank 0's cache directory while rank 0 holds it: refused, not shared.
        store = FaultInjectingStore(LocalStore(tmp_path / "data", read_only=True), PLAN)
        geoms = insitu.open_geometries(store)
        manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
        with pytest.raises(CacheInUseError, match=f"in use by process {pids[0]}") as info:
            insitu.InSituDataset(
                store, manifest, rank=1, world_size=WORLD, cache_dir=tmp_path / "cache-0", persist=True
            )
        refused.append(str(info.value))

    # --- run 1: the soak -----------------------------------------------------------------------
    first = _run_ranks(tmp_path, EPOCHS, 0, "soak", second_process_on_rank0_cache)
    assert len(refused) == 1
    _check_epochs(first)
    steady = [_check_steady(r) for r in first]
    faults = {k: sum(r["faults"][k] for r in first) for k in (*FAULT_KINDS, "gets")}
    stats = {k: sum(r["stats"][k] for r in first) for k in first[0]["stats"]}
    for kind in ("delayed", "transient", "stalled", "corrupted", "oversized", "truncated"):
        assert faults[kind] > 0, f"no {kind} fault was injected: the drill did not drill"
    assert faults["forbidden"] == faults["missing"] == faults["rewritten"] == 0
    # Each injected error or stall cost one retry (a loaded machine may add timeouts of its own).
    assert stats["retries"] >= faults["transient"] + faults["stalled"]
    assert stats["timeouts"] >= faults["stalled"]  # every stall was cut by the request timeout
    assert 0 < stats["bad_chunks"] == faults["corrupted"] + faults["oversized"] + faults["truncated"]
    assert stats["bad_chunks_read"] == 0, "a transient fault got through the retries"
    assert stats["bad_chunks"] == stats["bad_chunks_size"] + stats["bad_chunks_decode"]
    assert stats["skipped_samples"] == sum(e["skipped"] for r in first for e in r["epochs"])
    assert stats["skipped_samples"] > 0
    for r in first:
        assert r["stats"]["peak_resident_bytes"] <= r["stats"]["budget_bytes"]
    delivered = sum(e["delivered"] for r in first for e in r["epochs"])
    # Reads went through the faults every epoch, not only the first: the budget holds a fraction.
    assert stats["reads"] > EPOCHS * (N // X_CHUNK) // 2

    # --- rewrite chunks in place, among them some the first run persisted ----------------------
    index = [_persisted(tmp_path / f"cache-{r}") for r in range(WORLD)]
    persisted = [index[r]["x"] for r in range(WORLD)]
    damaged_x = {int(k.split("/")[2]) for k in DAMAGED if k.startswith("x/")}
    assert not (persisted[0] | persisted[1]) & damaged_x, "a damaged chunk was persisted"
    rewritten = {r: sorted(persisted[r])[:2] for r in range(WORLD)}
    assert all(len(v) == 2 for v in rewritten.values()), f"too little persisted: {persisted}"
    elsewhere = min(set(range(N // X_CHUNK)) - persisted[0] - persisted[1] - damaged_x)
    arr = zarr.open_array(LocalStore(tmp_path / "data"), path="x", mode="r+")
    changed = {*rewritten[0], *rewritten[1], elsewhere}
    for slab in sorted(changed):
        rows = slice(slab * X_CHUNK, (slab + 1) * X_CHUNK)
        arr[rows] = arr[rows] + 1000

    # --- run 2: the same caches, the new source ------------------------------------------------
    second = _run_ranks(tmp_path, RERUN_EPOCHS, EPOCHS, "rerun")  # workers check the new values
    _check_epochs(second)
    for r, result in enumerate(second):
        total = sum(len(slabs) for slabs in index[r].values())
        s = result["stats"]
        # A rank also caches its neighbours' slabs that its window reads (x+3): count every one changed.
        stale = len(persisted[r] & changed)
        assert s["cache_stale_slabs"] == stale, f"rank {r}: {s['cache_stale_slabs']} stale, expected {stale}"
        assert s["cache_verified_slabs"] == total - stale
        assert s["cache_corrupt_slabs"] == 0

    threads = sorted({t for tl, _ in steady for t in tl})
    print(
        f"\nsoak: {WORLD} ranks x {EPOCHS} epochs, {delivered} samples delivered "
        f"({stats['skipped_samples']} skipped as damaged), {faults['gets']} GETs; injected: "
        + ", ".join(
            f"{k} {faults[k]}"
            for k in ("delayed", "transient", "stalled", "corrupted", "oversized", "truncated")
        )
        + f"; retries {stats['retries']} (timeouts {stats['timeouts']}), bad chunks {stats['bad_chunks']} "
        f"(size {stats['bad_chunks_size']}, decode {stats['bad_chunks_decode']}, read {stats['bad_chunks_read']}); "
        f"threads per epoch {threads[0]}-{threads[-1]}; RSS growth after warm-up "
        f"{max(g for _, g in steady) >> 10} KiB; rerun: {len(changed)} chunks rewritten, "
        f"{sum(r['stats']['cache_stale_slabs'] for r in second)} persisted copies found stale and re-read, "
        f"{sum(r['stats']['cache_verified_slabs'] for r in second)} slabs verified and reused; "
        f"a second process on one cache dir: CacheInUseError"
    )
