"""What hides latency and what does not: insitu streaming one case through four stores.

    python bench/store_cost.py [--case c1] [--latency-ms 20 100] [--epochs 3] [--repeats 3]

The suite's ``latency`` condition wraps zarr's ``LocalStore``, whose every GET is a
hop to a thread pool and back (``asyncio.to_thread``): Python work on the event loop
and a thread per request, on the same two cores the decoders need. This script
separates that cost from the latency itself by reading the same data (a case the
suite built, ``$TMPDIR/insitu-bench/n<samples>/<case>.zarr``) through

- ``file``: the local directory (``insitu.open_store``), read in the decode threads;
- ``file+N ms``: the suite's latency wrapper over zarr's ``LocalStore``;
- ``memory``: the same bytes in a zarr ``MemoryStore`` (a GET costs next to no CPU);
- ``memory+N ms``: the suite's latency wrapper over that ``MemoryStore``;

each in a fresh process, ``--epochs`` cold streaming passes (``cache_budget_bytes=0``,
so every pass reads and decodes again; the engine's defaults otherwise), and prints
samples/s per store with its ratio to the plain local directory. Where
``memory+20 ms`` keeps pace with ``memory`` the engine hides the round trips; the gap
between ``file+20 ms`` and ``memory+20 ms`` is what the store's own per-request CPU
costs on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {suite!r})
import insitu
from common import latency_store
root, kind, ms, epochs, cap = {root!r}, {kind!r}, {ms!r}, {epochs!r}, {cap!r}
if kind == "memory":
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import MemoryStore
    make = default_buffer_prototype().buffer.from_bytes
    data = {{}}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                data[os.path.relpath(path, root).replace(os.sep, "/")] = make(f.read())
    store = MemoryStore(data)
elif ms:
    from zarr.storage import LocalStore
    store = LocalStore(root, read_only=True)
else:
    store = insitu.open_store(root)
if ms:
    store = latency_store(store, ms / 1e3)
geom = insitu.open_geometries(store, ["t2m"])["t2m"]
manifest = insitu.split_by_chunk(geom, (1.0,), names=("train",))
tuning = {{"max_inflight": cap}} if cap else {{}}
ds = insitu.InSituDataset(store, manifest, [geom], batch_size=32, seed=0, cache_budget_bytes=0, **tuning)
t0, n = time.perf_counter(), 0
for epoch in range(epochs):
    ds.set_epoch(epoch)
    for batch in ds.train:
        n += len(batch["t2m"])
print(json.dumps({{"samples_per_s": n / (time.perf_counter() - t0), "samples": n}}))
"""


def run(root: Path, kind: str, ms: float, epochs: int, cap: int = 0) -> float:
    """samples/s of one fresh process reading ``root`` through the store ``kind`` (+ ``ms``);
    ``cap``: ``max_inflight`` (0: the library's default)."""
    code = CHILD.format(suite=str(HERE / "suite"), root=str(root), kind=kind, ms=ms, epochs=epochs, cap=cap)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="c1")
    ap.add_argument("--samples", type=int, default=1024, help="which built case (n<samples>)")
    ap.add_argument("--latency-ms", type=float, nargs="+", default=[20.0, 100.0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-inflight", type=int, default=0, help="the engine's cap (0: its default)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "insitu-bench")
    args = ap.parse_args(argv)
    root = args.work / f"n{args.samples}" / f"{args.case}.zarr"
    if not root.is_dir():
        ap.error(
            f"{root} does not exist: build it with bench/run.py --cases {args.case} --samples {args.samples}"
        )
    stores = [("file", 0.0), ("memory", 0.0)]
    stores += [(kind, ms) for ms in args.latency_ms for kind in ("file", "memory")]
    runs: dict[tuple[str, float], list[float]] = {s: [] for s in stores}
    for _ in range(args.repeats):  # repeats outermost: drift of a shared machine hits every store alike
        for kind, ms in stores:
            runs[(kind, ms)].append(run(root, kind, ms, args.epochs, args.max_inflight))
    local = statistics.median(runs[("file", 0.0)])
    cap = f"max_inflight={args.max_inflight}" if args.max_inflight else "default max_inflight"
    print(
        f"{args.case}, {args.samples} samples, {args.epochs} streaming epochs, {cap}, medians of {args.repeats}"
    )
    print(f"{'store':<16}{'samples/s':>12}{'vs file':>10}")
    for kind, ms in stores:
        rate = statistics.median(runs[(kind, ms)])
        label = kind if not ms else f"{kind}+{ms:g} ms"
        print(f"{label:<16}{rate:>12,.0f}{rate / local:>9.2f}x")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "0")
    raise SystemExit(main())
