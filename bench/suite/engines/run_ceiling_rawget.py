"""Raw GET ceiling: every stored object of the case fetched from the store at high concurrency, no decode.

The upper bound the store itself sets for a loader: every stored object (chunk, or
shard when sharded) of the case's variables is fetched once, in key order, through
the zarr store API of the spec's store (``common.open_zarr_store``: local, local plus
a per-GET delay, or S3), by ``concurrency`` asyncio tasks sharing one key list. The
bytes are dropped on arrival: nothing is decoded, gathered or shuffled.

Keys are computed from the arrays' metadata (the stored-object grid and the chunk key
encoding), not listed. Opening the metadata is timed separately (``extra["open_s"]``)
and left out of ``elapsed_s`` and ``ttfb_s``, which run from the first GET issued to
the last object and to the first object in hand. ``bytes`` is the stored (compressed)
bytes fetched; ``samples`` is the case's epoch, so samples/s compares with the
engines, and ``extra["decoded_equivalent_bytes"]`` is what those objects decode to.
One pass (a cold fetch, like the engines' cold epoch). No checksum.

Tuning: ``concurrency`` (default 64).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Result, Spec, emit, open_zarr_store, rss_now

DEFAULT_CONCURRENCY = 64


def stored_keys(array: Any, path: str) -> list[str]:
    """Store keys of every stored object (chunk, or shard when sharded) of ``array``."""
    stored = array.shards or array.chunks
    grid = [range(math.ceil(s / c)) for s, c in zip(array.shape, stored, strict=True)]
    return [f"{path}/{array.metadata.encode_chunk_key(coords)}" for coords in itertools.product(*grid)]


async def fetch_all(store: Any, keys: list[str], concurrency: int) -> tuple[float, float, int, int]:
    """GET every key: ``(seconds, seconds to the first object, bytes, missing keys)``."""
    from zarr.core.buffer import default_buffer_prototype

    prototype = default_buffer_prototype()
    pending: Iterator[str] = iter(keys)  # shared by the tasks; one event loop, so no lock
    nbytes = missing = 0
    first = 0.0
    t0 = time.perf_counter()

    async def worker() -> None:
        nonlocal nbytes, missing, first
        for key in pending:
            buf = await store.get(key, prototype)
            if buf is None:  # never written (fill value)
                missing += 1
                continue
            if not first:
                first = time.perf_counter() - t0
            nbytes += len(buf)

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(keys))))))
    return time.perf_counter() - t0, first, nbytes, missing


def main() -> None:
    spec = Spec.load(sys.argv[1])
    unknown = set(spec.tuning) - {"concurrency"}
    if unknown:
        raise ValueError(f"unknown ceiling_rawget tuning keys {sorted(unknown)}")
    concurrency = int(spec.tuning.get("concurrency", DEFAULT_CONCURRENCY))
    import zarr

    case = spec.case
    floor = rss_now()
    t_open = time.perf_counter()
    store = open_zarr_store(spec)
    arrays = [zarr.open_array(store=store, path=v, mode="r") for v in case.variables]
    keys = [k for v, a in zip(case.variables, arrays, strict=True) for k in stored_keys(a, v)]
    open_s = time.perf_counter() - t_open
    elapsed, ttfb, nbytes, missing = asyncio.run(fetch_all(store, keys, concurrency))
    decoded = sum(math.prod(a.shape) * a.dtype.itemsize for a in arrays)
    result = Result(case.samples_per_epoch, nbytes, elapsed, ttfb, floor)
    result.extra = {
        "decoded_equivalent_bytes": decoded,
        "objects": len(keys) - missing,
        "missing_objects": missing,
        "concurrency": concurrency,
        "open_s": open_s,
        "note": "stored bytes fetched, no decode; metadata opening (open_s) excluded from elapsed/ttfb",
    }
    emit(result)


if __name__ == "__main__":
    main()
