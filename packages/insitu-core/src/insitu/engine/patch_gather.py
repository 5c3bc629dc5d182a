"""Gathering batches of patches out of a pool of chunks.

A patch is a box of the reference array; each array sampled with it holds the
same box (a window's box moved along the sample axis by its offset), pooled
one stored chunk per slot (:mod:`insitu.arrays.chunk_units`). A patch reads
every chunk its box touches, at most ``ceil((size - 1) / chunk) + 1`` per axis,
so the chunks of a batch are a fixed number per patch: which unit and which
slot each is, is worked out on the event loop with a few whole-batch numpy
operations while the chunks are pinned (slot numbers cannot change under it),
and the copies, one per (patch, chunk) pair, run on the gather thread into a
recycled batch buffer. Where a padded patch (``patch_edge="pad"``) runs past
the end of the array, its elements are the array's fill value (NaN for
floats) and :attr:`~insitu.Batch.patch_extent` says how far it is valid.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu.arrays.chunk_units import ChunkUnits, assemble_box
from insitu.arrays.coregistration import Scale, scale_extent, scale_origins
from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.lazycoords import LazyValues
from insitu.arrays.transforms import SlabSpec
from insitu.batch import Batch, BatchPatches
from insitu.engine.gather import BatchRows, BatchTransform, Gatherer
from insitu.engine.pool import ChunkPool
from insitu.plan.patch_plans import scaled_reads
from insitu.plan.patches_spec import PatchGrid

#: Per delivered axis of a static field: (reference axis, first index the field holds along it)
#: where patches crop it, None where it is delivered whole.
StaticCrop = tuple[tuple[int, int] | None, ...]


@dataclass(frozen=True)
class PatchShape:
    """How one label reads a patch: the box per axis of its array, what a batch row holds, and the
    chunks a box touches at most per axis."""

    label: str
    path: str
    offset: int  # along the sample axis (a window)
    box: tuple[int, ...]  # the patch's extent on every axis of the array (from its origin)
    read: tuple[int, ...]  # what it reads per axis: the box, or the indices picked along it
    picks: tuple[np.ndarray | None, ...]  # per axis: the source indices a list selection picks
    delivered: tuple[int, ...]  # a batch row: ``read`` without an unnamed sample axis or a dropped one
    chunk_shape: tuple[int, ...]
    grid: tuple[int, ...]  # chunks per axis
    stop: tuple[int, ...]  # per axis, where the part of the array patches are placed in ends
    fill: Any  # what padding holds
    scale: Scale  # indices of this array per reference index (co-registered resolutions)

    @property
    def span(self) -> tuple[int, ...]:
        """The most chunks a box touches along each axis."""
        return tuple(
            min(g, -(-(b - 1) // c) + 1)
            for b, c, g in zip(self.box, self.chunk_shape, self.grid, strict=True)
        )


class PatchRows(BatchRows):
    """Where the patches of one batch live: their origins, and per label the slot of every chunk
    each patch touches (-1: none there, outside the array or past the box)."""

    __slots__ = ("chunks", "extent", "origins", "slots")

    def __init__(
        self,
        origins: np.ndarray,
        sample_axis: int,
        slots: dict[str, np.ndarray],
        chunks: dict[str, np.ndarray],
        extent: np.ndarray | None,
        valid: np.ndarray | None,
        keep: np.ndarray | None,
    ) -> None:
        super().__init__(origins[:, sample_axis].copy(), {}, {}, valid, keep)
        self.origins = origins
        self.slots = slots
        self.chunks = chunks
        self.extent = extent


class PatchGatherer(Gatherer):
    """Copies batches of patches out of one dataset's pool of chunks."""

    def __init__(
        self,
        pool: ChunkPool,
        labels: Sequence[ArrayGeometry],
        grid: PatchGrid,
        batch_transforms: Sequence[BatchTransform],
        *,
        statics: Mapping[str, np.ndarray] | None = None,
        static_geoms: Mapping[str, ArrayGeometry] | None = None,
        sample_coord: tuple[str, np.ndarray | LazyValues] | None = None,
        patch_coords: Mapping[str, tuple[int, np.ndarray | LazyValues]] | None = None,
    ) -> None:
        super().__init__(pool, labels, batch_transforms, statics=statics, sample_coord=sample_coord)
        self.grid = grid
        self.patch_coords = dict(patch_coords or {})
        # Static fields on the patch's dimensions (a land-sea mask, orography under lat/lon
        # patches) come cropped to each patch; others come whole, as for cross-sections.
        self.static_boxes = {
            label: crop
            for label, value in self.statics.items()
            if (crop := _static_box(value.shape[1:], (static_geoms or {}).get(label), grid)) is not None
        }
        self.sample_axis = grid.sample_axis
        self.padded = grid.edge == "pad"
        picks = grid.picks or (None,) * grid.ndim
        reference = self.labels[0]
        self.shapes: dict[str, PatchShape] = {}
        for g in self.labels:
            apool = pool.arrays[g.path]
            units = apool.geom
            assert isinstance(units, ChunkUnits), "a patch pool holds chunk units"
            dtype = apool.spec.dtype
            fill = np.nan if dtype.kind in "fc" else (g.fill_value if g.fill_value is not None else 0)
            scale, box = scaled_reads(grid, reference, g)
            if all(k == 1 for k in scale):
                read, own_picks = grid.read_shape, picks
                stop = tuple(
                    units.shape[d] if d == grid.sample_axis else a.stop for d, a in enumerate(grid.axes)
                )
            else:  # another resolution (no selection): its scaled box, up to its own end
                read, own_picks = box, (None,) * grid.ndim
                stop = tuple(
                    min(n, -((-a.stop * k.numerator) // k.denominator))
                    for n, a, k in zip(units.shape, grid.axes, scale, strict=True)
                )
            self.shapes[g.label] = PatchShape(
                g.label,
                g.path,
                g.offset,
                box,
                read,
                own_picks,
                tuple(read[d] for d in grid.delivered_axes),
                units.chunk_shape,
                units.grid,
                stop,
                fill,
                scale,
            )
        # What a batch row of each label is (a sample of one row per patch), for describe() and the
        # memory model.
        self.specs = {
            label: SlabSpec((1, *shape.delivered), pool.arrays[shape.path].spec.dtype)
            for label, shape in self.shapes.items()
        }

    def patch_rows(
        self, origins: np.ndarray, valid: np.ndarray | None, *, skip_bad: bool, grid: PatchGrid | None = None
    ) -> PatchRows:
        """The slots of every chunk each patch at ``origins`` reads, per label. With ``skip_bad``,
        patches touching a bad chunk are dropped.

        Call on the loop thread while every chunk involved is pinned."""
        pools = self.pool.arrays
        keep: np.ndarray | None = None
        slots: dict[str, np.ndarray] = {}
        chunks: dict[str, np.ndarray] = {}
        for label, shape in self.shapes.items():
            units = _touched_units(scale_origins(origins, shape.scale), shape, self.sample_axis)
            chunks[label] = units
            there = units >= 0
            slot = np.full(units.shape, -1, dtype=np.int64)
            slot[there] = pools[shape.path].slab_to_slot[units[there]]
            if (slot[there] < 0).any():
                raise RuntimeError(f"internal error: a chunk of {label!r} is not resident at gather time")
            slots[label] = slot
            if skip_bad:
                bad = np.zeros(units.shape, dtype=bool)
                bad[there] = pools[shape.path].bad[units[there]]
                hit = np.asarray(bad.any(axis=1))
                if hit.any():
                    keep = ~hit if keep is None else np.logical_and(keep, ~hit)
        if keep is not None and keep.all():
            keep = None
        # The extent of a padded patch ends where its split's positions do (``grid``: the plan's).
        extent = (grid or self.grid).valid_extent(origins) if self.padded else None
        return PatchRows(origins, self.sample_axis, slots, chunks, extent, valid, keep)

    def read_box(self, label: str, lo: tuple[int, ...], hi: tuple[int, ...]) -> np.ndarray:
        """The values of ``label``'s array over ``[lo, hi)`` of its own indices, assembled from its
        pooled chunks (a weighted draw's footprint). Call on the loop thread while they are pinned."""
        shape = self.shapes[label]
        apool = self.pool.arrays[shape.path]

        def chunk_of(index: tuple[int, ...]) -> np.ndarray:
            slot = int(apool.slab_to_slot[int(np.ravel_multi_index(index, shape.grid))])
            if slot < 0:
                raise RuntimeError(
                    f"internal error: a chunk of {label!r} is not resident for a weighted draw"
                )
            return np.asarray(apool.arena[slot])

        return assemble_box(lo, hi, shape.chunk_shape, apool.spec.dtype, chunk_of)

    def gathers_inline(self, batch_size: int) -> bool:
        """Never: a patch batch's cost follows the chunks each patch spans, not its bytes, so it
        stays on the gather thread, off the loop."""
        return False

    def gather(
        self,
        where: BatchRows,
        *,
        split: str,
        epoch: int,
        index: int,
        buffers: Mapping[str, np.ndarray] | None = None,
    ) -> Batch:
        """The batch of patches at ``where`` (runs on the gather thread), batch transforms applied."""
        assert isinstance(where, PatchRows)
        pools = self.pool.arrays
        n = len(where.origins)
        origins, valid, extent, keep = where.origins, where.valid, where.extent, where.keep
        data: dict[str, np.ndarray] = {}
        reads: dict[str, np.ndarray] = {}
        sample = origins[:, self.sample_axis]
        for label, shape in self.shapes.items():
            spec = self.specs[label]
            out = self.buffers.empty((n, *shape.delivered), spec.dtype)
            boxes = out.reshape((n, *shape.read))  # an unnamed sample axis or a dropped one: one element
            arena = pools[shape.path].arena
            own = scale_origins(origins, shape.scale)
            own_extent = None if extent is None else scale_extent(extent, shape.scale)
            _copy_patches(
                boxes,
                arena,
                own,
                own_extent,
                shape,
                where.chunks[label],
                where.slots[label],
                self.sample_axis,
            )
            data[label] = out if keep is None else out[keep]
            reads[label] = sample + shape.offset
        if keep is not None:
            origins = origins[keep]
            sample = sample[keep]
            valid = valid[keep] if valid is not None else None
            extent = extent[keep] if extent is not None else None
            reads = {label: r[keep] for label, r in reads.items()}
        for label, value in self.statics.items():
            axes = self.static_boxes.get(label)
            if axes is None:
                data[label] = value.copy()  # resident once; each batch gets its own
            else:
                data[label] = _crop_static(value[0], axes, self.grid.patch_shape, origins)
        patches = BatchPatches(
            origins.copy(),
            self.grid.patch_shape,
            self.grid.delivered_axes,
            None if extent is None else extent.copy(),
            self.patch_coords,
            {label: shape.scale for label, shape in self.shapes.items() if any(k != 1 for k in shape.scale)},
        )
        return self.finish(
            data, sample.copy(), reads, valid, split=split, epoch=epoch, index=index, patches=patches
        )

    def static_shape(self, label: str) -> tuple[int, ...]:
        """A static field on the patch's dimensions is cropped to the patch; others come whole."""
        axes = self.static_boxes.get(label)
        if axes is None:
            return super().static_shape(label)
        extent = self.statics[label].shape[1:]
        return tuple(
            n if c is None else self.grid.patch_shape[c[0]] for n, c in zip(extent, axes, strict=True)
        )

    def static_rows(self, label: str, n: int) -> int:
        """A cropped static field has one row per patch."""
        return n if label in self.static_boxes else 1


def _static_box(
    value_shape: tuple[int, ...], geom: ArrayGeometry | None, grid: PatchGrid
) -> StaticCrop | None:
    """How a static field is cropped to each patch: per delivered axis of the field, the
    reference axis whose patch crops it and where the field's values start along it (None: kept
    whole); None when the field crosses no patched axis on the reference grid."""
    if geom is None:
        return None
    dims = geom.delivered_dims
    if len(dims) != len(value_shape) or None in dims:
        return None
    kept = [d for d in range(len(geom.shape)) if (c := geom.axis_selection(d)) is None or c.keep]
    axes: list[tuple[int, int] | None] = []
    for k, dim in enumerate(dims):
        a = grid.dims.index(dim) if dim in grid.dims else None
        if a is None or a not in grid.named:
            axes.append(None)
            continue
        chosen = geom.axis_selection(kept[k])
        first = 0 if chosen is None else int(chosen.array[0])
        run = chosen is None or bool((np.diff(chosen.array) == 1).all())
        # The field must hold every index patches are placed in along the axis, as one run.
        covers = run and first <= grid.axes[a].start and first + value_shape[k] >= grid.axes[a].stop
        axes.append((a, first) if covers and geom.shape[kept[k]] == grid.shape[a] else None)
    return tuple(axes) if any(a is not None for a in axes) else None


def _crop_static(
    value: np.ndarray, crop: StaticCrop, box: tuple[int, ...], origins: np.ndarray
) -> np.ndarray:
    """Each patch's box of a static field, one row per patch (the fill value past its end)."""
    shape = tuple(n if c is None else box[c[0]] for n, c in zip(value.shape, crop, strict=True))
    out = np.empty((len(origins), *shape), dtype=value.dtype)
    fill = np.nan if value.dtype.kind in "fc" else 0
    for i, origin in enumerate(origins.tolist()):
        index = tuple(
            slice(None) if c is None else slice(origin[c[0]] - c[1], origin[c[0]] - c[1] + box[c[0]])
            for c in crop
        )
        part = value[index]
        if part.shape != shape:
            out[i] = fill
        out[i][tuple(slice(0, n) for n in part.shape)] = part
    return out


def _touched_units(origins: np.ndarray, shape: PatchShape, sample_axis: int) -> np.ndarray:
    """Per patch, the unit (flat chunk id) of every chunk its box touches, ``(n, prod(span))``,
    -1 where a patch touches fewer (a box aligned with the chunks, or past the array's end)."""
    n = len(origins)
    span = shape.span
    first = np.empty((n, len(span)), dtype=np.int64)
    last = np.empty((n, len(span)), dtype=np.int64)
    for d, (b, c, stop) in enumerate(zip(shape.box, shape.chunk_shape, shape.stop, strict=True)):
        lo = origins[:, d] + (shape.offset if d == sample_axis else 0)
        hi = np.minimum(lo + b, stop) - 1  # the last element inside the array (or its selected part)
        first[:, d] = lo // c
        last[:, d] = hi // c
    steps = np.array(list(itertools.product(*(range(s) for s in span))), dtype=np.int64)  # (k, ndim)
    coords = first[:, None, :] + steps[None, :, :]  # (n, k, ndim)
    inside = (coords <= last[:, None, :]).all(axis=2)
    flat = np.ravel_multi_index(
        tuple(np.moveaxis(np.minimum(coords, np.array(shape.grid) - 1), 2, 0)), shape.grid
    )
    return np.where(inside, flat, -1)


def _copy_patches(
    boxes: np.ndarray,
    arena: np.ndarray,
    origins: np.ndarray,
    extent: np.ndarray | None,
    shape: PatchShape,
    units: np.ndarray,
    slots: np.ndarray,
    sample_axis: int,
) -> None:
    """Copy each patch's part of every chunk it touches into ``boxes`` (one row per patch); fill
    what lies past the end of the array, of its selected part or of its split (``extent``: the
    valid part of each padded patch)."""
    grid = shape.grid
    chunk = shape.chunk_shape
    picks = shape.picks
    starts = origins.copy()
    starts[:, sample_axis] += shape.offset
    box = np.array(shape.box)
    ends = starts + (box if extent is None else np.minimum(box, extent))
    short = (ends - starts < box).any(axis=1)
    inside = _copy_contained(boxes, arena, starts, short, shape, units, slots)
    for i in np.flatnonzero(~inside).tolist():
        row = boxes[i]
        if short[i]:
            row[...] = shape.fill
        o = starts[i].tolist()
        e = ends[i].tolist()
        for u, s in zip(units[i].tolist(), slots[i].tolist(), strict=True):
            if u < 0:
                continue
            coords = np.unravel_index(u, grid)
            src: list[Any] = []
            dst: list[Any] = []
            for d, j in enumerate(coords):
                c0 = int(j) * chunk[d]
                picked = picks[d]
                if picked is None:
                    lo = max(o[d], c0)
                    hi = min(e[d], c0 + chunk[d], shape.stop[d])
                    src.append(slice(lo - c0, hi - c0))
                    dst.append(slice(lo - o[d], hi - o[d]))
                else:  # a list selection: the picked indices this chunk holds
                    inside = np.flatnonzero((picked >= c0) & (picked < c0 + chunk[d]))
                    src.append(picked[inside] - c0)
                    dst.append(inside)
            if any(isinstance(x, np.ndarray) for x in dst):
                if any(isinstance(x, np.ndarray) and not len(x) for x in dst):
                    continue  # a chunk between the picked indices: nothing of it is read
                row[_outer(dst)] = arena[s][_outer(src)]
            else:
                row[tuple(dst)] = arena[s][tuple(src)]


#: Patches of at most this many elements are gathered in one fancy-indexed call when they lie in
#: one chunk: a Python-level copy per patch costs microseconds, which dominates small patches,
#: while fancy indexing of a window view loses to row-contiguous slice copies for large ones.
#: Measured (float32, 64 patches out of 512 x 512 chunks, best of 30): 16² 9.2 vs 1.4 GB/s,
#: 32² 16.7 vs 4.5, 64² 18.6 vs 12.8, 128² 24.1 vs 24.7, 256² 8.7 vs 13.2.
CONTAINED_GATHER_MAX = 128 * 128


def _copy_contained(
    boxes: np.ndarray,
    arena: np.ndarray,
    starts: np.ndarray,
    short: np.ndarray,
    shape: PatchShape,
    units: np.ndarray,
    slots: np.ndarray,
) -> np.ndarray:
    """Copy, in one fancy-indexed gather, every patch that lies inside one chunk (most of them when
    patches are smaller than chunks): a window view of the arena indexed by (slot, origin in the
    chunk). Returns which patches were copied; the others are copied piece by piece."""
    chunk = np.array(shape.chunk_shape)
    box = np.array(shape.box)
    done = np.zeros(len(starts), dtype=bool)
    if (
        any(p is not None for p in shape.picks)
        or (box > chunk).any()
        or not len(starts)
        or int(box.prod()) > CONTAINED_GATHER_MAX
    ):
        return done
    first = starts // chunk
    local = starts - first * chunk
    one = (units >= 0).sum(axis=1) == 1
    done = one & ~short & ((local + box) <= chunk).all(axis=1)
    rows = np.flatnonzero(done)
    if not len(rows):
        return done
    slot = slots[rows].max(axis=1)  # the one chunk's slot (the others are -1)
    windows = np.lib.stride_tricks.sliding_window_view(
        arena, tuple(shape.box), axis=tuple(range(1, arena.ndim))
    )
    boxes[rows] = windows[(slot, *local[rows].T)]
    return done


def _outer(index: list[Any]) -> tuple[Any, ...]:
    """``index`` (slices and index arrays) as an outer index: every array an axis of its own."""
    axes = [np.arange(i.start, i.stop) if isinstance(i, slice) else i for i in index]
    return np.ix_(*axes)


def patch_nbytes(shapes: Mapping[str, PatchShape], specs: Mapping[str, SlabSpec]) -> int:
    """Bytes of one delivered patch over every label."""
    return sum(math.prod(s.delivered) * specs[label].dtype.itemsize for label, s in shapes.items())
