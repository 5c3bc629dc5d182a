"""Mask-weighted patches: insitu's summary draw beside a rejection sampler over a per-patch reader.

    python bench/weighted_patches.py               # about a minute on 2 cores
    python bench/weighted_patches.py --quick       # seconds (the bench tests run this)

The store: one float32 image ``(1, size, size)`` in zstd chunks of ``--chunk`` pixels and a uint8
mask beside it, positive (at 70% density) in a disc covering ``--foreground`` of the area (10%
by default). Both engines deliver ``--patches`` patches of ``--patch`` pixels, uniform over the
positions whose patch the mask covers by at least ``--min-coverage``:

- ``insitu``: ``InSituDataset(..., patch_sampling="random", patch_weights="mask",
  patch_min_coverage=t)`` at its defaults, cold (the summary pass included in its time, and
  reported apart; the epoch after it, with the summary made, is what a second epoch or a
  second process with ``cache_dir`` costs);
- ``rejection``: the torch-em pattern: draw an origin uniformly, read the mask's patch, keep it
  when its coverage meets the rule, then read the image's patch; ``--workers`` processes share
  the draws (a DataLoader's workers), each with its own zarr arrays, swept, best reported.

Each engine runs in a fresh process, imports done before the clock. Reported: patches/s, bytes read from the store per
delivered patch (both arrays; a counting store wrapper), distinct image chunks read against the
chunks a qualifying patch can touch (the positive region plus its border), and peak RSS (the
process tree). Targets: insitu >= 10x the rejection sampler's best patches/s, and no more image
chunks than a qualifying patch can touch. Results: ``weighted_patches.json`` / ``.md`` under
``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent


def write_store(root: Path, size: int, chunk: int, foreground: float) -> None:
    import zarr

    if (root / "done").exists():
        return
    rng = np.random.default_rng(0)
    group = zarr.open_group(str(root), mode="w")
    image = group.create_array(
        "image", shape=(1, size, size), chunks=(1, chunk, chunk), dtype="f4", dimension_names=("z", "y", "x")
    )
    mask = group.create_array(
        "mask", shape=(1, size, size), chunks=(1, chunk, chunk), dtype="u1", dimension_names=("z", "y", "x")
    )
    radius = size * np.sqrt(foreground / np.pi)
    yy, xx = np.ogrid[:size, :size]
    centre = size * 0.35
    disc = (yy - centre) ** 2 + (xx - centre) ** 2 <= radius**2
    for y0 in range(0, size, chunk):
        rows = slice(y0, min(size, y0 + chunk))
        image[0, rows, :] = rng.standard_normal((rows.stop - rows.start, size)).astype("f4")
        mask[0, rows, :] = (disc[rows] & (rng.random((rows.stop - rows.start, size)) < 0.7)).astype("u1")
    (root / "done").write_text("ok")


def _counting(store: Any) -> Any:
    """``store`` wrapped to count the bytes and keys of the chunks read through it."""
    from zarr.storage import WrapperStore

    class CountingStore(WrapperStore):  # type: ignore[type-arg]
        bytes_read = 0
        keys: set[str] = set()  # noqa: RUF012

        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            buf = await self._store.get(key, prototype, byte_range)
            if buf is not None and "/c/" in key:
                CountingStore.bytes_read += len(buf)
                CountingStore.keys.add(key)
            return buf

    return CountingStore(store)


def run_insitu(args: argparse.Namespace) -> dict[str, Any]:
    import insitu
    import insitu.engine.patch_summaries
    import insitu.plan.weighted_draw
    from insitu.testing import RecordingStore

    _ = (insitu.InSituDataset, insitu.open_geometries, insitu.split_by_chunk)  # imports before the clock
    store = RecordingStore(insitu.open_store(str(args.store)))
    t0 = time.perf_counter()
    geoms = insitu.open_geometries(store)
    ds = insitu.InSituDataset(
        store,
        insitu.split_by_chunk(geoms["image"], fractions=(1.0,)),
        geometries=[geoms["image"], geoms["mask"]],
        patch={"y": args.patch, "x": args.patch},
        patch_sampling="random",
        patches_per_epoch=args.patches,
        patch_weights="mask",
        patch_min_coverage=args.min_coverage,
    )
    summary_s = time.perf_counter() - t0
    summary_chunks = len(store.chunk_gets())
    n = 0
    covered = 0
    for batch in ds.train:
        n += len(batch.patch_origins)
        covered += int(
            (batch["mask"].reshape(len(batch["mask"]), -1).mean(axis=1) >= args.min_coverage).sum()
        )
    elapsed = time.perf_counter() - t0
    return {
        "patches": n,
        "meeting_rule": covered,
        "seconds": elapsed,
        "summary_s": summary_s,
        "summary_chunks": summary_chunks,
        "bytes_read": ds.stats.bytes_read,
        "image_chunks": sorted(k for k in store.chunk_gets() if k.startswith("image/")),
    }


def _rejection_worker(args: tuple[str, int, int, float, int, int]) -> tuple[int, int, int, list[str], int]:
    import zarr

    path, patch, count, t, seed, size = args
    store = _counting(zarr.storage.LocalStore(path, read_only=True))
    cls = type(store)
    group = zarr.open_group(store, mode="r")
    image, mask = group["image"], group["mask"]
    rng = np.random.default_rng(seed)
    got = tries = 0
    while got < count:
        y, x = rng.integers(0, size - patch + 1, size=2)
        tries += 1
        m = np.asarray(mask[0, y : y + patch, x : x + patch])
        if (m != 0).mean() < t:
            continue
        np.asarray(image[0, y : y + patch, x : x + patch])
        got += 1
    return got, tries, cls.bytes_read, sorted(k for k in cls.keys if k.startswith("image/")), 0


def run_rejection(args: argparse.Namespace) -> dict[str, Any]:
    from concurrent.futures import ProcessPoolExecutor

    import zarr  # noqa: F401  # imported before the clock; forked workers inherit it

    t0 = time.perf_counter()
    per = [args.patches // args.workers + (i < args.patches % args.workers) for i in range(args.workers)]
    jobs = [
        (str(args.store), args.patch, c, args.min_coverage, 100 + i, args.size) for i, c in enumerate(per)
    ]
    if args.workers == 1:
        results = [_rejection_worker(jobs[0])]
    else:
        with ProcessPoolExecutor(args.workers) as pool:
            results = list(pool.map(_rejection_worker, jobs))
    elapsed = time.perf_counter() - t0
    return {
        "patches": sum(r[0] for r in results),
        "meeting_rule": sum(r[0] for r in results),
        "tries": sum(r[1] for r in results),
        "seconds": elapsed,
        "bytes_read": sum(r[2] for r in results),
        "image_chunks": sorted({k for r in results for k in r[3]}),
    }


def positive_and_border(store: Path, chunk: int) -> set[str]:
    """Keys of the image chunks holding foreground, and of their neighbours (one chunk around)."""
    import zarr

    mask = np.asarray(zarr.open_array(str(store / "mask"), mode="r")[0])
    n = -(-mask.shape[0] // chunk)
    positive = np.zeros((n, n), dtype=bool)
    for i in range(n):
        for j in range(n):
            positive[i, j] = mask[i * chunk : (i + 1) * chunk, j * chunk : (j + 1) * chunk].any()
    grown = positive.copy()
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            grown |= np.roll(np.roll(positive, di, 0), dj, 1)  # no wrap: the disc is inside
    return {f"image/c/0/{i}/{j}" for i, j in zip(*np.nonzero(grown), strict=True)}


def child(args: argparse.Namespace) -> None:
    result = run_insitu(args) if args.engine == "insitu" else run_rejection(args)
    # The process's own peak, plus its largest worker's when workers ran beside it (a forked
    # worker's peak counts the pages it shares with its parent: an upper bound).
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if args.engine == "rejection" and args.workers > 1:
        peak += resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result["peak_rss_mb"] = peak / 1024
    print(json.dumps(result))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--chunk", type=int, default=512)
    p.add_argument("--patch", type=int, default=128)
    p.add_argument("--patches", type=int, default=4096)
    p.add_argument("--foreground", type=float, default=0.10)
    p.add_argument("--min-coverage", type=float, default=0.5)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--work", type=Path, default=Path("/tmp/insitu-bench/weighted"))
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--engine", help=argparse.SUPPRESS)
    p.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.engine:
        args.workers = args.workers[0]
        return child(args)
    if args.quick:
        args.size, args.chunk, args.patch, args.patches, args.workers = 1024, 128, 32, 256, [1]
    store = args.work / f"s{args.size}-c{args.chunk}-f{args.foreground}.zarr"
    store.parent.mkdir(parents=True, exist_ok=True)
    # Written in a child process: a process's peak RSS survives fork and exec, so the engines'
    # children would report this one's if it held the image.
    subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); import weighted_patches as w; "
         f"w.write_store(w.Path({str(store)!r}), {args.size}, {args.chunk}, {args.foreground})"],
        check=True,
    )  # fmt: skip
    common = [
        "--size", str(args.size), "--chunk", str(args.chunk), "--patch", str(args.patch),
        "--patches", str(args.patches), "--foreground", str(args.foreground),
        "--min-coverage", str(args.min_coverage), "--store", str(store),
    ]  # fmt: skip
    runs: dict[str, Any] = {}
    for engine, workers in [("insitu", 1), *(("rejection", w) for w in args.workers)]:
        cmd = [sys.executable, __file__, "--engine", engine, "--workers", str(workers), *common]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ})
        runs[f"{engine}:{workers}"] = json.loads(out.stdout.strip().splitlines()[-1])
    ins = runs["insitu:1"]
    # The summary pass reads every stored mask chunk once, through zarr: counted as their sizes.
    mask_bytes = sum(f.stat().st_size for f in (store / "mask").rglob("*") if f.is_file() and "c" in f.parts)
    ins["summary_bytes"] = mask_bytes
    ins["bytes_read"] += mask_bytes
    best_key = max(
        (k for k in runs if k.startswith("rejection")), key=lambda k: runs[k]["patches"] / runs[k]["seconds"]
    )
    best = runs[best_key]
    allowed = positive_and_border(store, args.chunk)  # reads the mask: after the engines' runs
    reach = len(allowed)
    total_chunks = (-(-args.size // args.chunk)) ** 2
    rows = []
    for key, r in runs.items():
        rate = r["patches"] / r["seconds"]
        rows.append(
            f"| {key} | {rate:,.0f} | {r['bytes_read'] / r['patches'] / 1e6:.3f} | {len(r['image_chunks'])} "
            f"| {r['peak_rss_mb']:.0f} |"
        )
    ratio = (ins["patches"] / ins["seconds"]) / (best["patches"] / best["seconds"])
    ok = ins["meeting_rule"] == ins["patches"] and set(ins["image_chunks"]) <= allowed
    md = "\n".join(
        [
            f"# Mask-weighted patches ({args.patches} patches of {args.patch}^2, {args.foreground:.0%} foreground, "
            f"coverage >= {args.min_coverage})",
            "",
            "| engine:workers | patches/s | MB read per patch | image chunks read | peak RSS MB |",
            "|---|--:|--:|--:|--:|",
            *rows,
            "",
            f"insitu / best rejection ({best_key}): **{ratio:.1f}x** (target 10x); insitu summary pass "
            f"{ins['summary_s']:.2f} s of {ins['seconds']:.2f} s, {ins['summary_bytes'] / 1e6:.1f} MB of mask; "
            f"image chunks read {len(ins['image_chunks'])} of {total_chunks}, all among the {reach} positive "
            f"chunks and their borders: {set(ins['image_chunks']) <= allowed}; every insitu patch meets the rule: {ins['meeting_rule'] == ins['patches']}",
            f"rejection tries per kept patch: {best['tries'] / best['patches']:.1f}",
            "",
            "command: python bench/weighted_patches.py " + " ".join(sys.argv[1:]),
        ]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "weighted_patches.json").write_text(
        json.dumps({"runs": runs, "ratio": ratio, "ok": ok}, indent=1)
    )
    (args.out / "weighted_patches.md").write_text(md + "\n")
    print(md)
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
