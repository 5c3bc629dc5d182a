"""insitu throughput against the machine's decode ceiling, by samples per chunk.

For each chunk length it writes a synthetic ERA5-like float32 store (one
181x360 field per sample: smooth field plus noise, zstd level 1), then:

* ``ceiling``: zstd-decode every chunk, bytes already in memory, into one
  reused buffer per thread on all cores (no IO, no gather, no shuffle);
* ``insitu``: in a fresh process each time, a cold shuffled epoch through
  ``InSituDataset`` (throughput, time to first batch from construction, peak
  RSS above the interpreter's import floor), then a warm epoch served from
  the pool.

Medians of ``--repeats``. Absolute numbers drift on shared machines; the
ratio to the ceiling, measured in the same run, is the figure to compare.

Run: ``python bench/engine_ceiling.py [--samples 1024] [--chunks 1 8 32]``
(``--out results.json`` keeps the rows).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
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
    raws = [p.read_bytes() for p in files]  # no IO in the ceiling: bytes are in memory

    def work(part: list[bytes]) -> int:
        out = np.frombuffer(codec.decode(part[0]), dtype=np.uint8).copy()  # one buffer per thread
        total = 0
        for raw in part:
            codec.decode(raw, out=out)
            total += out.nbytes
        return total

    parts = [raws[i::threads] for i in range(threads)]
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        nbytes = sum(ex.map(work, parts))
    return nbytes / (time.perf_counter() - t0)


def run_insitu(
    root: Path, n: int, chunk: int, batch: int, block_chunks: int, budget: int
) -> dict[str, float]:
    """One cold epoch in this process: MB/s, time to first batch, peak RSS over the import floor."""
    floor = _rss_peak()
    store = insitu.open_store(root)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
    t0 = time.perf_counter()
    with insitu.InSituDataset(
        store, manifest, batch_size=batch, block_chunks=block_chunks, prefetch=4, cache_budget_bytes=budget
    ) as ds:
        it = iter(ds.train)
        first = next(it)
        ttfb = time.perf_counter() - t0
        count = first.size
        del first
        for b in it:
            count += b.size
        elapsed = time.perf_counter() - t0
        # A warm epoch: everything the budget could hold is served from the pool.
        ds.set_epoch(1)
        t1 = time.perf_counter()
        warm = sum(b.size for b in ds.train)
        warm_elapsed = time.perf_counter() - t1
    if count != n or warm != n:
        raise RuntimeError(f"expected {n} samples per epoch, got {count} cold and {warm} warm")
    nbytes = n * SHAPE[0] * SHAPE[1] * 4
    return {
        "MBps": nbytes / elapsed / 1e6,
        "warm_MBps": nbytes / warm_elapsed / 1e6,
        "ttfb_ms": ttfb * 1e3,
        "rss_over_floor_MB": (_rss_peak() - floor) / 1e6,
    }


def _rss_peak() -> int:
    """Peak resident set size of this process so far, in bytes (the kernel's high-water mark)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _in_subprocess(root: Path, n: int, chunk: int, batch: int, block: int, budget: int) -> dict[str, float]:
    """Each insitu run in a fresh interpreter: honest cold start and peak memory."""
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        str(root),
        str(n),
        str(chunk),
        str(batch),
        str(block),
        str(budget),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        root, n, chunk, batch, block, budget = sys.argv[2], *map(int, sys.argv[3:8])
        print(json.dumps(run_insitu(Path(root), n, chunk, batch, block, budget)))
        return
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--chunks", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget-mb", type=int, default=512, help="cache_budget_bytes, in MB")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    threads = os.cpu_count() or 1
    budget = args.budget_mb * 10**6
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for chunk in args.chunks:
            root = Path(tmp) / f"c{chunk}.zarr"
            build(root, args.samples, chunk)
            ceil = max(ceiling(root, threads) for _ in range(args.repeats))
            block = max(1, 256 // chunk)
            runs = [
                _in_subprocess(root, args.samples, chunk, args.batch, block, budget)
                for _ in range(args.repeats)
            ]
            med = {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in runs[0]}
            rows.append(
                {
                    "samples_per_chunk": chunk,
                    "block_chunks": block,
                    "ceiling_MBps": ceil / 1e6,
                    **med,
                    "fraction_of_ceiling": med["MBps"] * 1e6 / ceil,
                }
            )
    print(
        f"{args.samples} samples of {SHAPE[0]}x{SHAPE[1]} float32, zstd; {threads} threads; budget {args.budget_mb} MB;"
    )
    print(f"medians of {args.repeats} fresh processes\n")
    print(
        "| samples/chunk | decode ceiling MB/s | insitu cold MB/s | of ceiling | warm MB/s | TTFB ms | peak RSS over import floor MB |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['samples_per_chunk']} | {r['ceiling_MBps']:.0f} | {r['MBps']:.0f} | {r['fraction_of_ceiling']:.0%} | "
            f"{r['warm_MBps']:.0f} | {r['ttfb_ms']:.1f} | {r['rss_over_floor_MB']:.0f} |"
        )
    if args.out:
        args.out.write_text(json.dumps({"python": sys.version, "threads": threads, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
