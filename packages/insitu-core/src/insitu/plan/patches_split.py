"""Splits in space: chunk-aligned cells over the patch dimensions, assigned to train/val/test.

A *cell* is ``cell_chunks`` stored chunks of the reference array along each
split dimension (the whole extent along the others); the cells tile the array
and each belongs to at most one split. :func:`split_by_region` assigns them by
fractions, as :func:`insitu.plan.splits.split_by_chunk` does along the sample
axis: ``"blocks"`` keeps each split one run of cells in C order (bands along
the slowest split dimension), ``"checkerboard"`` deals cells at random from
``seed`` so every split samples the whole extent.

The leakage rule of spatial cross-validation: a patch belongs to a split only
when **every element it reads lies in cells of that split**. A patch near a
cell border that would read into another split's cell is excluded from every
split (never shifted: a shifted patch would duplicate a neighbour's pixels and
bias the split toward its interior). So no validation patch overlaps a
training cell, and no training patch sees validation data::

    elements  0       8       16      24      size 6, stride 4 (shift), cells of 8
    cells     | train | train |  val  |
    origins   0, 4, 8: train          patches [0, 6) [4, 10) [8, 14) stay in train cells
              12: excluded            [12, 18) reads a train and a val cell
              16, 18: val             [16, 22) [18, 24) stay in the val cell

Regions nest in cells (a cell's extent must be a multiple of the region's), so
a region's patches are those of its cell's split whose footprint stays in that
split; along each axis the positions of a region fall into runs by how many
cells forward their footprint reaches (0, 1, ... : origins increase), and a
region's kept patches are a few boxes of those runs (:class:`PatchSet`). The
manifest round-trips through JSON (:meth:`SpatialSplit.to_json`).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu.arrays.geometry import ArrayGeometry, is_integer
from insitu.errors import ConfigError
from insitu.options import seed_value
from insitu.plan.order import sorted_unique
from insitu.plan.patches_regions import PatchSet, RegionLayout

# The fraction and name rules of the sample-axis splits, shared so both read the same arguments.
from insitu.plan.splits import SplitManifest, _fractions, _largest_remainder, _names

_FORMAT = "insitu.SpatialSplit/1"
LAYOUTS = ("blocks", "checkerboard")


@dataclass(frozen=True, eq=False)
class SpatialSplit:
    """Which cells of the reference array belong to which split.

    ``axes`` are the split axes (``dims`` their names); a cell is ``cell_chunks[i]`` chunks of
    ``chunk_shape`` along ``axes[i]``. ``splits`` maps split names to cell ids: C order over
    :attr:`cell_grid`. Cell ids are held as read-only int64 arrays.
    """

    label: str
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    axes: tuple[int, ...]
    dims: tuple[str | None, ...]
    cell_chunks: tuple[int, ...]
    splits: Mapping[str, Any]
    layout: str = "blocks"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("shape", "chunk_shape", "axes", "cell_chunks"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        object.__setattr__(self, "dims", tuple(self.dims))
        if len(self.axes) != len(self.cell_chunks) or len(self.axes) != len(self.dims):
            raise ConfigError(f"a spatial split needs one cell size and name per axis {list(self.axes)}")
        n_cells = math.prod(self.cell_grid)
        seen = np.zeros(n_cells, dtype=bool)
        held = {}
        for name, ids in self.splits.items():
            arr = np.array(ids, dtype=np.int64).reshape(-1)
            if len(arr) and (arr.min() < 0 or arr.max() >= n_cells):
                raise ConfigError(
                    f"split {name!r} names cells outside the {n_cells} cells of {self.cell_grid}"
                )
            if len(sorted_unique(arr)) != len(arr) or seen[arr].any():
                raise ConfigError(f"split {name!r} holds cells another split (or itself) holds already")
            seen[arr] = True
            arr.flags.writeable = False
            held[str(name)] = arr
        object.__setattr__(self, "splits", held)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpatialSplit):
            return NotImplemented
        same = ("label", "shape", "chunk_shape", "axes", "dims", "cell_chunks", "layout", "seed")
        return (
            all(getattr(self, f) == getattr(other, f) for f in same)
            and list(self.splits) == list(other.splits)
            and all(np.array_equal(self.splits[k], other.splits[k]) for k in self.splits)
        )

    __hash__ = None  # type: ignore[assignment]  # equal by value, mutable arrays inside

    @property
    def names(self) -> tuple[str, ...]:
        """The split names, in order."""
        return tuple(self.splits)

    @property
    def cell_extent(self) -> tuple[int, ...]:
        """A cell's length in elements along each split axis."""
        return tuple(
            min(q * self.chunk_shape[a], self.shape[a])
            for a, q in zip(self.axes, self.cell_chunks, strict=True)
        )

    @property
    def cell_grid(self) -> tuple[int, ...]:
        """Cells along each split axis."""
        return tuple(-(-self.shape[a] // e) for a, e in zip(self.axes, self.cell_extent, strict=True))

    def check_reference(self, geom: ArrayGeometry) -> None:
        """Refuse, by name, a reference array this split was not made on (another shape or
        chunking: its cells would not be chunk-aligned there)."""
        if tuple(geom.shape) != self.shape or tuple(geom.chunk_shape) != self.chunk_shape:
            raise ConfigError(
                f"the spatial split was made on {self.label!r} (shape {self.shape}, chunks "
                f"{self.chunk_shape}), not on {geom.label!r} (shape {tuple(geom.shape)}, chunks "
                f"{tuple(geom.chunk_shape)}): split the reference array (the first one sampled)"
            )

    def sample_manifest(self, geom: ArrayGeometry) -> SplitManifest:
        """The splits along the sample axis of ``geom`` that a split in space leaves: every split
        holds every chunk (the cells decide which patches are whose), unless the spatial split
        cuts the sample axis itself, whose cells then decide alone too."""
        self.check_reference(geom)
        every = np.arange(geom.n_slabs, dtype=np.int64)
        return SplitManifest(
            label=geom.label,
            n_samples=geom.n_samples,
            chunk_len=geom.chunk_len,
            splits=dict.fromkeys(self.names, every),
            sample_range=(0, geom.n_samples),
            seed=self.seed,
            sample_axis=geom.sample_axis,
            sample_dim=geom.sample_dim,
        )

    def cell_map(self) -> np.ndarray:
        """The split number of every cell (in the order of :attr:`names`; -1: in no split),
        shaped :attr:`cell_grid`."""
        out = np.full(math.prod(self.cell_grid), -1, dtype=np.int64)
        for i, ids in enumerate(self.splits.values()):
            out[ids] = i
        return out.reshape(self.cell_grid)

    def patches(self, layout: RegionLayout, split: str) -> PatchSet:
        """The patches of ``layout`` that read only cells of ``split`` (the leakage rule above)."""
        if split not in self.splits:
            raise ConfigError(f"unknown split {split!r}; this spatial split has {list(self.splits)}")
        return _split_patches(self, layout, self.names.index(split))

    @classmethod
    def along_samples(cls, manifest: SplitManifest, geom: ArrayGeometry) -> SpatialSplit:
        """A split of chunks along the sample axis (:func:`~insitu.plan.splits.split_by_chunk`) as
        cells of one chunk along that axis, so splits along time keep working with patches, and
        a patch longer than one sample that would reach into the next split's chunk is left out
        by the same rule. Combine with ``sample_span=manifest.sample_range`` to bound origins
        to the manifest's range. A split by coordinate (per-split ranges) may cut a chunk, which
        a cell cannot express: it is refused."""
        if manifest.ranges is not None:
            raise ConfigError(
                "a split by coordinate value may cut a chunk; patches take chunk-aligned splits "
                "(split_by_chunk, or split_by_region for splits in space)"
            )
        if geom.static or geom.n_samples != manifest.n_samples or geom.chunk_len != manifest.chunk_len:
            raise ConfigError(
                f"the manifest (built on {manifest.label!r}: {manifest.n_samples} samples in chunks of "
                f"{manifest.chunk_len}) does not describe the sample axis of {geom.label!r}"
            )
        return cls(
            label=geom.label,
            shape=geom.shape,
            chunk_shape=geom.chunk_shape,
            axes=(geom.sample_axis,),
            dims=(geom.sample_dim,),
            cell_chunks=(1,),
            splits={name: manifest.chunk_ids(name) for name in manifest.names},
            layout="blocks" if manifest.contiguous else "checkerboard",
            seed=manifest.seed,
        )

    # -- JSON -------------------------------------------------------------------------------------
    def to_json(self) -> str:
        """Serialise to JSON (format ``insitu.SpatialSplit/1``; see :meth:`from_json`)."""
        raw = {
            "format": _FORMAT,
            "label": self.label,
            "shape": list(self.shape),
            "chunk_shape": list(self.chunk_shape),
            "axes": list(self.axes),
            "dims": list(self.dims),
            "cell_chunks": list(self.cell_chunks),
            "layout": self.layout,
            "seed": self.seed,
            "splits": {k: v.tolist() for k, v in self.splits.items()},
        }
        return json.dumps(raw, indent=1)

    @classmethod
    def from_json(cls, text: str) -> SpatialSplit:
        """Parse a spatial split written by :meth:`to_json`."""
        raw: dict[str, Any] = json.loads(text)
        if raw.get("format") != _FORMAT:
            raise ConfigError(f"not a spatial split (format={raw.get('format')!r}, expected {_FORMAT!r})")
        return cls(
            label=raw["label"],
            shape=tuple(raw["shape"]),
            chunk_shape=tuple(raw["chunk_shape"]),
            axes=tuple(raw["axes"]),
            dims=tuple(raw["dims"]),
            cell_chunks=tuple(raw["cell_chunks"]),
            splits={k: np.asarray(v, dtype=np.int64) for k, v in raw["splits"].items()},
            layout=raw["layout"],
            seed=int(raw["seed"]),
        )


def split_by_region(
    geom: ArrayGeometry,
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    *,
    dims: Sequence[str | int],
    cell_chunks: int | Mapping[str | int, int] = 1,
    layout: str = "blocks",
    names: Sequence[str] | None = None,
    seed: int = 0,
) -> SpatialSplit:
    """Split the cells of ``geom`` over ``dims`` (names or axis numbers; the patch dimensions)
    by ``fractions``.

    A cell is ``cell_chunks`` chunks along each of ``dims`` (one number for all, or one per
    dimension). ``layout="blocks"`` keeps each split one run of cells (C order);
    ``"checkerboard"`` deals cells at random from ``seed``. Counts are rounded by largest
    remainder, as :func:`insitu.plan.splits.split_by_chunk` rounds chunks.
    """
    if not isinstance(geom, ArrayGeometry):
        raise ConfigError(f"split_by_region splits an ArrayGeometry, got {type(geom).__name__}: {geom!r}")
    fracs = _fractions(fractions)
    split_names = _names(names, fracs)
    seed = seed_value("seed", seed)
    if layout not in LAYOUTS:
        raise ConfigError(f"layout={layout!r}; expected one of {list(LAYOUTS)}")
    if isinstance(dims, (str, int)) or not dims:
        raise ConfigError(f"dims must be a non-empty sequence of dimension names, got {dims!r}")
    axes = tuple(geom.axis_of(d) for d in dims)
    if len(set(axes)) != len(axes):
        raise ConfigError(f"dims {list(dims)} name an axis twice")
    per_dim = [_cell_chunks(cell_chunks, d) for d in dims]
    labels = tuple(geom.dimension_names[a] if geom.dimension_names else None for a in axes)
    probe = SpatialSplit(
        geom.label, geom.shape, geom.chunk_shape, axes, labels, tuple(per_dim), {}, layout, seed
    )
    n_cells = math.prod(probe.cell_grid)
    counts = _largest_remainder(fracs, n_cells)
    empty = [n for n, f, k in zip(split_names, fracs, counts, strict=True) if k == 0 and f > 0]
    if empty:
        raise ConfigError(
            f"split(s) {empty} would get no cell: {n_cells} cell(s) of {list(per_dim)} chunks over "
            f"{list(dims)} cannot be divided by fractions {tuple(fracs)}; use smaller cell_chunks"
        )
    cells = np.arange(n_cells, dtype=np.int64)
    if layout == "checkerboard":
        cells = np.random.default_rng(seed).permutation(cells)
    bounds = np.concatenate(([0], np.cumsum(counts)))
    splits = {n: np.sort(cells[bounds[i] : bounds[i + 1]]) for i, n in enumerate(split_names)}
    return SpatialSplit(
        geom.label, geom.shape, geom.chunk_shape, axes, labels, tuple(per_dim), splits, layout, seed
    )


def _cell_chunks(given: int | Mapping[str | int, int], dim: str | int) -> int:
    if isinstance(given, Mapping):
        if dim not in given:
            raise ConfigError(f"cell_chunks gives no size for {dim!r} (it gives {list(given)})")
        value: Any = given[dim]
    else:
        value = given
    if not is_integer(value) or int(value) < 1:
        raise ConfigError(f"cell_chunks for {dim!r} must be a positive integer, got {value!r}")
    return int(value)


def _split_patches(split: SpatialSplit, layout: RegionLayout, target: int) -> PatchSet:
    grid = layout.grid
    if tuple(grid.shape) != split.shape:
        raise ConfigError(f"the spatial split is of shape {split.shape}, the patch grid of {grid.shape}")
    cell_of: dict[int, int] = {}  # split axis -> a cell's extent there, in elements
    for a, e in zip(split.axes, split.cell_extent, strict=True):
        r = layout.extent[a]
        if grid.axes[a].whole and e < grid.shape[a]:
            raise ConfigError(
                f"the patch spans all of axis {a} ({split.dims[split.axes.index(a)]!r}), so every patch "
                "crosses its cells; split along the patch's dimensions"
            )
        if e % r and e < grid.shape[a]:
            raise ConfigError(
                f"a cell ({e} elements along axis {a}) is not a whole number of regions ({r}); "
                "make cell_chunks a multiple of region_chunks"
            )
        cell_of[a] = e
    # Per axis: the runs of positions of every region, with how many cells forward they reach.
    runs = [_axis_runs(layout, d, split, cell_of) for d in range(grid.ndim)]
    cmap = split.cell_map()
    shape = layout.n_regions_per_axis
    parts_region, parts_lo, parts_hi = [], [], []
    for combo in itertools.product(*(range(r[0].shape[1]) for r in runs)):
        lo = [r[0][:, p] for r, p in zip(runs, combo, strict=True)]
        hi = [r[1][:, p] for r, p in zip(runs, combo, strict=True)]
        keep = np.ones(shape, dtype=bool)
        for d in range(grid.ndim):
            view = [1] * grid.ndim
            view[d] = shape[d]
            keep &= (hi[d] > lo[d]).reshape(view)
        keep &= _reads_only(split, runs, combo, cmap, cell_of, target, shape, layout.extent)
        where = np.nonzero(keep)
        if not len(where[0]):
            continue
        parts_region.append(np.ravel_multi_index(where, shape).astype(np.int64))
        parts_lo.append(np.stack([lo[d][where[d]] for d in range(grid.ndim)], axis=1))
        parts_hi.append(np.stack([hi[d][where[d]] for d in range(grid.ndim)], axis=1))
    if not parts_region:
        empty = np.zeros((0, grid.ndim), dtype=np.int64)
        return PatchSet(layout, np.zeros(0, dtype=np.int64), empty, empty.copy())
    return PatchSet(layout, np.concatenate(parts_region), np.concatenate(parts_lo), np.concatenate(parts_hi))


def _axis_runs(
    layout: RegionLayout, d: int, split: SpatialSplit, cell_of: Mapping[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every region along axis ``d``: its runs of positions ``[lo, hi)`` and how many cells
    past its own their footprints reach, as ``(n_regions, runs)`` arrays (unused runs empty)."""
    starts = layout.position_starts[d]
    n = layout.n_regions_per_axis[d]
    if d not in cell_of:  # not a split axis: one run per region, reaching nowhere
        return starts[:-1, None], starts[1:, None], np.zeros((n, 1), dtype=np.int64)
    axis = layout.grid.axes[d]
    e = split.cell_extent[split.axes.index(d)]
    origins = axis.all_origins()
    region = origins // layout.extent[d]
    reach = (np.minimum(origins + axis.size, axis.length) - 1) // e - origins // e
    change = np.flatnonzero((region[1:] != region[:-1]) | (reach[1:] != reach[:-1])) + 1
    first = np.concatenate(([0], change)).astype(np.int64)
    last = np.append(change, len(origins)).astype(np.int64)
    run_region = region[first] if len(origins) else np.zeros(0, dtype=np.int64)
    rank = np.arange(len(first)) - np.searchsorted(run_region, run_region, side="left")
    width = int(rank.max()) + 1 if len(rank) else 1
    lo = np.zeros((n, width), dtype=np.int64)
    hi = np.zeros((n, width), dtype=np.int64)
    out_reach = np.zeros((n, width), dtype=np.int64)
    lo[run_region, rank] = first
    hi[run_region, rank] = last
    out_reach[run_region, rank] = reach[first] if len(origins) else 0
    return lo, hi, out_reach


def _reads_only(
    split: SpatialSplit,
    runs: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    combo: tuple[int, ...],
    cmap: np.ndarray,
    cell_of: Mapping[int, int],
    target: int,
    shape: tuple[int, ...],
    layout_extent: tuple[int, ...],
) -> np.ndarray:
    """Over the region grid: whether the run ``combo`` of every region reads only cells of
    split ``target``, i.e. every cell from the region's own to ``reach`` cells forward."""
    ndim = len(shape)
    # The region grid's cell indices and reaches along each split axis, broadcastable.
    cells, reaches = [], []
    for a in split.axes:
        view = [1] * ndim
        view[a] = shape[a]
        first_element = np.arange(shape[a], dtype=np.int64) * layout_extent[a]
        cells.append((first_element // cell_of[a]).reshape(view))
        reaches.append(runs[a][2][:, combo[a]].reshape(view))
    most = [int(r.max()) if r.size else 0 for r in reaches]
    ok = np.ones(shape, dtype=bool)
    for step in itertools.product(*(range(m + 1) for m in most)):
        index = tuple(np.minimum(c + s, g - 1) for c, s, g in zip(cells, step, split.cell_grid, strict=True))
        hit = cmap[index] == target
        needed = np.ones((1,) * ndim, dtype=bool)
        for s, r in zip(step, reaches, strict=True):
            needed = needed & (s <= r)
        ok &= hit | ~needed
    return ok
