"""What an engine costs per stored chunk: CPU microseconds per chunk on a store where decoding is free.

    python bench/overhead.py [--chunks 40000] [--repeats 5] [--engines insitu insitu-stream tensorstore raw]
                             [--tensorstore-python PATH] [--work DIR] [--out DIR]

The store (``tiny_chunks.build_store``, built once under ``--work``) holds
``--chunks`` one-sample chunks of ``--sample-shape`` float32 (256 bytes at the
default 8x8) with no compression: reading a chunk is a tiny file read and
decoding it is a copy, so what a pass costs is the reader's own work per chunk
(planning, tasks, futures, locks, slot bookkeeping, scatter and gather, stats).
Each engine reads the whole store once, in a shuffled order, in a fresh process
whose imports and set-up are done before the clock; the measure is the
process's CPU time over the pass (every thread, ``time.process_time``) divided
by the chunks delivered. Repeats are interleaved across engines (a shared
machine's drift hits each alike) and the table shows medians.

- ``insitu``: ``InSituDataset`` at its defaults (a cold first pass; the cache
  budget is "auto"), batches of ``--batch-size``.
- ``insitu-stream``: the same with ``cache_budget_bytes=0`` (the streaming pass).
- ``tensorstore``: Google's C++ reader driven as the suite drives it
  (``bench/suite/engines/run_tensorstore.py``: one ``read()`` future per chunk,
  a block of chunks in flight, rows dealt into batches of ``--batch-size``).
  tensorstore installs from PyPI on Python 3.12 only: it runs under
  ``--tensorstore-python`` (default: the virtualenv the ``bench`` nox session
  builds, ``.nox/bench-tensorstore-py312``) and is skipped with a note when
  there is none.
- ``raw``: the floor, a Python loop that opens each chunk file, reads it and
  wraps the bytes with ``numpy.frombuffer`` (no batches, no threads).

Prints the table and writes ``overhead.json`` to ``--out`` (default
``bench/results/``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "suite"))

import tiny_chunks
from portable import REPO, portable_paths

HERE = Path(__file__).resolve().parent

DEFAULT_TENSORSTORE_PYTHON = REPO / ".nox" / "bench-tensorstore-py312" / "bin" / "python"

INSITU = r"""
import insitu
store = insitu.open_store({root!r})
geom = insitu.open_geometries(store, [{array!r}])[{array!r}]
manifest = insitu.split_by_chunk(geom, (1.0,), names=("train",))
ds = insitu.InSituDataset(store, manifest, [geom], batch_size={batch}, seed={seed}, **{tuning!r})

def run():
    n = 0
    for batch in ds.train:
        n += len(batch[geom.label])
    return n

measure(run)
ds.close()
"""

TENSORSTORE = r"""
sys.path[:0] = [{engines!r}, {suite!r}]
import os
from run_tensorstore import BlockLoader, open_arrays
arrays = open_arrays({root!r}, [{array!r}], os.cpu_count() or 1)
loader = BlockLoader(arrays, {batch}, {block})

def run():
    n = 0
    for batch in loader.epoch({seed}):
        n += len(batch[0])
    return n

measure(run)
"""

RAW = r"""
import numpy as np
order = np.random.default_rng({seed}).permutation({chunks}).tolist()
head, tail, shape = {head!r}, {tail!r}, {shape!r}

def run():
    n = 0
    for i in order:
        with open(f"{{head}}{{i}}{{tail}}", "rb") as f:
            np.frombuffer(f.read(), dtype="<f4").reshape(shape)
        n += 1
    return n

measure(run)
"""


@dataclass(frozen=True)
class Engine:
    """One measured reader: how to write its snippet, and whether it needs the tensorstore Python."""

    name: str
    what: str
    code: Callable[[Path, argparse.Namespace], str]
    tensorstore: bool = False


def _insitu(tuning: dict[str, Any]) -> Callable[[Path, argparse.Namespace], str]:
    def code(root: Path, args: argparse.Namespace) -> str:
        return INSITU.format(
            root=str(root), array=tiny_chunks.ARRAY, batch=args.batch_size, seed=args.seed, tuning=tuning
        )

    return code


def _tensorstore(root: Path, args: argparse.Namespace) -> str:
    return TENSORSTORE.format(
        engines=str(HERE / "suite" / "engines"),
        suite=str(HERE / "suite"),
        root=str(root),
        array=tiny_chunks.ARRAY,
        batch=args.batch_size,
        block=args.block_chunks,
        seed=args.seed,
    )


def _raw(root: Path, args: argparse.Namespace) -> str:
    tail = "".join("/0" for _ in args.sample_shape)
    return RAW.format(
        seed=args.seed,
        chunks=args.chunks,
        head=f"{root}/{tiny_chunks.ARRAY}/c/",
        tail=tail,
        shape=tuple(args.sample_shape),
    )


ENGINES = {
    e.name: e
    for e in (
        Engine("insitu", "insitu at its defaults", _insitu({})),
        Engine("insitu-stream", "insitu, cache_budget_bytes=0", _insitu({"cache_budget_bytes": 0})),
        Engine("tensorstore", "tensorstore, a future per chunk", _tensorstore, tensorstore=True),
        Engine("raw", "open + read + frombuffer loop", _raw),
    )
}


def tensorstore_python(given: str | None) -> tuple[str | None, str]:
    """The interpreter for tensorstore and, when there is none, why."""
    python = given or str(DEFAULT_TENSORSTORE_PYTHON)
    if not Path(python).exists():
        return None, (
            f"no {portable_paths(python)}: build it with `nox -s bench` (any mode) or pass "
            "--tensorstore-python a Python 3.12 with tensorstore"
        )
    check = subprocess.run([python, "-c", "import tensorstore"], capture_output=True, text=True, check=False)
    if check.returncode != 0:
        return None, f"tensorstore does not import under {portable_paths(python)}"
    return python, ""


def summarize(name: str, what: str, runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One table row from an engine's runs: median CPU microseconds per chunk and wall chunks/s."""
    per_chunk = [1e6 * r["cpu_s"] / r["chunks"] for r in runs]
    rates = [r["chunks"] / r["wall_s"] for r in runs]
    return {
        "engine": name,
        "what": what,
        "chunks": runs[0]["chunks"],
        "us_cpu_per_chunk": statistics.median(per_chunk),
        "us_cpu_per_chunk_runs": per_chunk,
        "chunks_per_s": statistics.median(rates),
        "cpu_per_wall": statistics.median(r["cpu_s"] / r["wall_s"] for r in runs),
    }


def format_table(rows: Sequence[dict[str, Any]], skipped: dict[str, str]) -> str:
    """The printed table: one line per engine, its cost against the raw loop's where that ran."""
    floor = next((r["us_cpu_per_chunk"] for r in rows if r["engine"] == "raw"), None)
    lines = [
        f"{'engine':<15}{'':<34}{'CPU us/chunk':>13}{'range':>15}{'chunks/s':>11}{'cores':>7}{'vs raw':>8}"
    ]
    for r in rows:
        runs = r["us_cpu_per_chunk_runs"]
        spread = f"{min(runs):.1f}-{max(runs):.1f}"
        ratio = f"{r['us_cpu_per_chunk'] / floor:.2f}x" if floor else "-"
        lines.append(
            f"{r['engine']:<15}{r['what']:<34}{r['us_cpu_per_chunk']:>13.1f}{spread:>15}"
            f"{r['chunks_per_s']:>11,.0f}{r['cpu_per_wall']:>7.2f}{ratio:>8}"
        )
    lines += [f"{name:<15}skipped: {why}" for name, why in skipped.items()]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="bench/overhead.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--chunks", type=int, default=40_000)
    ap.add_argument("--sample-shape", type=int, nargs="+", default=[8, 8])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--engines", nargs="+", choices=list(ENGINES), default=list(ENGINES))
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--block-chunks", type=int, default=256, help="tensorstore's chunks in flight")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tensorstore-python", default=None)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "insitu-bench")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = tiny_chunks.build_store(args.work, args.chunks, args.sample_shape)
    skipped: dict[str, str] = {}
    pythons: dict[str, str] = {}
    for name in args.engines:
        if ENGINES[name].tensorstore:
            python, why = tensorstore_python(args.tensorstore_python)
            if python is None:
                skipped[name] = why
                print(f"{name} skipped: {why}", file=sys.stderr)
                continue
            pythons[name] = python
        else:
            pythons[name] = sys.executable
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in pythons}
    for _ in range(args.repeats):  # repeats outermost: drift of a shared machine hits every engine alike
        for name in pythons:
            try:
                runs[name].append(tiny_chunks.run_child(pythons[name], ENGINES[name].code(root, args)))
            except RuntimeError as exc:
                skipped[name] = f"failed: {portable_paths(str(exc))}"
    rows = [summarize(n, ENGINES[n].what, r) for n, r in runs.items() if r and n not in skipped]
    nbytes = tiny_chunks.chunk_bytes(args.sample_shape)
    print(
        f"{args.chunks:,} chunks of {nbytes} bytes, uncompressed, one shuffled pass per process, "
        f"{os.cpu_count()} CPUs, medians of {args.repeats}"
    )
    print(format_table(rows, skipped))
    tiny_chunks.write_record(
        args.out,
        "overhead",
        argv if argv is not None else sys.argv[1:],
        chunks=args.chunks,
        sample_shape=list(args.sample_shape),
        chunk_bytes=nbytes,
        repeats=args.repeats,
        rows=rows,
        skipped=skipped,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
