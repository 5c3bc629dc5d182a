"""Region summaries of a weighted patch draw: computed once in a streaming pass, kept, reused.

A summary (:class:`~insitu.plan.patch_weights.RegionSummary`) holds one number per region
(the sum of its positions' weights, or how many meet a minimum coverage) or one count per
(region, class). :func:`compute_summary` makes it region after region in C order: each region's
footprint (its positions' patches, or their centres) is assembled from the weighting array's
stored chunks, kept in a small LRU of decoded chunks (a region's footprint reaches into the
next regions' chunks, which the next regions read again), so memory is bounded by that LRU and
one footprint, never the whole mask. Values are read as stored (no chunk transform), which is
why the dataset requires the weighting array to be delivered undecoded too.

:class:`SummaryCache` keeps summaries per split for the dataset's life and, with a
``cache_dir``, on disk under ``summaries/``, named by a hash of what they depend on: the store,
the array's metadata, the version of every one of its stored chunks (size and mtime of a local
file, an ETag on object storage: no chunk is read), the positions of the split and the rule.
A summary whose array's bytes changed has another name and is made again. A file is written
whole to a temporary name and renamed, so a pass that fails part-way leaves no summary behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store

from insitu.arrays.chunk_units import assemble_box
from insitu.arrays.coregistration import Scale
from insitu.arrays.geometry import ArrayGeometry
from insitu.plan.patch_weights import BALANCE, COVERAGE, PositionWeighting, RegionSummary, summary_identity
from insitu.plan.patches_regions import PatchSet
from insitu.plan.weighted_draw import region_values
from insitu.store.capabilities import object_version, store_identity
from insitu.store.keys import chunk_key_encoder
from insitu.store.loop import run_sync

log = logging.getLogger(__name__)

__all__ = ["SummaryCache", "compute_summary"]

#: Decoded chunks the summary pass keeps for the regions after the one it reads (bytes).
LRU_BYTES = 256 * 1024 * 1024
FORMAT = "insitu.summary/1"


class _ChunkReader:
    """Stored chunks of one array, decoded by zarr, the most recent kept up to a byte bound."""

    def __init__(self, array: zarr.Array, budget_bytes: int) -> None:
        self.array = array
        self.chunks = tuple(int(c) for c in array.chunks)
        self.shape = tuple(int(n) for n in array.shape)
        chunk_bytes = max(1, int(np.prod(self.chunks)) * array.dtype.itemsize)
        # Regions go in C order and a footprint reaches into the next chunk along each axis: a chunk
        # is needed again one hyperplane of regions later, so two hyperplanes of chunks (and the
        # corners of one footprint) read each chunk once. The byte bound caps that for huge grids,
        # where a chunk may then be read again (at most 2^ndim times).
        grid = [-(-n // c) for n, c in zip(self.shape, self.chunks, strict=True)]
        outer = next((d for d, g in enumerate(grid) if g > 1), len(grid) - 1)  # axes of one chunk do not turn
        reuse = 2 * math.prod(grid[outer + 1 :]) + 2 ** len(grid)
        self.capacity = max(2 ** len(grid), min(reuse, budget_bytes // chunk_bytes))
        self.kept: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()
        self.reads = 0

    def chunk(self, index: tuple[int, ...]) -> np.ndarray:
        found = self.kept.get(index)
        if found is not None:
            self.kept.move_to_end(index)
            return found
        box = tuple(
            slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, self.chunks, self.shape, strict=True)
        )
        data = np.asarray(self.array[box])
        self.reads += 1
        self.kept[index] = data
        while len(self.kept) > self.capacity:
            self.kept.popitem(last=False)
        return data

    def box(self, lo: tuple[int, ...], hi: tuple[int, ...]) -> np.ndarray:
        """The values over ``[lo, hi)``, assembled from the chunks it touches."""
        return assemble_box(lo, hi, self.chunks, self.array.dtype, self.chunk)


def compute_summary(
    array: zarr.Array,
    patches: PatchSet,
    weighting: PositionWeighting,
    scale: Scale,
    own_box: tuple[int, ...],
    *,
    budget_bytes: int = LRU_BYTES,
) -> tuple[RegionSummary, int]:
    """The summary of ``patches``' regions under ``weighting`` from ``array`` (the weighting
    array, read as stored), and how many of its chunks were read."""
    reader = _ChunkReader(array, budget_bytes)
    n_regions = patches.layout.n_regions
    starts = patches.region_box_starts
    sums = np.zeros(n_regions, dtype=np.float64)
    per_class: dict[int, dict[int, int]] = {}
    for r in np.flatnonzero(patches.region_counts > 0).tolist():
        boxes = np.arange(starts[r], starts[r + 1])
        values = region_values(
            weighting, patches, boxes, scale, own_box, reader.shape, reader.box, skip_empty=True
        )
        if values is None:
            continue  # no foreground under any of its patches: weight 0, nothing to compute
        if weighting.mode == BALANCE:
            classes, counts = np.unique(values, return_counts=True)
            per_class[r] = dict(zip(classes.tolist(), counts.tolist(), strict=True))
        elif weighting.mode == COVERAGE:
            sums[r] = float(values.sum())
        else:
            assert weighting.min_coverage is not None
            sums[r] = float(np.count_nonzero(values >= weighting.min_coverage - 1e-12))
    if weighting.mode != BALANCE:
        return RegionSummary(sums), reader.reads
    classes = np.array(sorted({c for found in per_class.values() for c in found}), dtype=np.int64)
    table = np.zeros((n_regions, len(classes)), dtype=np.int64)
    column = {int(c): k for k, c in enumerate(classes.tolist())}
    for r, found in per_class.items():
        for c, n in found.items():
            table[r, column[c]] = n
    return RegionSummary(table, classes), reader.reads


class SummaryCache:
    """Summaries of one dataset's weighted draw, per split, in memory and under ``directory``."""

    def __init__(
        self, store: Store, weighting: PositionWeighting, directory: Path | None, *, rebuild: bool = False
    ) -> None:
        self.store = store
        self.rebuild = rebuild  # persist="rebuild": what is on disk is made again
        self.weighting = weighting
        self.directory = None if directory is None else Path(directory) / "summaries"
        self.chunks_read = 0  # by summary passes of this dataset
        self.loaded = 0  # summaries found on disk
        self.computed = 0
        self._lock = threading.Lock()

    def __call__(
        self, split: str, patches: PatchSet, geom: ArrayGeometry, scale: Scale, own_box: tuple[int, ...]
    ) -> RegionSummary:
        """Load or make ``split``'s summary (see the module docstring)."""
        with self._lock:
            array = zarr.open_array(store=self.store, path=geom.path, mode="r")
            if np.dtype(array.dtype).kind not in "biuf":
                from insitu.errors import ConfigError

                raise ConfigError(f"weighting array {geom.name!r} has dtype {array.dtype}: expected numbers")
            identity = self._identity(array, geom, patches, scale, own_box)
            found = None if self.rebuild else self._load(identity, patches.layout.n_regions)
            if found is not None:
                self.loaded += 1
                return found
            log.info("computing the region summary of %r for split %r", geom.name, split)
            summary, reads = compute_summary(array, patches, self.weighting, scale, own_box)
            self.chunks_read += reads
            self.computed += 1
            summary = RegionSummary(summary.values, summary.classes, identity)
            if identity:
                try:
                    self._save(identity, summary)
                except OSError as exc:  # a full or read-only disk: the summary serves from memory
                    log.warning(
                        "could not keep the region summary under %s (%s); it is used from memory",
                        self.directory,
                        exc,
                    )
            return summary

    def _identity(
        self,
        array: zarr.Array,
        geom: ArrayGeometry,
        patches: PatchSet,
        scale: Scale,
        own_box: tuple[int, ...],
    ) -> str:
        """What the summary depends on, hashed; "" when the store cannot tell whether the array's
        bytes changed (then nothing is written to disk)."""
        if self.directory is None:
            return ""
        metadata = array.metadata.to_dict()
        try:
            versions = run_sync(_chunk_versions(self.store, metadata, geom.path, array))
        except TypeError:  # the store reports no object versions
            return ""
        layout = patches.layout
        return summary_identity(
            {
                "format": FORMAT,
                "store": store_identity(self.store),
                "path": geom.path,
                "metadata": metadata,
                "versions": versions,
                "grid": [[a.size, a.stride, a.stop] for a in patches.grid.axes],
                "edge": patches.grid.edge,
                "regions": list(layout.extent),
                "boxes": summary_identity(
                    {"r": patches.region.tolist(), "lo": patches.lo.tolist(), "hi": patches.hi.tolist()}
                ),
                "scale": [str(k) for k in scale],
                "box": list(own_box),
                "rule": self.weighting.summary_rule,
                "label": self.weighting.label,
            }
        )

    def _file(self, identity: str) -> Path:
        assert self.directory is not None
        return self.directory / f"summary-{identity}.npz"

    def _load(self, identity: str, n_regions: int) -> RegionSummary | None:
        if not identity:
            return None
        path = self._file(identity)
        try:
            with np.load(path, allow_pickle=False) as data:
                values = np.array(data["values"])
                classes = np.array(data["classes"]) if "classes" in data.files else None
            balance = self.weighting.mode == BALANCE
            if len(values) != n_regions or (classes is None) == balance or not np.isfinite(values).all():
                raise ValueError(f"it holds {values.shape} values for {n_regions} regions")
            if classes is not None and (values.ndim != 2 or values.shape[1] != len(classes)):
                raise ValueError("its class table does not match its classes")
        except FileNotFoundError:
            return None
        except Exception as exc:  # a damaged or tampered file: made again
            log.warning("ignoring the unreadable summary %s (%s); computing it again", path, exc)
            return None
        return RegionSummary(values, classes, identity)

    def _save(self, identity: str, summary: RegionSummary) -> None:
        assert self.directory is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, Any] = {"values": summary.values}
        if summary.classes is not None:
            arrays["classes"] = summary.classes
        fd, tmp = tempfile.mkstemp(prefix=".summary-", suffix=".npz", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._file(identity))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


async def _chunk_versions(store: Store, metadata: dict[str, Any], path: str, array: zarr.Array) -> list[Any]:
    """The version of every stored chunk (or shard) of the array, in C order."""
    encode = chunk_key_encoder(metadata, path)
    shards = getattr(array, "shards", None)
    per = shards or array.chunks
    grid = [-(-int(n) // int(c)) for n, c in zip(array.shape, per, strict=True)]
    keys = [encode(index) for index in itertools.product(*(range(g) for g in grid))]
    limit = asyncio.Semaphore(64)

    async def one(key: str) -> str | None:
        async with limit:
            return await object_version(store, key)

    return list(await asyncio.gather(*(one(k) for k in keys)))
