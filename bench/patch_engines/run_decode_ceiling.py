"""Decode ceiling: zstd-decode every stored chunk of the array on all cores, bytes in memory,
straight into their place in one preallocated (already faulted-in) array of the whole store.

What no loader of this store beats on this machine: no IO (the chunk files are read before the
clock), no planning, no gather, no allocation; the decoded bytes are written to memory once, as
any loader's output must be (chunk after chunk in one array, each chunk contiguous). The chunks are dealt round-robin to ``os.cpu_count()`` threads;
the reported time is the best of three passes. ``patches`` counts cross-sections (the store's
``T``) and ``bytes`` the decoded bytes; the checksum takes what the grid patches would read
(``shared.section_checksum_index``), so the decode is cross-checked against the loaders.
Requires the benchmark store's codecs: ``bytes`` (little-endian) then ``zstd``, no sharding.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shared import Clock, PatchSpec, Result, emit, section_checksum_index, unsupported_without

PASSES = 3


def main() -> None:
    spec = PatchSpec.load(sys.argv[1])
    unsupported_without(["numcodecs"])
    from numcodecs import Zstd

    root = Path(spec.root) / spec.array
    codecs = [c["name"] for c in json.loads((root / "zarr.json").read_text())["codecs"]]
    if codecs != ["bytes", "zstd"]:
        emit({"unsupported": f"codecs {codecs}: the ceiling decodes bytes + zstd only"})
        return
    clock = Clock()
    grid = spec.grid_shape
    keys = list(itertools.product(*(range(n) for n in grid)))
    stored = [(root / "c" / "/".join(map(str, k))).read_bytes() for k in keys]
    # Chunk after chunk (each contiguous, as decoding into it needs), faulted in before the clock.
    out = np.ones((len(keys), *spec.chunks), dtype="<f4")
    threads = os.cpu_count() or 1
    codec = Zstd()

    def decode(worker: int) -> None:
        for i in range(worker, len(keys), threads):
            codec.decode(stored[i], out=out[i])

    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(PASSES):
            t0 = time.perf_counter()
            list(pool.map(decode, range(threads)))
            best = min(best, time.perf_counter() - t0)
    index = section_checksum_index(spec.shape[1:], spec.patch)
    checksum = float("nan")
    if (
        index is not None
        and spec.chunks[0] == 1
        and all(s % c == 0 for s, c in zip(spec.shape, spec.chunks, strict=True))
    ):
        # (T, GY, GX, 1, CY, CX) -> (T, GY, CY, GX, CX): the cross-sections, for the checksum.
        t, gy, gx = grid
        sections = out.reshape(t, gy, gx, *spec.chunks[1:]).transpose(0, 1, 3, 2, 4)
        checksum = float(sections.reshape(t, -1)[:, index].sum(dtype=np.float64))
    result = Result(
        patches=spec.shape[0],
        bytes=out.nbytes,
        elapsed_s=best,
        ttfb_s=0.0,
        iter_ttfb_s=0.0,
        floor_rss=clock.floor_rss,
        checksum=checksum,
        cpu_s=0.0,  # the best pass's CPU is not separated from the others'
        chunk_gets=len(keys),
        chunk_decodes=len(keys),
        distinct_chunks=len(keys),
        max_decodes_one_chunk=1,
        extra={"threads": threads, "passes": PASSES, "stored_bytes": sum(map(len, stored))},
    )
    emit(result)


if __name__ == "__main__":
    main()
