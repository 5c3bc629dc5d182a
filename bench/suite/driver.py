"""The benchmark driver: every (condition, case, engine, tuning) in a fresh process, repeated, checked.

    python bench/run.py [--mode quick|full] [--engines ...] [--cases ...]
                        [--conditions local latency s3] [--repeats N] [--samples N] [--out DIR]
                        [--insitubatch-python PATH] [--torch-python PATH] [--docs]

For each run the driver writes a spec (``common.Spec``) as JSON and starts
``bench/suite/engines/run_<engine>.py SPEC`` in a new process with the engine's
interpreter (insitubatch: ``--insitubatch-python``; the torch stacks:
``--torch-python`` or this interpreter; the rest: this interpreter). While it
runs, the driver sums the RSS of the runner and all its descendants (DataLoader
workers) about every 10 ms and keeps the peak. The runner's last stdout line is
its result. Working memory (``work_MB``) = peak RSS of the process tree - the
bytes the engine's cache holds at the end of the cold epoch (0 for engines
without a cache; insitu reports its pool's bytes as ``extra["cache_bytes"]``).
Repeats are the outer loop, engines the inner one, so slow drift of the machine
hits every engine alike; medians are taken per metric.

Each result is checked: a cold epoch that is not truncated must deliver the
case's ``samples_per_epoch`` samples (a wrong count makes the row an error),
and checksums of the same case must agree across engines, tunings, conditions
and repeats (relative tolerance 1e-6; disagreements are flagged in the JSON,
the table and the console). Rows, medians, best tunings and checks go to
``OUT/suite.json`` (rewritten after every run, so an interrupted run keeps
what it measured); ``report.py`` turns that into ``OUT/suite.md`` and plots.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil
from common import CEILINGS, Case, Spec, StoreSpec
from data import CASES, HTTPServer, S3Server, build_cases
from portable import recorded_command

SUITE = Path(__file__).resolve().parent
REPO = SUITE.parents[1]
ENGINES_DIR = SUITE / "engines"

ENGINES = [
    "insitu",
    "insitu_stream",
    "insitubatch",
    "xbatcher",
    "workers",
    "chunkaware",
    "naive",
    "simple",
    "tensorstore",
    *CEILINGS,
]
WORKER_STACKS = ("xbatcher", "workers", "chunkaware")
# No store IO: measured once per case on its local copy (under "local", whatever the conditions).
STORE_FREE = ("ceiling_decode", "ceiling_decode_out", "ceiling_decode_keep", "ceiling_gather")
# A warm epoch is timed too: engines with a cache, and insitu without one (it reads again).
WARM_ENGINES = ("insitu", "insitu_stream", "insitubatch")
INSITU_ENGINES = ("insitu", "insitu_stream")  # same interpreter, same tuning sweep
CONDITIONS = ("local", "latency", "latency100", "throttle", "http", "s3")
# latency100: local disk + 100 ms per GET (a far region); throttle: local disk + --latency-ms per
# GET, refusing with 503 SlowDown every GET beyond THROTTLE_ABOVE at once.
FAR_LATENCY_MS = 100.0
THROTTLE_ABOVE = 24
SPECTRUM = ("c1", "c2", "c8", "c32")  # single variable, samples per chunk 1..32

# Modules an engine's interpreter must have; checked once up front, so a missing stack is one
# note instead of an error per run.
REQUIRES = {
    "insitu": ["insitu"],
    "insitu_stream": ["insitu"],
    "insitubatch": ["insitubatch", "zarr"],
    "tensorstore": ["tensorstore"],
    "xbatcher": ["torch", "xarray", "xbatcher", "zarr"],
    "workers": ["torch", "zarr"],
    "chunkaware": ["torch", "zarr"],
}
PACKAGES = [
    "numpy",
    "zarr",
    "numcodecs",
    "insitu-core",
    "insitu-stores",
    "insitubatch",
    "tensorstore",
    "obstore",
    "torch",
    "xarray",
    "xbatcher",
]
# Engines that run only under an interpreter of their own (--<engine>-python), with what it needs.
OWN_VENV = {"insitubatch": "insitubatch==0.2.0", "tensorstore": "tensorstore"}
BEST_WORKER = "best-worker"  # plan placeholder: the best worker stack (engine, tuning) at local


@dataclass(frozen=True)
class Mode:
    samples: int
    repeats: int
    max_seconds: float  # per cold epoch; slower engines report truncated=True
    engine_max_seconds: dict[str, float]  # tighter caps for engines known to be slow
    # condition -> [(cases, engines)]; engines may hold BEST_WORKER.
    plan: dict[str, list[tuple[tuple[str, ...], tuple[str, ...]]]]
    block_samples: tuple[int, ...]  # insitu / insitubatch: samples per shuffle block
    inflight: tuple[int, ...]  # insitu / insitubatch max_inflight on latency and s3
    budgets: tuple[int | None, ...]  # insitu cache_budget_bytes (None: the engine's default)
    num_workers: tuple[int, ...]
    extra: dict[str, Any] = field(default_factory=dict)


_ALL = tuple(ENGINES)
_REMOTE_SET = ("insitu", "insitu_stream", "insitubatch", BEST_WORKER, "ceiling_rawget", "ceiling_fetch_keep")
# Loaders that read through one asyncio store: a worker stack's failures under 503s say nothing new.
_THROTTLE_SET = ("insitu", "insitu_stream", "insitubatch")
_CASE_SET = (
    "insitu",
    "insitu_stream",
    "insitubatch",
    "tensorstore",
    BEST_WORKER,
    "ceiling_decode",
    "ceiling_decode_out",
    "ceiling_decode_keep",
)
MODES = {
    "quick": Mode(
        samples=512,
        repeats=3,
        max_seconds=12.0,
        engine_max_seconds={"naive": 5.0},
        plan={
            "local": [
                (("c1", "c8", "c32"), _ALL),
                (("multivar", "window", "sharded"), _CASE_SET),
            ],
            "latency": [(("c1", "c8", "c32"), _REMOTE_SET)],
            "latency100": [(("c1", "c8", "c32"), _REMOTE_SET)],
            "throttle": [(("c8",), _THROTTLE_SET)],
            "http": [(("c1", "c8", "c32"), _REMOTE_SET)],
            "s3": [(("c8",), _REMOTE_SET)],
        },
        block_samples=(64, 256),
        inflight=(64, 256),
        budgets=(None,),
        num_workers=(2, 4),
    ),
    "full": Mode(
        samples=1024,
        repeats=5,
        max_seconds=60.0,
        engine_max_seconds={"naive": 20.0},
        plan={
            "local": [(tuple(CASES), _ALL)],
            "latency": [(tuple(CASES), _ALL)],
            "latency100": [(tuple(CASES), _REMOTE_SET)],
            "throttle": [(("c1", "c8", "c32"), _THROTTLE_SET)],
            "http": [(tuple(CASES), _ALL)],
            "s3": [(tuple(CASES), _ALL)],
        },
        block_samples=(64, 256, 1024),
        inflight=(32, 128, 256),
        budgets=(None, 256 << 20),
        num_workers=(0, 1, 2, 4),
    ),
}


def tunings(engine: str, case: Case, condition: str, mode: Mode) -> list[dict[str, Any]]:
    """The tuning sweep of ``engine`` for one case and condition."""
    spc = case.samples_per_chunk
    if engine in INSITU_ENGINES and mode.extra.get("insitu_defaults"):
        return [{}]  # the library's own defaults, nothing tuned (insitu_stream: cache off only)
    if engine in ("insitu", "insitu_stream", "insitubatch"):
        remote = condition != "local"
        out = []
        for block in mode.block_samples:
            for inflight in mode.inflight if remote else (None,):
                # The cache budget shapes the warm epoch; swept on local disk only.
                budgets = mode.budgets if engine == "insitu" and not remote else (None,)
                for budget in budgets:
                    if budget is not None and budget < 2 * block * case.sample_nbytes:
                        continue  # cannot hold a block and the next one's first slabs: not a useful setting
                    t: dict[str, Any] = {"block_chunks": max(1, block // spc)}
                    if inflight is not None:
                        t["max_inflight"] = inflight
                    if budget is not None:
                        t["cache_budget_bytes"] = budget
                    out.append(t)
        return _unique(out)
    if engine in WORKER_STACKS:
        return [{"num_workers": w} for w in mode.num_workers]
    if engine == "tensorstore":  # the same blocks as insitu's sweep; its C++ pool on every core
        threads = os.cpu_count() or 1
        return _unique([{"threads": threads, "block_chunks": max(1, b // spc)} for b in mode.block_samples])
    if engine == "simple":
        return [{"threads": os.cpu_count() or 1, "block_chunks": max(1, 256 // spc)}]
    if engine == "ceiling_rawget":
        return [{"concurrency": max(mode.inflight)}]  # a ceiling: the highest concurrency swept
    if engine == "ceiling_fetch_keep":
        return [{"concurrency": max(mode.inflight), "threads": os.cpu_count() or 1}]
    if engine in ("ceiling_decode", "ceiling_decode_out", "ceiling_decode_keep"):
        return [{"threads": os.cpu_count() or 1}]
    return [{}]  # naive, ceiling_gather: nothing to tune


def _unique(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen, out = set(), []
    for t in items:
        key = json.dumps(t, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def tuning_label(tuning: dict[str, Any]) -> str:
    short = {
        "block_chunks": "bc",
        "max_inflight": "inflight",
        "cache_budget_bytes": "cache",
        "num_workers": "nw",
    }
    parts = []
    for k, v in tuning.items():
        if k == "cache_budget_bytes":
            v = f"{v / 2**20:.0f}MiB"
        parts.append(f"{short.get(k, k)}={v}")
    return " ".join(parts) or "defaults"


# --- interpreters ---------------------------------------------------------------------------------

PROBE = r"""
import importlib.metadata as md, importlib.util as iu, json, sys
mods, pkgs = sys.argv[1].split(","), sys.argv[2].split(",")
def version(p):
    try:
        return md.version(p)
    except md.PackageNotFoundError:
        return None
print(json.dumps({
    "executable": sys.executable,
    "python": sys.version.split()[0],
    "modules": {m: iu.find_spec(m) is not None for m in mods if m},
    "packages": {p: v for p in pkgs if (v := version(p))},
}))
"""


def probe(python: str) -> dict[str, Any] | None:
    """Python version, importable modules and package versions of an interpreter (None: unusable)."""
    mods = sorted({m for ms in REQUIRES.values() for m in ms})
    try:
        out = subprocess.run(
            [python, "-c", PROBE, ",".join(mods), ",".join(PACKAGES)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


# --- one run --------------------------------------------------------------------------------------


def tree_peak_rss(
    proc: subprocess.Popen[bytes], limit_s: float, poll_s: float = 0.01
) -> tuple[int, int, bool]:
    """Wait for ``proc``; return (peak summed RSS of it and its descendants, most processes seen, timed out)."""
    t0 = time.perf_counter()
    try:
        root = psutil.Process(proc.pid)
    except psutil.NoSuchProcess:
        return 0, 0, False
    procs = {proc.pid: root}
    peak = most = 0
    last_scan = 0.0
    while proc.poll() is None:
        now = time.perf_counter()
        if now - t0 > limit_s:
            return peak, most, True
        if now - last_scan > 0.05:  # the process table scan is the costly part: every 50 ms
            try:
                for child in root.children(recursive=True):
                    procs.setdefault(child.pid, child)
            except psutil.Error:
                pass
            last_scan = now
        total = 0
        for pid, p in list(procs.items()):
            try:
                total += p.memory_info().rss
            except psutil.Error:
                del procs[pid]
        peak = max(peak, total)
        most = max(most, len(procs))
        time.sleep(poll_s)
    return peak, most, False


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _tail(path: Path, n: int = 2000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-n:]


def run_one(python: str, spec: Spec, workdir: Path, run_id: str, limit_s: float) -> dict[str, Any]:
    """Run one spec in a fresh process; the row: status, result fields, peak tree RSS, wall time."""
    runner = ENGINES_DIR / f"run_{spec.engine}.py"
    spec_path = workdir / f"{run_id}.json"
    spec_path.write_text(spec.dump())
    out_path, err_path = workdir / f"{run_id}.out", workdir / f"{run_id}.err"
    row: dict[str, Any] = {"status": "error"}
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [python, str(runner), str(spec_path)], cwd=REPO, stdout=out, stderr=err, start_new_session=True
        )
        try:
            peak, most, timed_out = tree_peak_rss(proc, limit_s)
        finally:
            if proc.poll() is None:
                _kill_group(proc.pid)
                proc.wait()
            _kill_group(proc.pid)  # DataLoader workers left behind by a runner that died
        wall = time.perf_counter() - t0
    row.update(peak_rss_tree=peak, max_procs=most, wall_s=wall, returncode=proc.returncode)
    lines = [ln for ln in out_path.read_text(errors="replace").splitlines() if ln.strip()]
    if timed_out:
        row.update(status="timeout", error=f"no result within {limit_s:.0f} s", error_tail=_tail(err_path))
        return row
    last: Any = None
    if lines:
        try:
            last = json.loads(lines[-1])
        except json.JSONDecodeError:
            last = None
    if isinstance(last, dict) and "unsupported" in last and proc.returncode == 0:
        row.update(status="unsupported", reason=str(last["unsupported"]))
    elif isinstance(last, dict) and "samples" in last and proc.returncode == 0:
        row.update(status="ok", **last)
    else:
        tail = _tail(err_path) or "\n".join(lines[-5:])
        last_line = next((ln for ln in reversed(tail.splitlines()) if ln.strip()), "")
        row.update(error=f"exit {proc.returncode}: {last_line.strip()[:300]}", error_tail=tail)
    return row


def working_memory_MB(row: dict[str, Any]) -> float | None:
    """A run's working memory in MB (1e6 bytes): what its cold pass holds besides its cache.

    working memory = peak RSS of the process tree - the bytes the engine's cache holds at the end
    of the cold epoch (0 for engines without a cache).

    The cache is the runner's ``extra["cache_bytes"]`` (insitu: the pool's resident bytes); an
    engine that reports no such key counts 0, so its working memory is its peak. The peak includes
    the cache insitu keeps for later epochs (by default the whole dataset when it fits in a quarter
    of RAM), which peers without a cache do not hold: subtracting it compares what a cold pass needs.
    None when the runner reported the key without a value (unknown, not zero)."""
    extra = row.get("extra") or {}
    cache = extra.get("cache_bytes", 0)
    if cache is None:
        return None
    return (row["peak_rss_tree"] - cache) / 1e6


def derive(row: dict[str, Any], case: Case) -> None:
    """Rates from a row's raw fields, and the sample-count check."""
    if row["status"] != "ok":
        return
    el = row.get("elapsed_s") or 0.0
    row["samples_per_s"] = row["samples"] / el if el > 0 else None
    row["MBps"] = row["bytes"] / el / 1e6 if el > 0 else None
    row["ttfb_ms"] = row["ttfb_s"] * 1e3
    row["peak_rss_MB"] = row["peak_rss_tree"] / 1e6
    row["work_MB"] = working_memory_MB(row)
    warm_el, warm_n = row.get("warm_elapsed_s"), row.get("warm_samples")
    if warm_el and warm_n:
        row["warm_samples_per_s"] = warm_n / warm_el
        row["warm_MBps"] = warm_n * case.sample_nbytes / warm_el / 1e6
    want = case.samples_per_epoch
    problems = []
    if not row.get("truncated") and row["samples"] != want:
        problems.append(f"delivered {row['samples']} samples, expected {want}")
    if warm_n is not None and warm_n != want:
        problems.append(f"warm epoch delivered {warm_n} samples, expected {want}")
    if problems:
        row["status"] = "error"
        row["error"] = "; ".join(problems)


# --- summaries and checks -------------------------------------------------------------------------

METRICS = (
    "samples_per_s",
    "MBps",
    "ttfb_ms",
    "peak_rss_MB",
    "work_MB",
    "warm_samples_per_s",
    "warm_MBps",
    "wall_s",
)


def summarize(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Medians per (condition, case, engine, tuning), and each engine's best tuning by median MB/s."""
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["condition"], r["case"], r["engine"], r["tuning_label"]), []).append(r)
    summary = []
    for (cond, case, engine, label), rs in groups.items():
        ok = [r for r in rs if r["status"] == "ok"]
        s: dict[str, Any] = {
            "condition": cond,
            "case": case,
            "engine": engine,
            "tuning_label": label,
            "tuning": rs[0]["tuning"],
            "runs": len(rs),
            "ok": len(ok),
            "statuses": sorted({r["status"] for r in rs}),
            "truncated": any(r.get("truncated") for r in ok),
        }
        for m in METRICS:
            vals = [r[m] for r in ok if r.get(m) is not None]
            s[m] = statistics.median(vals) if vals else None
        reasons = sorted({r.get("reason") or r.get("error") or "?" for r in rs if r["status"] != "ok"})
        if reasons:
            s["problems"] = reasons
        summary.append(s)
    best: dict[tuple[str, str, str], dict[str, Any]] = {}
    for s in summary:
        key = (s["condition"], s["case"], s["engine"])
        have = best.get(key)
        if have is None or (s["MBps"] or -1) > (have["MBps"] or -1):
            best[key] = s
    return summary, list(best.values())


def check_checksums(rows: list[dict[str, Any]], rel: float = 1e-6) -> list[dict[str, Any]]:
    """Rows whose checksum disagrees with the case's majority value (flagged in the row too)."""
    mismatches = []
    by_case: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        # Ceilings that deliver nothing (decode, rawget) report no checksum (0.0).
        if (
            r["status"] == "ok"
            and not r.get("truncated")
            and not (r["engine"] in CEILINGS and not r["checksum"])
        ):
            by_case.setdefault(r["case"], []).append(r)

    def close(a: float, b: float) -> bool:
        return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)

    for case, rs in by_case.items():
        values = [r["checksum"] for r in rs]
        reference = max(values, key=lambda v: sum(close(v, w) for w in values))
        for r in rs:
            r["checksum_ok"] = close(r["checksum"], reference)
            if not r["checksum_ok"]:
                mismatches.append(
                    {
                        "case": case,
                        "condition": r["condition"],
                        "engine": r["engine"],
                        "tuning_label": r["tuning_label"],
                        "repeat": r["repeat"],
                        "checksum": r["checksum"],
                        "reference": reference,
                    }
                )
    return mismatches


# --- machine --------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"cpus": os.cpu_count(), "platform": platform.platform()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info["ram_GB"] = round(psutil.virtual_memory().total / 1e9, 1)
    return info


# --- the run --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench/run.py", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--mode", choices=list(MODES), default="quick")
    ap.add_argument(
        "--engines", nargs="+", choices=ENGINES, help="only these engines (default: the mode's plan)"
    )
    ap.add_argument("--cases", nargs="+", choices=list(CASES), help="these cases under every condition")
    ap.add_argument("--conditions", nargs="+", choices=CONDITIONS, help="default: local latency http s3")
    ap.add_argument(
        "--repeats", type=int, help="runs per (engine, tuning); default: the mode's (quick 3, full 5)"
    )
    ap.add_argument("--samples", type=int, help="samples per case; default: quick 512, full 1024")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-seconds", type=float, help="per cold epoch; slower engines report truncated")
    ap.add_argument("--latency-ms", type=float, default=20.0, help="delay per GET under 'latency'")
    ap.add_argument(
        "--budget-mb",
        type=int,
        nargs="+",
        help="insitu cache_budget_bytes values to sweep, in MB (0: the engine's default); "
        "e.g. to compare memory at a budget matching another engine's footprint",
    )
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="results folder")
    ap.add_argument("--work", type=Path, help="data cache (default: $TMPDIR/insitu-bench)")
    ap.add_argument("--insitubatch-python", help="Python 3.12 interpreter with insitubatch==0.2.0")
    ap.add_argument("--tensorstore-python", help="Python 3.12 interpreter with tensorstore (zarr3 driver)")
    ap.add_argument(
        "--torch-python", help="interpreter for xbatcher, workers, chunkaware (default: this one)"
    )
    ap.add_argument(
        "--docs", action="store_true", help="plots into docs/img/bench, rewrite docs/benchmarks.md"
    )
    ap.add_argument(
        "--defaults",
        action="store_true",
        help="insitu and insitu_stream at the library's defaults only (no block, in-flight or budget "
        "sweep): what a user gets without tuning; the other engines keep their sweeps",
    )
    args = ap.parse_args(argv)
    if args.samples is not None and args.samples % args.batch_size:
        ap.error(f"--samples must be a multiple of --batch-size ({args.batch_size})")
    return args


def make_plan(args: argparse.Namespace, mode: Mode) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """condition -> [(case, engines)], the mode's plan narrowed (or widened) by the arguments."""
    conditions = args.conditions or list(CONDITIONS)
    plan: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for cond in conditions:
        entries: list[tuple[str, tuple[str, ...]]]
        if args.cases:  # explicit cases: every requested case under every requested condition
            default = {c: e for cases, e in mode.plan.get(cond, []) for c in cases}
            fallback = _REMOTE_SET if cond != "local" else _ALL
            entries = [(case, default.get(case, fallback)) for case in args.cases]
        else:
            entries = [(c, e) for cases, e in mode.plan.get(cond, []) for c in cases]
        if args.engines:  # explicit engines replace the plan's engine lists
            entries = [(c, tuple(args.engines)) for c, _ in entries]
        plan[cond] = [(c, e) for c, e in entries if e]
    # Store-free ceilings once per case, under "local" (added when the run has no local condition).
    free = {(c, e) for entries in plan.values() for c, es in entries for e in es if e in STORE_FREE}
    for cond in plan:
        plan[cond] = [(c, tuple(e for e in es if e not in STORE_FREE)) for c, es in plan[cond]]
    if free:
        local = dict(plan.get("local", []))
        for case, engine in sorted(free, key=lambda ce: (list(CASES).index(ce[0]), ENGINES.index(ce[1]))):
            local[case] = (*local.get(case, ()), engine)
        plan = {"local": list(local.items()), **{k: v for k, v in plan.items() if k != "local"}}
    return {cond: [(c, es) for c, es in entries if es] for cond, entries in plan.items()}


class Log:
    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:7.1f}s] {msg}", flush=True)


def precompile(pythons: list[str], log: Log) -> None:
    """Byte-compile this checkout's packages and every engine interpreter's installed packages
    once, as a (pip) install would.

    The suite runs insitu from an editable install, and uv installs without compiling; with
    PYTHONDONTWRITEBYTECODE set (as on the reference machine) no ``.pyc`` is ever written, so
    every fresh runner would compile the modules it imports after its clock started (a CF
    decoder, a store backend) inside its time to first batch, for whichever engine.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    find = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    for python in pythons:
        purelib = subprocess.run([python, "-c", find], capture_output=True, text=True).stdout.strip()
        folders = [p for p in (purelib, str(REPO / "packages")) if p]
        done = subprocess.run(
            [python, "-m", "compileall", "-q", *folders], capture_output=True, text=True, env=env
        )
        if done.returncode != 0 and not done.stdout.count("Error"):
            # Some installed files are not meant for this Python (torch ships 3.12-only test
            # files): those fail to compile and nothing else does; anything else is worth a note.
            log(f"note: byte-compiling for {python} failed: {(done.stderr or done.stdout).strip()[-200:]}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mode = MODES[args.mode]
    if args.max_seconds is not None:
        mode = replace(mode, max_seconds=args.max_seconds, engine_max_seconds={})
    if args.budget_mb:
        mode = replace(mode, budgets=tuple(mb * 10**6 if mb else None for mb in args.budget_mb))
    if args.defaults:
        mode = replace(mode, extra={**mode.extra, "insitu_defaults": True})
    n_samples = args.samples or mode.samples
    repeats = args.repeats or mode.repeats
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.gettempdir()) / "insitu-bench"
    log = Log()
    command = recorded_command(argv if argv is not None else sys.argv[1:])
    plan = make_plan(args, mode)
    notes: list[str] = []

    # Interpreters and what they can run.
    interpreters = dict.fromkeys(ENGINES, sys.executable)
    if args.torch_python:
        interpreters.update(dict.fromkeys(WORKER_STACKS, args.torch_python))
    interpreters["insitubatch"] = args.insitubatch_python or ""
    interpreters["tensorstore"] = args.tensorstore_python or ""
    wanted = {e for entries in plan.values() for _, es in entries for e in es}
    if BEST_WORKER in wanted:
        wanted = (wanted - {BEST_WORKER}) | set(WORKER_STACKS)
    probes: dict[str, dict[str, Any] | None] = {}
    for python in sorted({interpreters[e] for e in wanted if interpreters[e]}):
        probes[python] = probe(python)
    skip: dict[str, str] = {}
    for e in sorted(wanted, key=ENGINES.index):
        python = interpreters[e]
        if not (ENGINES_DIR / f"run_{e}.py").exists():
            skip[e] = f"no runner bench/suite/engines/run_{e}.py"
        elif not python:
            skip[e] = f"no --{e}-python given (a Python 3.12 virtualenv with {OWN_VENV[e]})"
        elif probes.get(python) is None:
            skip[e] = f"interpreter {python} does not start"
        else:
            missing = [m for m in REQUIRES.get(e, []) if not probes[python]["modules"].get(m)]  # type: ignore[index]
            if missing:
                skip[e] = f"{python} lacks {', '.join(missing)}"
    for e, why in skip.items():
        notes.append(f"skipped {e}: {why}")
        log(f"note: skipping {e}: {why}")
    precompile(sorted({interpreters[e] for e in wanted - set(skip) if interpreters[e]}), log)

    case_names = sorted({c for entries in plan.values() for c, _ in entries}, key=list(CASES).index)
    log(f"mode {args.mode}: {n_samples} samples, {repeats} repeats, cases {' '.join(case_names)}")
    cases = build_cases(case_names, n_samples, work, log)

    results: dict[str, Any] = {
        "schema": 1,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command,
        "mode": args.mode,
        "settings": {
            "samples": n_samples,
            "repeats": repeats,
            "batch_size": args.batch_size,
            "max_seconds": mode.max_seconds,
            "engine_max_seconds": mode.engine_max_seconds,
            "latency_ms": args.latency_ms,
        },
        "machine": machine(),
        "interpreters": {
            e: probes.get(interpreters[e]) for e in sorted(wanted - set(skip), key=ENGINES.index)
        },
        "cases": {n: {**asdict(c), "sample_nbytes": c.sample_nbytes} for n, c in cases.items()},
        "plan": {cond: [[c, list(es)] for c, es in entries] for cond, entries in plan.items()},
        "notes": notes,
        "rows": [],
    }
    rows: list[dict[str, Any]] = results["rows"]
    json_path = out / "suite.json"
    specs_dir = Path(tempfile.mkdtemp(prefix="insitu-bench-runs-"))
    logs_dir = out / "logs"
    server: S3Server | None = None
    http: HTTPServer | None = None
    interrupted = False
    try:
        if plan.get("s3"):
            server = S3Server(log=log)
            server.start()
        if plan.get("http"):
            why = HTTPServer.missing()
            if why is None:
                http = HTTPServer(work, args.latency_ms, log=log)
                http.start()
            else:
                notes.append(f"skipped the http condition: {why}")
                log(f"note: skipping the http condition: {why}")
                plan.pop("http")
        for cond, entries in plan.items():
            for case_name, engines in entries:
                case = cases[case_name]
                store = _store(cond, case, args, server, http)
                runs = _resolve(engines, case, cond, mode, rows, skip, log)
                if not runs:
                    continue
                for rep in range(repeats):
                    for engine, tuning in runs:
                        spec = Spec(
                            engine=engine,
                            case=case,
                            store=store,
                            batch_size=args.batch_size,
                            seed=rep,
                            tuning=tuning,
                            warm=engine in WARM_ENGINES,
                            max_seconds=mode.engine_max_seconds.get(engine, mode.max_seconds),
                        )
                        label = tuning_label(tuning)
                        run_id = f"{len(rows):04d}-{cond}-{case_name}-{engine}-r{rep}"
                        # Runners stop at max_seconds; the warm epoch is not capped but is faster.
                        limit = spec.max_seconds * (2 if spec.warm else 1) + 45
                        row = {
                            "condition": cond,
                            "case": case_name,
                            "engine": engine,
                            "tuning": tuning,
                            "tuning_label": label,
                            "repeat": rep,
                            "interpreter": interpreters[engine],
                        }
                        row.update(run_one(interpreters[engine], spec, specs_dir, run_id, limit))
                        derive(row, case)
                        rows.append(row)
                        log(f"{cond} {case_name} r{rep + 1}/{repeats} {engine} [{label}]: {_brief(row)}")
                        if row["status"] in ("error", "timeout"):
                            logs_dir.mkdir(exist_ok=True)
                            for suffix in (".out", ".err", ".json"):
                                src = specs_dir / f"{run_id}{suffix}"
                                if src.exists():
                                    shutil.copy(src, logs_dir / src.name)
                        _save(results, json_path)
    except KeyboardInterrupt:
        interrupted = True
        notes.append("interrupted: partial results")
        log("interrupted: writing partial results")
    finally:
        if server is not None:
            server.stop()
        if http is not None:
            http.stop()
        shutil.rmtree(specs_dir, ignore_errors=True)

    summary, best = summarize(rows)
    mismatches = check_checksums(rows)
    results["summary"] = summary
    results["best"] = best
    results["checks"] = {
        "checksum_mismatches": mismatches,
        "errors": [
            {
                k: r.get(k)
                for k in ("condition", "case", "engine", "tuning_label", "repeat", "status", "error")
            }
            for r in rows
            if r["status"] in ("error", "timeout")
        ],
    }
    results["wall_s"] = time.perf_counter() - log.t0
    _save(results, json_path)
    for m in mismatches:
        log(
            f"CHECKSUM MISMATCH {m['condition']} {m['case']} {m['engine']} [{m['tuning_label']}] "
            f"r{m['repeat']}: {m['checksum']!r} vs {m['reference']!r}"
        )
    errors = results["checks"]["errors"]
    if errors:
        log(f"{len(errors)} runs failed (details in {json_path} and {logs_dir}/)")

    import report

    img_dir = REPO / "docs" / "img" / "bench" if args.docs else out / "img"
    text = report.write_report(results, out, img_dir)
    print(text, flush=True)
    if args.docs:
        target = REPO / "docs" / "benchmarks.md"
        if report.update_docs(results, target, img_dir):
            log(f"rewrote the results section of {target}")
        else:
            log(f"{target} missing or without bench:results markers: left alone")
    log(f"done in {results['wall_s']:.0f} s: {json_path}, {out / 'suite.md'}, plots in {img_dir}")
    return 130 if interrupted else 0


def _store(
    cond: str, case: Case, args: argparse.Namespace, server: S3Server | None, http: HTTPServer | None
) -> StoreSpec:
    if cond == "local":
        return StoreSpec("local")
    if cond == "latency":
        return StoreSpec("latency", latency_ms=args.latency_ms)
    if cond == "latency100":
        return StoreSpec("latency", latency_ms=FAR_LATENCY_MS)
    if cond == "throttle":
        return StoreSpec("latency", latency_ms=args.latency_ms, throttle_above=THROTTLE_ABOVE)
    if cond == "http":
        assert http is not None
        return http.store_spec(case)
    assert server is not None
    server.upload(case)
    return server.store_spec(case)


def _resolve(
    engines: tuple[str, ...],
    case: Case,
    cond: str,
    mode: Mode,
    rows: list[dict[str, Any]],
    skip: dict[str, str],
    log: Log,
) -> list[tuple[str, dict[str, Any]]]:
    """(engine, tuning) runs for one case and condition; BEST_WORKER becomes the best local worker stack."""
    runs: list[tuple[str, dict[str, Any]]] = []
    for e in engines:
        if e == BEST_WORKER:
            found = _best_worker(case, rows)
            if found:
                log(f"{cond} {case.name}: best worker stack at local: {found[0]} [{tuning_label(found[1])}]")
                runs.append(found)
            else:
                runs += [(w, t) for w in WORKER_STACKS if w not in skip for t in tunings(w, case, cond, mode)]
        elif e not in skip:
            runs += [(e, t) for t in tunings(e, case, cond, mode)]
    return _unique_runs(runs)


def _unique_runs(runs: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    seen, out = set(), []
    for e, t in runs:
        key = (e, json.dumps(t, sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append((e, t))
    return out


def _best_worker(case: Case, rows: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The worker stack (engine, tuning) with the best median local MB/s on this case, or on the
    single-variable case with the same samples per chunk."""
    spc = case.samples_per_chunk
    for ref in (case.name, f"c{spc}", "c8"):
        local = [
            r for r in rows if r["condition"] == "local" and r["case"] == ref and r["engine"] in WORKER_STACKS
        ]
        _, best = summarize(local)
        best = [b for b in best if b["MBps"] is not None]
        if best:
            top = max(best, key=lambda b: b["MBps"])
            return top["engine"], dict(top["tuning"])
    return None


def _brief(row: dict[str, Any]) -> str:
    wall = f"(wall {row['wall_s']:.1f} s)"
    if row["status"] == "ok":
        warm = f", warm {row['warm_MBps']:.0f} MB/s" if row.get("warm_MBps") else ""
        trunc = " TRUNCATED" if row.get("truncated") else ""
        # Working memory only where a cache makes it differ from the peak.
        work = row.get("work_MB")
        working = f" (working {work:.0f} MB)" if work is not None and work != row["peak_rss_MB"] else ""
        return (
            f"{row['samples']} samples, {row['MBps']:.0f} MB/s, TTFB {row['ttfb_ms']:.0f} ms, "
            f"peak RSS {row['peak_rss_MB']:.0f} MB{working}{warm}{trunc} {wall}"
        )
    if row["status"] == "unsupported":
        return f"unsupported: {row['reason']} {wall}"
    return f"{row['status'].upper()}: {row.get('error') or '?'} {wall}"


def _save(results: dict[str, Any], path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(path)
