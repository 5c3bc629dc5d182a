"""Runner for the published insitubatch 0.2.0: one cold shuffled epoch, then a warm one from its pool.

Measures the reference design this project is compared against, driven through its
public API the way its documentation shows: ``open_geometries`` on the zarr store,
a chunk-aligned manifest holding every chunk in the train split, ``InSituDataset``
and one pass over ``ds.train``. Runs under its own Python 3.12 virtualenv
(insitubatch needs Python >= 3.12 and zarr >= 3.3).

Every store condition goes through ``common.open_zarr_store`` (zarr ``LocalStore``,
the same with a per-GET delay, or obstore's S3 client behind zarr's ``ObjectStore``).
A windowed case adds a shifted view of each variable (``geometry.shift(window)``);
insitubatch drops the anchors whose shifted read falls off the array, which leaves
exactly the samples ``t < n - window``. The warm epoch (``set_epoch(1)``, a new
shuffle) reuses whatever the pool retained, which is governed by
``cache_budget_bytes``: the engine's default budget is its residency floor, so a warm
epoch without a larger budget mostly fetches again.

Tuning: ``block_chunks``, ``max_inflight``, ``cache_budget_bytes``, ``prefetch``
(``prefetch_depth``) and ``decode_threads``; insitubatch's defaults where absent.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Spec, begin, cold_epoch, emit, open_zarr_store, warm_epoch

# Spec tuning keys -> InSituDataset keyword arguments.
DATASET_KEYS = {
    "block_chunks": "block_chunks",
    "max_inflight": "max_inflight",
    "cache_budget_bytes": "cache_budget_bytes",
    "prefetch": "prefetch_depth",
}


def dataset_kwargs(tuning: dict[str, Any]) -> dict[str, Any]:
    """``InSituDataset`` keywords for the spec's tuning (``decode_threads`` is set separately)."""
    unknown = set(tuning) - set(DATASET_KEYS) - {"decode_threads"}
    if unknown:
        raise ValueError(f"unknown insitubatch tuning keys {sorted(unknown)}")
    return {DATASET_KEYS[k]: v for k, v in tuning.items() if k in DATASET_KEYS}


def main() -> None:
    spec = Spec.load(sys.argv[1])
    import insitubatch

    case = spec.case
    floor, clock = begin()
    store = open_zarr_store(spec)
    base = insitubatch.open_geometries(store, list(case.variables))
    # Labels are the batch's array names: the variable, plus "<variable>+<window>" for the
    # shifted view that reads the same array `window` samples later.
    geometries = {v: base[v] for v in case.variables}
    if case.window:
        geometries.update({f"{v}+{case.window}": base[v].shift(case.window) for v in case.variables})
    # Every chunk in the train split: round(1.0 * n_chunks) chunks, val and test empty.
    manifest = insitubatch.split_by_chunk(base[case.variables[0]], fractions=(1.0, 0.0, 0.0), seed=spec.seed)
    ds = insitubatch.InSituDataset(
        store,
        manifest,
        geometries,
        batch_size=spec.batch_size,
        seed=spec.seed,
        **dataset_kwargs(spec.tuning),
    )
    if "decode_threads" in spec.tuning:  # a scheduler setting, not a constructor argument
        ds.scheduler_config = replace(ds.scheduler_config, decode_threads=int(spec.tuning["decode_threads"]))
    labels = list(geometries)
    result = cold_epoch(spec, clock, floor, ds.train, lambda batch: [batch.arrays[label] for label in labels])
    cold = ds.last_pass
    result.extra = {
        "block_chunks": ds.block_chunks,  # after insitubatch widens it to fit one batch
        "cache_budget_bytes": ds.cache_budget_bytes,  # after raising it to the residency floor
        "limiting_stage": cold.limiting_stage if cold else None,
        "cache_misses": ds.cache_misses,
    }
    if spec.warm and not result.truncated:
        ds.set_epoch(1)
        warm_epoch(result, clock, lambda: ds.train)
        result.extra["warm_cache_hits"] = ds.cache_hits
        result.extra["warm_cache_misses"] = ds.cache_misses
    ds.close()
    emit(result)


if __name__ == "__main__":
    main()
