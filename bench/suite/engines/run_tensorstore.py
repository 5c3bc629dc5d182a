"""Runner for tensorstore (Google's C++ array store, zarr3 driver) driven the careful way.

A reference engine, not a data loader: what a user gets by putting
tensorstore's own C++ read path (file IO, zstd decode and copies on its
thread pools, no Python per chunk) under the same access pattern insitu
uses. Per epoch the chunks are permuted (seeded) and cut into blocks of
``block_chunks`` whole chunks; each chunk is one ``read()`` of its aligned
sample range; the next block's reads are issued before the current block is
gathered, so one block is always in flight; the samples of a block are
shuffled and gathered with ``np.take`` into batch arrays reused from batch
to batch (a batch completes from the next block when a block does not fill
it, so every batch is full and each sample is delivered exactly once).
tensorstore's chunk cache is off (``cache_pool`` 0): every read decodes.

Local zarr v3 groups only (sharded arrays too: a read chunk is then an inner
chunk); no window (a shifted view spans blocks). Runs under its own Python
3.12 virtualenv, like insitubatch (``--tensorstore-python``).

Tuning: ``block_chunks`` (default: chunks holding 256 samples) and
``threads`` (decode and copy threads, default: the CPU count).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from common import BatchDealer, Spec, Unsupported, begin, check_local_whole_blocks, cold_epoch, emit

DEFAULT_BLOCK_SAMPLES = 256


class BlockLoader:
    """Block-shuffled batches over tensorstore arrays, one block's reads always in flight."""

    def __init__(self, arrays: list[Any], batch_size: int, block_chunks: int) -> None:
        first = arrays[0]
        self.arrays = arrays
        self.n = int(first.shape[0])
        self.spc = int(first.chunk_layout.read_chunk.shape[0])
        for a in arrays[1:]:
            if (int(a.shape[0]), int(a.chunk_layout.read_chunk.shape[0])) != (self.n, self.spc):
                raise Unsupported("variables chunked differently along the samples")
        self.n_chunks = -(-self.n // self.spc)
        self.block_chunks = max(1, min(block_chunks, self.n_chunks))
        self.batch_size = batch_size
        self.batches = [np.empty((batch_size, *a.shape[1:]), a.dtype.numpy_dtype) for a in arrays]

    def _issue(self, chunks: np.ndarray) -> list[list[Any]]:
        """Start the reads of every chunk of a block: per variable, one future per chunk."""
        spans = [(int(c) * self.spc, min(self.n, (int(c) + 1) * self.spc)) for c in chunks]
        return [[a[lo:hi].read() for lo, hi in spans] for a in self.arrays]

    def epoch(self, seed: int) -> Iterator[list[np.ndarray]]:
        """One epoch's batches; each list holds one array per variable (reused buffers)."""
        rng = np.random.default_rng(seed)
        order = rng.permutation(self.n_chunks)
        blocks = [order[i : i + self.block_chunks] for i in range(0, len(order), self.block_chunks)]
        dealer = BatchDealer(self.batches)
        pending = self._issue(blocks[0]) if blocks else []
        for b in range(len(blocks)):
            current = pending
            if b + 1 < len(blocks):
                pending = self._issue(blocks[b + 1])  # the next block's reads go out first
            block = [np.concatenate([f.result() for f in futures]) for futures in current]
            yield from dealer.deal(block, rng.permutation(len(block[0])))
        yield from dealer.rest()


def open_arrays(root: str, variables: list[str], threads: int) -> list[Any]:
    import tensorstore as ts

    context = ts.Context(
        {
            "cache_pool": {"total_bytes_limit": 0},  # no chunk cache: every read decodes
            "data_copy_concurrency": {"limit": threads},
            "file_io_concurrency": {"limit": max(8, 4 * threads)},
        }
    )
    out = []
    for v in variables:
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(Path(root) / v)}}
        out.append(ts.open(spec, read=True, context=context).result())
    return out


def main() -> None:
    spec = Spec.load(sys.argv[1])
    case = spec.case
    try:
        check_local_whole_blocks(spec, "tensorstore")
        threads = int(spec.tuning.get("threads", os.cpu_count() or 1))
        floor, clock = begin()
        arrays = open_arrays(case.root, list(case.variables), threads)
        spc = int(arrays[0].chunk_layout.read_chunk.shape[0])
        block_chunks = int(spec.tuning.get("block_chunks", max(1, DEFAULT_BLOCK_SAMPLES // spc)))
        loader = BlockLoader(arrays, spec.batch_size, block_chunks)
    except Unsupported as exc:
        print(json.dumps({"unsupported": str(exc)}))
        return
    result = cold_epoch(spec, clock, floor, loader.epoch(spec.seed))
    result.extra = {"block_chunks": loader.block_chunks, "threads": threads}
    emit(result)


if __name__ == "__main__":
    main()
