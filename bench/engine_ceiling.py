"""insitu throughput against the machine's decode ceiling, by samples per chunk.

For each chunk length it writes a synthetic ERA5-like float32 store (one
181x360 field per sample, zstd), then measures in one process:

* ``ceiling``: read every chunk file and zstd-decode it into a preallocated
  buffer on all cores (no gather, no shuffle): what no loader can beat;
* ``insitu``: a full shuffled epoch through ``InSituDataset`` (cold pool,
  then a second cold dataset, best of ``--repeats``), time to first batch.

Run: ``python bench/engine_ceiling.py [--samples 1024] [--chunks 1 8 32]``.
Prints a table and writes JSON next to it with ``--out``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numcodecs
import numpy as np
import zarr

import insitu

SHAPE = (181, 360)


def build(root: Path, n: int, chunk: int) -> None:
    rng = np.random.default_rng(0)
    lat = np.linspace(-1, 1, SHAPE[0])[:, None]
    lon = np.linspace(0, 2 * np.pi, SHAPE[1])[None, :]
    g = zarr.open_group(root, mode="w")
    arr = g.create_array(
        "t2m",
        shape=(n, *SHAPE),
        chunks=(chunk, *SHAPE),
        dtype="f4",
        compressors=zarr.codecs.ZstdCodec(level=1),
    )
    step = max(chunk, 64)
    for t0 in range(0, n, step):
        t = np.arange(t0, min(n, t0 + step))[:, None, None]
        field = (
            280 + 20 * np.cos(lat * 1.5) + 5 * np.sin(lon + t * 0.1) + rng.normal(0, 0.5, (len(t), *SHAPE))
        )
        arr[t0 : t0 + len(t)] = field.astype("f4")


def ceiling(root: Path, threads: int) -> float:
    files = sorted(p for p in (root / "t2m" / "c").rglob("*") if p.is_file())
    codec = numcodecs.Zstd()
    chunk_elems = None

    def work(part: list[Path]) -> int:
        nonlocal chunk_elems
        out = None
        total = 0
        for p in part:
            raw = p.read_bytes()
            size = numcodecs.blosc.cbuffer_sizes(raw)[0] if False else None
            if out is None:
                out = np.frombuffer(codec.decode(raw), dtype="f4").copy()
            codec.decode(raw, out=out)
            total += out.nbytes
            del size
        return total

    parts = [files[i::threads] for i in range(threads)]
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        nbytes = sum(ex.map(work, parts))
    return nbytes / (time.perf_counter() - t0)


def run_insitu(root: Path, n: int, chunk: int, batch: int, block_chunks: int) -> tuple[float, float]:
    store = insitu.open_store(root)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
    t0 = time.perf_counter()
    with insitu.InSituDataset(store, manifest, batch_size=batch, block_chunks=block_chunks, prefetch=4) as ds:
        it = iter(ds.train)
        first = next(it)
        ttfb = time.perf_counter() - t0
        count = first.size
        for b in it:
            count += b.size
        elapsed = time.perf_counter() - t0
    assert count == n
    return n * SHAPE[0] * SHAPE[1] * 4 / elapsed, ttfb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--chunks", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    threads = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for chunk in args.chunks:
            root = Path(tmp) / f"c{chunk}.zarr"
            build(root, args.samples, chunk)
            ceil = max(ceiling(root, threads) for _ in range(args.repeats))
            block = max(1, 256 // chunk)
            runs = [run_insitu(root, args.samples, chunk, args.batch, block) for _ in range(args.repeats)]
            best = max(r[0] for r in runs)
            ttfb = sorted(r[1] for r in runs)[len(runs) // 2]
            rows.append(
                {
                    "samples_per_chunk": chunk,
                    "ceiling_MBps": ceil / 1e6,
                    "insitu_MBps": best / 1e6,
                    "fraction_of_ceiling": best / ceil,
                    "ttfb_ms": ttfb * 1e3,
                    "block_chunks": block,
                }
            )
    print("| samples/chunk | decode ceiling MB/s | insitu MB/s | of ceiling | TTFB ms |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['samples_per_chunk']} | {r['ceiling_MBps']:.0f} | {r['insitu_MBps']:.0f} | "
            f"{r['fraction_of_ceiling']:.0%} | {r['ttfb_ms']:.1f} |"
        )
    if args.out:
        args.out.write_text(json.dumps({"python": sys.version, "threads": threads, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
