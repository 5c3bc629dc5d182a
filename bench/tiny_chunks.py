"""A store of many tiny uncompressed chunks, and one measured pass over it in a fresh process.

``bench/overhead.py`` and ``bench/scaling.py`` measure what an engine costs per
stored chunk when decoding costs nothing: a zarr v3 group holding one float32
array ``x`` of shape ``(chunks, *sample_shape)`` in one-sample chunks with the
``bytes`` codec alone, so a chunk file is the sample's raw little-endian bytes
(256 bytes at the default ``(8, 8)``). The metadata is written by zarr; the
chunk files are written directly (tens of thousands of tiny writes through
zarr's pipeline would take longer than the measurement). A store is built once
under the work folder and reused, keyed by its chunk count and sample shape.

A measurement runs a snippet of Python in a fresh interpreter: the snippet does
its imports and builds its reader, then calls ``measure(run)`` from the prelude
here, which times ``run()`` (one whole pass, returning the chunks it delivered)
with the process's CPU clock (every thread of the process) and the wall clock,
and prints one JSON line (with what ``extra()``, when given, adds after the pass).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ARRAY = "x"
DTYPE = np.dtype("<f4")

# Put before every measured snippet: the clock starts in ``measure``, after the snippet's imports
# and set-up, and stops when the pass returns.
PRELUDE = r"""
import json, sys, time

def measure(run, extra=dict):
    cpu0, wall0 = time.process_time(), time.perf_counter()
    chunks = run()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    print(json.dumps({"chunks": chunks, "cpu_s": cpu, "wall_s": wall, **extra()}))
"""


def store_path(work: Path, chunks: int, sample_shape: Sequence[int]) -> Path:
    """Where the store of ``chunks`` one-sample chunks of ``sample_shape`` lives under ``work``."""
    shape = "x".join(str(int(s)) for s in sample_shape)
    return work / f"tiny-{chunks}-{shape}.zarr"


def build_store(work: Path, chunks: int, sample_shape: Sequence[int] = (8, 8)) -> Path:
    """The tiny-chunk store (built on first use): sample ``i`` holds the values ``i * size + k``."""
    import zarr

    root = store_path(work, chunks, sample_shape)
    done = root / ".complete"  # written last: an interrupted build is redone, not reused
    if done.exists():
        return root
    group = zarr.open_group(zarr.storage.LocalStore(root), mode="w")
    group.create_array(
        ARRAY,
        shape=(chunks, *sample_shape),
        chunks=(1, *sample_shape),
        dtype=DTYPE,
        compressors=None,
        filters=None,
        fill_value=0.0,
    )
    size = math.prod(sample_shape)
    tail = "/".join("0" * len(sample_shape))  # the chunk key's coordinates after the sample axis
    base = np.arange(size, dtype=DTYPE)
    for i in range(chunks):
        path = root / ARRAY / "c" / str(i) / tail
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((base + np.float32(i * size)).tobytes())
    done.write_text(json.dumps({"chunks": chunks, "sample_shape": list(sample_shape)}))
    return root


def chunk_bytes(sample_shape: Sequence[int]) -> int:
    """Bytes of one stored (and decoded) chunk of the tiny store."""
    return math.prod(sample_shape) * DTYPE.itemsize


def run_child(
    python: str, code: str, env: dict[str, str] | None = None, timeout: float = 900
) -> dict[str, Any]:
    """Run ``PRELUDE + code`` under ``python`` in a fresh process; the JSON line it printed last.

    Raises RuntimeError with the end of stderr when the process fails."""
    done = subprocess.run(
        [python, "-c", PRELUDE + code], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()[-1500:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def write_record(out: Path, script: str, argv: Sequence[str], **fields: Any) -> Path:
    """Write ``<script>.json`` under ``out``: the command that produced it and the CPU count, then
    ``fields``; returns its path. (Paths in the command are written relative to the repository.)"""
    from portable import portable_paths  # bench/suite: on sys.path in every script that writes a record

    record = {
        "command": portable_paths(" ".join([f"python bench/{script}.py", *argv])),
        "cpus": os.cpu_count(),
        **fields,
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{script}.json"
    path.write_text(json.dumps(record, indent=1))
    return path
