"""Check a chunk transform on one real chunk before training with it.

``check_transform(t, store_or_view, label)`` reads the first chunk of an
array (the selection a view's geometry carries included), and reports:

* whether the output matches what ``out_spec`` declares (shape and dtype), or
  for a transform without ``out_spec`` what the engine's probe on slabs of
  zeros finds (a transform whose output depends on the values differs here),
  the error the engine would raise at that chunk otherwise;
* whether it has a stable identity for the persisted cache (``fingerprint()``
  or a derivable default);
* its time per chunk, beside the time to read and decode that chunk;
* whether it lets two decode threads run at once: the engine runs chunk
  transforms on its decode threads, so a transform that holds the GIL
  throughout serialises them. Measured as the cores two threads calling it
  keep busy (this process's CPU time over wall time): about 1 for a
  transform holding the GIL, up to 2 for one releasing it; only meaningful
  on a machine with at least two cores.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import zarr

from insitu.plugin_api import (
    ArrayGeometry,
    ConfigError,
    DeclaresOutput,
    bind_to_array,
    cf_transform_for,
    chain_runner,
    describe,
    output_spec,
    transform_fingerprint,
)

#: Two threads must keep this many cores busy for a transform to count as releasing the GIL.
SCALING_THRESHOLD = 1.4
#: Two threads keeping at most this many cores busy are serialised by the GIL.
HOLDS_THRESHOLD = 1.15
#: Below this time per chunk a transform costs nothing next to decoding; threads are not compared.
NEGLIGIBLE_SECONDS = 1e-3


@dataclass
class TransformReport:
    """What :func:`check_transform` found. ``ok`` is False when the output contradicts ``out_spec``
    (or, for a transform without one, what a probe on zeros found: ``probed``) or the transform
    raised; ``problems`` says why."""

    transform: str
    label: str
    input_shape: tuple[int, ...]
    input_dtype: str
    declared_shape: tuple[int, ...] | None = None
    declared_dtype: str | None = None
    output_shape: tuple[int, ...] | None = None
    output_dtype: str | None = None
    fingerprint: str | None = None
    seconds_per_chunk: float | None = None
    read_seconds_per_chunk: float | None = None
    two_thread_speedup: float | None = None
    releases_gil: bool | None = None
    probed: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the check found no problem."""
        return not self.problems

    def to_json(self) -> str:
        """The report as JSON, for scripts (``insitu check-transform --json``)."""
        return json.dumps({**asdict(self), "ok": self.ok}, indent=1)

    def __str__(self) -> str:
        lines = [f"{self.transform} on {self.label!r}: {'OK' if self.ok else 'PROBLEMS'}"]
        lines.append(f"  input            {list(self.input_shape)} {self.input_dtype}")
        if self.declared_shape is not None:
            how = "probed output   " if self.probed else "declared output "
            lines.append(f"  {how} {list(self.declared_shape)} {self.declared_dtype}")
        if self.output_shape is not None:
            lines.append(f"  actual output    {list(self.output_shape)} {self.output_dtype}")
        lines.append(f"  fingerprint      {self.fingerprint or '(none: not persistable)'}")
        if self.seconds_per_chunk is not None:
            lines.append(f"  time per chunk   {self.seconds_per_chunk * 1e3:.3f} ms")
        if self.read_seconds_per_chunk is not None:
            lines.append(
                f"  read+decode      {self.read_seconds_per_chunk * 1e3:.3f} ms (the first chunk, cold)"
            )
        if self.seconds_per_chunk is not None and self.seconds_per_chunk < NEGLIGIBLE_SECONDS:
            lines.append("  2 vs 1 threads   not measured: under 1 ms per chunk, negligible beside decoding")
        elif self.two_thread_speedup is not None:
            verdict = {True: "releases the GIL", False: "holds the GIL", None: "not measured"}[
                self.releases_gil
            ]
            lines.append(f"  2 threads busy   {self.two_thread_speedup:.2f} cores ({verdict})")
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)


def check_transform(
    transform: Callable[[str, np.ndarray], np.ndarray],
    store_or_view: Any,
    label: str,
    *,
    repeats: int = 5,
    measure_threads: bool = True,
    cf_decode: bool = True,
) -> TransformReport:
    """Run ``transform`` on the first chunk of ``label`` and report what it does (see the module).

    ``store_or_view`` is a zarr store or URL (``label`` names an array, read
    along axis 0 or its time-like leading dimension), an ``InSituDataset`` or
    one of its views (``label`` is a batch label; its geometry's selection
    applies). The chunk is CF-decoded first, as the engine does by default
    (``cf_decode=False``: the raw values). Raises ConfigError for an unknown
    label or an empty array.
    """
    geom, store = _geometry(store_or_view, label)
    started = time.perf_counter()
    block = _first_chunk(store, geom)
    decode = cf_transform_for(geom.metadata, name=geom.name) if cf_decode else None
    if decode is not None:  # what the transform receives in the engine: decoded values
        block = decode(geom.name, block)
        geom = dataclasses.replace(geom, dtype=block.dtype)
    read_seconds = time.perf_counter() - started
    report = TransformReport(
        transform=describe(transform), label=label, input_shape=block.shape, input_dtype=str(block.dtype)
    )
    report.read_seconds_per_chunk = read_seconds
    transform = bind_to_array(transform, geom)  # as the dataset does: a transform may need the array
    try:
        report.fingerprint = transform_fingerprint(transform)
    except ConfigError as exc:
        report.problems.append(str(exc))
    try:
        spec = output_spec(geom, [transform])
    except ConfigError as exc:
        report.problems.append(str(exc))
        return report
    report.declared_shape, report.declared_dtype = (block.shape[0], *spec.sample_shape), str(spec.dtype)
    report.probed = not isinstance(transform, DeclaresOutput)  # found on zeros, as the engine does
    run = chain_runner(geom.name, [transform], spec)
    try:
        out = run(block.copy())
    except ConfigError as exc:  # the output contradicts the declaration: the engine's own check
        report.problems.append(str(exc))
        raw = np.asarray(transform(geom.name, block.copy()))
        report.output_shape, report.output_dtype = raw.shape, str(raw.dtype)
        return report
    except Exception as exc:
        report.problems.append(f"the transform raised on a real chunk: {exc!r}")
        return report
    report.output_shape, report.output_dtype = out.shape, str(out.dtype)
    report.seconds_per_chunk = _median_seconds(lambda: run(block.copy()), repeats)
    if measure_threads and (os.cpu_count() or 1) >= 2 and report.seconds_per_chunk >= NEGLIGIBLE_SECONDS:
        # Enough calls per thread for about 0.2 s of work: shorter runs measure thread start-up.
        calls = max(repeats, math.ceil(0.2 / report.seconds_per_chunk))
        report.two_thread_speedup = _two_thread_speedup(lambda: run(block.copy()), calls)
        busy = report.two_thread_speedup
        # Between the two thresholds the machine's other load may explain it: no verdict.
        report.releases_gil = (
            True if busy >= SCALING_THRESHOLD else False if busy <= HOLDS_THRESHOLD else None
        )
    return report


def _geometry(store_or_view: Any, label: str) -> tuple[ArrayGeometry, Any]:
    dataset = getattr(store_or_view, "dataset", store_or_view)  # a view knows its dataset
    labels = getattr(dataset, "labels", None)
    if labels is not None and hasattr(dataset, "store"):
        geoms = {g.label: g for g in (*labels, *getattr(dataset, "statics", ()))}
        if label not in geoms:
            raise ConfigError(f"unknown label {label!r}; the dataset's labels are {sorted(geoms)}")
        return geoms[label].shift(-geoms[label].offset), dataset.store
    from insitu.plugin_api import open_geometries, open_store

    store = open_store(store_or_view)
    geoms = open_geometries(store, [label])
    return geoms[label], store


def _first_chunk(store: Any, geom: ArrayGeometry) -> np.ndarray:
    """The first slab of ``geom``, sample axis first, selection applied (as the engine decodes it)."""
    arr = zarr.open_array(store=store, path=geom.path, mode="r")
    region, axis = geom.orthogonal_region(slice(0, min(geom.chunk_len, geom.n_samples)))
    values = np.asarray(arr.get_orthogonal_selection(region))
    if geom.static:
        return values[np.newaxis]
    return np.ascontiguousarray(np.moveaxis(values, axis, 0))


def _median_seconds(call: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _two_thread_speedup(call: Callable[[], Any], repeats: int) -> float:
    """How many cores two threads calling at once keep busy: this process's CPU time over wall time
    (best of three). A transform holding the GIL keeps one (about 1.0), one releasing it up to two.
    CPU time rather than a throughput ratio: other processes on a busy machine slow the wall clock
    of both runs unevenly, but never add to this process's CPU time."""
    n = max(2, repeats)

    def two_threads() -> float:
        start = threading.Barrier(3)

        def work() -> None:
            start.wait()
            for _ in range(n):
                call()

        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        start.wait()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for t in threads:
            t.join()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        return cpu / wall if wall > 0 else 0.0

    return max(two_threads() for _ in range(3))


__all__ = ["SCALING_THRESHOLD", "TransformReport", "check_transform"]
