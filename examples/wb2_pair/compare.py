"""Train the same model on the same samples through insitu and through xbatcher + DataLoader workers.

    python -m examples.wb2_pair --smoke        # tiny synthetic store, seconds
    python -m examples.wb2_pair                # a synthetic year of 6-hourly 64x32 fields
    python -m examples.wb2_pair --store gs://weatherbench2/datasets/era5/1959-2023_01_10-6h-64x32_equiangular_conservative.zarr

The task: forecast 2 m temperature and 500 hPa geopotential 6 hours ahead on
WeatherBench2's 5.625° grid, trained on the training dates and scored on
held-out test dates (latitude-weighted RMSE) against persistence. Each stack
runs in a process of its own, one after the other; this process samples the
memory of that process and its DataLoader workers in a background thread.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from examples.common import Result, finish, parser
from examples.wb2_pair.data import write_store
from examples.wb2_pair.measure import run as measure_run
from examples.wb2_pair.spec import DEFAULT, SMOKE, Plan, Spec

LEAD_HOURS = 6
ORDER = ("insitu", "xbatcher")  # measured one after the other, never side by side
EXPLAIN = """\
  TTFB        seconds from constructing the loader (opening the store included; imports excluded) to the
              first training batch in hand
  samples/s   training samples per second, model steps included (one torch thread in both runs), after
              the first {warmup} steps and across epoch boundaries (DataLoader workers restart each
              epoch, its default)
  waiting     share of that time the training loop spent waiting for its next batch
  peak RSS    highest resident memory of the measuring process plus its DataLoader workers, summed,
              sampled every 10 ms from outside (pages a worker shares with its parent count in both,
              as top shows them: an upper bound on the physical footprint)
  +loader     that peak minus the measuring process's RSS just before construction
  RMSE        latitude-weighted, over the test dates, each stack scoring its own model through its own
              loader; persistence predicts x(t + 6 h) = x(t)"""


class PeakMemory(threading.Thread):
    """Samples the summed RSS of a process and all its descendants until stopped; keeps the peak."""

    def __init__(self, pid: int, every_s: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.pid, self.every_s, self.peak = pid, every_s, 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop_event.is_set():
            total = 0
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            for proc in tree:
                with contextlib.suppress(psutil.Error):  # a worker that just exited
                    total += proc.memory_info().rss
            self.peak = max(self.peak, total)
            self._stop_event.wait(self.every_s)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return self.peak


def measure(stack: str, spec: Spec) -> dict[str, Any]:
    """Run one stack in a process of its own; its measurements plus the peak RSS of its process tree.

    The process is spawned (a fresh interpreter), so what it measures does
    not depend on what this process did before; its RSS includes its own
    imports, the same for both stacks. This process never touches the
    store, only writes the synthetic one.
    """
    # Spawned, not forked: a process that has run insitu (or dask, or a storage client) holds
    # threads a fork would copy mid-flight, and the child could hang (a test suite does exactly
    # that). Each child imports its own libraries, so both stacks pay the same start-up.
    context: Any = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    proc = context.Process(target=measure_run, args=(stack, spec.dumps(), send), name=f"wb2_pair-{stack}")
    proc.start()
    send.close()
    assert proc.pid is not None
    sampler = PeakMemory(proc.pid)
    sampler.start()
    try:
        status, payload = receive.recv()
    except EOFError:
        status, payload = "error", "the process ended without a result"
    proc.join()
    peak = sampler.stop()
    if status != "ok":
        raise RuntimeError(f"the {stack} run failed (exit {proc.exitcode}):\n{payload}")
    row: dict[str, Any] = payload
    row["peak_rss_mb"] = peak / 1e6
    return row


def day_after(date: str) -> str:
    return str(np.datetime64(date, "D") + np.timedelta64(1, "D"))


def prepare(args: argparse.Namespace, workdir: Path) -> Spec:
    """The plan, and the store (written first when synthetic)."""
    plan: Plan = SMOKE if args.smoke else DEFAULT
    if args.train:
        plan = replace(plan, train=tuple(args.train.split(",")))
    if args.test:
        plan = replace(plan, test=tuple(args.test.split(",")))
    if args.epochs:
        plan = replace(plan, epochs=args.epochs)
    store = args.store
    if store is None:  # the dates the plan needs, and the target of the last test sample
        store = write_store(workdir / "wb2-like.zarr", plan.train[0], day_after(plan.test[1]), seed=args.seed)
    return Spec(store=store, plan=plan, seed=args.seed, lead_hours=LEAD_HOURS, num_workers=args.workers)


@dataclass
class Outcome:
    spec: Spec
    rows: list[dict[str, Any]]
    result: Result
    checks: list[str]  # what was verified across the two runs; a line starting "MISMATCH" did not hold


def compare(args: argparse.Namespace) -> Outcome:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="wb2_pair-") as tmp:
        workdir = Path(args.workdir) if args.workdir else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        spec = prepare(args, workdir)
        rows = [measure(stack, spec) for stack in ORDER]
    insitu, xb = rows
    checks = [
        check(
            insitu["samples_per_epoch"] == xb["samples_per_epoch"],
            f"samples per training epoch: {insitu['samples_per_epoch']} (insitu), {xb['samples_per_epoch']} (xbatcher)",
        ),
        check(
            insitu["test_samples"] == xb["test_samples"]
            and np.allclose(
                list(insitu["persistence"].values()), list(xb["persistence"].values()), rtol=1e-5
            ),
            f"test samples: {insitu['test_samples']} and {xb['test_samples']}, persistence RMSE "
            "equal (the same test fields through both stacks)",
        ),
    ]
    name = "2m_temperature"
    result = Result(
        example="wb2_pair",
        metric="2 m temperature RMSE at +6 h, K (latitude-weighted, insitu run)",
        model=insitu["rmse"][name],
        baseline=insitu["persistence"][name],
        baseline_name="persistence",
        higher_is_better=False,
        seconds=time.perf_counter() - started,
    )
    return Outcome(spec=spec, rows=rows, result=result, checks=checks)


def check(ok: bool, what: str) -> str:
    return ("same " if ok else "MISMATCH ") + what


def render(outcome: Outcome) -> str:
    """The side-by-side table, what each column measures, and the cross-checks."""
    spec = outcome.spec
    plan = spec.plan
    head = ("stack", "TTFB s", "samples/s", "waiting", "peak RSS MB", "+loader MB", "t2m RMSE K", "z500 RMSE")
    lines = [
        f"store: {spec.store}",
        f"train {plan.train[0]} … {plan.train[1]}, test {plan.test[0]} … {plan.test[1]}; "
        f"batch {plan.batch_size}, {plan.epochs} epochs, Adam lr {plan.lr:g}, seed {spec.seed}",
    ]
    table = [head]
    table += [
        (
            row["stack"],
            f"{row['ttfb_s']:.2f}",
            f"{row['samples_per_s']:,.0f}",
            f"{row['wait_fraction']:.0%}",
            f"{row['peak_rss_mb']:,.0f}",
            f"{row['peak_rss_mb'] - row['floor_rss_mb']:,.0f}",
            f"{row['rmse']['2m_temperature']:.3f}",
            f"{row['rmse']['geopotential']:.1f}",
        )
        for row in outcome.rows
    ]
    base = outcome.rows[0]["persistence"]
    table.append(
        ("persistence", "", "", "", "", "", f"{base['2m_temperature']:.3f}", f"{base['geopotential']:.1f}")
    )
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for i, r in enumerate(table):
        cells = [r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))]
        lines.append("  ".join(cells))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines += [f"  {row['stack']}: {row['how']}; {row['steps']} steps" for row in outcome.rows]
    lines.append(EXPLAIN.format(warmup=spec.warmup_steps))
    lines += outcome.checks
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--train", help="training dates START,END (inclusive; default by mode)")
    p.add_argument("--test", help="held-out dates START,END")
    p.add_argument("--epochs", type=int, default=0, help="training epochs (default by mode)")
    p.add_argument("--workers", type=int, default=2, help="the xbatcher stack's DataLoader workers")
    args = p.parse_args(argv)
    outcome = compare(args)
    print(render(outcome))
    return finish(outcome.result, args)
