"""What the patch benchmark's engine runners share: the run spec, patch positions, the counting
store, the checksum and the result line.

A runner is ``python bench/patch_engines/run_<family>.py SPEC.json`` in a fresh interpreter,
started by ``bench/patches.py``. It imports its engine, notes its RSS after imports, starts the
clock, opens the store, builds its loader, consumes one cold epoch and prints one JSON line last
on stdout: the result below, or ``{"unsupported": why}`` when its imports are missing. The driver
measures the peak RSS of the process tree (DataLoader workers included) from outside.

Imports: numpy and zarr only (torch and the engines are the runners' own business).
"""

from __future__ import annotations

import json
import math
import mmap
import multiprocessing
import os
import resource
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

CHECK_STRIDE = 251  # the checksum reads every 251st value of each patch (see patch_checksum)


@dataclass(frozen=True)
class PatchSpec:
    """One run: the store, the patch layout, the engine and its tuning."""

    engine: str  # insitu | insitu_section | xbatcher | zarr_reader
    root: str  # local path of the zarr group
    array: str  # the float32 array's name in the group
    dims: list[str]  # its dimension names, sample dimension first: ["t", "y", "x"]
    shape: list[int]  # (T, Y, X)
    chunks: list[int]  # (1, CY, CX)
    patch: list[int]  # patch size along the non-sample dims, e.g. [256, 256]
    batch_size: int = 32  # patches per batch (insitu_section: cross-sections per batch)
    sampling: str = "grid"  # "grid": every grid position once; "random": patches_per_epoch draws
    patches_per_epoch: int = 0  # random sampling only
    seed: int = 0
    tuning: dict[str, Any] = field(default_factory=dict)
    max_seconds: float = 120.0  # a slow engine stops at this time and reports truncated

    @classmethod
    def load(cls, path: str) -> PatchSpec:
        with open(path) as f:
            return cls(**json.load(f))

    def dump(self) -> str:
        return json.dumps(asdict(self))

    @property
    def patch_by_dim(self) -> dict[str, int]:
        """The patch size by dimension name (what insitu's ``patch=`` takes)."""
        return dict(zip(self.dims[1:], self.patch, strict=True))

    @property
    def patch_nbytes(self) -> int:
        return math.prod(self.patch) * 4

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Stored chunks per axis."""
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunks, strict=True))


@dataclass
class Result:
    """A runner's result line (a cold epoch, construction to last batch)."""

    patches: int  # samples delivered (patches, or cross-sections for insitu_section)
    bytes: int  # sample bytes delivered
    elapsed_s: float  # store opened -> last batch in hand
    ttfb_s: float  # store opened -> first batch in hand (construction included)
    iter_ttfb_s: float  # iterator created -> first batch in hand
    floor_rss: int  # the runner's RSS after its imports (bytes)
    checksum: float  # sum of patch_checksum over the epoch (order-independent)
    truncated: bool = False  # stopped at max_seconds
    cpu_s: float = 0.0  # CPU seconds of the process and its workers, store opened -> epoch over
    chunk_gets: int = 0  # stored-chunk GETs (insitu: its reads)
    chunk_decodes: int = 0  # chunks decoded (peers: one per GET, zarr decodes what it gets)
    distinct_chunks: int = 0  # stored chunks the epoch's patches touch
    max_decodes_one_chunk: int = 0  # the most any one chunk was decoded (0 when not known)
    extra: dict[str, Any] = field(default_factory=dict)


def emit(result: Result | dict[str, Any]) -> None:
    """Print the result line the driver reads (the last stdout line)."""
    sys.stdout.flush()
    print(json.dumps(asdict(result) if isinstance(result, Result) else result), flush=True)


def unsupported_without(modules: Sequence[str]) -> None:
    """Import ``modules``; on ImportError print the ``unsupported`` line and exit 0."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            emit({"unsupported": f"{name} does not import here ({exc})"})
            raise SystemExit(0) from None


def rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# --- patch positions ------------------------------------------------------------------------------


def grid_origins(spec: PatchSpec) -> np.ndarray:
    """Every grid patch's origin, ``(n, ndim)`` int64, in C order (t, then y, then x): stride =
    size, patches past the edge dropped (the benchmark's stores tile exactly, so none are)."""
    axes = [np.arange(spec.shape[0])]
    axes += [np.arange(0, s - p + 1, p) for s, p in zip(spec.shape[1:], spec.patch, strict=True)]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1).astype(np.int64)


def random_origins(spec: PatchSpec) -> np.ndarray:
    """``patches_per_epoch`` origins drawn uniformly (any offset, not aligned to chunks), seeded."""
    rng = np.random.default_rng(spec.seed)
    n = spec.patches_per_epoch
    cols = [rng.integers(0, spec.shape[0], n)]
    cols += [rng.integers(0, s - p + 1, n) for s, p in zip(spec.shape[1:], spec.patch, strict=True)]
    return np.stack(cols, axis=1).astype(np.int64)


def origins_for(spec: PatchSpec) -> np.ndarray:
    return grid_origins(spec) if spec.sampling == "grid" else random_origins(spec)


def touched_chunks(spec: PatchSpec, origins: np.ndarray) -> int:
    """How many distinct stored chunks the patches at ``origins`` overlap."""
    touched = np.zeros(spec.grid_shape, dtype=bool)
    size = [1, *spec.patch]
    first = origins // np.asarray(spec.chunks)
    last = (origins + np.asarray(size) - 1) // np.asarray(spec.chunks)
    # Patches no larger than a chunk overlap at most 2 chunks per axis: mark each corner's chunk.
    for corner in np.ndindex(*(2,) * len(size)):
        idx = np.where(np.asarray(corner, dtype=bool), last, first)
        touched[tuple(idx.T)] = True
    return int(touched.sum())


# --- checksum -------------------------------------------------------------------------------------


def patch_checksum(batch: Any) -> float:
    """float64 sum of every CHECK_STRIDE-th value of each patch of ``batch`` ``(B, *patch)``.

    Order-independent across batches and patches, and sparse, so checking costs the consumer next
    to nothing; engines delivering the same patches agree. Takes numpy arrays or torch tensors."""
    a = np.asarray(batch)
    return float(a.reshape(len(a), -1)[:, ::CHECK_STRIDE].sum(dtype=np.float64))


def section_checksum_index(section_shape: Sequence[int], patch: Sequence[int]) -> np.ndarray | None:
    """Flat indices into one cross-section of the values :func:`patch_checksum` would read from
    each grid patch tiling it, so a cross-section pass checksums like a grid patch pass over the
    same data; None when the patches do not tile the section exactly."""
    if any(s % p for s, p in zip(section_shape, patch, strict=True)):
        return None
    local = np.unravel_index(np.arange(0, math.prod(patch), CHECK_STRIDE), tuple(patch))
    axes = [np.arange(0, s, p) for s, p in zip(section_shape, patch, strict=True)]
    origins = np.stack([m.ravel() for m in np.meshgrid(*axes, indexing="ij")], axis=1)
    coords = [origins[:, k, None] + local[k][None, :] for k in range(len(patch))]
    return np.ravel_multi_index(tuple(c.ravel() for c in coords), tuple(section_shape))


# --- the counting store ---------------------------------------------------------------------------


class SharedCounts:
    """GETs per stored chunk, in an anonymous shared mapping: forked DataLoader workers add to the
    same counters as the parent (under one fork-shared lock)."""

    def __init__(self, grid_shape: Sequence[int]) -> None:
        self.grid_shape = tuple(grid_shape)
        self._map = mmap.mmap(-1, 8 * (math.prod(self.grid_shape) + 1))  # MAP_SHARED | MAP_ANONYMOUS
        flat = np.frombuffer(self._map, dtype=np.int64)
        self.counts = flat[:-1].reshape(self.grid_shape)
        self._other = flat[-1:]  # metadata and other keys
        self.lock = multiprocessing.get_context("fork").Lock()

    def add(self, key: str, array: str) -> None:
        head, sep, coords = key.rpartition("/c/")
        with self.lock:
            if sep and head == array:
                self.counts[tuple(int(c) for c in coords.split("/"))] += 1
            else:
                self._other[0] += 1

    def summary(self) -> dict[str, int]:
        c = self.counts
        return {
            "chunk_gets": int(c.sum()),
            "distinct_chunks": int((c > 0).sum()),
            "max_decodes_one_chunk": int(c.max()) if c.size else 0,
            "other_gets": int(self._other[0]),
        }


try:
    from zarr.storage import WrapperStore as _WrapperStore
except ImportError:  # pragma: no cover - zarr without WrapperStore
    _WrapperStore = object  # type: ignore[assignment,misc]


class CountingStore(_WrapperStore):  # type: ignore[misc,valid-type]
    """A zarr store that counts every GET per key into :class:`SharedCounts` (zarr decodes every
    chunk it gets, so for the peers GETs are decodes). Works in forked workers; not picklable on
    purpose (a spawned worker would count into a copy nobody reads)."""

    def __init__(self, store: Any, counts: SharedCounts, array: str) -> None:
        super().__init__(store)
        self.counts = counts
        self.array = array

    def _with_store(self, store: Any) -> CountingStore:
        return type(self)(store, self.counts, self.array)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        self.counts.add(key, self.array)
        return await self._store.get(key, prototype, byte_range)

    async def get_partial_values(self, prototype: Any, key_ranges: Any) -> list[Any]:
        for key, _ in key_ranges:
            self.counts.add(key, self.array)
        return list(await self._store.get_partial_values(prototype, key_ranges))


def counting_store(spec: PatchSpec) -> tuple[Any, SharedCounts]:
    """The spec's group as a read-only zarr ``LocalStore`` behind a :class:`CountingStore`."""
    from zarr.storage import LocalStore

    counts = SharedCounts(spec.grid_shape)
    return CountingStore(LocalStore(spec.root, read_only=True), counts, spec.array), counts


# --- the epoch ------------------------------------------------------------------------------------


def cpu_now() -> float:
    """CPU seconds (user + system) of this process and of its children that have exited and
    been waited for (DataLoader workers, once the loader shut them down)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class Clock:
    """Started after imports, right before the store is opened: wall time and CPU time."""

    def __init__(self) -> None:
        self.floor_rss = rss_now()
        self.cpu0 = cpu_now()
        self.t0 = time.perf_counter()

    def since(self) -> float:
        return time.perf_counter() - self.t0

    def cpu_since(self) -> float:
        return cpu_now() - self.cpu0


def cold_epoch(
    spec: PatchSpec,
    clock: Clock,
    make_batches: Callable[[], Iterable[Any]],
    arrays: Callable[[Any], Any] = lambda b: b,
    checksum: Callable[[Any], float] = patch_checksum,
    on_batch: Callable[[Any], None] | None = None,
) -> Result:
    """Consume one epoch of ``make_batches()`` (the iterator is created here, on the clock).

    ``arrays(batch)`` gives the batch's ``(B, ...)`` array; ``on_batch`` sees every batch (insitu:
    its patch origins). Stops at ``spec.max_seconds``; shutting the loader down is not timed."""
    iter_t0 = clock.since()
    batches = iter(make_batches())
    patches = nbytes = 0
    total = elapsed = ttfb = iter_ttfb = 0.0
    truncated = False
    batch: Any = None
    for batch in batches:
        if patches == 0:
            ttfb = clock.since()
            iter_ttfb = ttfb - iter_t0
        x = arrays(batch)
        patches += len(x)
        nbytes += x.nbytes  # numpy arrays and torch tensors alike
        total += checksum(x)
        if on_batch is not None:
            on_batch(batch)
        elapsed = clock.since()
        if elapsed > spec.max_seconds:
            truncated = True
            break
    # Dropping the iterator shuts a DataLoader's workers down and waits for them, so their CPU
    # time is counted (with that of the shutdown, which is small beside an epoch's).
    del batches, batch
    cpu = clock.cpu_since()
    return Result(
        patches=patches,
        bytes=nbytes,
        elapsed_s=elapsed,
        ttfb_s=ttfb,
        iter_ttfb_s=iter_ttfb,
        floor_rss=clock.floor_rss,
        checksum=total,
        truncated=truncated,
        cpu_s=cpu,
    )
