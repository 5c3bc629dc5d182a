"""Runner for insitu (this project): one cold shuffled epoch, then a warm one from the pool.

Tuning: ``block_chunks``, ``max_inflight``, ``cache_budget_bytes``, ``prefetch``,
``decode_threads`` (the engine's defaults where absent). Stores: local and
latency through insitu's own local store (wrapped with the latency), s3 and
http through insitu-stores' obstore backend (plus latency when given).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Spec, begin, cold_epoch, emit, remote_store, warm_epoch


def open_store(spec: Spec) -> Any:
    import insitu

    s = spec.store
    if s.kind in ("local", "latency"):
        store = insitu.open_store(spec.case.root)
    elif s.kind == "s3":
        from insitu_stores import obstore_store

        store = obstore_store(
            f"s3://{s.bucket}/{s.prefix}",
            endpoint=s.endpoint,
            region="us-east-1",
            access_key_id="bench",
            secret_access_key="bench-secret",
        )
    elif s.kind == "http":
        store = insitu.open_store(s.endpoint)  # insitu-stores' obstore HTTP backend
    else:
        raise ValueError(f"unknown store kind {s.kind!r}")
    return remote_store(store, s)


def main(budget: int | None = None) -> None:
    """One run; ``budget`` forces ``cache_budget_bytes`` (``run_insitu_stream.py`` passes 0)."""
    spec = Spec.load(sys.argv[1])
    import insitu

    # Root names resolve lazily (PEP 562): import what the run uses before the clock starts, as
    # every other engine's imports are, or the first batch's time includes the engine's import.
    _ = (insitu.open_store, insitu.open_geometries, insitu.split_by_chunk, insitu.InSituDataset)
    case = spec.case
    floor, clock = begin()
    store = open_store(spec)
    geoms = insitu.open_geometries(store, case.variables)
    labels = [geoms[v] for v in case.variables]
    if case.window:
        labels += [g.shift(case.window) for g in labels]
    manifest = insitu.split_by_chunk(geoms[case.variables[0]], (1.0,), names=("train",))
    tuning = dict(spec.tuning) if budget is None else {**spec.tuning, "cache_budget_bytes": budget}
    ds = insitu.InSituDataset(store, manifest, labels, batch_size=spec.batch_size, seed=spec.seed, **tuning)
    result = cold_epoch(spec, clock, floor, ds.train, lambda batch: [batch[g.label] for g in labels])
    stats = ds.stats
    if spec.warm and not result.truncated:
        ds.set_epoch(1)
        warm_epoch(result, clock, lambda: ds.train)
    ds.close()
    result.extra = {
        "stall_fraction": stats.get("stall_fraction"),
        "budget_bytes": stats.get("budget_bytes"),
        "slabs_streamed": stats.get("slabs_streamed"),
    }
    emit(result)


if __name__ == "__main__":
    main()
