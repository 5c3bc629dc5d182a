"""Runner for the naive loader: sequential, synchronous, one sample at a time through zarr.

Measures what the obvious loop costs: ``zarr.open_array`` per variable on the spec's
store, a seeded shuffle of the sample indices, and for each batch ``arr[i]`` per
sample and per variable (and ``arr[i + window]`` for a windowed case), stacked into
the batch. No concurrency, no cache, no chunk awareness: every sample read fetches
and decodes its whole chunk (or, sharded, its shard index and inner chunk) again, so
throughput falls with the samples per chunk and with store latency. It stops at
``max_seconds`` (``truncated``) and has no warm epoch (nothing is cached).

Tuning: none.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Spec, begin, cold_epoch, emit, open_zarr_store


def main() -> None:
    spec = Spec.load(sys.argv[1])
    if spec.tuning:
        raise ValueError(f"naive takes no tuning, got {sorted(spec.tuning)}")
    import numpy as np
    import zarr

    case = spec.case
    floor, clock = begin()
    store = open_zarr_store(spec)
    arrays = [zarr.open_array(store=store, path=v, mode="r") for v in case.variables]
    order = np.random.default_rng(spec.seed).permutation(case.samples_per_epoch)
    # Each field of a sample: (array, offset along the sample axis).
    fields = [(a, 0) for a in arrays] + [(a, case.window) for a in arrays if case.window]
    batches = (
        [np.stack([a[int(i) + off] for i in order[start : start + spec.batch_size]]) for a, off in fields]
        for start in range(0, len(order), spec.batch_size)
    )
    emit(cold_epoch(spec, clock, floor, batches))


if __name__ == "__main__":
    main()
