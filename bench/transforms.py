"""What Regrid (a chunk transform) and RandomCrop (a batch transform) cost a shuffled pass.

Writes (once, cached under the work folder) an ERA5-like zarr v3 store laid
out as xarray writes one: dims ``time/latitude/longitude`` named with
``dimension_names``, coordinates ``time`` (hours since 2000-01-01),
``latitude`` (north to south, poles included, as ERA5: 721 rows at 0.25°)
and ``longitude`` (0 to 360 - res, east), and a float32 field ``t2m``
(a smooth random surface drifting in time, compressing like real data)
chunked ``(chunk_time, lat, lon)``. The default grid is ERA5's own,
721 x 1440 at 0.25°; ``--grid 181 360`` (1°) or ``--grid 361 720`` (0.5°)
is a scaled-down equivalent. The regrid target is always ``--factor`` (4)
times coarser: ``Grid.regular`` cell centres, 180 x 360 at 1° for ERA5.

Four pipelines read the store with the same batch size, ``block_chunks``,
``max_inflight``, seed and a pool budget holding every slab:

- ``plain``: the field as stored;
- ``conservative`` / ``bilinear``: ``chunk_transforms=[Regrid(target=...,
  method=...)]``, bound to the array's grid by the dataset, run once per
  decoded chunk; the pool holds the regridded slabs;
- ``crop``: ``batch_transforms=[RandomCrop(size={"latitude": h, "longitude":
  w}, dims=geoms)]``, a window per sample cut from each gathered batch.

Each repeat builds a fresh dataset per pipeline and takes a cold epoch
(construction to last batch: every chunk read, decoded and, for Regrid,
regridded) and then ``--warm-epochs`` (3) warm ones, timed together
(``set_epoch(1..)``, other shuffles; the pool serves every slab, so Regrid's
cost is paid once). The pipelines alternate inside each repeat, starting one
later each repeat, so drift of a shared machine hits them alike. Reported:
the median samples/s per pipeline and epoch, the ratio of medians to
``plain``, the range of the paired ratios (pipeline / plain within one
repeat) as the noise, and this process's CPU time per sample (all threads),
which other processes do not add to. The consumer sums two latitude rows of
each sample (a checksum), not whole batches, so its own work stays small.

Also measured, outside the epochs:

- the weights: built once per process and cached on disk. Their build (and
  write), a load from the disk cache, and the preparation from the in-memory
  cache (what each new dataset's binding costs) are timed, medians of
  ``--weight-repeats``; the epochs start with the weights in memory, so the
  build is excluded from their throughput;
- per chunk: the regrid beside decoding the same chunk (the engine's decoder
  on the stored bytes held in memory) and beside reading it with zarr, over a
  few chunks in every repeat (medians of wall and thread CPU time), and
  ``check_transform``'s report.

Checks before any ratio is reported: the first batch of the cold and of the
first warm epoch of a Regrid pipeline equals that Regrid applied to the same
rows read directly with zarr; ``plain``'s first batches equal those rows; the
crop's windows equal the plain batch sliced at ``RandomCrop.offsets(batch,
sample_shapes)``; every epoch delivers every sample, with the same checksum in
every repeat (and, but for the crop, warm as cold); warm epochs decode
nothing.

    python bench/transforms.py                     # under a minute on 2 cores, two with other load
    python bench/transforms.py --grid 181 360 --n-time 512 --repeats 7

Run it with an environment that has insitu-core, insitu-transforms and psutil
(``.nox/tests-transforms/bin/python``); results go to
``bench/results/transforms.json`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy  # type: ignore[import-untyped]  # scipy ships no type information
import zarr

import insitu
import insitu_transforms
from insitu.store.codecs import numcodecs_decoder
from insitu_transforms import Grid, RandomCrop, Regrid, check_transform
from insitu_transforms.regrid import cache as weight_cache
from insitu_transforms.regrid.weights import weights_key

sys.path.insert(0, str(Path(__file__).resolve().parent / "suite"))

from driver import machine
from portable import REPO, portable_paths

NAME = "t2m"
DIMS = ("time", "latitude", "longitude")
METHODS = ("conservative", "bilinear")
ENGINES = ("plain", "conservative", "bilinear", "crop")
PHASES = ("cold", "warm")
ERA5_GRID = (721, 1440)


# --- the store ------------------------------------------------------------------------------------


def resolution(shape: Sequence[int]) -> float:
    """Degrees between rows of a grid with both poles (ERA5's layout), checked against its columns."""
    n_lat, n_lon = shape
    if n_lat < 3 or (n_lat - 1) * 2 != n_lon:
        raise SystemExit(
            f"--grid {n_lat} {n_lon}: a global grid with both poles has 2 * (rows - 1) columns "
            "(721 1440, 361 720, 181 360, ...)"
        )
    return 180.0 / (n_lat - 1)


def coordinates(shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Latitudes north to south with both poles, longitudes 0 .. 360 - res (ERA5's order)."""
    n_lat, n_lon = shape
    lat = np.linspace(90.0, -90.0, n_lat)
    lon = np.arange(n_lon) * (360.0 / n_lon)
    return lat, lon


def write_store(root: Path, n_time: int, shape: Sequence[int], chunk_time: int) -> None:
    """The store, written once: a smooth field drifting in time (compresses like real data)."""
    n_lat, n_lon = shape
    group = zarr.open_group(root, mode="w", zarr_format=3)
    lat, lon = coordinates(shape)
    coords: list[tuple[str, np.ndarray, dict[str, Any]]] = [
        ("time", np.arange(n_time, dtype="int64"), {"units": "hours since 2000-01-01 00:00:00"}),
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
    field = group.create_array(
        NAME,
        shape=(n_time, n_lat, n_lon),
        chunks=(chunk_time, n_lat, n_lon),
        dtype="float32",
        dimension_names=DIMS,
        attributes={"units": "K", "long_name": "2 metre temperature"},
    )
    rng = np.random.default_rng(0)
    climate = 250.0 + 40.0 * np.cos(np.radians(lat))[:, None]
    scale = np.sqrt(n_lat * n_lon)
    base = climate + 5.0 * rng.normal(size=(n_lat, n_lon)).cumsum(axis=0).cumsum(axis=1) / scale
    wave = 3.0 * rng.normal(size=(n_lat, n_lon)).cumsum(axis=1) / np.sqrt(n_lon)
    step = chunk_time * max(1, 16 // chunk_time)
    for t0 in range(0, n_time, step):
        t = np.arange(t0, min(t0 + step, n_time))[:, None, None]
        field[t0 : t0 + len(t)] = (base + 0.01 * t + np.sin(t / 7.0) * wave).astype("float32")
    (root / "complete").write_text("ok\n")


def ensure_store(work: Path, args: argparse.Namespace) -> Path:
    root = work / "transforms-t{}-g{}x{}-c{}".format(args.n_time, *args.grid, args.chunk_time)
    if not (root / "complete").exists():
        print(f"writing {root} ...", flush=True)
        started = time.perf_counter()
        write_store(root, args.n_time, args.grid, args.chunk_time)
        print(f"  written in {time.perf_counter() - started:.1f} s", flush=True)
    return root


# --- the weights ----------------------------------------------------------------------------------


def weight_costs(
    geom: Any, target: str, method: str, folder: Path, repeats: int
) -> tuple[dict[str, Any], Regrid]:
    """Build (into an empty ``folder``), load from disk, and prepare from memory: medians of ``repeats``."""
    times: dict[str, list[float]] = {"build_s": [], "load_s": [], "memory_s": []}
    regrid = None
    for _ in range(max(1, repeats)):
        shutil.rmtree(folder, ignore_errors=True)
        for what in ("build_s", "load_s", "memory_s"):
            if what != "memory_s":
                weight_cache.clear_memory()  # this process has not seen them: from the disk, or built
            started = time.perf_counter()
            regrid = Regrid.for_array(geom, target, method, cache_dir=folder)
            times[what].append(time.perf_counter() - started)
    assert regrid is not None
    files = list(folder.glob("weights-*.npz"))
    matrix = regrid.weights
    row = {
        "method": method,
        **{k: statistics.median(v) for k, v in times.items()},
        "runs": times,
        "nnz": int(matrix.nnz),
        "shape": list(matrix.shape),
        "file_bytes": sum(f.stat().st_size for f in files),
        "key": weights_key(regrid.source, regrid.target, method),  # type: ignore[arg-type]
    }
    return row, regrid


# --- the pipelines --------------------------------------------------------------------------------


def pipeline(
    engine: str, args: argparse.Namespace, target: str, weights_dir: Path, geoms: Any
) -> tuple[list[Any], list[Callable[[Any], Any]]]:
    """Fresh (chunk_transforms, batch_transforms) for one dataset of ``engine``."""
    if engine in METHODS:
        # Unbound, as a user writes it: the dataset binds it to the array's grid (weights from memory).
        return [Regrid(target=target, method=engine, cache_dir=weights_dir / engine)], []
    if engine == "crop":
        return [], [make_crop(args, geoms)]
    return [], []


def make_crop(args: argparse.Namespace, geoms: Any) -> RandomCrop:
    return RandomCrop(size={"latitude": args.crop[0], "longitude": args.crop[1]}, dims=geoms, seed=0)


def row_checksum(x: np.ndarray) -> float:
    """A sum over two latitude rows of every sample (the first and the middle one): it tells
    samples, order and values apart while keeping the consumer's work small beside the loader's
    (a full sum would cost the plain pipeline, delivering 16 times the bytes, far more)."""
    return float(x[:, 0].sum(dtype=np.float64) + x[:, x.shape[1] // 2].sum(dtype=np.float64))


def one_pass(ds: Any, keep_first: bool) -> dict[str, Any]:
    """Every sample once, in the dataset's current epoch; with ``keep_first``, the first batch kept."""
    first = None
    samples = 0
    checksum = 0.0
    for batch in ds.view("all"):
        x = batch[NAME]
        if keep_first and first is None:
            # Kept, not copied: a batch owns its arrays. Either way it costs the engine a fresh batch
            # buffer (it recycles one only when no one holds it), so firsts are kept in repeat 0 only.
            first = batch
        checksum += row_checksum(x)
        samples += batch.size
    return {"samples": samples, "checksum": checksum, "sample_shape": list(x.shape[1:]), "first": first}


def timed(passes: Callable[[], list[dict[str, Any]]], wall0: float, cpu0: float) -> dict[str, Any]:
    """The passes' samples, wall and CPU time since ``wall0`` / ``cpu0``, and their summed checksum."""
    done = passes()
    elapsed, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    samples = sum(p["samples"] for p in done)
    return {
        "epochs": len(done),
        "samples": samples,
        "elapsed_s": elapsed,
        "samples_per_s": samples / elapsed,
        # This process's CPU time (every decode thread) per sample: unlike the wall clock, other
        # processes on a shared machine do not add to it.
        "cpu_ms_per_sample": 1e3 * cpu / samples,
        "checksum": sum(p["checksum"] for p in done),
        "sample_shape": done[0]["sample_shape"],
        "first": done[0]["first"],
    }


def run_engine(
    store: Any,
    geoms: Any,
    manifest: Any,
    engine: str,
    args: argparse.Namespace,
    target: str,
    weights_dir: Path,
    budget: int,
    keep_first: bool,
) -> dict[str, Any]:
    """One dataset of ``engine``: a cold epoch from its construction, then ``--warm-epochs`` warm ones."""
    chunk_transforms, batch_transforms = pipeline(engine, args, target, weights_dir, geoms)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    with insitu.InSituDataset(
        store,
        manifest,
        geoms,
        batch_size=args.batch_size,
        block_chunks=args.block_chunks,
        max_inflight=args.max_inflight,
        seed=0,
        cache_budget_bytes=budget,
        chunk_transforms=chunk_transforms,
        batch_transforms=batch_transforms,
    ) as ds:
        cold = timed(lambda: [one_pass(ds, keep_first)], wall0, cpu0)
        before = ds.stats

        def warm_passes() -> list[dict[str, Any]]:
            done = []
            for epoch in range(1, args.warm_epochs + 1):  # another shuffle each, every slab pooled
                ds.set_epoch(epoch)
                done.append(one_pass(ds, keep_first and epoch == 1))
            return done

        warm = timed(warm_passes, time.perf_counter(), time.process_time())
        after = ds.stats
        sample_shapes = dict(ds.view("all").pooled_sample_shapes)
    cold.update(chunks_decoded=int(before["chunks_decoded"]), bytes_read=int(before["bytes_read"]))
    warm.update(
        chunks_decoded=int(after["chunks_decoded"] - before["chunks_decoded"]),
        bytes_read=int(after["bytes_read"] - before["bytes_read"]),
    )
    return {
        "cold": cold,
        "warm": warm,
        "peak_resident_bytes": int(after["peak_resident_bytes"]),
        "pooled_sample_shape": list(sample_shapes[NAME]),
    }


# --- per-chunk costs ------------------------------------------------------------------------------


class ChunkTimer:
    """Decode, zarr read and each regrid of the same chunks, timed side by side (interleaved).

    Wall time, and the CPU time of this thread (decode and regrid run on it alone; zarr may use
    other threads, so its read gets wall time only): other processes lengthen the first, never
    the second."""

    def __init__(self, root: Path, geom: Any, regrids: dict[str, Regrid], args: argparse.Namespace) -> None:
        self.decoder = numcodecs_decoder(geom)
        if self.decoder is None:
            raise SystemExit(f"insitu has no direct decoder for {NAME}'s codecs")
        self.array = zarr.open_array(root, path=NAME, mode="r")
        self.regrids = regrids
        self.chunk_time = args.chunk_time
        n_chunks = -(-args.n_time // args.chunk_time)
        self.chunks = sorted({int(i) for i in np.linspace(0, n_chunks - 1, min(n_chunks, args.chunks_timed))})
        # The stored bytes, read once: decoding is timed on bytes in memory, as the engine decodes them.
        self.raw = {i: (root / NAME / "c" / str(i) / "0" / "0").read_bytes() for i in self.chunks}
        self.keys = ("decode", "zarr_read", *regrids)
        self.wall: dict[str, list[float]] = {k: [] for k in self.keys}
        self.cpu: dict[str, list[float]] = {k: [] for k in self.keys if k != "zarr_read"}

    def _clock(self, key: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        result = call(*args, **kwargs)
        self.wall[key].append(time.perf_counter() - wall0)
        if key in self.cpu:
            self.cpu[key].append(time.thread_time() - cpu0)
        return result

    def run(self) -> None:
        for i in self.chunks:
            out = np.empty(self.decoder.chunk_shape, dtype=self.decoder.dtype)
            self._clock("decode", self.decoder.decode, self.raw[i], out=out)
            rows = slice(i * self.chunk_time, (i + 1) * self.chunk_time)
            read = self._clock("zarr_read", self.array.__getitem__, rows)
            if read.shape == out.shape and not np.array_equal(read, out):
                raise SystemExit(f"chunk {i}: insitu's decoder and zarr disagree")
            for method, regrid in self.regrids.items():
                self._clock(method, regrid, NAME, out)

    def summary(self) -> dict[str, Any]:
        wall = {k: statistics.median(v) for k, v in self.wall.items()}
        cpu = {k: statistics.median(v) for k, v in self.cpu.items()}
        return {
            "chunk_shape": list(self.decoder.chunk_shape),
            "chunk_mb": self.decoder.nbytes / 1e6,
            "stored_mb": statistics.mean(len(b) for b in self.raw.values()) / 1e6,
            "timed": len(self.wall["decode"]),
            "median_s": wall,
            "range_s": {k: [min(v), max(v)] for k, v in self.wall.items()},
            "cpu_median_s": cpu,
            "regrid_over_decode": {m: wall[m] / wall["decode"] for m in self.regrids},
            "regrid_over_decode_cpu": {m: cpu[m] / cpu["decode"] for m in self.regrids},
            "regrid_over_zarr_read": {m: wall[m] / wall["zarr_read"] for m in self.regrids},
        }


# --- checks ---------------------------------------------------------------------------------------


def direct_rows(root: Path, indices: np.ndarray) -> np.ndarray:
    """The rows of ``indices`` read with zarr, no insitu involved."""
    arr = zarr.open_array(root, path=NAME, mode="r")
    return np.asarray(arr.get_orthogonal_selection((np.asarray(indices), slice(None), slice(None))))


def direct_regrid(root: Path, target: str, method: str) -> Regrid:
    """A Regrid whose source grid comes from the coordinates read with zarr (not the dataset's binding)."""
    group = zarr.open_group(root, mode="r")
    source = Grid.from_coords(np.asarray(group["latitude"][...]), np.asarray(group["longitude"][...]))
    return Regrid(source, target, method, cache_dir=False)


def differ(what: str, got: np.ndarray, expected: np.ndarray) -> str | None:
    if got.shape != expected.shape:
        return f"{what}: shape {got.shape}, expected {expected.shape}"
    if not np.array_equal(got, expected):
        diff = float(np.nanmax(np.abs(got.astype(np.float64) - expected)))
        return f"{what}: values differ (max abs diff {diff:.3g})"
    return None


def check_first_batches(
    root: Path, first: dict[str, dict[str, Any]], target: str, args: argparse.Namespace
) -> list[str]:
    """First batches of repeat 0, cold and warm, against zarr (and the plain batch for the crop)."""
    problems = []
    regrids = {m: direct_regrid(root, target, m) for m in METHODS}
    for phase in PHASES:
        plain = first["plain"][phase]
        rows = direct_rows(root, plain.sample_indices)
        problems.append(differ(f"plain {phase} first batch vs zarr", plain[NAME], rows))
        for method in METHODS:
            batch = first[method][phase]
            mine = direct_rows(root, batch.sample_indices)
            expected = regrids[method](NAME, mine)
            problems.append(
                differ(f"{method} {phase} first batch vs Regrid of zarr rows", batch[NAME], expected)
            )
        cropped = first["crop"][phase]
        if not np.array_equal(cropped.sample_indices, plain.sample_indices):
            problems.append(f"crop {phase}: the first batch holds other samples than plain's")
            continue
        crop = make_crop(args, first["geoms"])
        offsets = crop.offsets(cropped, {NAME: tuple(plain[NAME].shape[1:])})[NAME]
        if any(not np.array_equal(offsets[d], o) for d, o in crop.offsets(plain)[NAME].items()):
            problems.append(f"crop {phase}: offsets from the cut and the uncut batch differ")
        h, w = args.crop
        expected = np.stack(
            [
                plain[NAME][i, a : a + h, b : b + w]
                for i, (a, b) in enumerate(zip(offsets["latitude"], offsets["longitude"], strict=True))
            ]
        )
        problems.append(
            differ(f"crop {phase} first batch vs plain sliced at offsets()", cropped[NAME], expected)
        )
    return [p for p in problems if p]


def check_epochs(rows: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> list[str]:
    problems = []
    for engine in ENGINES:
        for phase in PHASES:
            expected = args.n_time * (1 if phase == "cold" else args.warm_epochs)
            counts = sorted({r[phase]["samples"] for r in rows[engine]})
            if counts != [expected]:
                problems.append(f"{engine} {phase}: delivered {counts} samples, not {expected}")
            sums = sorted({r[phase]["checksum"] for r in rows[engine]})
            if len(sums) != 1:
                problems.append(f"{engine} {phase}: checksums differ across repeats: {sums}")
        decoded = sorted({r["warm"]["chunks_decoded"] for r in rows[engine]})
        if decoded != [0]:
            problems.append(f"{engine}: warm epochs decoded {decoded} chunks (the pool should serve all)")
        if engine != "crop":  # the same samples in other orders: equal sums, to rounding
            cold, warm = rows[engine][0]["cold"]["checksum"], rows[engine][0]["warm"]["checksum"]
            if not np.isclose(cold * args.warm_epochs, warm, rtol=1e-9, atol=0):
                problems.append(f"{engine}: cold and warm checksums differ ({cold!r}, {warm!r})")
    return problems


# --- summary and report ---------------------------------------------------------------------------


def summarise(rows: dict[str, list[dict[str, Any]]], valid: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for engine in ENGINES:
        out[engine] = {}
        for phase in PHASES:
            rates = [r[phase]["samples_per_s"] for r in rows[engine]]
            base = [r[phase]["samples_per_s"] for r in rows["plain"]]
            paired = [a / b for a, b in zip(rates, base, strict=True)]
            median = statistics.median(rates)
            cpu = statistics.median(r[phase]["cpu_ms_per_sample"] for r in rows[engine])
            cpu_base = statistics.median(r[phase]["cpu_ms_per_sample"] for r in rows["plain"])
            out[engine][phase] = {
                "samples_per_s": median,
                "samples_per_s_range": [min(rates), max(rates)],
                "spread": (max(rates) - min(rates)) / median,
                # No ratio is reported for wrong data.
                "ratio": median / statistics.median(base) if valid else None,
                "paired_ratio_range": [min(paired), max(paired)] if valid else None,
                "cpu_ms_per_sample": cpu,
                "cpu_ratio": cpu / cpu_base if valid else None,
                "chunks_decoded": rows[engine][-1][phase]["chunks_decoded"],
                "sample_shape": rows[engine][-1][phase]["sample_shape"],
            }
        out[engine]["peak_resident_bytes"] = max(r["peak_resident_bytes"] for r in rows[engine])
        out[engine]["pooled_sample_shape"] = rows[engine][-1]["pooled_sample_shape"]
    return out


def label(engine: str, args: argparse.Namespace) -> str:
    if engine in METHODS:
        return f"Regrid {engine}"
    if engine == "crop":
        return f"RandomCrop {args.crop[0]}x{args.crop[1]}"
    return "plain"


def print_throughput(summary: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"\nsamples/s (median of {args.repeats}) and ratio to plain: ratio of medians, and the range of "
        "the paired ratios (same repeat); CPU ms per sample (this process, all threads) and its ratio"
    )
    header = (
        f"{'pipeline':<22}{'epoch':<6}{'samples/s':>10}{'x plain':>9}{'paired':>13}"
        f"{'CPU ms':>9}{'x plain':>9}{'pool MB':>9}  delivered"
    )
    print(header)
    print("-" * len(header))
    for phase in PHASES:
        for engine in ENGINES:
            s = summary[engine]
            p = s[phase]
            if p["ratio"] is None:
                ratios = f"{'-':>9}{'-':>13}{p['cpu_ms_per_sample']:>9.1f}{'-':>9}"
            else:
                lo, hi = p["paired_ratio_range"]
                ratios = (
                    f"{p['ratio']:>8.2f}x{f'{lo:.2f}-{hi:.2f}':>13}"
                    f"{p['cpu_ms_per_sample']:>9.2f}{p['cpu_ratio']:>8.2f}x"
                )
            print(
                f"{label(engine, args):<22}{phase:<6}{p['samples_per_s']:>10.0f}{ratios}"
                f"{s['peak_resident_bytes'] / 1e6:>9.1f}  {' x '.join(map(str, p['sample_shape']))}"
            )
    spreads = {(e, ph): summary[e][ph]["spread"] for e in ENGINES for ph in PHASES}
    worst = max(spreads, key=spreads.__getitem__)
    print(
        f"noise: (max - min) / median of samples/s across repeats: up to {spreads[worst]:.0%} "
        f"({worst[0]} {worst[1]}); plain cold {spreads['plain', 'cold']:.0%}, warm {spreads['plain', 'warm']:.0%}"
    )


def print_chunks(chunks: dict[str, Any], checks: dict[str, Any]) -> None:
    shape = " x ".join(map(str, chunks["chunk_shape"]))
    print(
        f"\nper chunk ({shape} float32, {chunks['chunk_mb']:.1f} MB, {chunks['stored_mb']:.1f} MB stored; "
        f"medians of {chunks['timed']}; CPU: this thread's)"
    )
    wall, rng, cpu = chunks["median_s"], chunks["range_s"], chunks["cpu_median_s"]
    rows = [
        ("decode (insitu's decoder, bytes in memory)", "decode"),
        ("read + decode with zarr", "zarr_read"),
        *((f"Regrid {m}", m) for m in METHODS),
    ]
    print(f"  {'':<44}{'wall ms':>8}{'range':>14}{'x decode':>10}{'CPU ms':>8}{'x decode':>10}")
    for text, key in rows:
        lo, hi = rng[key]
        cells = f"{'-':>8}{'-':>10}"
        if key in cpu:
            cells = f"{cpu[key] * 1e3:>8.1f}{cpu[key] / cpu['decode']:>9.2f}x"
        print(
            f"  {text:<44}{wall[key] * 1e3:>8.1f}{f'{lo * 1e3:.1f}-{hi * 1e3:.1f}':>14}"
            f"{wall[key] / wall['decode']:>9.2f}x{cells}"
        )
    for method, report in checks.items():
        busy = report["two_thread_speedup"]
        print(
            f"  check_transform {method}: {report['seconds_per_chunk'] * 1e3:.1f} ms per chunk, "
            f"read+decode {report['read_seconds_per_chunk'] * 1e3:.1f} ms (first chunk, cold), "
            + ("2 threads not compared" if busy is None else f"2 threads keep {busy:.2f} cores busy")
        )


def print_weights(weights: dict[str, Any], repeats: int) -> None:
    print(f"\nweights, once per process (median of {repeats})")
    header = f"  {'method':<14}{'nnz':>10}{'file MB':>9}{'build s':>9}{'load s':>9}{'memory s':>10}"
    print(header)
    for method, w in weights.items():
        print(
            f"  {method:<14}{w['nnz']:>10}{w['file_bytes'] / 1e6:>9.1f}{w['build_s']:>9.3f}"
            f"{w['load_s']:>9.3f}{w['memory_s']:>10.3f}"
        )
    print(
        "  build: built, written to the disk cache and prepared; load: read from the disk cache and "
        "prepared; memory: prepared from the in-memory cache (each new dataset's binding)"
    )


def describe_grid(args: argparse.Namespace, res: float, target_shape: tuple[int, int]) -> str:
    n_lat, n_lon = args.grid
    scale = "ERA5's own grid" if tuple(args.grid) == ERA5_GRID else "scaled down from ERA5's 721 x 1440"
    return (
        f"{n_lat} x {n_lon} ({res:g}°, poles included; {scale}) -> {target_shape[0]} x {target_shape[1]} "
        f"({res * args.factor:g}° cell centres, {args.factor}:1)"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench/transforms.py", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n-time", type=int, default=128, help="samples (time steps)")
    ap.add_argument(
        "--grid",
        type=int,
        nargs=2,
        default=ERA5_GRID,
        metavar=("LAT", "LON"),
        help="source grid, poles included: 721 1440 (0.25°, default), 361 720, 181 360",
    )
    ap.add_argument("--factor", type=int, default=4, help="the target grid is this many times coarser")
    ap.add_argument("--chunk-time", type=int, default=4, help="time steps per chunk")
    ap.add_argument("--crop", type=int, nargs=2, default=(64, 64), metavar=("LAT", "LON"))
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--block-chunks", type=int, default=16)
    ap.add_argument("--max-inflight", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=7, help="epochs per pipeline (alternating); medians")
    ap.add_argument(
        "--warm-epochs", type=int, default=3, help="warm epochs timed together after the cold one"
    )
    ap.add_argument("--weight-repeats", type=int, default=3, help="builds and loads of the weights timed")
    ap.add_argument("--chunks-timed", type=int, default=4, help="chunks whose decode and regrid are timed")
    ap.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()) / "insitu-bench",
        help="where the store is written (once, keyed by its sizes)",
    )
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "transforms.json")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(arguments)
    started = time.perf_counter()
    res = resolution(args.grid)
    target = f"{res * args.factor:g}deg"
    target_shape = Grid.regular(target).shape
    if args.crop[0] > args.grid[0] or args.crop[1] > args.grid[1]:
        raise SystemExit(f"--crop {args.crop[0]} {args.crop[1]} is larger than the grid")
    root = ensure_store(args.work, args)
    store = insitu.open_store(root)
    geoms = insitu.open_geometries(store, [NAME], "time")
    geom = geoms[NAME]
    manifest = insitu.split_by_chunk(geom, (1.0,), names=["all"])
    sample_bytes = args.grid[0] * args.grid[1] * 4
    budget = 2 * args.n_time * sample_bytes + (256 << 20)  # every slab of an epoch, and room to spare
    grid_text = describe_grid(args, res, target_shape)
    print(
        f"{args.n_time} samples of {args.grid[0]} x {args.grid[1]} float32 "
        f"({sample_bytes / 1e6:.1f} MB), chunks of {args.chunk_time}, batch {args.batch_size}, "
        f"block_chunks {args.block_chunks}, max_inflight {args.max_inflight}, median of {args.repeats}\n"
        f"regrid {grid_text}",
        flush=True,
    )

    with tempfile.TemporaryDirectory(prefix="insitu-regrid-weights-") as tmp:
        weights_dir = Path(tmp)
        weights, bound = {}, {}
        for method in METHODS:
            weights[method], bound[method] = weight_costs(
                geom, target, method, weights_dir / method, args.weight_repeats
            )
        for method in METHODS:  # in memory before any epoch: the one-time build stays out of them
            Regrid.for_array(geom, target, method, cache_dir=weights_dir / method)
        print_weights(weights, args.weight_repeats)

        timer = ChunkTimer(root, geom, bound, args)
        rows: dict[str, list[dict[str, Any]]] = {e: [] for e in ENGINES}
        first: dict[str, Any] = {"geoms": geoms}
        for repeat in range(args.repeats):
            timer.run()
            order = ENGINES[repeat % len(ENGINES) :] + ENGINES[: repeat % len(ENGINES)]
            for engine in order:  # alternate, each repeat starting one later: drift hits all alike
                row = run_engine(
                    store, geoms, manifest, engine, args, target, weights_dir, budget, keep_first=repeat == 0
                )
                if repeat == 0:
                    first[engine] = {phase: row[phase]["first"] for phase in PHASES}
                for phase in PHASES:
                    del row[phase]["first"]
                rows[engine].append(row)
            print(
                f"  repeat {repeat + 1}/{args.repeats}: "
                + ", ".join(f"{e} {rows[e][-1]['cold']['samples_per_s']:.0f}" for e in ENGINES)
                + " cold samples/s",
                flush=True,
            )
        checks = {}
        for method in METHODS:
            report = check_transform(
                Regrid(target=target, method=method, cache_dir=weights_dir / method), store, NAME
            )
            checks[method] = {**json.loads(report.to_json())}

    problems = check_first_batches(root, first, target, args) + check_epochs(rows, args)
    problems += [f"check_transform {m}: {p}" for m, c in checks.items() for p in c["problems"]]
    summary = summarise(rows, valid=not problems)
    chunks = timer.summary()
    print_throughput(summary, args)
    print_chunks(chunks, checks)
    if problems:
        print("VALUES DIFFER, no ratio reported:\n  " + "\n  ".join(problems))
    else:
        print(
            "\nvalues checked: first batches (cold and warm) equal zarr rows, regridded or cropped; checksums"
        )
    out = {
        "schema": 1,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": portable_paths(shlex.join(["python", "bench/transforms.py", *arguments])),
        "wall_s": time.perf_counter() - started,
        "settings": {
            k: (portable_paths(str(v)) if isinstance(v, Path) else v) for k, v in vars(args).items()
        },
        "grid": {
            "source": list(args.grid),
            "target": list(target_shape),
            "source_deg": res,
            "target_deg": res * args.factor,
            "era5_full": tuple(args.grid) == ERA5_GRID,
            "text": grid_text,
        },
        "cache_budget_bytes": budget,
        "machine": machine(),
        "versions": {
            "insitu": insitu.__version__,
            "insitu_transforms": getattr(insitu_transforms, "__version__", None),
            "zarr": zarr.__version__,
            "numpy": np.__version__,
            "scipy": scipy.__version__,
        },
        "weights": weights,
        "chunk_costs": chunks,
        "check_transform": checks,
        "summary": summary,
        "rows": rows,
        "values_equal": not problems,
        "problems": problems,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=float))
    print(f"wrote {portable_paths(str(args.out))}")
    if problems:
        raise SystemExit("values differ:\n  " + "\n  ".join(problems))
    return out


if __name__ == "__main__":
    main()
