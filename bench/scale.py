"""Planning at archive scale, without data: construction, ordering, planning and per-rank sharding
for up to ten million chunks, and the per-epoch Python work per chunk.

Writes (once, cached under the work folder) metadata-only zarr v3 stores of one
float32 array ``t`` of shape ``(n, 4, 4)`` in one-sample chunks: no chunk is
written, so every read finds the object absent and the engine writes the fill
value (what 40 years of hourly fields x 100 variable-levels look like to the
planner, without 40 TB on disk). Each measurement runs in a fresh interpreter
and reports, beside the interpreter's own RSS floor (after imports):

- ``split_s``: ``split_by_chunk`` (0.8 / 0.1 / 0.1, contiguous);
- ``construct_s``: ``InSituDataset(...)`` (pool, engine, budget);
- ``plan_s``: ``iter(ds.train)``: the epoch's order for this rank, the read
  plan of every block, the budget check;
- ``first_batch_s``: from there to the first batch in hand;
- ``next_plan_s``: ``set_epoch(1)`` and ``iter()`` again (a new permutation);
- ``peak_MB``: peak RSS (VmHWM) minus the floor, through the first batch
  (``next_peak_MB``: through the next epoch's plan too);
- ``epoch_s`` / ``us_per_chunk`` (``--epoch-max`` and below): one whole epoch of
  the train split read through the engine (absent chunks filled), per chunk.

- ``--resume-from W1``: an elastic resume instead of a fresh epoch: a state
  saved half-way through the epoch at world size ``W1`` (one rank's, ranks in
  lockstep) is loaded at ``--world``; ``plan_s`` is then ``load_state_dict``
  plus ``iter()``: every old rank's order, what they handed out, and this
  rank's share of the rest.

The targets the project set: construction + planning + ordering + sharding of
10**7 chunks in at most 2 s and 500 MB beyond the interpreter, at every world
size up to 1,024 (``--world`` simulates ranks: the rank given is planned,
exactly as that rank would plan it).

    python bench/scale.py                                    # 10**5 .. 10**7 chunks, world 1 and 1024
    python bench/scale.py --chunks 10000000 --world 1 8 64 1024 --rank last
    python bench/scale.py --chunks 100000 1000000 --epoch-max 1000000
    python bench/scale.py --chunks 10000000 --world 1024 --resume-from 1280 --rank last

Run it with insitu-core installed (``.nox/tests-core-3-11/bin/python``); results
go to ``bench/results/scale.json`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "suite"))

from portable import REPO, portable_paths

TARGET_S = 2.0
TARGET_MB = 500.0


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def measure(root: str, world: int, rank: int, epoch: bool, resume_from: int = 0) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    import insitu

    floor_kb = _status_kb("VmRSS")
    clock = time.perf_counter
    t0 = clock()
    store = insitu.open_store(root)
    g = insitu.open_geometries(store)["t"]
    t1 = clock()
    manifest = insitu.split_by_chunk(g, (0.8, 0.1, 0.1))
    t2 = clock()
    ds = insitu.InSituDataset(store, manifest, [g], batch_size=32, rank=rank, world_size=world)
    if resume_from:  # not timed: what the old ranks' state says (half of their pass handed out)
        old = ds.plan("train", ds.train.shuffle, rank=0, world_size=resume_from).n_batches
        state = ds.train.state_dict() | {"world_size": resume_from, "rank": 0, "batches_done": old // 2}
    t3 = clock()
    if resume_from:
        ds.train.load_state_dict(state)
    it = iter(ds.train)
    t4 = clock()
    next(it)
    t5 = clock()
    peak_kb = _status_kb("VmHWM")
    it.close()
    del it  # a finished pass's plan goes with its iterator
    ds.set_epoch(1)
    t6 = clock()
    it = iter(ds.train)
    t7 = clock()
    it.close()
    del it
    out: dict[str, Any] = {
        "open_s": t1 - t0,
        "split_s": t2 - t1,
        "construct_s": t3 - t2,
        "plan_s": t4 - t3,
        "first_batch_s": t5 - t4,
        "next_plan_s": t7 - t6,
        "setup_s": t4 - t1,  # split + construct + plan: what the target counts
        "train_chunks": len(manifest.chunk_ids("train")) // world,
        "floor_MB": floor_kb / 1024,
        "peak_MB": (peak_kb - floor_kb) / 1024,  # through the first batch
        "next_peak_MB": (_status_kb("VmHWM") - floor_kb) / 1024,  # ... and the next epoch's plan
    }
    if epoch:
        ds.set_epoch(2)
        t8 = clock()
        samples = sum(len(b.sample_indices) for b in ds.train)
        out["epoch_s"] = clock() - t8
        out["epoch_samples"] = samples
        out["us_per_chunk"] = out["epoch_s"] / max(1, samples) * 1e6
    ds.close()
    return out


def make_store(work: Path, n: int) -> str:
    import zarr

    root = work / f"meta-{n}.zarr"
    if not (root / "t" / "zarr.json").exists():
        zarr.create_array(
            str(root), name="t", shape=(n, 4, 4), chunks=(1, 4, 4), dtype="float32", fill_value=0.0
        )
    return str(root)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    ap.add_argument("--world", type=int, nargs="+", default=[1, 1024])
    ap.add_argument("--rank", choices=["first", "last"], default="first", help="which rank to plan")
    ap.add_argument(
        "--epoch-max", type=int, default=1_000_000, help="run whole epochs up to this many chunks"
    )
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "insitu-bench" / "scale")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    ap.add_argument(
        "--resume-from", type=int, default=0, metavar="W1", help="plan an elastic resume from world size W1"
    )
    ap.add_argument(
        "--one", nargs=5, metavar=("ROOT", "WORLD", "RANK", "EPOCH", "FROM"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.one:
        root, world, rank, epoch, resume_from = args.one
        print(json.dumps(measure(root, int(world), int(rank), epoch == "1", int(resume_from))))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    print(
        f"{'chunks':>10} {'world':>5} {'split s':>8} {'constr s':>8} {'plan s':>7} {'setup s':>8} "
        f"{'1st batch s':>11} {'next plan s':>11} {'peak MB':>8} {'us/chunk':>9}"
    )
    for n in args.chunks:
        root = make_store(args.work, n)
        for world in args.world:
            rank = 0 if args.rank == "first" else world - 1
            epoch = n <= args.epoch_max and world == 1 and not args.resume_from
            cmd = [sys.executable, __file__, "--one", root, str(world), str(rank), "1" if epoch else "0"]
            cmd.append(str(args.resume_from))
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"{n:>10} {world:>5} failed: {done.stderr.strip()[-400:]}")
                continue
            row = {
                "chunks": n,
                "world": world,
                "rank": rank,
                "resume_from": args.resume_from,
                **json.loads(done.stdout.splitlines()[-1]),
            }
            rows.append(row)
            per = f"{row['us_per_chunk']:.1f}" if "us_per_chunk" in row else "-"
            print(
                f"{n:>10} {world:>5} {row['split_s']:>8.2f} {row['construct_s']:>8.2f} {row['plan_s']:>7.2f} "
                f"{row['setup_s']:>8.2f} {row['first_batch_s']:>11.3f} {row['next_plan_s']:>11.2f} "
                f"{row['peak_MB']:>8.0f} {per:>9}"
            )
    largest = [r for r in rows if r["chunks"] == max(args.chunks)]
    if largest:
        worst_s = max(r["setup_s"] for r in largest)
        worst_mb = max(r["peak_MB"] for r in largest)
        print(
            f"\n{max(args.chunks)} chunks: setup {worst_s:.2f} s (target {TARGET_S} s), "
            f"peak {worst_mb:.0f} MB beyond the interpreter (target {TARGET_MB:.0f} MB)"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    record = {
        "command": portable_paths(" ".join(["python bench/scale.py", *sys.argv[1:]])),
        "cpus": os.cpu_count(),
        "rows": rows,
    }
    (args.out / "scale.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
