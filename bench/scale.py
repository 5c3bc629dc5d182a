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

``--arrays`` measures the other way a store grows: a group of many small arrays
(10 to 5,000, each ``(64, 4)`` float32 in chunks of 8 samples, metadata only),
every array read into each batch: ``open_s`` (``open_store`` +
``open_geometries``), ``construct_s``, ``first_batch_s``. Per-load bookkeeping
must not grow with the number of arrays, so the first batch stays within
seconds at 5,000 arrays (it took ~200 s when each load summed every array's
memory).

    python bench/scale.py --arrays 10 100 1000 5000

``--patches SIDE`` measures patch sampling at scale: a metadata-only square uint8 raster of
``SIDE`` x ``SIDE`` in 512 x 512 chunks (default 65,536: the 16 GB mosaic), sampled in 32 x 32
patches (4.2 million positions; ``--patch`` and ``--patch-chunk`` change them): ``construct_s``
(``InSituDataset(..., patch=...)``: every split's positions planned as regions, the first
epoch's blocks sized for the pool), ``first_batch_s`` (``iter`` and ``next``), ``peak_MB``
beyond the interpreter. Target: seconds and well under 1 GB.

    python bench/scale.py --patches 65536
    python bench/scale.py --patches 65536 131072 --patch 16 --world 64

Run it with insitu-core installed (``.nox/tests-core-3-11/bin/python``); results
go to ``bench/results/scale.json`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
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


def write_record(path: Path, rows: list[dict[str, Any]]) -> None:
    """The measured rows as JSON at ``path``, with the command that made them (paths portable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "command": portable_paths(" ".join(["python bench/scale.py", *sys.argv[1:]])),
        "cpus": os.cpu_count(),
        "rows": rows,
    }
    path.write_text(json.dumps(record, indent=1))


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


def measure_arrays(root: str) -> dict[str, Any]:
    """One many-arrays measurement, in this (fresh) process: open, construct, first batch."""
    import insitu

    clock = time.perf_counter
    t0 = clock()
    store = insitu.open_store(root)
    geoms = insitu.open_geometries(store)
    t1 = clock()
    manifest = insitu.split_by_chunk(next(iter(geoms.values())), (1.0,))
    ds = insitu.InSituDataset(store, manifest, list(geoms.values()), batch_size=8)
    t2 = clock()
    batch = next(iter(ds.train))
    t3 = clock()
    ds.close()
    return {
        "arrays": len(geoms),
        "open_s": t1 - t0,
        "construct_s": t2 - t1,
        "first_batch_s": t3 - t2,
        "batch_fields": len(batch),
    }


def measure_patches(root: str, patch: int, world: int) -> dict[str, Any]:
    """One patch-sampling measurement, in this (fresh) process: construct, first batch, memory."""
    import insitu

    floor = _status_kb("VmRSS")
    clock = time.perf_counter
    store = insitu.open_store(root)
    (geom,) = insitu.open_geometries(store).values()
    manifest = insitu.split_by_chunk(geom, (0.8, 0.1, 0.1))
    t0 = clock()
    ds = insitu.InSituDataset(
        store,
        manifest,
        [geom],
        patch={"y": patch, "x": patch},
        batch_size=256,
        world_size=world,
        rank=world - 1,
    )
    t1 = clock()
    batch = next(iter(ds.train))
    t2 = clock()
    out = {
        "positions": int(math.prod(-(-n // patch) for n in geom.shape)),
        "train_positions": ds.train.plan().n_positions,
        "construct_s": t1 - t0,
        "first_batch_s": t2 - t1,
        "peak_MB": (_status_kb("VmHWM") - floor) / 1024,
        "batch_shape": list(batch[geom.label].shape),
    }
    ds.close()
    return out


def make_raster(work: Path, side: int, chunk: int) -> str:
    """A metadata-only ``side`` x ``side`` uint8 raster in ``chunk`` x ``chunk`` chunks (no chunk
    written: reads find them absent and fill)."""
    import zarr

    root = work / f"raster-{side}-{chunk}.zarr"
    if not (root / "mosaic" / "zarr.json").exists():
        zarr.create_array(
            str(root),
            name="mosaic",
            shape=(side, side),
            chunks=(chunk, chunk),
            dtype="uint8",
            fill_value=7,
            dimension_names=("y", "x"),
        )
    return str(root)


def run_patches(args: argparse.Namespace) -> None:
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    print(
        f"{'side':>7} {'patch':>5} {'world':>5} {'positions':>10} {'constr s':>8} {'1st batch s':>11} {'peak MB':>8}"
    )
    for side in args.patches:
        root = make_raster(args.work, side, args.patch_chunk)
        for world in args.world:
            cmd = [sys.executable, __file__, "--one-patches", root, str(args.patch), str(world)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"{side:>7} failed: {done.stderr.strip()[-400:]}")
                continue
            row = {"side": side, "chunk": args.patch_chunk, "patch": args.patch, "world": world}
            row |= json.loads(done.stdout.splitlines()[-1])
            rows.append(row)
            print(
                f"{side:>7} {args.patch:>5} {world:>5} {row['positions']:>10} {row['construct_s']:>8.2f} "
                f"{row['first_batch_s']:>11.3f} {row['peak_MB']:>8.0f}"
            )
    write_record(args.out / "scale-patches.json", rows)


def make_group(work: Path, n_arrays: int) -> str:
    """A zarr v3 group of ``n_arrays`` arrays ``v0000..``, metadata written by hand (no chunks:
    reads find them absent and fill), so building 5,000 takes a second rather than a minute."""
    root = work / f"arrays-{n_arrays}.zarr"
    if (root / f"v{n_arrays - 1:04d}" / "zarr.json").exists():
        return str(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    meta = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [64, 4],
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": ["time", "x"],
        "attributes": {},
    }
    for i in range(n_arrays):
        (root / f"v{i:04d}").mkdir(exist_ok=True)
        (root / f"v{i:04d}" / "zarr.json").write_text(json.dumps(meta))
    return str(root)


def run_arrays(args: argparse.Namespace) -> None:
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"{'arrays':>7} {'open s':>7} {'constr s':>8} {'1st batch s':>11}")
    for n in args.arrays:
        root = make_group(args.work, n)
        cmd = [sys.executable, __file__, "--one-arrays", root]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"{n:>7} failed: {done.stderr.strip()[-400:]}")
            continue
        row = json.loads(done.stdout.splitlines()[-1])
        rows.append(row)
        print(f"{n:>7} {row['open_s']:>7.2f} {row['construct_s']:>8.2f} {row['first_batch_s']:>11.3f}")
    write_record(args.out / "scale-arrays.json", rows)


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
        "--arrays", type=int, nargs="+", help="measure groups of this many arrays instead (e.g. 10 5000)"
    )
    ap.add_argument(
        "--one", nargs=5, metavar=("ROOT", "WORLD", "RANK", "EPOCH", "FROM"), help=argparse.SUPPRESS
    )
    ap.add_argument("--one-arrays", metavar="ROOT", help=argparse.SUPPRESS)
    ap.add_argument(
        "--patches",
        type=int,
        nargs="+",
        metavar="SIDE",
        help="measure patch sampling of SIDE x SIDE rasters instead",
    )
    ap.add_argument("--patch", type=int, default=32, help="patch side (with --patches)")
    ap.add_argument("--patch-chunk", type=int, default=512, help="chunk side (with --patches)")
    ap.add_argument("--one-patches", nargs=3, metavar=("ROOT", "PATCH", "WORLD"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one_patches:
        root, patch, world = args.one_patches
        print(json.dumps(measure_patches(root, int(patch), int(world))))
        return
    if args.patches:
        run_patches(args)
        return
    if args.one_arrays:
        print(json.dumps(measure_arrays(args.one_arrays)))
        return
    if args.arrays:
        run_arrays(args)
        return
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
    write_record(args.out / "scale.json", rows)


if __name__ == "__main__":
    main()
