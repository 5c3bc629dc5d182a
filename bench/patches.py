"""Patch sampling: insitu at its defaults beside the two ways users read patches today, and beside
insitu's own whole-cross-section pass over the same bytes, as ratios from one run.

    python bench/patches.py                       # a few minutes on 2 cores (store written once)
    python bench/patches.py --quick               # seconds: a tiny store (the tests run this)
    python bench/patches.py --patches 256 --workers 2 4 --repeats 5 --out /tmp/patches

The store (``bench/patch_engines/patch_store.py``, cached under ``--work``) is one float32
``(t, y, x)`` array in zstd chunks of one step and ``--chunks`` pixels; each ``--patches`` size
is a case (default 256 and 128 in 512 x 512 chunks: 4 and 16 patches per chunk). Engines, each
run in a fresh process (``bench/patch_engines/run_*.py``, imports done before the clock):

- ``insitu``: ``InSituDataset(..., patch={"y": P, "x": P})`` at its defaults (grid, stride =
  size, edge "shift"): each chunk decoded once, its patches gathered from the pool;
- ``insitu_section``: the same dataset without ``patch=`` (a sample is one step, the whole
  field), batches of the same bytes as the patch batches where a field is smaller than that,
  else one field: the pass the patches' MB/s is held to (target: 80% of it);
- ``xbatcher``: ``BatchGenerator(open_zarr(...), input_dims={t: 1, y: P, x: P},
  input_overlap=0)`` through a torch map-style Dataset and DataLoader, ``--workers`` swept;
- ``zarr_reader``: a map-style Dataset slicing ``array[t, y0:y0+P, x0:x0+P]`` per patch behind a
  DataLoader (the torchgeo / torch-em pattern), ``--workers`` swept;
- ``decode_ceiling``: every chunk zstd-decoded on all cores from bytes in memory into one
  preallocated array (best of three passes): what no loader of this store beats here.

Per run: patches/s and delivered MB/s (cold epoch, store opening to last batch), MB per CPU
second of the process and its workers (which other load on a shared machine moves less), time
to first batch (from opening the store, and from creating the iterator), chunk decodes per
distinct chunk touched (peers: GETs counted by a zarr WrapperStore in memory shared with the
DataLoader workers; insitu: ``ds.stats``), and the peak RSS of the process tree (workers
included, summed: pages forked workers share count once per process).

Repeats are interleaved (the repeat loop outside the engine loop, each repeat starting one run
later). The first ``--sweep-repeats`` (default 1) run every tuning; later ones run only the
tuning of each peer that was best in those, and that tuning is the one reported (a worker sweep
in every repeat would take several times as long on two cores). With ``--max-other-load``, a
run during which other processes kept more cores busy than that is run again (at most
``--busy-retries`` times; the discarded run stays in the JSON as ``busy``). insitu's passes and the
ceiling, a second or less each, run ``--insitu-runs`` (default 3) times per repeat. Tables
show medians and the ratios the targets are stated in: insitu over the best peer (target 5x at
4 patches per chunk) and insitu patches over its cross-section pass (target 0.8), with the
range of the same ratio within each repeat, and the ratio of MB per CPU second.

Checks: every grid engine delivers every patch once with one checksum, and the cross-section
pass and the ceiling read the same values (their checksum takes what the tiling patches would);
insitu's patch origins are the grid. A failed check or run reports no ratio and exits 1. An
engine whose imports are missing (torch, xbatcher) is skipped with a note. Results:
``patches.json`` and ``patches.md`` under ``--out`` (default ``bench/results/``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "suite"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "patch_engines"))

import patch_store
from driver import machine, tree_peak_rss
from portable import REPO, portable_paths
from shared import PatchSpec

HERE = Path(__file__).resolve().parent
RUNNERS = {
    "insitu": "run_insitu.py",
    "insitu_section": "run_insitu.py",
    "xbatcher": "run_xbatcher.py",
    "zarr_reader": "run_zarr_reader.py",
    "decode_ceiling": "run_decode_ceiling.py",
}
ENGINES = tuple(RUNNERS)
PEERS = ("xbatcher", "zarr_reader")
NEEDS = {  # what each engine's runner imports: probed once, an engine without them is skipped
    "insitu": ("insitu",),
    "insitu_section": ("insitu",),
    "xbatcher": ("torch", "xarray", "xbatcher"),
    "zarr_reader": ("torch",),
    "decode_ceiling": ("numcodecs",),
}
TARGET_VS_PEER = 5.0  # insitu MB/s over the best peer's, at 4 patches per chunk
TARGET_VS_SECTION = 0.8  # insitu patch MB/s over its own cross-section pass
REL_TOL = 1e-6  # checksum agreement

DEFAULTS = {"shape": [48, 1024, 1024], "chunks": [1, 512, 512], "patches": [256, 128], "batch_size": 32}
DEFAULTS |= {"repeats": 3, "insitu_runs": 3, "workers": [0, 2, 4], "max_seconds": 60.0}
QUICK = {"shape": [4, 128, 128], "chunks": [1, 64, 64], "patches": [32, 16], "batch_size": 8}
QUICK |= {"repeats": 1, "insitu_runs": 1, "workers": [0, 2], "max_seconds": 30.0}


# --- the plan -------------------------------------------------------------------------------------


def case_specs(
    args: argparse.Namespace, engines: Sequence[str], root: Path, patch: int
) -> dict[str, list[PatchSpec]]:
    """Every run of one case (patch size), by engine: one per tuning."""
    shape, chunks = list(args.shape), list(args.chunks)
    grid_count = shape[0] * math.prod(s // patch for s in shape[1:])
    base = PatchSpec(
        engine="",
        root=str(root),
        array=patch_store.ARRAY,
        dims=list(patch_store.DIMS),
        shape=shape,
        chunks=chunks,
        patch=[patch, patch],
        batch_size=args.batch_size,
        sampling=args.sampling,
        patches_per_epoch=(args.patches_per_epoch or grid_count) if args.sampling == "random" else 0,
        seed=args.seed,
        max_seconds=args.max_seconds,
    )
    specs: dict[str, list[PatchSpec]] = {}
    for engine in engines:
        if engine == "insitu_section":
            specs[engine] = [replace(base, engine=engine, batch_size=section_batch(args, patch))]
        elif engine in PEERS:
            specs[engine] = [replace(base, engine=engine, tuning={"num_workers": w}) for w in args.workers]
        else:
            specs[engine] = [replace(base, engine=engine)]
    return specs


def section_batch(args: argparse.Namespace, patch: int) -> int:
    """Cross-sections per batch: as many bytes as a batch of patches, at least one section."""
    return max(1, round(args.batch_size * patch * patch / math.prod(args.shape[1:])))


def expected_patches(spec: PatchSpec) -> int:
    if spec.engine in ("insitu_section", "decode_ceiling"):
        return spec.shape[0]
    if spec.sampling == "random":
        return spec.patches_per_epoch
    return spec.shape[0] * math.prod(s // p for s, p in zip(spec.shape[1:], spec.patch, strict=True))


def runs_for(
    plan: list[tuple[str, list[PatchSpec]]], chosen: dict[tuple[str, str], str] | None, insitu_runs: int
) -> list[tuple[str, PatchSpec]]:
    """One repeat's runs: every tuning of every engine, or (``chosen``: after the sweep) the
    chosen tuning of each engine (an engine with none chosen keeps all its tunings). insitu's
    passes and the decode ceiling, a second or two each, run ``insitu_runs`` times, alternating."""
    runs: list[tuple[str, PatchSpec]] = []
    ours: dict[str, list[tuple[str, PatchSpec]]] = {}
    for case, specs in plan:
        tuning = (chosen or {}).get((case, specs[0].engine))
        keep = [s for s in specs if tuning_label(s) == tuning]
        picked = [(case, spec) for spec in (keep or specs)]
        if specs[0].engine in PEERS:
            runs += picked
        else:
            ours.setdefault(case, []).extend(picked)
    return [run for pair in ours.values() for run in pair * insitu_runs] + runs


def tuning_label(spec: PatchSpec) -> str:
    if "num_workers" in spec.tuning:
        return f"workers={spec.tuning['num_workers']}"
    if spec.engine == "insitu_section":
        return f"defaults, batch {spec.batch_size} fields"
    return "defaults"


# --- one run --------------------------------------------------------------------------------------


def probe(python: str, engines: Sequence[str]) -> dict[str, str]:
    """Engines whose imports fail under ``python``, with why (a note, not a failure)."""
    missing: dict[str, str] = {}
    for engine in engines:
        code = "; ".join(f"import {m}" for m in NEEDS[engine])
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
        if done.returncode:
            last = (done.stderr.strip().splitlines() or ["import failed"])[-1]
            missing[engine] = f"skipped: {last}"
    return missing


def machine_busy_s() -> float:
    """CPU seconds every core of the machine spent busy since boot (``/proc/stat``)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def our_cpu_s() -> float:
    """CPU seconds of this process and of the children it has waited for (the runs, with the
    DataLoader workers each run waited for)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_one(python: str, spec: PatchSpec, workdir: Path, run_id: str) -> dict[str, Any]:
    """One spec in a fresh process: its result line, the tree's peak RSS, status and wall time."""
    spec_path = workdir / f"{run_id}.json"
    spec_path.write_text(spec.dump())
    runner = HERE / "patch_engines" / RUNNERS[spec.engine]
    limit = spec.max_seconds * 2 + 60
    out_path, err_path = workdir / f"{run_id}.out", workdir / f"{run_id}.err"
    busy0, ours0 = machine_busy_s(), our_cpu_s()
    t0 = time.perf_counter()
    with open(out_path, "w") as out_file, open(err_path, "w") as err_file:
        proc = subprocess.Popen([python, str(runner), str(spec_path)], stdout=out_file, stderr=err_file)
        peak, most, timed_out = tree_peak_rss(proc, limit)  # type: ignore[arg-type]
        if timed_out:
            proc.kill()
        proc.wait()
    wall = time.perf_counter() - t0
    # What the machine's CPUs did meanwhile beyond this run (its workers, reaped by it, and this
    # driver's polling included): other processes competing for the cores.
    others = max(0.0, machine_busy_s() - busy0 - (our_cpu_s() - ours0))
    out, err = out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
    row: dict[str, Any] = {
        "engine": spec.engine,
        "tuning": tuning_label(spec),
        "peak_rss_tree": peak,
        "max_procs": most,
        "wall_s": wall,
        "other_load": others / wall if wall > 0 else 0.0,
    }
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        last = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        last = None
    if timed_out:
        row.update(status="timeout", error=f"no result within {limit:.0f} s")
    elif isinstance(last, dict) and "unsupported" in last:
        row.update(status="unsupported", reason=last["unsupported"])
    elif isinstance(last, dict) and "patches" in last and proc.returncode == 0:
        row.update(status="ok", **last)
        derive(row, spec)
    else:
        tail = err.strip()[-1500:]
        row.update(status="error", error=f"exit {proc.returncode}: {portable_paths(tail)}")
    return row


def derive(row: dict[str, Any], spec: PatchSpec) -> None:
    """Rates and per-chunk counts from a row's raw fields."""
    el = row["elapsed_s"]
    row["patches_per_s"] = row["patches"] / el if el > 0 else None
    row["MBps"] = row["bytes"] / el / 1e6 if el > 0 else None
    row["ttfb_ms"] = 1e3 * row["ttfb_s"]
    row["iter_ttfb_ms"] = 1e3 * row["iter_ttfb_s"]
    row["peak_rss_MB"] = row["peak_rss_tree"] / 1e6
    row["MB_per_cpu_s"] = row["bytes"] / row["cpu_s"] / 1e6 if row["cpu_s"] > 0 else None
    row["decodes_per_chunk"] = (
        row["chunk_decodes"] / row["distinct_chunks"] if row["distinct_chunks"] else None
    )
    row["expected_patches"] = expected_patches(spec)


# --- summary and checks ---------------------------------------------------------------------------

METRICS = (
    "other_load",
    "patches_per_s",
    "MBps",
    "MB_per_cpu_s",
    "ttfb_ms",
    "iter_ttfb_ms",
    "peak_rss_MB",
    "decodes_per_chunk",
)


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians per (case, engine, tuning) over the ok rows."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["case"], r["engine"], r["tuning"]), []).append(r)
    out = []
    for (case, engine, tuning), rs in groups.items():
        ok = [r for r in rs if r["status"] == "ok"]
        s: dict[str, Any] = {"case": case, "engine": engine, "tuning": tuning, "runs": len(rs), "ok": len(ok)}
        if not ok:
            s["status"] = rs[0]["status"]
            s["note"] = rs[0].get("reason") or rs[0].get("error", "")
        for m in METRICS:
            vals = [r[m] for r in ok if r.get(m) is not None]
            s[m] = statistics.median(vals) if vals else None
        if ok:
            last = ok[-1]
            for k in ("chunk_decodes", "distinct_chunks", "max_decodes_one_chunk", "patches"):
                s[k] = last[k]
            s["truncated"] = any(r["truncated"] for r in ok)
        out.append(s)
    return out


def best_by_engine(
    summary: list[dict[str, Any]], chosen: dict[tuple[str, str], str] | None = None
) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (case, engine), the tuning with the highest median MB/s, or the one ``chosen`` (by the
    sweep: a tuning the later repeats did not run has fewer runs, so its median is no peer of
    the chosen one's)."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for s in summary:
        key = (s["case"], s["engine"])
        if s.get("MBps") is None or (chosen and key in chosen and chosen[key] != s["tuning"]):
            continue
        if key not in best or s["MBps"] > best[key]["MBps"]:
            best[key] = s
    return best


def check(rows: list[dict[str, Any]], sampling: str) -> list[str]:
    """Wrong data: a patch count off, checksums that disagree (grid), origins not the grid."""
    problems = []
    sums: dict[str, list[tuple[str, float]]] = {}
    for r in rows:
        if r["status"] != "ok" or r["truncated"]:
            continue
        who = f"{r['case']} {r['engine']} ({r['tuning']}, repeat {r['repeat']})"
        if r["patches"] != r["expected_patches"]:
            problems.append(f"{who} delivered {r['patches']} samples, expected {r['expected_patches']}")
        if r.get("extra", {}).get("origins_are_the_grid") is False:
            problems.append(f"{who}: the patch origins are not the grid, each position once")
        if sampling == "grid" and not math.isnan(r["checksum"]):
            sums.setdefault(r["case"], []).append((who, r["checksum"]))
    for pairs in sums.values():
        ref_who, ref = pairs[0]
        for who, value in pairs[1:]:
            if abs(value - ref) > REL_TOL * max(abs(ref), 1.0):
                problems.append(f"checksum of {who} ({value!r}) differs from {ref_who} ({ref!r})")
    return problems


def ratios(
    rows: list[dict[str, Any]], best: dict[tuple[str, str], dict[str, Any]], cases: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Per case: insitu over the best peer and over its cross-section pass, as the ratio of median
    MB/s (what the targets are stated in), the range of the same ratio within each repeat, and
    the ratio of median MB per CPU second (which other load on the machine moves less)."""

    def paired(case: str, a: tuple[str, str], b: tuple[str, str]) -> list[float]:
        """The ratio of ``a``'s to ``b``'s MB/s within each repeat (medians where one ran twice)."""
        by_repeat: dict[int, dict[tuple[str, str], list[float]]] = {}
        for r in rows:
            if r["case"] == case and r["status"] == "ok" and r.get("MBps"):
                runs = by_repeat.setdefault(r["repeat"], {}).setdefault((r["engine"], r["tuning"]), [])
                runs.append(r["MBps"])
        return [
            statistics.median(v[a]) / statistics.median(v[b]) for v in by_repeat.values() if a in v and b in v
        ]

    def compare(res: dict[str, Any], key: str, case: str, ins: dict[str, Any], other: dict[str, Any]) -> None:
        pr = paired(case, ("insitu", ins["tuning"]), (other["engine"], other["tuning"]))
        res[key] = ins["MBps"] / other["MBps"]
        res[f"{key}_range"] = [min(pr), max(pr)] if pr else None
        cpu_a, cpu_b = ins.get("MB_per_cpu_s"), other.get("MB_per_cpu_s")
        res[f"{key}_per_cpu"] = cpu_a / cpu_b if cpu_a and cpu_b else None

    out: dict[str, dict[str, Any]] = {}
    for case, info in cases.items():
        ins = best.get((case, "insitu"))
        peers = [best[(case, p)] for p in PEERS if (case, p) in best]
        peer = max(peers, key=lambda s: s["MBps"]) if peers else None
        sec = best.get((case, "insitu_section"))
        res: dict[str, Any] = {"patches_per_chunk": info["patches_per_chunk"]}
        if ins and peer:
            res["best_peer"] = f"{peer['engine']} ({peer['tuning']})"
            compare(res, "vs_best_peer", case, ins, peer)
            if info["patches_per_chunk"] == 4:
                res["vs_best_peer_target"] = TARGET_VS_PEER
                res["vs_best_peer_met"] = res["vs_best_peer"] >= TARGET_VS_PEER
        if ins and sec:
            compare(res, "vs_section", case, ins, sec)
            res["vs_section_target"] = TARGET_VS_SECTION
            res["vs_section_met"] = res["vs_section"] >= TARGET_VS_SECTION
        ceiling = best.get((case, "decode_ceiling"))
        if ins and ceiling:
            compare(res, "vs_ceiling", case, ins, ceiling)
        out[case] = res
    return out


# --- report ---------------------------------------------------------------------------------------

COLUMNS = (
    "case",
    "engine",
    "tuning",
    "patches/s",
    "MB/s",
    "insitu / row",
    "MB per CPU s",
    "decodes per chunk",
    "TTFB ms (iter)",
    "peak RSS MB",
)


def _num(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _rate(v: float | None) -> str:
    """A rate: whole numbers from 100 up, three significant digits below (the quick mode's)."""
    return "-" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _head(columns: Sequence[str]) -> list[str]:
    return [_line(columns), _line(["---"] * len(columns))]


def table(
    summary: list[dict[str, Any]],
    best: dict[tuple[str, str], dict[str, Any]],
    result_ratios: dict[str, dict[str, Any]],
    notes: dict[str, str],
) -> str:
    """The markdown tables: the best tuning of each engine per case, every tuning, the ratios."""
    blank = [""] * (len(COLUMNS) - 3)
    lines = ["Best tuning per engine (medians):", "", *_head(COLUMNS)]
    for case in dict.fromkeys(s["case"] for s in summary):
        for engine in ENGINES:
            s = best.get((case, engine))
            if s is not None:
                lines.append(_row(s, best.get((case, "insitu"))))
                continue
            failed = next((x for x in summary if x["case"] == case and x["engine"] == engine), None)
            why = notes.get(engine) or (failed or {}).get("note") or "not run"
            lines.append(_line([case, engine, why.strip().splitlines()[-1][:100], *blank]))
    lines += ["", "Every tuning (medians):", "", *_head(COLUMNS)]
    for s in summary:
        if s.get("MBps") is not None:
            lines.append(_row(s, best.get((s["case"], "insitu"))))
        else:
            note = str(s.get("note", "")).strip().splitlines()
            why = f"{s['tuning']}: {s.get('status')} {note[-1][:100] if note else ''}"
            lines.append(_line([s["case"], s["engine"], why, *blank]))
    ratio_columns = ["case", "patches per chunk", "insitu / best peer (MB/s)", "paired range"]
    ratio_columns += [
        "per CPU s",
        "target",
        "insitu / cross-section (MB/s)",
        "paired range",
        "per CPU s",
        "target",
    ]
    ratio_columns.append("insitu / decode ceiling (MB/s)")
    lines += ["", "Ratios (medians; paired range: the ratio within each repeat):", "", *_head(ratio_columns)]
    for case, r in result_ratios.items():
        vp, vs = r.get("vs_best_peer"), r.get("vs_section")
        cells = [case, str(r["patches_per_chunk"])]
        cells += [
            f"{vp:.2f}x vs {r['best_peer']}" if vp is not None else "-",
            _range(r.get("vs_best_peer_range")),
        ]
        cells += [_num(r.get("vs_best_peer_per_cpu"), ".2f"), _target(r, "vs_best_peer")]
        cells += [
            _num(vs, ".2f"),
            _range(r.get("vs_section_range")),
            _num(r.get("vs_section_per_cpu"), ".2f"),
        ]
        cells += [_target(r, "vs_section"), _num(r.get("vs_ceiling"), ".2f")]
        lines.append(_line(cells))
    return "\n".join(lines)


def _row(s: dict[str, Any], ins: dict[str, Any] | None) -> str:
    rel = f"{ins['MBps'] / s['MBps']:.2f}x" if ins else "-"
    tuning = s["tuning"] + (" (capped)" if s.get("truncated") else "")
    return _line(
        [
            s["case"],
            s["engine"],
            tuning,
            _rate(s["patches_per_s"]),
            _rate(s["MBps"]),
            rel,
            _rate(s["MB_per_cpu_s"]),
            _num(s["decodes_per_chunk"], ".2f"),
            f"{_num(s['ttfb_ms'], '.0f')} ({_num(s['iter_ttfb_ms'], '.0f')})",
            _num(s["peak_rss_MB"], ",.0f"),
        ]
    )


def load_note(rows: list[dict[str, Any]]) -> str:
    """How busy other processes kept the cores during the runs (a quiet machine shows ~0)."""
    loads = sorted(r["other_load"] for r in rows)
    if not loads:
        return ""
    busy = sum(v > 0.5 for v in loads)
    retried = sum(r["status"] == "busy" for r in rows)
    kept = sum(bool(r.get("busy_kept")) for r in rows)
    again = f" {retried} were run again, {kept} kept with their retries spent." if retried or kept else ""
    return (
        f"Other processes during the runs: median {statistics.median(loads):.2f} cores busy, "
        f"max {loads[-1]:.2f}; {busy} of {len(loads)} runs shared the machine with more than half "
        f"a core of other work ({os.cpu_count()} CPUs).{again} Ratios per CPU second move least with it."
    )


def _range(pr: list[float] | None) -> str:
    return "-" if not pr else f"{pr[0]:.2f}-{pr[1]:.2f}"


def _target(r: dict[str, Any], key: str) -> str:
    if f"{key}_target" not in r:
        return "-"
    return f"{r[f'{key}_target']:g}: {'met' if r[f'{key}_met'] else 'NOT met'}"


# --- the run --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="bench/patches.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="a tiny store, one repeat (seconds; the tests)")
    ap.add_argument("--shape", type=int, nargs=3, metavar=("T", "Y", "X"))
    ap.add_argument("--chunks", type=int, nargs=3, metavar=("CT", "CY", "CX"))
    ap.add_argument("--patches", type=int, nargs="+", help="patch sizes (square), one case each")
    ap.add_argument("--batch-size", type=int, help="patches per batch")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--workers", type=int, nargs="+", help="num_workers swept for the DataLoader peers")
    ap.add_argument(
        "--sweep-repeats",
        type=int,
        default=1,
        help="repeats that run every tuning; later ones run each peer's best so far (default 1)",
    )
    ap.add_argument(
        "--insitu-runs",
        type=int,
        help="runs of each insitu pass per repeat (short runs: more of them steady the medians)",
    )
    ap.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    ap.add_argument("--sampling", choices=("grid", "random"), default="grid")
    ap.add_argument(
        "--patches-per-epoch", type=int, help="random sampling: draws per epoch (default: the grid's count)"
    )
    ap.add_argument("--max-seconds", type=float, help="a run stops here and reports the rate so far")
    ap.add_argument(
        "--max-other-load",
        type=float,
        help="run again (up to --busy-retries times) when other processes kept more cores than this busy",
    )
    ap.add_argument("--busy-retries", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--python", default=sys.executable, help="the interpreter the engines run under")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "insitu-bench")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args(argv)
    for key, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.chunks[0] != 1:
        ap.error("--chunks: one step per chunk along t (CT = 1)")
    for p in args.patches:
        if p > min(args.chunks[1:]) or any(s % p for s in args.shape[1:]):
            ap.error(f"--patches {p}: a patch must fit a chunk and tile the field exactly")
    return args


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(arguments)
    started = time.perf_counter()
    root = patch_store.build_store(args.work, args.shape, args.chunks)
    notes = probe(args.python, args.engines)
    for engine, why in notes.items():
        print(f"{engine} {why}", file=sys.stderr)
    engines = [e for e in args.engines if e not in notes]
    cases: dict[str, dict[str, Any]] = {}
    plan: list[tuple[str, list[PatchSpec]]] = []
    for p in args.patches:
        name = f"p{p}"
        cases[name] = {"patch": [p, p], "patches_per_chunk": math.prod(c // p for c in args.chunks[1:])}
        specs = case_specs(args, engines, root, p)
        plan += [(name, specs[e]) for e in engines]
    t, y, x = args.shape
    print(
        f"{t} x {y} x {x} float32 in {args.chunks[1]} x {args.chunks[2]} zstd chunks "
        f"({patch_store.stored_bytes(root) / 1e6:.0f} MB stored, {t * y * x * 4 / 1e6:.0f} MB decoded); "
        f"{args.sampling} patches {', '.join(str(p) for p in args.patches)}; batch {args.batch_size}; "
        f"workers {args.workers}; median of {args.repeats}",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    chosen: dict[tuple[str, str], str] | None = None
    with tempfile.TemporaryDirectory(prefix="insitu-patches-") as tmp:
        for repeat in range(args.repeats):
            if repeat == args.sweep_repeats:  # the sweep is over: each engine keeps its best tuning
                chosen = {key: s["tuning"] for key, s in best_by_engine(summarize(rows)).items()}
            runs = runs_for(plan, chosen, args.insitu_runs)
            # Repeats outermost, each starting one run later: drift hits every engine alike.
            shift = repeat % len(runs) if runs else 0
            for i, (case, spec) in enumerate(runs[shift:] + runs[:shift]):
                for attempt in range(1 + args.busy_retries):
                    row = run_one(args.python, spec, Path(tmp), f"r{repeat}-{i}-{attempt}")
                    row.update(case=case, repeat=repeat, attempt=attempt)
                    busy = args.max_other_load is not None and row["other_load"] > args.max_other_load
                    if row["status"] == "ok" and busy and attempt < args.busy_retries:
                        row["status"] = "busy"  # kept in the JSON, left out of the medians
                    elif row["status"] == "ok" and busy:
                        row["busy_kept"] = True  # the retries are spent: counted, and said so
                    rows.append(row)
                    print(f"  {_brief(row)}", flush=True)
                    if row["status"] != "busy":
                        break
    summary = summarize(rows)
    best = best_by_engine(summary, chosen)
    problems = check(rows, args.sampling)
    problems += [
        f"{r['case']} {r['engine']} ({r['tuning']}): {r['error']}"
        for r in rows
        if r["status"] in ("error", "timeout")
    ]
    result_ratios = {} if problems else ratios(rows, best, cases)
    text = table(summary, best, result_ratios, notes) + "\n\n" + load_note(rows)
    print("\n" + text)
    if problems:
        print("\nPROBLEMS (no ratios reported):\n  " + "\n  ".join(problems))
    record = {
        "schema": 1,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": portable_paths(shlex.join(["python", "bench/patches.py", *arguments])),
        "wall_s": time.perf_counter() - started,
        "settings": {
            k: (portable_paths(str(v)) if isinstance(v, Path) else v) for k, v in vars(args).items()
        },
        "store": {"shape": args.shape, "chunks": args.chunks, "stored_bytes": patch_store.stored_bytes(root)},
        "machine": machine(),
        "versions": versions(args.python),
        "cases": cases,
        "notes": notes,
        "rows": rows,
        "summary": summary,
        "best": [best[k] for k in sorted(best)],
        "chosen_tunings": None if chosen is None else [[*k, v] for k, v in sorted(chosen.items())],
        "ratios": result_ratios,
        "problems": problems,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "patches.json").write_text(json.dumps(record, indent=1, default=str))
    (args.out / "patches.md").write_text(f"`{record['command']}`\n\n{text}\n")
    print(f"\nwrote {portable_paths(str(args.out / 'patches.json'))} and patches.md")
    return 1 if problems else 0


def versions(python: str) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json\n"
        "out = {}\n"
        "for n in ('insitu-core', 'zarr', 'numpy', 'numcodecs', 'torch', 'xarray', 'xbatcher'):\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))"
    )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def _brief(row: dict[str, Any]) -> str:
    who = f"{row['case']} {row['engine']} {row['tuning']} (repeat {row['repeat']})"
    if row["status"] == "busy":
        return f"{who}: others kept {row['other_load']:.2f} cores busy; running it again"
    if row["status"] != "ok":
        why = row.get("reason") or row.get("error", "")
        return f"{who}: {row['status']} {why.strip().splitlines()[-1][:120] if why.strip() else ''}"
    return (
        f"{who}: {row['patches_per_s']:,.0f} patches/s, {row['MBps']:,.0f} MB/s, "
        f"{_num(row['decodes_per_chunk'], '.2f')} decodes/chunk, TTFB {row['ttfb_ms']:.0f} ms, "
        f"peak {row['peak_rss_MB']:,.0f} MB"
    )


if __name__ == "__main__":
    raise SystemExit(main())
