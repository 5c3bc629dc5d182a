"""``insitu bench URL``: the command; a short real run on a store, then a sweep that recommends settings.

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
import sys
from pathlib import Path

from insitu.cli.bench.render import render, report_json
from insitu.cli.bench.settings import AXES, config_from_args, parse_grid
from insitu.cli.bench.sweep import bench, recommend
from insitu.cli.common import add_store_arguments

__all__ = ["AXES", "BenchCommand", "bench", "parse_grid", "recommend", "render"]


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
        """Add the store arguments and the sweep's options (time budget, grid, repeats, output file)."""
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
        """Measure, sweep and print the report (saved to ``--out``); exit status 1 when no setting
        could be recommended."""
        config = config_from_args(args)
        report = bench(args, config, progress=_stderr)
        out = Path(args.out)
        out.write_text(report_json(report) + "\n")
        if args.json:
            print(report_json(report))
        else:
            print(render(report))
        _stderr(f"results saved to {out}")
        return 0 if report["recommendation"] is not None else 1


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
