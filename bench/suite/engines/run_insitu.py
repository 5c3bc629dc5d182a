"""Runner for insitu (this project): one cold shuffled epoch, then a warm one from the pool.

Tuning: ``block_chunks``, ``max_inflight``, ``cache_budget_bytes``, ``prefetch``,
``decode_threads`` (the engine's defaults where absent). Stores: local and
latency through insitu's own local store (wrapped with the latency), s3 and
http through insitu-stores' obstore backend (plus latency when given).

``extra`` carries ``cache_bytes``, the pool's resident bytes at the end of the
cold epoch (the decoded chunks kept for later epochs), so the driver can report
working memory: peak RSS of the process tree minus the bytes the engine's cache
holds at the end of the cold epoch.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Spec, begin, cold_epoch, emit, remote_store, warm_epoch

# Points of the in-flight limit's trajectory a result keeps. The controller holds up to its
# MAX_TRAJECTORY (512) changes; a figure needs far fewer, and every insitu run of a sweep carries
# its own, so the results file stays small (~2 KB per run).
TRAJECTORY_POINTS = 128


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


def trajectory_points(changes: Sequence[Any], most: int = TRAJECTORY_POINTS) -> list[tuple[float, int]]:
    """``(at_s, limit)`` per change of the in-flight limit (``insitu``'s ``LimitChange``), times to
    the millisecond; beyond ``most`` (at least 2) changes, ``most`` evenly spaced ones, always with
    the first (the start value) and the last (where the epoch left the limit)."""
    points = [(round(float(c.at_s), 3), int(c.limit)) for c in changes]
    if len(points) <= most:
        return points
    step = (len(points) - 1) / (max(2, most) - 1)
    return [points[round(i * step)] for i in range(max(2, most))]


def cold_cache_bytes(stats: Mapping[str, Any]) -> int | None:
    """The bytes insitu's cache holds at the end of the cold epoch: the pool's ``resident_bytes``
    (slabs held now, kept for later epochs; ~0 with ``cache_budget_bytes=0``), from ``ds.stats``
    read right after that epoch. None when the stats do not report it.

    The driver's working memory is the peak RSS of the process tree minus these bytes."""
    value = stats.get("resident_bytes")
    return None if value is None else int(value)


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
    # Read before the warm epoch: without a cache (insitu_stream) that one reads the store again,
    # and the controller's changes would run on into it.
    trajectory = trajectory_points(ds.inflight_trajectory)
    cache_bytes = cold_cache_bytes(stats)
    if spec.warm and not result.truncated:
        ds.set_epoch(1)
        warm_epoch(result, clock, lambda: ds.train)
    ds.close()
    result.extra = {
        "stall_fraction": stats.get("stall_fraction"),
        "budget_bytes": stats.get("budget_bytes"),
        "slabs_streamed": stats.get("slabs_streamed"),
        # The pool's bytes at the end of the cold epoch: the driver subtracts them from the peak
        # RSS to get the pass's working memory (``work_MB``).
        "cache_bytes": cache_bytes,
        # [at_s, limit] per change of the requests-in-flight limit (empty for local files).
        "inflight_trajectory": trajectory,
    }
    emit(result)


if __name__ == "__main__":
    main()
