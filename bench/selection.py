"""A selection folded into the read plan against the whole field read and sliced in a batch transform.

Writes (once, cached under the work folder) an ERA5-like zarr v3 store laid
out the way xarray writes one: dims ``time/level/latitude/longitude`` named
with ``dimension_names``, coordinate arrays ``time`` (hours since 2000-01-01),
``level`` (the 13 ERA5 pressure levels, hPa), ``latitude`` (cell centres,
90 → -90) and ``longitude`` (cell centres, 0 → 360), and the float32 field in
two chunkings:

- ``z``: ``(4, 13, 16, 32)``, all levels in one chunk (as ERA5 archives
  usually are): the level selection saves decode and copy, not reads;
- ``z_by_level``: ``(4, 1, 16, 32)``, one level per chunk: the level
  selection avoids reads too.

Two engines read the same store with the same batch size, ``block_chunks``,
``max_inflight`` and seed:

- ``select``: ``open_geometries(store, [name], "time", sel=SELECTION)``, the
  selection folded in: only the chunks it touches are fetched and decoded;
- ``whole+slice``: the whole field read, and the same region taken in a
  batch transform (``batch.replace({name: x[np.ix_(...)]})``), which is what a
  user does without the feature.

SELECTION is 3 of 13 levels and a box of a quarter of the globe crossing the
prime meridian: ``level=[300, 500, 850], latitude=slice(90, 0),
longitude=slice(270, 90)``. With the default grid (64 x 128) and chunks the
box covers 2 x 2 of the 4 x 4 lat/lon chunks.

Each epoch builds a fresh dataset and reads every sample once (cold: nothing
in the pool); the two engines alternate inside each repeat, so drift of a
shared machine hits both alike. Per store condition (``--latency-ms``: 0 is
the local disk as is, more adds that delay before every GET, concurrent GETs
overlapping their waits, as object storage would) it prints the median
samples/s, GETs, chunks decoded, MB read and peak pool residency of each
engine, the ratio select / whole+slice, and the fraction of chunks the
selection avoided: the ratio to expect is roughly 1 / (1 - avoided) where
reading and decoding chunks set the pace. Before reporting it checks that both
engines delivered the same samples in the same order with equal values (first
batch compared exactly, every batch by checksum).

    python bench/selection.py                          # about a minute on 2 cores
    python bench/selection.py --latency-ms 0 20 --repeats 7 --n-time 512
    python bench/selection.py --layouts z_by_level --latency-ms 5

Run it with an environment that has insitu-core and psutil
(``.nox/tests-core-3-11/bin/python``); results go to
``bench/results/selection.json`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import zarr

import insitu

sys.path.insert(0, str(Path(__file__).resolve().parent / "suite"))

from common import latency_store
from driver import machine
from portable import REPO, portable_paths

LEVELS = (50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000)  # ERA5 pressure levels, hPa
DIMS = ("time", "level", "latitude", "longitude")
# Northern hemisphere, 90°W .. 90°E across the prime meridian (a quarter of the globe), 3 of 13 levels.
SELECTION: dict[str, Any] = {
    "level": [300, 500, 850],
    "latitude": slice(90, 0),
    "longitude": slice(270, 90),
}
LAYOUTS = {"z": "13 levels per chunk", "z_by_level": "1 level per chunk"}
ENGINES = ("select", "whole+slice")


# --- the store ------------------------------------------------------------------------------------


def grid(n_lat: int, n_lon: int) -> tuple[np.ndarray, np.ndarray]:
    """Cell-centre latitudes (north to south) and longitudes (0 to 360, east)."""
    lat = 90.0 - (np.arange(n_lat) + 0.5) * 180.0 / n_lat
    lon = (np.arange(n_lon) + 0.5) * 360.0 / n_lon
    return lat, lon


def write_store(root: Path, n_time: int, shape: tuple[int, int], chunks: tuple[int, int, int]) -> None:
    """The store, written once: a smooth field per level drifting in time (compresses like real data)."""
    n_lat, n_lon = shape
    ct, clat, clon = chunks
    group = zarr.open_group(root, mode="w", zarr_format=3)
    lat, lon = grid(n_lat, n_lon)
    coords: list[tuple[str, np.ndarray, dict[str, Any]]] = [
        ("time", np.arange(n_time, dtype="int64") * 6, {"units": "hours since 2000-01-01 00:00:00"}),
        ("level", np.asarray(LEVELS, dtype="int64"), {"units": "hPa", "long_name": "pressure_level"}),
        ("latitude", lat.astype("float32"), {"units": "degrees_north"}),
        ("longitude", lon.astype("float32"), {"units": "degrees_east"}),
    ]
    for name, values, attrs in coords:
        arr = group.create_array(
            name,
            shape=values.shape,
            chunks=values.shape,
            dtype=values.dtype,
            dimension_names=(name,),
            attributes=attrs,
        )
        arr[...] = values
    full = (n_time, len(LEVELS), n_lat, n_lon)
    arrays = [
        group.create_array(
            name,
            shape=full,
            chunks=(ct, len(LEVELS) if name == "z" else 1, clat, clon),
            dtype="float32",
            dimension_names=DIMS,
            attributes={"units": "m**2 s**-2", "long_name": "Geopotential"},
        )
        for name in LAYOUTS
    ]
    rng = np.random.default_rng(0)
    noise = rng.normal(size=(len(LEVELS), n_lat, n_lon))
    base = noise.cumsum(axis=1).cumsum(axis=2) / np.sqrt(n_lat * n_lon)
    wave = rng.normal(size=(len(LEVELS), n_lat, n_lon)).cumsum(axis=2) / np.sqrt(n_lon)
    height = 1000.0 * np.arange(len(LEVELS))[::-1, None, None]
    step = ct * max(1, 64 // ct)
    for t0 in range(0, n_time, step):
        t = np.arange(t0, min(t0 + step, n_time))[:, None, None, None]
        block = (height + base + 0.01 * t + np.sin(t / 7.0) * wave).astype("float32")
        for arr in arrays:
            arr[t0 : t0 + len(t)] = block
    (root / "complete").write_text("ok\n")


def ensure_store(work: Path, args: argparse.Namespace) -> Path:
    key = "selection-t{}-g{}x{}-c{}x{}x{}".format(args.n_time, *args.grid, args.chunk_time, *args.chunk_grid)
    root = work / key
    if not (root / "complete").exists():
        print(f"writing {root} ...", flush=True)
        write_store(root, args.n_time, tuple(args.grid), (args.chunk_time, *args.chunk_grid))
    return root


# --- the two engines ------------------------------------------------------------------------------


def user_slice(root: Path, name: str) -> Callable[[Any], Any]:
    """The batch transform a user writes without the feature: SELECTION taken from whole fields.

    Indices come from the coordinate arrays read with zarr, independently of insitu's selection
    code, so the comparison of values checks the engine's resolution of the selection too."""
    group = zarr.open_group(root, mode="r")
    level = np.asarray(group["level"][...])
    lat = np.asarray(group["latitude"][...], dtype=np.float64)
    lon = np.asarray(group["longitude"][...], dtype=np.float64)
    lev_idx = np.asarray([int(np.flatnonzero(level == v)[0]) for v in SELECTION["level"]])
    north, south = SELECTION["latitude"].start, SELECTION["latitude"].stop
    lat_idx = np.flatnonzero((lat <= north) & (lat >= south))
    west, east = SELECTION["longitude"].start, SELECTION["longitude"].stop
    lon_idx = np.concatenate(
        [np.flatnonzero(lon >= west), np.flatnonzero(lon <= east)]
    )  # west .. 360, 0 .. east

    def take_region(batch: Any) -> Any:
        x = batch[name]
        rows = np.arange(x.shape[0])
        return batch.replace({**batch.data, name: x[np.ix_(rows, lev_idx, lat_idx, lon_idx)]})

    return take_region


def epoch(
    store: Any,
    geoms: Mapping[str, Any],
    manifest: Any,
    name: str,
    args: argparse.Namespace,
    transforms: list[Callable[[Any], Any]],
) -> tuple[dict[str, Any], tuple[np.ndarray, np.ndarray]]:
    """One cold epoch over every sample, from the dataset's construction to the last batch."""
    started = time.perf_counter()
    first: tuple[np.ndarray, np.ndarray] | None = None
    samples = 0
    checksum = 0.0
    with insitu.InSituDataset(
        store,
        manifest,
        geoms,
        batch_size=args.batch_size,
        block_chunks=args.block_chunks,
        max_inflight=args.max_inflight,
        seed=0,
        batch_transforms=transforms,
    ) as ds:
        for batch in ds.view("all"):
            x = batch[name]
            if first is None:
                first = (np.array(batch.sample_indices), np.array(x))
            checksum += float(x.sum(dtype=np.float64))
            samples += batch.size
        elapsed = time.perf_counter() - started
        stats = ds.stats
        shape = list(x.shape[1:])
    assert first is not None
    row = {
        "samples": samples,
        "elapsed_s": elapsed,
        "samples_per_s": samples / elapsed,
        "reads": int(stats["reads"]),
        "chunks_decoded": int(stats["chunks_decoded"]),
        "bytes_read": int(stats["bytes_read"]),
        "peak_resident_bytes": int(stats["peak_resident_bytes"]),
        "sample_shape": shape,
        "checksum": checksum,
    }
    return row, first


def run_case(root: Path, name: str, latency_ms: float, args: argparse.Namespace) -> dict[str, Any]:
    """Both engines on one layout under one store condition, alternating for ``args.repeats``."""
    store: Any = insitu.open_store(root)
    if latency_ms > 0:
        store = latency_store(store, latency_ms / 1e3)
    # Geometries and manifest are opened once per case, outside the timings (equal cost for both).
    selected = insitu.open_geometries(store, [name], "time", sel=SELECTION)
    whole = insitu.open_geometries(store, [name], "time")
    setups = {
        "select": (selected, []),
        "whole+slice": (whole, [user_slice(root, name)]),
    }
    manifest = insitu.split_by_chunk(whole[name], (1.0,), names=["all"])
    rows: dict[str, list[dict[str, Any]]] = {e: [] for e in ENGINES}
    firsts: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    problems: list[str] = []
    for repeat in range(args.repeats):
        for engine in ENGINES:  # alternate: drift of a shared machine hits both alike
            geoms, transforms = setups[engine]
            row, first = epoch(store, geoms, manifest, name, args, transforms)
            rows[engine].append(row)
            if repeat == 0:
                firsts[engine] = first
    a, b = firsts["select"], firsts["whole+slice"]
    if not np.array_equal(a[0], b[0]):
        problems.append("the first batches hold different samples")
    elif a[1].shape != b[1].shape or not np.array_equal(a[1], b[1]):
        problems.append(f"the first batches differ (shapes {a[1].shape} and {b[1].shape})")
    sums = {row["checksum"] for e in ENGINES for row in rows[e]}
    if len(sums) != 1:
        problems.append(f"epoch checksums differ across engines or repeats: {sorted(sums)}")
    counts = {e: sorted({r["samples"] for r in rows[e]}) for e in ENGINES}
    if any(c != [args.n_time] for c in counts.values()):
        problems.append(f"an epoch did not deliver all {args.n_time} samples: {counts}")
    summary = {
        e: {
            "samples_per_s": statistics.median(r["samples_per_s"] for r in rows[e]),
            "elapsed_s": statistics.median(r["elapsed_s"] for r in rows[e]),
            **{k: rows[e][-1][k] for k in ("reads", "chunks_decoded", "bytes_read", "peak_resident_bytes")},
            "sample_shape": rows[e][-1]["sample_shape"],
        }
        for e in ENGINES
    }
    sel, full = summary["select"], summary["whole+slice"]
    derived = {
        # No speed is reported for wrong data.
        "ratio": None if problems else sel["samples_per_s"] / full["samples_per_s"],
        "chunks_avoided": 1 - sel["chunks_decoded"] / full["chunks_decoded"],
        "reads_avoided": 1 - sel["reads"] / full["reads"],
        "bytes_avoided": 1 - sel["bytes_read"] / full["bytes_read"],
        "chunk_ratio": full["chunks_decoded"] / sel["chunks_decoded"],
    }
    return {
        "layout": name,
        "chunks": list(zarr.open_array(root, path=name, mode="r").chunks),
        "latency_ms": latency_ms,
        "rows": rows,
        "summary": summary,
        **derived,
        "values_equal": not problems,
        "problems": problems,
    }


# --- report ---------------------------------------------------------------------------------------


def describe_selection() -> str:
    return ", ".join(
        f"{k}=slice({v.start}, {v.stop})" if isinstance(v, slice) else f"{k}={v}"
        for k, v in SELECTION.items()
    )


def print_case(result: dict[str, Any]) -> None:
    print(
        f"\n{result['layout']} (chunks {tuple(result['chunks'])}, {LAYOUTS[result['layout']]}), "
        f"+{result['latency_ms']:g} ms per GET"
    )
    header = (
        f"  {'engine':<13}{'samples/s':>11}{'GETs':>8}{'chunks':>8}{'MB read':>9}{'pool MB':>9}  delivered"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for engine in ENGINES:
        s = result["summary"][engine]
        print(
            f"  {engine:<13}{s['samples_per_s']:>11.0f}{s['reads']:>8}{s['chunks_decoded']:>8}"
            f"{s['bytes_read'] / 1e6:>9.1f}{s['peak_resident_bytes'] / 1e6:>9.1f}  "
            f"{' x '.join(map(str, s['sample_shape']))}"
        )
    if result["problems"]:
        print("  VALUES DIFFER, no ratio reported: " + "; ".join(result["problems"]))
        return
    print(
        f"  select / whole+slice: x{result['ratio']:.2f} samples/s; chunks avoided "
        f"{result['chunks_avoided']:.0%} (x{result['chunk_ratio']:.1f} fewer), "
        f"bytes avoided {result['bytes_avoided']:.0%}"
    )


def print_summary(results: list[dict[str, Any]]) -> None:
    print("\nselect / whole+slice (median samples/s ratio) against the chunks the selection avoided")
    header = f"{'layout':<12}{'latency':>9}{'ratio':>8}{'chunks avoided':>16}{'1/(1-avoided)':>15}  values"
    print(header)
    print("-" * len(header))
    for r in results:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        print(
            f"{r['layout']:<12}{r['latency_ms']:>7g}ms{ratio:>8}{r['chunks_avoided']:>16.0%}"
            f"{r['chunk_ratio']:>14.1f}x  {'equal' if r['values_equal'] else 'DIFFER'}"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench/selection.py", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n-time", type=int, default=384, help="samples (time steps)")
    ap.add_argument("--grid", type=int, nargs=2, default=(64, 128), metavar=("LAT", "LON"))
    ap.add_argument("--chunk-time", type=int, default=4, help="time steps per chunk")
    ap.add_argument("--chunk-grid", type=int, nargs=2, default=(16, 32), metavar=("LAT", "LON"))
    ap.add_argument("--layouts", nargs="+", choices=list(LAYOUTS), default=list(LAYOUTS))
    ap.add_argument(
        "--latency-ms",
        type=float,
        nargs="+",
        default=[0.0, 5.0],
        help="store conditions: delay before every GET (0: the local disk as is); default 0 and 5",
    )
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--block-chunks", type=int, default=16)
    ap.add_argument("--max-inflight", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5, help="epochs per engine (alternating); medians")
    ap.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()) / "insitu-bench",
        help="where the store is written (once, keyed by its sizes)",
    )
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "selection.json")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(arguments)
    started = time.perf_counter()
    root = ensure_store(args.work, args)
    print(
        f"{args.n_time} samples of {len(LEVELS)} x {args.grid[0]} x {args.grid[1]} float32, "
        f"batch {args.batch_size}, block_chunks {args.block_chunks}, max_inflight {args.max_inflight}, "
        f"median of {args.repeats}; sel {describe_selection()}",
        flush=True,
    )
    results = []
    for latency_ms in args.latency_ms:
        for name in args.layouts:
            result = run_case(root, name, latency_ms, args)
            print_case(result)
            results.append(result)
    print_summary(results)
    problems = [f"{r['layout']} +{r['latency_ms']:g} ms: {p}" for r in results for p in r["problems"]]
    out = {
        "schema": 1,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": portable_paths(shlex.join(["python", "bench/selection.py", *arguments])),
        "wall_s": time.perf_counter() - started,
        "settings": {
            k: (portable_paths(str(v)) if isinstance(v, Path) else v) for k, v in vars(args).items()
        },
        "selection": describe_selection(),
        "machine": machine(),
        "versions": {"insitu": insitu.__version__, "zarr": zarr.__version__, "numpy": np.__version__},
        "results": results,
        "problems": problems,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=float))
    print(f"\nwrote {portable_paths(str(args.out))}")
    if problems:
        raise SystemExit("values differ between the engines:\n  " + "\n  ".join(problems))
    return out


if __name__ == "__main__":
    main()
