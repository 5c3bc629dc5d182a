"""What the pool's own bookkeeping costs once it caches many slabs: Python memory per cached slab,
the time one full garbage collection takes with the cache full, and the time to fill it.

    python bench/pool_bookkeeping.py [--slabs 100000 1000000] [--base REV] [--work DIR] [--out DIR]

The pool's arena (the decoded bytes) is what ``cache_budget_bytes`` counts;
this measures what comes on top of it, per cached slab. Each size runs in a
fresh process: an ``ArrayPool`` of that many one-row slabs (16 bytes each, so
the arena is small against the bookkeeping) has every slab reserved, marked
ready and unpinned as a pass leaves it, with no planned use (a cache for later
passes). Then:

- ``bytes/slab``: Python memory the filled pool holds beyond its arena
  (``tracemalloc``), per slab;
- ``full GC ms``: one ``gc.collect()`` with the pool full, which every full
  collection of the process pays for as long as the cache lives;
- ``fill us/slab``: the wall time per slab of the filling loop, collections
  included.

With ``--base REV`` the same is measured at that revision (a git worktree,
as ``bench/revisions.py`` makes it) in the same run, side by side. Prints the
table and writes ``pool_bookkeeping.json`` to ``--out`` (default
``bench/results/``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from revisions import pythonpath, worktree

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

PROBE = r"""
import gc, json, time, tracemalloc
import numpy as np
from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transforms import source_spec
from insitu.engine.pool import ArrayPool, allocate_arena

n = {slabs}
geom = ArrayGeometry(name="a", path="a", shape=(n, 4), dtype=np.dtype("f4"), chunk_shape=(1, 4))
tracemalloc.start()
apool = ArrayPool(geom, n, allocate_arena(geom, n), source_spec(geom))
t0 = time.perf_counter()
for s in range(n):
    entry = apool.reserve(s)
    entry.finish(None)
    apool.mark_ready(entry)
    apool.unpin(entry, None)
fill = time.perf_counter() - t0
held, _ = tracemalloc.get_traced_memory()
tracemalloc.stop()
gc.collect()
t0 = time.perf_counter()
gc.collect()
full = time.perf_counter() - t0
assert apool.slots_in_use == n
print(json.dumps({{"bytes_per_slab": held / n, "full_gc_ms": full * 1e3, "fill_us": fill / n * 1e6}}))
"""


def measure(src: str, slabs: int) -> dict[str, Any]:
    """One fresh process at the checkout whose sources are ``src`` (a PYTHONPATH)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(slabs=slabs)],
        env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--slabs", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--base", help="a commit to measure beside this checkout")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "insitu-bench")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    sides = {"this checkout": pythonpath(REPO)}
    if args.base:
        sha, root = worktree(args.base, args.work)
        sides = {sha[:7]: pythonpath(root), **sides}
    rows = []
    for slabs in args.slabs:
        for side, src in sides.items():
            rows.append({"side": side, "slabs": slabs, **measure(src, slabs)})
    print(f"{'checkout':14s} {'slabs':>10s} {'bytes/slab':>11s} {'full GC ms':>11s} {'fill us/slab':>13s}")
    for r in rows:
        print(
            f"{r['side']:14s} {r['slabs']:>10,} {r['bytes_per_slab']:>11.0f} "
            f"{r['full_gc_ms']:>11.1f} {r['fill_us']:>13.2f}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pool_bookkeeping.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
