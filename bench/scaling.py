"""How far the engine scales past the cores measured here: its serial limit, and a projection from it.

    python bench/scaling.py [--threads 8 16 32 64] [--wait-ms 2] [--chunks 20000] [--repeats 3]
                            [--cores 8 16 32 64] [--samples-per-chunk 1 8 32] [--work DIR] [--out DIR]

Method. Decoding is replaced by a wait of known length that holds no GIL: the
tiny-chunk store of ``bench/tiny_chunks.py`` (one-sample uncompressed chunks,
so the real decode is a 256-byte copy) is read by ``InSituDataset`` with the
``"wait"`` decoder of ``bench/wait_decoder.py``, registered through insitu's
plugin registry, which sleeps ``--wait-ms`` per chunk before decoding.
``time.sleep`` releases the GIL, as zstd, blosc and numpy's copies do, so ``T``
decode threads overlap their waits whatever the core count: an engine with no
serial cost would deliver ``T / wait`` chunks/s (the "ideal" column, from the
sleep's measured length on this machine). The engine's own work per chunk
that holds the GIL (planning, the event loop, futures, slot bookkeeping,
batch assembly) runs one thread at a time; as ``T`` rises, throughput stops
following it. The highest chunks/s measured over the thread counts is the
engine's **serial limit** ``L``. Each count runs in a fresh process (default
engine settings, except ``decode_threads=T`` and blocks of
``max(256, 4 T)`` chunks so that every thread has chunks queued), one
shuffled pass, repeats interleaved, medians. The script says when the
largest count still gained more than 10% over the one before: no plateau yet,
so the limit is a lower bound (raise ``--threads``).

Projection. For a real archive of ``s`` samples of 181x360 float32 per chunk
(``B = s x 260,640`` bytes) on ``C`` cores, decoding scales with the cores at
``--decode-gbps-per-core`` (1.1 GB/s: zstd on one core of the reference
machine) while the serial work does not:

    bytes/s  = min(C x per-core decode rate, L x B)
    chunks/s = bytes/s / B

printed for ``--cores`` x ``--samples-per-chunk``, each cell marked with what
sets it (``decode``: the cores; ``engine``: the serial limit). What this leaves
out: per-chunk serial cost that grows with the chunk's bytes (the limit is
measured on tiny chunks, so any GIL-holding copy of large chunks is not in
``L``), memory bandwidth, and the store: it is a bound for local reads whose
serial cost per chunk is what this machine's measured.

Prints both tables and writes ``scaling.json`` to ``--out`` (default
``bench/results/``).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "suite"))

import tiny_chunks
import wait_decoder
from portable import REPO

HERE = Path(__file__).resolve().parent

SAMPLE_FIELD = (181, 360)  # one sample of the suite's cases: a 0.5-degree global field
SAMPLE_BYTES = math.prod(SAMPLE_FIELD) * 4  # float32
DEFAULT_DECODE_GBPS_PER_CORE = 1.1
# The largest thread count gaining less than this over the one before it: the plateau is reached.
PLATEAU_GAIN = 0.10

CHILD = r"""
sys.path[:0] = [{bench!r}, {plugins!r}]
import insitu
import wait_decoder
store = insitu.open_store({root!r})
geom = insitu.open_geometries(store, [{array!r}])[{array!r}]
manifest = insitu.split_by_chunk(geom, (1.0,), names=("train",))
ds = insitu.InSituDataset(
    store, manifest, [geom], batch_size={batch}, seed={seed}, decoders=[{decoder!r}],
    decode_threads={threads}, block_chunks={block},
)

def run():
    n = 0
    for batch in ds.train:
        n += len(batch[geom.label])
    return n

measure(run, lambda: {{"decoded": wait_decoder.decoded()}})
ds.close()
"""


def block_chunks(threads: int) -> int:
    """Chunks per block at ``threads`` decode threads: enough that every thread has work queued."""
    return max(256, 4 * threads)


def sleep_seconds(wait_s: float, calls: int = 50) -> float:
    """What ``time.sleep(wait_s)`` takes on this machine (mean of ``calls``): the sleep overshoots,
    and the ideal rate is computed from what it really waits."""
    t0 = time.perf_counter()
    for _ in range(calls):
        time.sleep(wait_s)
    return (time.perf_counter() - t0) / calls


def serial_limit(rows: Sequence[dict[str, Any]]) -> float:
    """The engine's serial limit: the highest chunks/s measured over the thread counts."""
    return max(r["chunks_per_s"] for r in rows)


def plateau_reached(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether throughput stopped following the thread count: the largest count gained less than
    ``PLATEAU_GAIN`` over the next smaller one (one count alone cannot tell)."""
    ordered = sorted(rows, key=lambda r: r["threads"])
    if len(ordered) < 2:
        return False
    before, last = ordered[-2:]
    return bool(last["chunks_per_s"] < (1 + PLATEAU_GAIN) * before["chunks_per_s"])


def project(
    limit_chunks_per_s: float,
    samples_per_chunk: int,
    cores: int,
    decode_bytes_per_s_per_core: float = DEFAULT_DECODE_GBPS_PER_CORE * 1e9,
    sample_bytes: int = SAMPLE_BYTES,
) -> dict[str, Any]:
    """Projected throughput at ``cores`` for chunks of ``samples_per_chunk`` samples:
    ``min(cores x per-core decode rate, serial limit x chunk bytes)``, and which term sets it."""
    chunk = samples_per_chunk * sample_bytes
    decode_bound = cores * decode_bytes_per_s_per_core
    engine_bound = limit_chunks_per_s * chunk
    rate = min(decode_bound, engine_bound)
    return {
        "cores": cores,
        "samples_per_chunk": samples_per_chunk,
        "chunk_bytes": chunk,
        "chunks_per_s": rate / chunk,
        "GB_per_s": rate / 1e9,
        "bound": "engine" if engine_bound < decode_bound else "decode",
    }


def format_measured(rows: Sequence[dict[str, Any]]) -> str:
    """The measured table: chunks/s per thread count against the ideal."""
    lines = [f"{'threads':>8}{'chunks/s':>11}{'ideal':>11}{'of ideal':>10}{'CPU us/chunk':>14}"]
    lines += [
        f"{r['threads']:>8}{r['chunks_per_s']:>11,.0f}{r['ideal_chunks_per_s']:>11,.0f}"
        f"{r['chunks_per_s'] / r['ideal_chunks_per_s']:>9.0%} {r['us_cpu_per_chunk']:>13.1f}"
        for r in rows
    ]
    return "\n".join(lines)


def format_projection(cells: Sequence[dict[str, Any]]) -> str:
    """The projection table: a row per chunk size, a column per core count."""
    cores = sorted({c["cores"] for c in cells})
    lines = [f"{'samples/chunk':>13}{'chunk MB':>10}" + "".join(f"{f'{n} cores':>26}" for n in cores)]
    for spc in sorted({c["samples_per_chunk"] for c in cells}):
        row = {c["cores"]: c for c in cells if c["samples_per_chunk"] == spc}
        text = f"{spc:>13}{row[cores[0]]['chunk_bytes'] / 1e6:>10.2f}"
        for n in cores:
            c = row[n]
            cell = f"{c['chunks_per_s']:,.0f}/s {c['GB_per_s']:.1f} GB/s {c['bound']}"
            text += f"{cell:>26}"
        lines.append(text)
    return "\n".join(lines)


def measure(root: Path, plugins: Path, threads: int, args: argparse.Namespace) -> dict[str, Any]:
    """One fresh-process pass at ``threads`` decode threads."""
    code = CHILD.format(
        bench=str(HERE),
        plugins=str(plugins),
        root=str(root),
        array=tiny_chunks.ARRAY,
        batch=args.batch_size,
        seed=args.seed,
        decoder=wait_decoder.DECODER_NAME,
        threads=threads,
        block=block_chunks(threads),
    )
    env = {k: v for k, v in os.environ.items() if k != "INSITU_DISABLE_PLUGIN_AUTOLOAD"}
    env[wait_decoder.WAIT_ENV] = repr(args.wait_ms / 1e3)
    result = tiny_chunks.run_child(sys.executable, code, env=env)
    if result["decoded"] < result["chunks"]:
        raise RuntimeError(f"the wait decoder decoded {result['decoded']} of {result['chunks']} chunks")
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="bench/scaling.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--threads", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--wait-ms", type=float, default=2.0, help="the GIL-free wait per chunk")
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--sample-shape", type=int, nargs="+", default=[8, 8])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cores", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--samples-per-chunk", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--decode-gbps-per-core", type=float, default=DEFAULT_DECODE_GBPS_PER_CORE)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "insitu-bench")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = tiny_chunks.build_store(args.work, args.chunks, args.sample_shape)
    wait = sleep_seconds(args.wait_ms / 1e3)
    runs: dict[int, list[dict[str, Any]]] = {t: [] for t in args.threads}
    with tempfile.TemporaryDirectory(prefix="insitu-bench-wait-") as folder:
        plugins = wait_decoder.entry_point_dir(Path(folder))
        for _ in range(args.repeats):  # repeats outermost: drift of a shared machine hits every count alike
            for threads in args.threads:
                runs[threads].append(measure(root, plugins, threads, args))
    rows = [
        {
            "threads": t,
            "block_chunks": block_chunks(t),
            "chunks_per_s": statistics.median(r["chunks"] / r["wall_s"] for r in rs),
            "chunks_per_s_runs": [r["chunks"] / r["wall_s"] for r in rs],
            "ideal_chunks_per_s": t / wait,
            "us_cpu_per_chunk": statistics.median(1e6 * r["cpu_s"] / r["chunks"] for r in rs),
        }
        for t, rs in runs.items()
    ]
    limit = serial_limit(rows)
    reached = plateau_reached(rows)
    cells = [
        project(limit, spc, cores, args.decode_gbps_per_core * 1e9)
        for spc in args.samples_per_chunk
        for cores in args.cores
    ]
    print(
        f"{args.chunks:,} one-sample uncompressed chunks, a {args.wait_ms:g} ms GIL-free wait per chunk "
        f"(sleeps {wait * 1e3:.3f} ms here), {os.cpu_count()} CPUs, medians of {args.repeats}"
    )
    print(format_measured(rows))
    note = "" if reached else " (no plateau yet, so a lower bound: the largest thread count still gained)"
    print(f"serial limit: {limit:,.0f} chunks/s{note}\n")
    print(
        f"projection, 181x360 float32 samples, {args.decode_gbps_per_core:g} GB/s of decode per core: "
        "min(cores x decode rate, serial limit x chunk bytes)"
    )
    print(format_projection(cells))
    tiny_chunks.write_record(
        args.out,
        "scaling",
        argv if argv is not None else sys.argv[1:],
        chunks=args.chunks,
        wait_ms=args.wait_ms,
        sleep_ms=wait * 1e3,
        repeats=args.repeats,
        measured=rows,
        serial_limit_chunks_per_s=limit,
        plateau_reached=reached,
        decode_GBps_per_core=args.decode_gbps_per_core,
        sample_bytes=SAMPLE_BYTES,
        projection=cells,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
