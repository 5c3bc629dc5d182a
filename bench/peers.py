"""insitu against the published insitubatch 0.2.0, same data, same settings, fresh processes.

The reference design ships as ``insitubatch`` (Python >= 3.12, zarr >= 3.3); it
is run with its own interpreter and virtualenv, named by ``--insitubatch-python``
(create one with ``uv venv -p 3.12 VENV && uv pip install -p VENV insitubatch==0.2.0``).
Both engines get the same zarr ``LocalStore``, manifest (0.8/0.1/0.1, chunk
aligned), batch size, ``block_chunks`` and cache budget; each run is one cold
shuffled train epoch in a fresh process: throughput, time to first batch from
construction, and peak RSS above the interpreter's import floor. Medians of
``--repeats``; the ratio column is what to read (absolute numbers drift).

    python bench/peers.py --insitubatch-python /path/to/venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = r"""
import json, sys, time
engine, root, batch, block, budget = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
mod = __import__(engine)
import zarr
floor = hwm()
store = zarr.storage.LocalStore(root, read_only=True)
geoms = mod.open_geometries(store, ["t2m"])
manifest = mod.split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1))
t0 = time.perf_counter()
ds = mod.InSituDataset(store, manifest, geoms, batch_size=batch, block_chunks=block, cache_budget_bytes=budget)
it = iter(ds.train)
first = next(it)
ttfb = time.perf_counter() - t0
def data(b):  # insitu's Batch is the mapping; insitubatch keeps it in .arrays
    return getattr(b, "arrays", b)["t2m"]
n = len(first.sample_indices)
nbytes = data(first).nbytes
del first
for b in it:
    n += len(b.sample_indices)
    nbytes += data(b).nbytes
elapsed = time.perf_counter() - t0
ds.close()
print(json.dumps({"samples": n, "MBps": nbytes / elapsed / 1e6, "ttfb_ms": ttfb * 1e3, "rss_MB": (hwm() - floor) / 1e6}))
"""


def run(python: str, engine: str, root: Path, batch: int, block: int, budget: int) -> dict[str, float]:
    out = subprocess.run(
        [python, "-c", WORKER, engine, str(root), str(batch), str(block), str(budget)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--insitubatch-python", required=True)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--chunks", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--budget-mb", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from engine_ceiling import build

    budget = args.budget_mb * 10**6
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for chunk in args.chunks:
            root = Path(tmp) / f"c{chunk}.zarr"
            build(root, args.samples, chunk)
            block = max(1, 256 // chunk)
            res: dict[str, list[dict[str, float]]] = {"insitu": [], "insitubatch": []}
            for _ in range(args.repeats):  # interleaved, so drift hits both engines alike
                res["insitu"].append(run(sys.executable, "insitu", root, args.batch, block, budget))
                res["insitubatch"].append(
                    run(args.insitubatch_python, "insitubatch", root, args.batch, block, budget)
                )
            med = {
                e: {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in runs[0]} for e, runs in res.items()
            }
            if med["insitu"]["samples"] != med["insitubatch"]["samples"]:
                raise RuntimeError(f"engines delivered different sample counts: {med}")
            rows.append((chunk, block, med))
            time.sleep(0.5)
    print(
        f"{args.samples} samples of 181x360 float32 (zstd), train split, batch {args.batch}, budget {args.budget_mb} MB,"
    )
    print(f"one cold epoch per fresh process, medians of {args.repeats}\n")
    print(
        "| samples/chunk | block_chunks | insitu MB/s | insitubatch MB/s | ratio | TTFB ms insitu / insitubatch | peak RSS MB insitu / insitubatch |"
    )
    print("|---|---|---|---|---|---|---|")
    for chunk, block, m in rows:
        a, b = m["insitu"], m["insitubatch"]
        print(
            f"| {chunk} | {block} | {a['MBps']:.0f} | {b['MBps']:.0f} | {a['MBps'] / b['MBps']:.2f}x | "
            f"{a['ttfb_ms']:.0f} / {b['ttfb_ms']:.0f} | {a['rss_MB']:.0f} / {b['rss_MB']:.0f} |"
        )


if __name__ == "__main__":
    main()
