"""Decode ceiling: zstd-decode every stored chunk of the case on all cores, bytes already in memory.

The upper bound for any loader that has to decompress the case: no IO (every chunk's
compressed bytes are read into memory before the clock starts), no shuffle, no
gather, no allocation (each thread decodes into one reused buffer). The chunks of all
of the case's variables are dealt round-robin to ``threads`` threads of a pool that
exists before timing; the elapsed time is the best of three passes.

Reported as a run over the epoch: ``samples`` is the case's epoch (decoding every
chunk once is what serves it, windowed or not), ``bytes`` the decoded bytes,
``elapsed_s`` the decode wall time and ``ttfb_s`` 0. No checksum (nothing is
delivered). Reads the case's local copy (``case.root``): decoding does not depend on
the store, so other store conditions are reported unsupported rather than measured
again. Sharded arrays are decoded per inner chunk, located through the shard index.
Codec chains other than ``bytes`` + ``zstd`` (inside the shard when sharded) are
unsupported.

Tuning: ``threads`` (default: ``os.cpu_count()``), ``ring_mb`` (default 0: one reused
buffer per thread, which stays in CPU cache). With ``ring_mb`` each thread decodes into
successive places of a ring that large, faulted in beforehand: the decoded bytes go to
memory once, as any loader's output must (the ``ceiling_decode_out`` engine runs this
with a ring of 64 MiB, more than the caches hold). With ``keep`` (the
``ceiling_decode_keep`` engine) every pass decodes the whole epoch into a fresh private
anonymous mapping, never touched before, one place per chunk: what a cold pass that
keeps every decoded byte for the next epoch must pay at least, the kernel committing
(zeroing and mapping) each page of it as it is first written.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run_simple: the chunk layout

import numpy as np
from common import Result, Spec, emit, rss_now
from run_simple import (
    Layout,
    Unsupported,
    check_plain_zstd,
    grid_layout,
    plain_layout,
    read_metadata,
)

PASSES = 3
EMPTY = 2**64 - 1  # shard index entry of an inner chunk that was never written


def shard_index_reader(conf: dict[str, Any], n_inner: int, var: str) -> Any:
    """A function ``shard bytes -> (n_inner, 2) offsets/lengths`` for a ``sharding_indexed`` config."""
    names = [c.get("name") for c in conf.get("index_codecs", [])]
    if names not in (["bytes"], ["bytes", "crc32c"]):
        raise Unsupported(f"{var}: shard index codecs {names}")
    if conf["index_codecs"][0].get("configuration", {}).get("endian", "little") != "little":
        raise Unsupported(f"{var}: big-endian shard index")
    size = n_inner * 16 + (4 if "crc32c" in names else 0)
    at_end = conf.get("index_location", "end") == "end"

    def read(raw: bytes) -> np.ndarray:
        index = raw[len(raw) - size :] if at_end else raw[:size]
        return np.frombuffer(index, dtype="<u8", count=n_inner * 2).reshape(n_inner, 2)

    return read


def chunk_frames(root: str, var: str) -> tuple[list[Any], int]:
    """Every compressed chunk of ``var`` as ``(frames, decoded_nbytes_per_frame)``; frames in memory."""
    meta = read_metadata(root, var)
    codecs = meta["codecs"]
    if [c.get("name") for c in codecs] != ["sharding_indexed"]:
        lay = plain_layout(root, var)
        frames = [lay.chunk_path(c).read_bytes() for c in range(lay.n_chunks) if lay.chunk_path(c).exists()]
        return frames, math.prod(lay.chunk_shape) * lay.dtype.itemsize
    conf = codecs[0]["configuration"]
    check_plain_zstd(conf["codecs"], f"{var} (inside its shards)")
    shard: Layout = grid_layout(root, var, meta, meta["chunk_grid"]["configuration"]["chunk_shape"])
    inner = conf["chunk_shape"]
    n_inner = math.prod(s // c for s, c in zip(shard.chunk_shape, inner, strict=True))
    read_index = shard_index_reader(conf, n_inner, var)
    frames: list[Any] = []
    for c in range(shard.n_chunks):
        path = shard.chunk_path(c)
        if not path.exists():
            continue
        raw = memoryview(path.read_bytes())
        frames += [raw[off : off + n] for off, n in read_index(raw.obj) if off != EMPTY]
    return frames, math.prod(inner) * shard.dtype.itemsize


def decode_pass(
    pool: ThreadPoolExecutor,
    parts: list[list[Any]],
    frame_nbytes: list[int],
    ring_bytes: int = 0,
    keep: bool = False,
) -> float:
    """Wall time to decode every frame once, each thread into its own reused buffer; with
    ``ring_bytes``, into successive places of a ring that large (faulted in beforehand); with
    ``keep``, each frame into its own place of a fresh mapping (committed as it is written)."""
    import numcodecs

    codec = numcodecs.Zstd()
    local = threading.local()
    # One fresh mapping per variable, a place per frame; made untouched, before the clock.
    arenas = (
        [_fresh_arena(sum(len(p) for p in group) * n) for group, n in zip(parts, frame_nbytes, strict=True)]
        if keep
        else []
    )

    def work_keep(part: list[Any], nbytes: int, arena: np.ndarray, first: int, step: int) -> None:
        # Thread i of the round-robin deal decodes frames i, i + step, ...: their own places.
        for k, frame in enumerate(part):
            start = (first + k * step) * nbytes
            codec.decode(frame, out=arena[start : start + nbytes])

    def work(part: list[Any], nbytes: int) -> None:
        size = max(ring_bytes, nbytes)
        out = getattr(local, "out", None)
        if out is None or len(out) < size:
            out = local.out = np.ones(size, np.uint8)  # ones: every page faulted in before timing
        places = max(1, size // nbytes)
        at = getattr(local, "at", 0)
        for frame in part:
            start = (at % places) * nbytes
            codec.decode(frame, out=out[start : start + nbytes])
            at += 1
        local.at = at

    t0 = time.perf_counter()
    if keep:
        jobs = [
            pool.submit(work_keep, part, n, arena, i, len(group))
            for group, n, arena in zip(parts, frame_nbytes, arenas, strict=True)
            for i, part in enumerate(group)
        ]
    else:
        jobs = [
            pool.submit(work, part, n) for group, n in zip(parts, frame_nbytes, strict=True) for part in group
        ]
    for job in jobs:
        job.result()
    return time.perf_counter() - t0


def _fresh_arena(nbytes: int) -> np.ndarray:
    """A private anonymous mapping never touched: its pages are committed where first written
    (insitu's pool arenas are made the same way)."""
    import mmap

    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS if hasattr(mmap, "MAP_PRIVATE") else 0
    buf = mmap.mmap(-1, max(1, nbytes), flags=flags) if flags else mmap.mmap(-1, max(1, nbytes))
    return np.frombuffer(buf, dtype=np.uint8)


def main(ring_mb: int | None = None, keep: bool = False) -> None:
    """One run; ``ring_mb`` forces the output ring (``run_ceiling_decode_out.py`` passes 64),
    ``keep`` decodes each pass into fresh memory (``run_ceiling_decode_keep.py``)."""
    spec = Spec.load(sys.argv[1])
    case = spec.case
    floor = rss_now()
    try:
        if spec.store.kind != "local" or spec.store.latency_ms > 0:
            raise Unsupported(f"store-independent; measured under the local condition, not {spec.store.kind}")
        per_var = [chunk_frames(case.root, v) for v in case.variables]
    except Unsupported as exc:
        print(json.dumps({"unsupported": str(exc)}))
        return
    threads = int(spec.tuning.get("threads", os.cpu_count() or 1))
    ring = int(spec.tuning.get("ring_mb", 0) if ring_mb is None else ring_mb) << 20
    # Per variable (frames of one decoded size), one round-robin share per thread.
    parts = [[frames[i::threads] for i in range(threads)] for frames, _ in per_var]
    sizes = [n for _, n in per_var]
    with ThreadPoolExecutor(threads) as pool:
        # Start the threads and fault their buffers in: one frame per thread and variable.
        decode_pass(pool, [[f[:1]] * threads for f, _ in per_var], sizes, ring)
        passes = [decode_pass(pool, parts, sizes, ring, keep) for _ in range(PASSES)]
    decoded = sum(len(frames) * n for frames, n in per_var)
    stored = sum(len(f) for frames, _ in per_var for f in frames)
    result = Result(case.samples_per_epoch, decoded, min(passes), 0.0, floor)
    result.extra = {
        "threads": threads,
        "frames": sum(len(frames) for frames, _ in per_var),
        "stored_bytes": stored,
        "passes_s": passes,
        "ring_bytes": ring,
        "note": f"best of {PASSES} passes; compressed bytes in memory before timing, no IO/gather/shuffle"
        + (f"; output to successive places of a {ring >> 20} MiB ring per thread" if ring else "")
        + ("; every pass into a fresh mapping holding the epoch" if keep else ""),
    }
    emit(result)


if __name__ == "__main__":
    main()
