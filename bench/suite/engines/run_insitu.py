"""Runner for insitu (this project): one cold shuffled epoch, then a warm one from the pool.

Tuning: ``block_chunks``, ``max_inflight``, ``cache_budget_bytes``, ``prefetch``,
``decode_threads`` (the engine's defaults where absent). Stores: local and
latency through insitu's own local store (wrapped with the latency), s3 through
insitu-stores' obstore backend (plus latency when given).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Clock, Result, Spec, batch_sum, emit, latency_store, rss_now


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
    else:
        raise ValueError(f"unknown store kind {s.kind!r}")
    return latency_store(store, s.latency_ms / 1e3) if s.latency_ms > 0 else store


def main() -> None:
    spec = Spec.load(sys.argv[1])
    import insitu

    case = spec.case
    floor = rss_now()
    clock = Clock()
    clock.start()
    store = open_store(spec)
    geoms = insitu.open_geometries(store, case.variables)
    labels = [geoms[v] for v in case.variables]
    if case.window:
        labels += [g.shift(case.window) for g in labels]
    manifest = insitu.split_by_chunk(geoms[case.variables[0]], (1.0,), names=("train",))
    tuning = dict(spec.tuning)
    ds = insitu.InSituDataset(store, manifest, labels, batch_size=spec.batch_size, seed=spec.seed, **tuning)
    samples = nbytes = 0
    checksum = 0.0
    truncated = False
    for batch in ds.train:
        if samples == 0:
            clock.first()
        arrays = [batch[g.label] for g in labels]
        samples += len(batch.sample_indices)
        nbytes += sum(a.nbytes for a in arrays)
        checksum += batch_sum(*arrays)
        if clock.since_start() > spec.max_seconds:
            truncated = True
            break
    elapsed = clock.since_start()
    stats = ds.stats
    result = Result(samples, nbytes, elapsed, clock.ttfb, floor, truncated=truncated, checksum=checksum)
    if spec.warm and not truncated:
        ds.set_epoch(1)
        clock.start()
        result.warm_samples = sum(len(b.sample_indices) for b in ds.train)
        result.warm_elapsed_s = clock.since_start()
    ds.close()
    result.extra = {"stall_fraction": stats.get("stall_fraction")}
    emit(result)


if __name__ == "__main__":
    main()
