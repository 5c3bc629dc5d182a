"""Gather ceiling: shuffled batches copied out of decoded arrays already in RAM (memory bandwidth).

The upper bound for any loader's last stage: the case's variables are read and
decoded in full (through zarr, before the clock starts), then one epoch of batches
is gathered in a seeded random order with ``np.take(array, idx, axis=0,
out=batch)`` into batch arrays allocated once, one gather per field (two per
variable for a windowed case: ``t`` and ``t + window``). Each batch is checksummed
like an engine's consumer does, so the checksum matches the engines' for the case.
The elapsed time is the best of three passes (each a fresh permutation); ``ttfb_s``
is 0 (there is no construction to wait for).

Reads the case's local copy (``case.root``): gathering does not depend on the store,
so other store conditions are reported unsupported rather than measured again.

Tuning: none.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from common import Result, Spec, batch_sum, emit, rss_now

PASSES = 3


def gather_pass(
    fields: list[tuple[np.ndarray, int]], batches: list[np.ndarray], order: np.ndarray, batch_size: int
) -> tuple[float, int, int, float]:
    """One epoch of gathers: ``(seconds, samples, bytes, checksum)``."""
    samples = nbytes = 0
    checksum = 0.0
    t0 = time.perf_counter()
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        out = [b[: len(idx)] for b in batches]
        for (array, offset), o in zip(fields, out, strict=True):
            np.take(array, idx + offset if offset else idx, axis=0, out=o)
        samples += len(idx)
        nbytes += sum(o.nbytes for o in out)
        checksum += batch_sum(*out)
    return time.perf_counter() - t0, samples, nbytes, checksum


def main() -> None:
    spec = Spec.load(sys.argv[1])
    case = spec.case
    if spec.store.kind != "local" or spec.store.latency_ms > 0:
        print(json.dumps({"unsupported": "store-independent; measured under the local condition only"}))
        return
    if spec.tuning:
        raise ValueError(f"ceiling_gather takes no tuning, got {sorted(spec.tuning)}")
    import zarr
    from zarr.storage import LocalStore

    floor = rss_now()
    store = LocalStore(case.root, read_only=True)
    arrays = [zarr.open_array(store=store, path=v, mode="r")[:] for v in case.variables]
    fields = [(a, 0) for a in arrays] + [(a, case.window) for a in arrays if case.window]
    batches = [np.empty((spec.batch_size, *a.shape[1:]), a.dtype) for a, _ in fields]
    for b in batches:
        b.fill(0)  # fault the pages in before timing
    rng = np.random.default_rng(spec.seed)
    runs = [
        gather_pass(fields, batches, rng.permutation(case.samples_per_epoch), spec.batch_size)
        for _ in range(PASSES)
    ]
    elapsed, samples, nbytes, checksum = min(runs)
    result = Result(samples, nbytes, elapsed, 0.0, floor, checksum=checksum)
    result.extra = {
        "passes_s": [r[0] for r in runs],
        "note": f"best of {PASSES} passes; decoded arrays in RAM before timing, np.take into reused batches",
    }
    emit(result)


if __name__ == "__main__":
    main()
