"""One rank of the soak drill (test_soak.py), run as its own process.

Usage: ``python _soak_worker.py CONFIG.json``. The config names the source
store, the fault plan, the rank, the cache directory and the epochs to run.
The worker builds its dataset (with ``persist=True`` it now holds the cache
directory), prints ``ready <pid>`` and waits for a line on stdin, so the
parent can try the same cache directory while this process holds it. Then it
runs the epochs, checking every batch against the source read directly (not
through the faults): each anchor the epoch plans exactly once, in the planned
order, less those touching a damaged chunk; every label's values equal to the
source at ``read_indices``; resident bytes within the budget. After each
epoch it samples its threads and RSS. It writes what it saw to the config's
``out`` path as JSON and exits 0, or exits non-zero with the failed check on
stderr.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
from zarr.storage import LocalStore

import insitu
from insitu.testing.faults import FaultInjectingStore, FaultPlan

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Resident set size, from /proc/self/statm (its second field, in pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def thread_groups() -> dict[str, int]:
    """Live threads by name, numbers left out (``insitu-io_0`` and ``insitu-io_1`` count as one kind)."""
    groups: dict[str, int] = {}
    for t in threading.enumerate():
        kind = t.name.rstrip("0123456789").rstrip("_-") or t.name
        groups[kind] = groups.get(kind, 0) + 1
    return dict(sorted(groups.items()))


def open_dataset(cfg: dict[str, Any]) -> tuple[insitu.InSituDataset, FaultInjectingStore]:
    store = FaultInjectingStore(LocalStore(cfg["root"], read_only=True), FaultPlan.from_json(cfg["plan"]))
    geoms = insitu.open_geometries(store)
    labels = [geoms[name].shift(offset) for name, offset in cfg["labels"]]
    manifest = insitu.split_by_chunk(geoms[cfg["labels"][0][0]], (1.0,))
    ds = insitu.InSituDataset(
        store,
        manifest,
        labels,
        rank=cfg["rank"],
        world_size=cfg["world_size"],
        cache_dir=cfg["cache_dir"],
        persist=True,
        on_bad_chunk="skip",
        retry=insitu.RetryPolicy(**cfg["retry"]),
        **cfg["dataset"],
    )
    return ds, store


def damaged_anchors(ds: insitu.InSituDataset, damaged: list[str], anchors: np.ndarray) -> set[int]:
    """Anchors one of whose labels reads a slab holding a damaged chunk (keys ``name/c/<slab>/...``)."""
    bad_slabs: dict[str, set[int]] = {}
    for key in damaged:
        name, _, slab, *_ = key.split("/")
        bad_slabs.setdefault(name, set()).add(int(slab))
    out: set[int] = set()
    for g in ds.labels:
        slabs = (anchors + g.offset) // g.chunk_len
        hit = np.isin(slabs, sorted(bad_slabs.get(g.name, ())))
        out.update(anchors[hit].tolist())
    return out


def main(config_path: str) -> None:
    cfg = json.loads(Path(config_path).read_text())
    source = LocalStore(cfg["root"], read_only=True)
    import zarr

    data = {name: np.asarray(zarr.open_array(source, path=name, mode="r")[...]) for name, _ in cfg["labels"]}
    ds, store = open_dataset(cfg)
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()  # the parent's go-ahead
    budget = ds.stats["budget_bytes"]
    epochs: list[dict[str, Any]] = []
    with ds:
        view = ds.train
        for epoch in range(cfg["epochs"]):
            ds.set_epoch(epoch + cfg["first_epoch"])
            planned = view.sample_order()
            bad = damaged_anchors(ds, cfg["damaged"], planned)
            expected = [int(a) for a in planned if int(a) not in bad]
            got: list[int] = []
            for batch in view:
                idx = batch.sample_indices
                for g in ds.labels:
                    rows = batch.read_indices[g.label]
                    if not np.array_equal(rows, idx + g.offset):
                        raise AssertionError(f"epoch {epoch}: {g.label} read rows {rows} for anchors {idx}")
                    if not np.array_equal(batch[g.label], data[g.name][rows]):
                        same = [
                            np.array_equal(v, data[g.name][r])
                            for v, r in zip(batch[g.label], rows, strict=True)
                        ]
                        wrong = [int(a) for a, ok in zip(idx, same, strict=True) if not ok]
                        raise AssertionError(f"epoch {epoch}: {g.label} wrong values for anchors {wrong}")
                got.extend(idx.tolist())
                resident = ds.stats["resident_bytes"]
                if resident > budget:
                    raise AssertionError(f"epoch {epoch}: {resident} resident bytes, budget {budget}")
            if got != expected:
                missing = sorted(set(expected) - set(got))[:10]
                extra = sorted(set(got) - set(expected))[:10]
                raise AssertionError(
                    f"epoch {epoch}: {len(got)} samples, expected {len(expected)}; missing {missing}, "
                    f"unexpected {extra}, duplicates {len(got) - len(set(got))}"
                )
            epochs.append(
                {
                    "planned": [int(a) for a in planned],
                    "delivered": len(got),
                    "skipped": len(bad),
                    "threads": threading.active_count(),
                    "thread_groups": thread_groups(),
                    "rss": rss_bytes(),
                }
            )
        stats = {k: v for k, v in ds.stats.items() if isinstance(v, (int, float))}
    out = {"pid": os.getpid(), "epochs": epochs, "stats": stats, "faults": store.counts}
    Path(cfg["out"]).write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
