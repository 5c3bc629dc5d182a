"""insitu at two git revisions, side by side on the same data: did a change cost throughput?

    python bench/revisions.py BASE [--cases c1 c8 c32 ...] [--conditions local latency]
                              [--samples N] [--repeats N] [--block-samples N] [--budget-mb BASE NEW]

BASE (a commit, tag or branch) is checked out once into a git worktree under
the work folder; every run is a fresh process of the suite's insitu runner
(``bench/suite/engines/run_insitu.py``), with ``PYTHONPATH`` pointing either at
that worktree's insitu-core and insitu-stores sources or at this checkout's.
Repeats are the outer loop and the two revisions alternate inside it, so drift
of a shared machine hits both alike. Prints, per case and condition, the
median cold and warm MB/s, time to first batch and peak RSS of each revision,
and the ratio this checkout / BASE; checks that both delivered every sample
with equal checksums. Run it through the bench session's environment, e.g.
``.nox/bench/bin/python bench/revisions.py HEAD~3``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "suite"))

from common import Spec, StoreSpec
from data import build_cases
from driver import FAR_LATENCY_MS, MODES, REPO, THROTTLE_ABOVE, run_one, tunings

SOURCES = ("packages/insitu-core/src", "packages/insitu-stores/src")


def worktree(rev: str, work: Path) -> tuple[str, Path]:
    """(commit, folder) of ``rev`` checked out under ``work`` (made once, reused)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    folder = work / f"rev-{sha[:12]}"
    if not (folder / SOURCES[0]).exists():
        subprocess.run(
            ["git", "worktree", "add", "--detach", "--force", str(folder), sha], cwd=REPO, check=True
        )
    return sha, folder


def pythonpath(root: Path) -> str:
    return os.pathsep.join(str(root / s) for s in SOURCES)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", help="git revision to compare this checkout against")
    ap.add_argument("--cases", nargs="+", default=["c1", "c8", "c32", "multivar", "window", "sharded"])
    ap.add_argument(
        "--conditions",
        nargs="+",
        default=["local", "latency"],
        choices=["local", "latency", "latency100", "throttle"],
    )
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--block-samples", type=int, default=256, help="samples per shuffle block (0: the library's default)"
    )
    ap.add_argument(
        "--max-inflight",
        type=int,
        default=64,
        help="max_inflight on remote conditions (0: the library's default, the adaptive limit's own cap)",
    )
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument(
        "--budget-mb",
        nargs=2,
        type=float,
        metavar=("BASE", "NEW"),
        help="cache_budget_bytes of each revision, in MB (-1: its default); e.g. each at its best cold setting",
    )
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "insitu-bench")
    args = ap.parse_args(argv)

    args.work.mkdir(parents=True, exist_ok=True)
    sha, base_root = worktree(args.base, args.work)
    revisions = {f"base {sha[:8]}": pythonpath(base_root), "this checkout": pythonpath(REPO)}
    cases = build_cases(list(args.cases), args.samples, args.work)
    mode = MODES["quick"]
    runs_dir = Path(tempfile.mkdtemp(prefix="insitu-revisions-"))
    rows: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for rep in range(args.repeats):
        for cond in args.conditions:
            store = _store(cond, args.latency_ms)
            for name in args.cases:
                case = cases[name]
                tuning = tunings("insitu", case, cond, mode)[0]
                tuning.pop("max_inflight", None)
                if cond != "local" and args.max_inflight:
                    tuning["max_inflight"] = args.max_inflight
                tuning.pop("block_chunks", None)
                if args.block_samples:
                    tuning["block_chunks"] = max(1, args.block_samples // case.samples_per_chunk)
                for i, (label, path) in enumerate(revisions.items()):
                    own = dict(tuning)
                    if args.budget_mb is not None and args.budget_mb[i] >= 0:
                        own["cache_budget_bytes"] = int(args.budget_mb[i] * 1e6)
                    spec = Spec(engine="insitu", case=case, store=store, seed=rep, tuning=own, warm=True)
                    os.environ["PYTHONPATH"] = path
                    row = run_one(sys.executable, spec, runs_dir, f"{cond}-{name}-{label[:4]}-{rep}", 300)
                    rows.setdefault((cond, name, label), []).append(row)
                    status = row["status"] if row["status"] != "ok" else f"{_mbs(row):.0f} MB/s"
                    print(f"rep {rep} {cond:7s} {name:8s} {label:14s} {status}", flush=True)
    os.environ.pop("PYTHONPATH", None)
    _report(rows, args, sha, list(revisions))
    return 0


def _store(cond: str, latency_ms: float) -> StoreSpec:
    """The suite's store for ``cond`` (see driver.py's CONDITIONS)."""
    if cond == "local":
        return StoreSpec("local")
    if cond == "latency100":
        return StoreSpec("latency", latency_ms=FAR_LATENCY_MS)
    if cond == "throttle":
        return StoreSpec("latency", latency_ms=latency_ms, throttle_above=THROTTLE_ABOVE)
    return StoreSpec("latency", latency_ms=latency_ms)


def _mbs(row: dict[str, Any]) -> float:
    return row["bytes"] / row["elapsed_s"] / 1e6


def _warm_mbs(row: dict[str, Any]) -> float:
    return row["bytes"] / row["warm_elapsed_s"] / 1e6 if row.get("warm_elapsed_s") else float("nan")


def _report(
    rows: dict[tuple[str, str, str], list[dict[str, Any]]], args: Any, sha: str, labels: list[str]
) -> None:
    base, head = labels
    print(f"\ninsitu at {sha[:8]} (base) vs this checkout; {args.samples} samples, medians of {args.repeats}")
    print(
        "| condition | case | base cold MB/s | new cold MB/s | ratio | base warm | new warm | ratio "
        "| base TTFB ms | new TTFB ms | base RSS MB | new RSS MB | checks |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
    for cond in args.conditions:
        for name in args.cases:
            a = [r for r in rows.get((cond, name, base), []) if r["status"] == "ok"]
            b = [r for r in rows.get((cond, name, head), []) if r["status"] == "ok"]
            if not a or not b:
                print(
                    f"| {cond} | {name} | failed runs: base {len(a)} ok, new {len(b)} ok | | | | | | | | | | |"
                )
                continue
            med = statistics.median
            ca, cb = med(map(_mbs, a)), med(map(_mbs, b))
            wa, wb = med(map(_warm_mbs, a)), med(map(_warm_mbs, b))
            sums = {round(r["checksum"], 3) for r in a + b}
            counts = {r["samples"] for r in a + b}
            checks = "ok" if len(counts) == 1 and len(sums) == 1 else f"MISMATCH samples={counts} sums={sums}"
            print(
                f"| {cond} | {name} | {ca:.0f} | {cb:.0f} | {cb / ca:.2f} | {wa:.0f} | {wb:.0f} | {wb / wa:.2f} "
                f"| {1e3 * med(r['ttfb_s'] for r in a):.0f} | {1e3 * med(r['ttfb_s'] for r in b):.0f} "
                f"| {med(r['peak_rss_tree'] for r in a) / 1e6:.0f} | {med(r['peak_rss_tree'] for r in b) / 1e6:.0f} "
                f"| {checks} |"
            )


if __name__ == "__main__":
    sys.exit(main())
