"""Fetch-decode-keep ceiling: every chunk fetched through the spec's store, decoded on arrival into
fresh memory that keeps the epoch, on all cores: the least a caching cold pass does through that store.

``ceiling_decode_keep`` bounds a cold pass that keeps the epoch where decoding is all
the work (the compressed bytes already in memory). Through a store the bytes must be
fetched as well, and with a Python store (zarr's local store behind a per-GET delay,
an object store client) each GET costs CPU on the same cores as the decoding. This
ceiling does both and nothing else: ``concurrency`` asyncio tasks share one key list
and GET every stored chunk once, in key order, through the zarr store API of the
spec's store (``common.open_zarr_store``, as ``ceiling_rawget``); each object in hand
goes straight to a queue that ``threads`` decode threads drain, each decoding a chunk
into its own place of a fresh private anonymous mapping holding the epoch (committed
page by page as it is written, like insitu's pool at its default budget). No
shuffle, no gather, no batches, no bookkeeping beyond one queue entry per chunk.

Opening the metadata is timed separately (``extra["open_s"]``) and left out of
``elapsed_s`` and ``ttfb_s``, which run from the first GET to the last chunk decoded
and to the first chunk decoded. ``bytes`` is the decoded bytes; ``samples`` the case's
epoch. One pass. No checksum. Unsharded ``bytes`` + ``zstd`` arrays only.

Tuning: ``concurrency`` (default 64), ``threads`` (default ``os.cpu_count()``).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Result, Spec, emit, open_zarr_store, rss_now
from run_ceiling_decode import _fresh_arena
from run_ceiling_rawget import DEFAULT_CONCURRENCY, stored_keys
from run_simple import Unsupported, check_plain_zstd, read_metadata


class KeptEpoch:
    """``threads`` threads decoding queued chunks, each into its own place of one fresh mapping per
    variable; :meth:`finish` waits for every chunk queued and returns when the last was decoded."""

    def __init__(self, threads: int) -> None:
        import numcodecs

        self.codec = numcodecs.Zstd()
        self.queue: queue.SimpleQueue[tuple[Any, Any] | None] = queue.SimpleQueue()
        self.first = 0.0
        self.t0 = 0.0
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._work, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def _work(self) -> None:
        while (item := self.queue.get()) is not None:
            raw, out = item
            try:
                self.codec.decode(raw, out=out)
            except Exception as exc:  # reported after the pass, never a silent drop
                self.errors.append(exc)
            if not self.first:
                self.first = time.perf_counter() - self.t0

    def finish(self) -> None:
        for _ in self.threads:
            self.queue.put(None)
        for t in self.threads:
            t.join()
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} chunks failed to decode: {self.errors[0]!r}")


async def fetch_into(store: Any, places: list[tuple[str, Any]], concurrency: int, kept: KeptEpoch) -> int:
    """GET every ``(key, out)`` and queue it for decoding into ``out``; the number of missing keys."""
    from zarr.core.buffer import default_buffer_prototype

    prototype = default_buffer_prototype()
    pending: Iterator[tuple[str, Any]] = iter(places)  # shared by the tasks; one event loop, no lock
    missing = 0

    async def worker() -> None:
        nonlocal missing
        for key, out in pending:
            buf = await store.get(key, prototype)
            if buf is None:  # never written: a loader writes the fill value, nothing to decode
                missing += 1
                continue
            kept.queue.put((buf.as_numpy_array(), out))

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(places))))))
    return missing


def main() -> None:
    spec = Spec.load(sys.argv[1])
    unknown = set(spec.tuning) - {"concurrency", "threads"}
    if unknown:
        raise ValueError(f"unknown ceiling_fetch_keep tuning keys {sorted(unknown)}")
    concurrency = int(spec.tuning.get("concurrency", DEFAULT_CONCURRENCY))
    threads = int(spec.tuning.get("threads", os.cpu_count() or 1))
    import zarr

    case = spec.case
    floor = rss_now()
    try:
        for v in case.variables:
            meta = read_metadata(case.root, v)
            if [c.get("name") for c in meta["codecs"]] == ["sharding_indexed"]:
                raise Unsupported(f"{v}: sharded; this ceiling decodes whole unsharded chunks only")
            check_plain_zstd(meta["codecs"], v)
    except Unsupported as exc:
        print(json.dumps({"unsupported": str(exc)}))
        return
    t_open = time.perf_counter()
    store = open_zarr_store(spec)
    arrays = [zarr.open_array(store=store, path=v, mode="r") for v in case.variables]
    places: list[tuple[str, Any]] = []
    for v, a in zip(case.variables, arrays, strict=True):
        keys = stored_keys(a, v)
        nbytes = math.prod(a.chunks) * a.dtype.itemsize
        arena = _fresh_arena(len(keys) * nbytes)  # untouched: committed as the decoders write it
        places += [(k, arena[i * nbytes : (i + 1) * nbytes]) for i, k in enumerate(keys)]
    open_s = time.perf_counter() - t_open
    kept = KeptEpoch(threads)
    kept.t0 = time.perf_counter()
    missing = asyncio.run(fetch_into(store, places, concurrency, kept))
    kept.finish()
    elapsed = time.perf_counter() - kept.t0
    decoded = sum(len(out) for _, out in places)  # the epoch's bytes (a missing chunk: fill value)
    result = Result(case.samples_per_epoch, decoded, elapsed, kept.first, floor)
    result.extra = {
        "objects": len(places) - missing,
        "missing_objects": missing,
        "concurrency": concurrency,
        "threads": threads,
        "open_s": open_s,
        "note": "GET + decode into fresh kept memory, no shuffle/gather; metadata opening (open_s) "
        "excluded from elapsed/ttfb",
    }
    emit(result)


if __name__ == "__main__":
    main()
