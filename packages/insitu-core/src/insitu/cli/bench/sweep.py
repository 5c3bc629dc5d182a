"""The settings sweep of ``insitu bench``: the budget, the baseline, the rounds, the recommendation."""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from insitu.cli.bench.measure import Target, median, run_point
from insitu.cli.bench.render import run_text, setting_text
from insitu.cli.bench.settings import AXES, Config, default_grid, engine_defaults
from insitu.cli.common import open_store_from_args

#: Share of --seconds for the baseline run with the defaults.
BASELINE_SHARE = 0.2
#: The shortest timed run per point; a budget that leaves less is refused.
MIN_SLICE_S = 0.15
#: Throughputs closer than this to the best (or the measured noise, if larger) count as tied.
TIE_FLOOR = 0.05
SCHEMA = "insitu.bench/1"


@dataclass
class SweepPlan:
    """The points to run and the time each gets."""

    grid: dict[str, list[int]]
    points: list[dict[str, int]]
    baseline_s: float
    slice_s: float  # one timed run of one point
    rounds: int
    notes: list[str]  # grows while the sweep runs


@dataclass
class SweepResult:
    """Every point summarised, the noise between repeats and the recommended point."""

    points: list[dict[str, Any]]
    noise: dict[str, Any]
    recommendation: dict[str, Any] | None
    rounds_run: int


def bench(args: argparse.Namespace, config: Config, progress: Callable[[str], None]) -> dict[str, Any]:
    """Open the store, run the baseline and the sweep; the report (JSON-able)."""
    started = time.perf_counter()
    target, open_s = open_target(args)
    sampled = [g for g in target.geometries if g.label in target.fields]
    defaults = engine_defaults(target.manifest.chunk_len * sum(g.sample_nbytes for g in sampled))
    plan = plan_sweep(target, config, defaults, open_s)
    progress(
        f"insitu bench: {len(plan.points)} setting(s) x {plan.rounds} round(s), {plan.slice_s:.2f} s each, "
        f"after a {plan.baseline_s:.2f} s baseline with the defaults"
    )
    baseline = run_baseline(target, defaults, plan.baseline_s, config, open_s, progress)
    deadline = started + config.seconds * 1.5  # rounds stop once well past the budget
    runs, failed, rounds_run = run_rounds(target, plan, config, deadline, progress)
    result = summarize_sweep(plan, runs, failed, defaults, rounds_run)
    return _report(args, config, target, plan, defaults, baseline, result, started)


def open_target(args: argparse.Namespace) -> tuple[Target, float]:
    """The store, its geometries and one split over every sample; the seconds opening took."""
    from zarr.storage import LocalStore

    import insitu

    started = time.perf_counter()
    store = open_store_from_args(args)
    sample_dim = args.sample_dim
    if args.variables:
        # The store's sample dimension, not one guessed from the named arrays alone: named on its
        # own, a static field (lsm) would lead with latitude and be benchmarked along it.
        whole = insitu.open_geometries(store, sample_dim=sample_dim, path=args.path, include_static=True)
        sample_dim = whole.sample_dim if sample_dim is None else sample_dim
        if all(v in whole and whole[v].static for v in args.variables):
            raise insitu.ConfigError(
                f"--variables {' '.join(args.variables)}: static (no {sample_dim!r} dimension), "
                f"nothing to batch; name a variable along {sample_dim!r}: "
                f"{sorted(n for n, g in whole.items() if not g.static)}"
            )
    geoms = insitu.open_geometries(store, args.variables, sample_dim=sample_dim, path=args.path)
    moving = [g for g in geoms.values() if not g.static]
    statics = [g.label for g in geoms.values() if g.static]
    if not moving:
        raise insitu.ConfigError(f"no array of {args.url} has a sample dimension to batch along")
    if statics:
        print(f"static (read once, delivered with every batch): {', '.join(statics)}", file=sys.stderr)
    manifest = insitu.split_by_chunk(moving[0], (1.0,), names=("train",))
    open_s = time.perf_counter() - started
    target = Target(
        store=store,
        geometries=list(geoms.values()),
        fields=[g.label for g in moving],
        manifest=manifest,
        local=isinstance(store, LocalStore),
        sample_dim=geoms.sample_dim,
        n_chunks=len(manifest.chunk_ids("train")),
    )
    return target, open_s


def plan_sweep(target: Target, config: Config, defaults: Mapping[str, int], open_s: float) -> SweepPlan:
    """The grid's points and the budget: a share for the baseline, the rest split evenly over
    points x rounds (fewer rounds if the budget is short); notes on what that means."""
    grid, notes = default_grid(config.grid, defaults, local=target.local, n_chunks=target.n_chunks)
    points = [dict(zip(AXES, values, strict=True)) for values in itertools.product(*(grid[a] for a in AXES))]
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
    notes += _budget_notes(target, config, rounds, slice_s)
    return SweepPlan(grid, points, baseline_s, slice_s, rounds, notes)


def _budget_notes(target: Target, config: Config, rounds: int, slice_s: float) -> list[str]:
    notes: list[str] = []
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
    return notes


def run_baseline(
    target: Target,
    defaults: Mapping[str, int],
    seconds: float,
    config: Config,
    open_s: float,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """One run with the engine's defaults; its time to first batch also counted from opening."""
    baseline = run_point(target, defaults, seconds, config)
    if baseline["error"] is not None:
        progress(f"baseline {setting_text(defaults)}: failed: {baseline['error']}")
    else:
        progress(f"baseline {setting_text(defaults)}: {run_text(baseline)}")
        baseline["open_s"] = open_s
        baseline["ttfb_from_open_s"] = open_s + baseline["ttfb_s"]
    return baseline


def run_rounds(
    target: Target, plan: SweepPlan, config: Config, deadline: float, progress: Callable[[str], None]
) -> tuple[dict[int, list[dict[str, Any]]], dict[int, str], int]:
    """Every point once per round, each round in its own shuffled order, until the rounds are
    done or ``deadline`` has passed; the runs per point, the points that failed, the rounds run."""
    import numpy as np

    points = plan.points
    rng = np.random.default_rng(config.seed)
    runs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(points))}
    failed: dict[int, str] = {}
    done = 0
    rounds_run = 0
    for r in range(plan.rounds):
        if r > 0 and time.perf_counter() > deadline:
            plan.notes.append(f"stopped after {r} round(s): the runs took longer than the budget")
            break
        rounds_run += 1
        for i in rng.permutation(len(points)).tolist():
            if i in failed:
                continue
            done += 1
            result = run_point(target, points[i], plan.slice_s, config)
            tag = f"[{done}/{len(points) * plan.rounds}] round {r + 1} {setting_text(points[i])}"
            if result["error"] is not None:
                failed[i] = result["error"]
                progress(f"{tag}: failed: {result['error']}")
                continue
            runs[i].append(result)
            progress(f"{tag}: {run_text(result)}")
    return runs, failed, rounds_run


def summarize_sweep(
    plan: SweepPlan,
    runs: Mapping[int, list[dict[str, Any]]],
    failed: Mapping[int, str],
    defaults: Mapping[str, int],
    rounds_run: int,
) -> SweepResult:
    """Each point's medians, the noise, the recommendation marked in the points (and how it
    compares with the defaults)."""
    points = plan.points
    summary = [_summarize(points[i], runs[i], failed.get(i), defaults) for i in range(len(points))]
    noise = _noise(summary)
    recommendation = recommend(summary, noise["tolerance"])
    if recommendation is not None:
        rec = summary[recommendation["index"]]
        rec["recommended"] = True
        for i in recommendation["tied"]:
            summary[i]["tied"] = True
        if rec["setting"]["block_chunks"] < defaults["block_chunks"]:
            plan.notes.append(
                f"block_chunks also sets how well samples mix: {rec['setting']['block_chunks']} chunks "
                f"shuffled together instead of {defaults['block_chunks']} is a weaker shuffle"
            )
        default_row = next((p for p in summary if p["is_default"] and p["samples_per_s"]), None)
        if default_row is not None and rec["samples_per_s"]:
            recommendation["vs_default"] = rec["samples_per_s"] / default_row["samples_per_s"] - 1
    return SweepResult(summary, noise, recommendation, rounds_run)


def _report(
    args: argparse.Namespace,
    config: Config,
    target: Target,
    plan: SweepPlan,
    defaults: dict[str, int],
    baseline: dict[str, Any],
    result: SweepResult,
    started: float,
) -> dict[str, Any]:
    import insitu
    from insitu.store.opener import redact_urls

    return {
        "schema": SCHEMA,
        "store": redact_urls(repr(target.store)),
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
            "sample_dim": target.sample_dim,
            "samples": int(target.manifest.n_samples),
            "chunks": target.n_chunks,
        },
        "settings": {
            "seconds": config.seconds,
            "batch_size": config.batch_size,
            "repeats": result.rounds_run,
            "run_seconds": plan.slice_s,
            "baseline_seconds": plan.baseline_s,
            "step_ms": config.step_s * 1e3,
            "seed": config.seed,
            "cache_budget_bytes": config.budget,
        },
        "defaults": defaults,
        "baseline": baseline,
        "grid": plan.grid,
        "points": result.points,
        "noise": result.noise,
        "recommendation": result.recommendation,
        "notes": plan.notes,
        "wall_s": time.perf_counter() - started,
    }


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
    mid = median(rates)
    row.update(
        {
            "samples_per_s": mid,
            "MBps": median([r["MBps"] for r in runs]),
            "spread": (max(rates) - min(rates)) / mid if len(runs) > 1 and mid else None,
            "ttfb_s": median([r["ttfb_s"] for r in runs]),
            "need_bytes": runs[0]["need_bytes"],
            "peak_pool_bytes": max(r["peak_pool_bytes"] or 0 for r in runs),
            "peak_rss_growth_bytes": max((r["peak_rss_growth_bytes"] or 0 for r in runs), default=None),
        }
    )
    return row


def _noise(summary: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    spreads = [p["spread"] for p in summary if p["spread"] is not None]
    mid = median(spreads) if spreads else None
    return {
        "median_spread": mid,
        "max_spread": max(spreads) if spreads else None,
        "tolerance": max(TIE_FLOOR, mid or 0.0),
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
