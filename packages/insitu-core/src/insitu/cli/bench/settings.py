"""What ``insitu bench`` sweeps: the dials, their grid and the validated command-line options."""

from __future__ import annotations

import argparse
import inspect
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

AXES = ("max_inflight", "block_chunks", "decode_threads")


@dataclass(frozen=True)
class Config:
    """The validated options of one ``insitu bench`` run: the time budget (s), batch size, rounds over
    the grid, simulated training step per batch (s), shuffle seed, pool budget in bytes (``None``:
    the engine's) and the dials given with ``--grid``."""

    seconds: float
    batch_size: int
    repeats: int
    step_s: float
    seed: int
    budget: int | None
    grid: dict[str, list[int]]  # only the dials given with --grid


def config_from_args(args: argparse.Namespace) -> Config:
    """The command line's options, checked once."""
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


def engine_defaults(unit_nbytes: int | None = None) -> dict[str, int]:
    """The engine's own values of the swept dials (read from ``InSituDataset``'s signature), an
    ``"auto"`` one as the engine resolves it for chunks of ``unit_nbytes`` decoded bytes (one chunk
    of every sampled array together; None: the smallest value "auto" takes)."""
    from insitu import InSituDataset
    from insitu.options import AUTO_BLOCK_MIN, auto_block_chunks

    params = inspect.signature(InSituDataset.__init__).parameters
    out = {name: params[name].default for name in AXES}
    if out["decode_threads"] is None:
        out["decode_threads"] = os.cpu_count() or 1
    if out["block_chunks"] == "auto":
        out["block_chunks"] = AUTO_BLOCK_MIN if unit_nbytes is None else auto_block_chunks(unit_nbytes)
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
