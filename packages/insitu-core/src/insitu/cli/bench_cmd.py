"""``insitu bench URL``: a short real run on a store, then a sweep that recommends settings.

First one run with the engine's defaults (time to first batch, throughput,
stall fraction), which also warms the process, the store's connections and
the OS page cache. Then every point of a small grid of ``max_inflight`` x
``block_chunks`` x ``decode_threads``, each a fresh dataset (so no point
reads from another's pool) timed for an equal share of ``--seconds``. The
points run in rounds, each round in its own shuffled order, so drift of the
machine spreads over all of them; a setting's repeats show how noisy the
numbers are. The recommendation is the swept setting with the best median
throughput, except that settings within the noise of the best count as tied
and the one of them that holds the least in flight wins (``need MiB``: the batch buffers of
its read-ahead blocks and prefetch queue, ``iter(view).readahead_bytes``).

Throughput is measured after the first batch (start-up is the TTFB column),
over delivered sample bytes (MB = 10^6 bytes), as ``bench/`` measures it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from insitu.cli.common import add_store_arguments, open_store_from_args, print_table

AXES = ("max_inflight", "block_chunks", "decode_threads")
#: Share of --seconds for the baseline run with the defaults.
BASELINE_SHARE = 0.2
#: The shortest timed run per point; a budget that leaves less is refused.
MIN_SLICE_S = 0.15
#: Throughputs closer than this to the best (or the measured noise, if larger) count as tied.
TIE_FLOOR = 0.05
SCHEMA = "insitu.bench/1"


class BenchCommand:
    """insitu bench URL_OR_PATH: measure a short real run on the store (time to first batch,
    samples/s, MB/s, stall fraction), then sweep max_inflight x block_chunks x decode_threads
    within --seconds and recommend the best setting for this store and machine.

    The table lists every swept setting with its median throughput, the spread of its repeats,
    time to first batch and memory; the recommendation is marked '*'. The full results go to
    --out (default ./insitu-bench.json). Progress is printed on stderr, one line per run.
    """

    description = inspect.cleandoc(__doc__ or "")
    help = "measure a short run on a store and sweep max_inflight x block_chunks x decode_threads"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_store_arguments(parser)
        parser.add_argument("--path", default="", help="a group inside the store")
        parser.add_argument(
            "--variables",
            nargs="+",
            default=None,
            metavar="NAME",
            help="arrays to read (default: every data variable); put the URL before this option",
        )
        parser.add_argument(
            "--sample-dim", default=None, help="the sample dimension (default: insitu's choice)"
        )
        parser.add_argument(
            "--seconds",
            type=float,
            default=60.0,
            help="time budget for the whole measurement (default 60)",
        )
        parser.add_argument("--batch-size", type=int, default=32, help="samples per batch (default 32)")
        parser.add_argument(
            "--repeats",
            type=int,
            default=2,
            help="rounds over the grid, each in a shuffled order (default 2; fewer if the budget is short)",
        )
        parser.add_argument(
            "--grid",
            action="append",
            default=[],
            metavar="NAME=V1,V2",
            help="the values to sweep of max_inflight, block_chunks or decode_threads (repeatable); "
            "unnamed dials take their default grid",
        )
        parser.add_argument(
            "--step-ms",
            type=float,
            default=0.0,
            help="simulated training step per batch, in ms (default 0: the loader alone)",
        )
        parser.add_argument(
            "--cache-budget-bytes", type=int, default=None, help="the pool budget (default: the engine's)"
        )
        parser.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
        parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
        parser.add_argument(
            "--out",
            default="insitu-bench.json",
            metavar="FILE",
            help="where to save the results as JSON (default ./insitu-bench.json)",
        )

    def run(self, args: argparse.Namespace) -> int:
        config = _config(args)
        report = bench(args, config, progress=_stderr)
        out = Path(args.out)
        out.write_text(json.dumps(report, indent=1, default=str) + "\n")
        if args.json:
            print(json.dumps(report, indent=1, default=str))
        else:
            print(render(report))
        _stderr(f"results saved to {out}")
        return 0 if report["recommendation"] is not None else 1


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Config:
    seconds: float
    batch_size: int
    repeats: int
    step_s: float
    seed: int
    budget: int | None
    grid: dict[str, list[int]]  # only the dials given with --grid


def _config(args: argparse.Namespace) -> Config:
    if not args.seconds > 0:
        raise ValueError(f"--seconds must be positive, got {args.seconds}")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.repeats < 1:
        raise ValueError(f"--repeats must be at least 1, got {args.repeats}")
    if args.step_ms < 0:
        raise ValueError(f"--step-ms must not be negative, got {args.step_ms}")
    return Config(
        seconds=float(args.seconds),
        batch_size=args.batch_size,
        repeats=args.repeats,
        step_s=args.step_ms / 1e3,
        seed=args.seed,
        budget=args.cache_budget_bytes,
        grid=parse_grid(args.grid),
    )


def parse_grid(items: Sequence[str]) -> dict[str, list[int]]:
    """``["max_inflight=8,32", "block_chunks=4"]`` -> ``{"max_inflight": [8, 32], "block_chunks": [4]}``."""
    grid: dict[str, list[int]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in AXES:
            raise ValueError(f"--grid takes NAME=V1,V2 with NAME one of {', '.join(AXES)}; got {item!r}")
        try:
            parsed = [int(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"--grid {name} takes whole numbers, got {values!r}") from None
        if not parsed or min(parsed) < 1:
            raise ValueError(f"--grid {name} takes positive whole numbers, got {values!r}")
        grid[name] = sorted(set(grid.get(name, []) + parsed))
    return grid


def engine_defaults() -> dict[str, int]:
    """The engine's own values of the swept dials (read from ``InSituDataset``'s signature)."""
    from insitu import InSituDataset

    params = inspect.signature(InSituDataset.__init__).parameters
    out = {name: params[name].default for name in AXES}
    if out["decode_threads"] is None:
        out["decode_threads"] = os.cpu_count() or 1
    return {k: int(v) for k, v in out.items()}


def default_grid(
    given: Mapping[str, list[int]], defaults: Mapping[str, int], *, local: bool, n_chunks: int
) -> tuple[dict[str, list[int]], list[str]]:
    """The grid to sweep: what ``--grid`` names, the default values for the rest; and notes."""
    cpus = os.cpu_count() or 1
    notes: list[str] = []
    grid: dict[str, list[int]] = {}
    if "max_inflight" in given:
        grid["max_inflight"] = list(given["max_inflight"])
    elif local:
        grid["max_inflight"] = [defaults["max_inflight"]]
        notes.append(
            "max_inflight not swept: local files are read in the decode threads, and max_inflight "
            "bounds concurrent requests to remote stores only"
        )
    else:
        grid["max_inflight"] = sorted({8, defaults["max_inflight"], 128})
    if "block_chunks" in given:
        grid["block_chunks"] = list(given["block_chunks"])
    else:
        wanted = sorted({4, defaults["block_chunks"], 64})
        capped = sorted({min(v, n_chunks) for v in wanted})
        if capped != wanted:
            notes.append(
                f"block_chunks capped at the store's {n_chunks} chunk(s): a larger block is the same block"
            )
        grid["block_chunks"] = capped
    if "decode_threads" in given:
        grid["decode_threads"] = list(given["decode_threads"])
    else:
        grid["decode_threads"] = sorted({max(1, cpus // 2), cpus})
    return grid, notes


# -- measuring one run ------------------------------------------------------------------------------
class PeakRss:
    """The process's peak resident set size while running, sampled every few milliseconds
    (Linux ``/proc/self/statm``; ``None`` elsewhere), as growth over the size when it started."""

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.floor = self.peak = self._now() or 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def _now() -> int | None:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return None

    def __enter__(self) -> PeakRss:
        if self._now() is not None:
            self._thread = threading.Thread(target=self._watch, name="insitu-bench-rss", daemon=True)
            self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, self._now() or 0)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self.peak = max(self.peak, self._now() or 0)

    @property
    def growth(self) -> int | None:
        return None if self._thread is None else max(0, self.peak - self.floor)


@dataclass
class Target:
    """What every run reads: the store, its geometries and the split over every sample."""

    store: Any
    geometries: list[Any]
    fields: list[str]  # labels whose arrays count as delivered bytes (not static ones)
    manifest: Any
    local: bool


def run_point(target: Target, setting: Mapping[str, int], seconds: float, config: Config) -> dict[str, Any]:
    """One timed run of ``setting``: cold epochs, each from a fresh dataset, until ``seconds``
    have passed (the last one stopped there); at least one batch."""
    started = time.perf_counter()
    epochs: list[dict[str, Any]] = []
    while True:
        left = seconds - (time.perf_counter() - started)
        epoch = run_epoch(target, setting, left, config)
        if epoch["error"] is not None:
            return epoch
        epochs.append(epoch)
        if not epoch["complete_epoch"] or time.perf_counter() - started >= seconds:
            break
    steady_samples = sum(e["steady_samples"] for e in epochs)
    steady_s = sum(e["steady_s"] for e in epochs)
    samples, nbytes = sum(e["samples"] for e in epochs), sum(e["bytes"] for e in epochs)
    rate = steady_samples / steady_s if steady_s > 0 else 0.0
    busy = sum(e["iterating_s"] for e in epochs)
    rss = [e["peak_rss_growth_bytes"] for e in epochs if e["peak_rss_growth_bytes"] is not None]
    return {
        "setting": dict(setting),
        "error": None,
        "epochs": len(epochs),
        "ttfb_s": _median([e["ttfb_s"] for e in epochs]),
        "seconds": time.perf_counter() - started,
        "samples": samples,
        "bytes": nbytes,
        "samples_per_s": rate,
        "MBps": rate * (nbytes / samples) / 1e6 if samples else 0.0,
        "stall_fraction": sum(e["waiting_s"] for e in epochs) / busy if busy else None,
        "need_bytes": epochs[0]["need_bytes"],
        "peak_pool_bytes": max(e["peak_pool_bytes"] or 0 for e in epochs),
        "peak_rss_growth_bytes": max(rss) if rss else None,
        "reads": sum(e["reads"] or 0 for e in epochs),
        "bytes_read": sum(e["bytes_read"] or 0 for e in epochs),
    }


def run_epoch(target: Target, setting: Mapping[str, int], seconds: float, config: Config) -> dict[str, Any]:
    """One cold epoch of a fresh dataset with ``setting``, timed from construction; stopped at
    the first batch after ``seconds``."""
    import gc

    from insitu import ConfigError, InSituDataset

    gc.collect()  # the previous run's arenas go back to the OS before this one is measured
    out: dict[str, Any] = {"setting": dict(setting), "error": None}
    options: dict[str, Any] = dict(setting)
    if config.budget:
        options["cache_budget_bytes"] = config.budget
    with PeakRss() as rss:
        t0 = time.perf_counter()
        try:
            ds = InSituDataset(
                target.store,
                target.manifest,
                target.geometries,
                batch_size=config.batch_size,
                seed=config.seed,
                **options,
            )
        except ConfigError as exc:
            out["error"] = str(exc)
            return out
        try:
            it = iter(ds.train)
            need = getattr(it, "readahead_bytes", None)
            samples = nbytes = first_samples = 0
            first_at = last_at = None
            complete = True
            for batch in it:
                now = time.perf_counter()
                if first_at is None:
                    first_at, first_samples = now, batch.size
                samples += batch.size
                nbytes += sum(batch[f].nbytes for f in target.fields)
                last_at = now
                if config.step_s:
                    time.sleep(config.step_s)
                if now - t0 >= seconds:
                    complete = False
                    break
            it.close()
            stats = dict(ds.stats)
        except ConfigError as exc:
            out["error"] = str(exc)
            return out
        finally:
            ds.close()
    if first_at is None or last_at is None:
        out["error"] = "the split delivered no batch"
        return out
    steady_samples, steady_s = samples - first_samples, last_at - first_at
    if steady_samples <= 0 or steady_s <= 0:  # one batch: the rate from construction
        steady_samples, steady_s = samples, last_at - t0
    out.update(
        {
            "ttfb_s": first_at - t0,
            "samples": samples,
            "bytes": nbytes,
            "complete_epoch": complete,
            "steady_samples": steady_samples,
            "steady_s": steady_s,
            "waiting_s": stats.get("waiting_s") or 0.0,
            "iterating_s": stats.get("iterating_s") or 0.0,
            "need_bytes": need,
            "peak_pool_bytes": stats.get("peak_resident_bytes"),
            "peak_rss_growth_bytes": rss.growth,
            "reads": stats.get("reads"),
            "bytes_read": stats.get("bytes_read"),
        }
    )
    return out


# -- the whole measurement --------------------------------------------------------------------------
def bench(args: argparse.Namespace, config: Config, progress: Callable[[str], None]) -> dict[str, Any]:
    """Open the store, run the baseline and the sweep; the report (JSON-able)."""
    import itertools
    import platform

    import numpy as np
    from zarr.storage import LocalStore

    import insitu
    from insitu.store.opener import redact_urls

    started = time.perf_counter()
    store = open_store_from_args(args)
    geoms = insitu.open_geometries(store, args.variables, args.sample_dim, path=args.path)
    moving = [g for g in geoms.values() if not g.static]
    if not moving:
        raise insitu.ConfigError(f"no array of {args.url} has a sample dimension to batch along")
    manifest = insitu.split_by_chunk(moving[0], (1.0,), names=("train",))
    open_s = time.perf_counter() - started
    target = Target(
        store=store,
        geometries=list(geoms.values()),
        fields=[g.label for g in moving],
        manifest=manifest,
        local=isinstance(store, LocalStore),
    )
    n_chunks = len(manifest.chunk_ids("train"))
    defaults = engine_defaults()
    grid, notes = default_grid(config.grid, defaults, local=target.local, n_chunks=n_chunks)
    points = [dict(zip(AXES, values, strict=True)) for values in itertools.product(*(grid[a] for a in AXES))]

    # The budget: a share for the baseline, the rest split evenly over points x rounds.
    baseline_s = max(MIN_SLICE_S, config.seconds * BASELINE_SHARE)
    sweep_s = config.seconds - open_s - baseline_s
    rounds = config.repeats
    while rounds > 1 and sweep_s / (len(points) * rounds) < MIN_SLICE_S:
        rounds -= 1
    slice_s = sweep_s / (len(points) * rounds)
    if slice_s < MIN_SLICE_S:
        raise ValueError(
            f"--seconds {config.seconds:g} leaves {max(slice_s, 0):.2f} s per run for {len(points)} "
            f"setting(s) (at least {MIN_SLICE_S} s each): raise --seconds or narrow the sweep with --grid"
        )
    if rounds < config.repeats:
        notes.append(f"{rounds} round(s) instead of {config.repeats}: the budget allows no more")
    if rounds == 1:
        notes.append(
            "one run per setting: the noise is not measured; throughputs within "
            f"{TIE_FLOOR:.0%} of the best count as tied"
        )
    if slice_s < 1.0:
        notes.append(
            f"each run lasts {slice_s:.2f} s: short runs weigh start-up heavily; raise --seconds "
            "for steadier numbers"
        )
    if target.local:
        notes.append(
            "local files: after the first read the OS page cache may hold them, so the sweep compares "
            "decoding and gathering more than the disk"
        )
    progress(
        f"insitu bench: {len(points)} setting(s) x {rounds} round(s), {slice_s:.2f} s each, after a "
        f"{baseline_s:.2f} s baseline with the defaults"
    )

    baseline = run_point(target, defaults, baseline_s, config)
    if baseline["error"] is not None:
        progress(f"baseline {_setting_text(defaults)}: failed: {baseline['error']}")
    else:
        progress(f"baseline {_setting_text(defaults)}: {_run_text(baseline)}")
        baseline["open_s"] = open_s
        baseline["ttfb_from_open_s"] = open_s + baseline["ttfb_s"]

    rng = np.random.default_rng(config.seed)
    runs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(points))}
    failed: dict[int, str] = {}
    done = 0
    deadline = started + config.seconds * 1.5  # rounds stop once well past the budget
    rounds_run = 0
    for r in range(rounds):
        if r > 0 and time.perf_counter() > deadline:
            notes.append(f"stopped after {r} round(s): the runs took longer than the budget")
            break
        rounds_run += 1
        for i in rng.permutation(len(points)).tolist():
            if i in failed:
                continue
            done += 1
            result = run_point(target, points[i], slice_s, config)
            tag = f"[{done}/{len(points) * rounds}] round {r + 1} {_setting_text(points[i])}"
            if result["error"] is not None:
                failed[i] = result["error"]
                progress(f"{tag}: failed: {result['error']}")
                continue
            runs[i].append(result)
            progress(f"{tag}: {_run_text(result)}")

    summary = [_summarize(points[i], runs[i], failed.get(i), defaults) for i in range(len(points))]
    noise = _noise(summary)
    recommendation = recommend(summary, noise["tolerance"])
    if recommendation is not None:
        rec = summary[recommendation["index"]]
        rec["recommended"] = True
        for i in recommendation["tied"]:
            summary[i]["tied"] = True
        if rec["setting"]["block_chunks"] < defaults["block_chunks"]:
            notes.append(
                f"block_chunks also sets how well samples mix: {rec['setting']['block_chunks']} chunks "
                f"shuffled together instead of {defaults['block_chunks']} is a weaker shuffle"
            )
        default_row = next((p for p in summary if p["is_default"] and p["samples_per_s"]), None)
        if default_row is not None and rec["samples_per_s"]:
            recommendation["vs_default"] = rec["samples_per_s"] / default_row["samples_per_s"] - 1
    return {
        "schema": SCHEMA,
        "store": redact_urls(repr(store)),
        "url": redact_urls(args.url),
        "local": target.local,
        "insitu": insitu.__version__,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "data": {
            "arrays": [g.label for g in target.geometries],
            "batched": target.fields,
            "sample_dim": geoms.sample_dim,
            "samples": int(manifest.n_samples),
            "chunks": n_chunks,
        },
        "settings": {
            "seconds": config.seconds,
            "batch_size": config.batch_size,
            "repeats": rounds_run,
            "run_seconds": slice_s,
            "baseline_seconds": baseline_s,
            "step_ms": config.step_s * 1e3,
            "seed": config.seed,
            "cache_budget_bytes": config.budget,
        },
        "defaults": defaults,
        "baseline": baseline,
        "grid": grid,
        "points": summary,
        "noise": noise,
        "recommendation": recommendation,
        "notes": notes,
        "wall_s": time.perf_counter() - started,
    }


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _summarize(
    setting: Mapping[str, int], runs: list[dict[str, Any]], error: str | None, defaults: Mapping[str, int]
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "setting": dict(setting),
        "is_default": dict(setting) == dict(defaults),
        "error": error,
        "runs": runs,
        "samples_per_s": None,
        "MBps": None,
        "spread": None,
        "ttfb_s": None,
        "need_bytes": None,
        "peak_pool_bytes": None,
        "peak_rss_growth_bytes": None,
        "recommended": False,
        "tied": False,
    }
    if not runs:
        return row
    rates = [r["samples_per_s"] for r in runs]
    median = _median(rates)
    row.update(
        {
            "samples_per_s": median,
            "MBps": _median([r["MBps"] for r in runs]),
            "spread": (max(rates) - min(rates)) / median if len(runs) > 1 and median else None,
            "ttfb_s": _median([r["ttfb_s"] for r in runs]),
            "need_bytes": runs[0]["need_bytes"],
            "peak_pool_bytes": max(r["peak_pool_bytes"] or 0 for r in runs),
            "peak_rss_growth_bytes": max((r["peak_rss_growth_bytes"] or 0 for r in runs), default=None),
        }
    )
    return row


def _noise(summary: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    spreads = [p["spread"] for p in summary if p["spread"] is not None]
    median = _median(spreads) if spreads else None
    return {
        "median_spread": median,
        "max_spread": max(spreads) if spreads else None,
        "tolerance": max(TIE_FLOOR, median or 0.0),
    }


def recommend(summary: Sequence[Mapping[str, Any]], tolerance: float) -> dict[str, Any] | None:
    """The recommended point: among the settings whose median throughput is within ``tolerance``
    of the best, the one holding the least in flight, then fewer decode threads, then fewer
    requests in flight, then the faster.

    The best's own spread widens the tolerance when it is larger: the top of several noisy
    medians is likely the luckiest, and what lies within its own spread is not measurably slower.
    """
    ok = [i for i, p in enumerate(summary) if p["samples_per_s"]]
    if not ok:
        return None
    best = max(ok, key=lambda i: summary[i]["samples_per_s"])
    tolerance = max(tolerance, summary[best].get("spread") or 0.0)
    floor = summary[best]["samples_per_s"] * (1 - tolerance)
    tied = [i for i in ok if summary[i]["samples_per_s"] >= floor]

    def cost(i: int) -> tuple[float, ...]:
        p = summary[i]
        need = p["need_bytes"] if p["need_bytes"] is not None else p["peak_pool_bytes"] or 0
        s = p["setting"]
        return (need, s["decode_threads"], s["max_inflight"], -p["samples_per_s"])

    pick = min(tied, key=cost)
    why = (
        "the best throughput"
        if len(tied) == 1
        else f"{len(tied)} settings within {tolerance:.0%} of the best throughput; this one needs the least "
        "memory (then the fewest threads and requests in flight)"
    )
    return {
        "index": pick,
        "setting": dict(summary[pick]["setting"]),
        "samples_per_s": summary[pick]["samples_per_s"],
        "MBps": summary[pick].get("MBps"),
        "best_index": best,
        "tied": tied,
        "tolerance": tolerance,
        "reason": why,
    }


# -- text -------------------------------------------------------------------------------------------
def _setting_text(setting: Mapping[str, int]) -> str:
    return " ".join(f"{k}={setting[k]}" for k in AXES)


def _run_text(r: Mapping[str, Any]) -> str:
    stall = "" if r["stall_fraction"] is None else f", stall {r['stall_fraction']:.2f}"
    return (
        f"TTFB {r['ttfb_s'] * 1e3:.0f} ms, {r['samples_per_s']:.0f} samples/s, {r['MBps']:.1f} MB/s"
        f"{stall} ({r['samples']} samples, {r['epochs']} cold epoch(s), {r['seconds']:.2f} s)"
    )


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def render(report: Mapping[str, Any]) -> str:
    """The report as text: the baseline, the swept settings, the recommendation."""
    d, s, b = report["data"], report["settings"], report["baseline"]
    kind = "local files" if report["local"] else "remote"
    lines = [
        f"store: {report['store']} ({kind})",
        f"data: {', '.join(d['batched'])} along {d['sample_dim'] or 'axis 0'}, {d['samples']} samples in "
        f"{d['chunks']} chunk(s); batch {s['batch_size']}"
        + (f", {s['step_ms']:g} ms simulated step per batch" if s["step_ms"] else ""),
        "",
        f"baseline, the engine's defaults ({_setting_text(report['defaults'])}):",
    ]
    if b["error"] is not None:
        lines.append(f"  failed: {b['error']}")
    else:
        lines += [
            f"  time to first batch  {b['ttfb_s'] * 1e3:.0f} ms after construction "
            f"({b['ttfb_from_open_s'] * 1e3:.0f} ms from opening the store)",
            f"  throughput           {b['samples_per_s']:.0f} samples/s, {b['MBps']:.1f} MB/s",
            f"  stall fraction       {b['stall_fraction']:.2f} (time waiting for a batch / time iterating)"
            + ("" if s["step_ms"] else "; nothing trains here: model a step with --step-ms"),
        ]
    lines += [
        "",
        f"sweep: {len(report['points'])} setting(s) x {s['repeats']} round(s) of {s['run_seconds']:.2f} s, "
        "a fresh dataset each, rounds in shuffled order:",
    ]
    rows = []
    for p in report["points"]:
        mark = "*" if p["recommended"] else "=" if p["tied"] else ""
        st = p["setting"]
        if p["error"] is not None or not p["runs"]:
            why = p["error"] or "not run"
            rows.append([mark, *(st[a] for a in AXES), "failed", "", "", "", "", "", "", why[:60]])
            continue
        rows.append(
            [
                mark,
                *(st[a] for a in AXES),
                f"{p['samples_per_s']:.0f}",
                f"{p['MBps']:.1f}",
                "-" if p["spread"] is None else f"{p['spread']:.0%}",
                f"{p['ttfb_s'] * 1e3:.0f}",
                _mib(p["need_bytes"]),
                _mib(p["peak_pool_bytes"]),
                _mib(p["peak_rss_growth_bytes"]),
                len(p["runs"]),
                "default" if p["is_default"] else "",
            ]
        )
    lines += print_table(
        [
            "",
            "max_inflight",
            "block_chunks",
            "decode_threads",
            "samples/s",
            "MB/s",
            "spread",
            "TTFB ms",
            "need MiB",
            "pool MiB",
            "RSS+ MiB",
            "runs",
            "",
        ],
        rows,
    )
    n = report["noise"]
    lines.append("")
    if n["median_spread"] is not None:
        lines.append(
            f"noise: the repeats of one setting differ by {n['median_spread']:.0%} (median over settings; "
            f"worst {n['max_spread']:.0%})"
        )
    rec = report["recommendation"]
    if rec is not None:
        widened = " (the best's own spread)" if rec["tolerance"] > n["tolerance"] else ""
        lines.append(
            f"settings within {rec['tolerance']:.0%}{widened} of the best throughput count as tied ('=')"
        )
    if rec is None:
        lines.append("no recommendation: every setting failed")
    else:
        lines.append(
            f"* recommended: {_setting_text(rec['setting'])} ({rec['samples_per_s']:.0f} samples/s, "
            f"{rec['MBps']:.1f} MB/s): {rec['reason']}"
        )
        if "vs_default" in rec:
            gain = rec["vs_default"]
            verdict = (
                "within the noise: the defaults are as good here"
                if abs(gain) <= rec["tolerance"]
                else f"{gain:+.0%} over the defaults"
            )
            lines.append(f"  versus the defaults: {verdict}")
    lines.append(
        "  need: pool bytes the setting pins at most (its blocks and read-ahead); pool: peak pool "
        "bytes held; RSS+: peak growth of this process's memory during the run"
    )
    for note in report["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)
