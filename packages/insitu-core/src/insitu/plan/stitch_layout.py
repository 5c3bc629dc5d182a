"""Where stitched outputs go: the output array's shape and chunking, the output chunks each patch
touches, and the blending weights of one patch.

Arithmetic on a :class:`~insitu.plan.patches_spec.PatchGrid` only (no store, no zarr), for
:class:`insitu.stitch.PatchStitcher`. The output array has an axis per axis of the reference
array, then any trailing axes the outputs add. Along an axis the patch names (and the sample
axis), a row is placed at the patch's origin and blended with its neighbours; an axis the patch
takes whole keeps the reference array's length when the row does (placed at the patch's origin:
the start of a selected run) and otherwise is stored whole, from 0, at the row's length.

The unit written once is the output chunk, or the shard when the array is sharded; units are
numbered in C order over :attr:`StitchLayout.unit_grid`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from insitu.errors import ConfigError
from insitu.plan.patches_spec import PatchGrid

__all__ = ["BLENDS", "StitchLayout", "taper_window"]

BLENDS = ("mean", "taper")


def taper_window(size: int, overlap: int) -> np.ndarray:
    """The ``"taper"`` weights along one axis of a patch of ``size`` elements whose neighbours
    overlap it by ``overlap`` elements (``size - stride``): float64, ``size`` long.

    ``w[i] = min(1, (i + 1) / (overlap + 1), (size - i) / (overlap + 1))``: a linear ramp up
    over the first ``overlap`` elements, 1 in the middle, the mirror ramp down over the last
    ``overlap``. Never zero, so an element only one patch covers (near the array's edge) keeps
    that patch's value; on a regular grid two neighbours' ramps sum to 1 across their overlap.
    ``overlap <= 0`` gives all ones (the plain mean).
    """
    if size < 1:
        raise ConfigError(f"taper_window needs a size of at least 1, got {size}")
    overlap = max(0, int(overlap))
    i = np.arange(size, dtype=np.float64)
    return np.minimum(1.0, np.minimum(i + 1, size - i) / (overlap + 1))


@dataclass(frozen=True)
class StitchLayout:
    """Where an output row goes, per axis of the output array.

    ``row``: the shape of one output row as the caller gives it (``outputs.shape[1:]``);
    ``placed``: the axis takes the patch's origin (False: the row covers the whole axis from 0,
    an axis the outputs resize or add); ``box``: the row's length along it; ``uniform``: every
    patch covers the whole axis, so weights do not vary along it (accumulated weights keep one
    element there); ``row_view``: the shape a row is viewed as, one entry per array axis (1 on a
    reference axis the row leaves out: an unnamed sample axis); ``chunks`` the array's chunks and
    ``unit`` what is written once (the chunk, or the shard).
    """

    shape: tuple[int, ...]
    row: tuple[int, ...]
    placed: tuple[bool, ...]
    box: tuple[int, ...]
    uniform: tuple[bool, ...]
    row_view: tuple[int, ...]
    chunks: tuple[int, ...]
    unit: tuple[int, ...]

    @classmethod
    def of(
        cls,
        grid: PatchGrid,
        row_shape: Sequence[int] | None,
        ref_chunks: Sequence[int],
        chunks: Sequence[int] | None = None,
        shards: Sequence[int] | None = None,
    ) -> StitchLayout:
        """The layout of rows of ``row_shape`` (default: the patch as delivered) on ``grid``, in
        ``chunks`` (default: ``ref_chunks`` along the reference axes, whole along the others)
        and optionally ``shards``. A row that changes the size along an axis the patch names,
        or chunks and shards that do not fit the output, are refused by name."""
        delivered = grid.delivered_axes
        given = grid.delivered_shape if row_shape is None else tuple(int(n) for n in row_shape)
        if len(given) < len(delivered) or any(n < 1 for n in given):
            raise ConfigError(
                f"row_shape={given} must start with one length per axis of the delivered patch "
                f"{grid.delivered_shape} (trailing axes may follow)"
            )
        shape, placed, box, uniform, row_view = [], [], [], [], []
        lengths = dict(zip(delivered, given, strict=False))
        for d, axis in enumerate(grid.axes):
            tiled = d in grid.named or d == grid.sample_axis
            n = lengths.get(d, 1)  # the unnamed sample axis: one element per patch
            if tiled and n != axis.size:
                raise ConfigError(
                    f"row_shape={given} has {n} along {grid.dims[d] or f'axis {d}'!r}; outputs are "
                    f"blended along the axes the patch names and keep the patch's size there "
                    f"({axis.size}); only axes it takes whole may change length"
                )
            keep = tiled or n == axis.size  # a whole axis of another length starts at 0, stored whole
            shape.append(grid.shape[d] if keep else n)
            placed.append(keep)
            box.append(axis.size if keep else n)
            uniform.append(axis.whole or not keep)
            row_view.append(n)
        extra = given[len(delivered) :]
        out_shape = tuple(shape) + extra
        out_placed = tuple(placed) + (False,) * len(extra)
        out_chunks = _chunks(out_shape, out_placed, ref_chunks, chunks)
        unit = out_chunks if shards is None else _shards(out_shape, out_chunks, shards)
        return cls(
            out_shape,
            given,
            out_placed,
            tuple(box) + extra,
            tuple(uniform) + (True,) * len(extra),
            tuple(row_view) + extra,
            out_chunks,
            unit,
        )

    @property
    def unit_grid(self) -> tuple[int, ...]:
        """Units (chunks, or shards) per axis."""
        return tuple(-(-n // u) for n, u in zip(self.shape, self.unit, strict=True))

    def interval(self, origins: np.ndarray, extent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per patch and output axis, the half-open part of the axis its valid part covers
        (``extent``: the elements inside the array per reference axis)."""
        n = len(origins)
        lo = np.zeros((n, len(self.shape)), dtype=np.int64)
        hi = np.empty_like(lo)
        for d, (placed, box) in enumerate(zip(self.placed, self.box, strict=True)):
            if placed:
                lo[:, d] = origins[:, d]
                hi[:, d] = origins[:, d] + np.minimum(box, extent[:, d])
            else:
                hi[:, d] = box
        return lo, hi

    def touched(self, origins: np.ndarray, extent: np.ndarray) -> np.ndarray:
        """Per patch, the number of every unit its valid part touches, ``(n, k)``; -1 where a
        patch touches fewer than the most any patch can."""
        lo, hi = self.interval(origins, extent)
        unit = np.asarray(self.unit, dtype=np.int64)
        first, last = lo // unit, (hi - 1) // unit
        grid = self.unit_grid
        span = [min(g, -(-(b - 1) // u) + 1) for b, u, g in zip(self.box, self.unit, grid, strict=True)]
        steps = np.array(list(itertools.product(*(range(s) for s in span))), dtype=np.int64)
        coords = first[:, None, :] + steps[None, :, :]
        inside = (coords <= last[:, None, :]).all(axis=2)
        clipped = np.minimum(coords, np.asarray(grid, dtype=np.int64) - 1)
        flat = np.ravel_multi_index(tuple(np.moveaxis(clipped, 2, 0)), grid)
        return np.where(inside, flat, -1)

    def unit_box(self, unit: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Where unit ``unit`` starts, and its shape (shorter at the array's end)."""
        coords = np.unravel_index(unit, self.unit_grid)
        start = tuple(int(c) * u for c, u in zip(coords, self.unit, strict=True))
        return start, tuple(min(u, n - s) for s, u, n in zip(start, self.unit, self.shape, strict=True))

    def window(self, grid: PatchGrid, blend: str) -> np.ndarray | None:
        """The ``"taper"`` weights of one patch over :attr:`row_view` (one element along uniform
        axes): the product of :func:`taper_window` over the other axes, with the overlap
        ``size - stride``. None for ``"mean"``."""
        if blend not in BLENDS:
            raise ConfigError(f"blend={blend!r}; expected one of {list(BLENDS)}")
        if blend == "mean":
            return None
        weight = np.ones((1,) * len(self.shape))
        for d, axis in enumerate(grid.axes):
            if self.uniform[d]:
                continue
            view = [1] * len(self.shape)
            view[d] = axis.size
            weight = weight * taper_window(axis.size, axis.size - axis.stride).reshape(view)
        return weight

    def dimension_names(
        self, ref: Sequence[str | None] | None, given: Sequence[str | None] | None, zarr_format: int
    ) -> tuple[str | None, ...] | None:
        """``given``, checked; by default the reference array's names (None on resized and added
        axes), and none for zarr v2."""
        if given is not None:
            if len(given) != len(self.shape):
                raise ConfigError(
                    f"dimension_names={tuple(given)} must name each axis of the output {self.shape}"
                )
            return tuple(given)
        if zarr_format == 2 or ref is None:
            return None
        names = [n if placed else None for n, placed in zip(ref, self.placed, strict=False)]
        return (*names, *([None] * (len(self.shape) - len(names))))


def _chunks(
    shape: tuple[int, ...], placed: tuple[bool, ...], ref_chunks: Sequence[int], chunks: Sequence[int] | None
) -> tuple[int, ...]:
    if chunks is None:
        ref = tuple(ref_chunks) + (0,) * (len(shape) - len(ref_chunks))
        return tuple(min(c, n) if p else n for c, n, p in zip(ref, shape, placed, strict=True))
    out = tuple(int(c) for c in chunks)
    if len(out) != len(shape) or any(c < 1 for c in out):
        raise ConfigError(
            f"chunks={tuple(chunks)} must give a positive length per axis of the output {shape}"
        )
    return out


def _shards(shape: tuple[int, ...], chunks: tuple[int, ...], shards: Sequence[int]) -> tuple[int, ...]:
    out = tuple(int(s) for s in shards)
    if len(out) != len(shape) or any(s < c or s % c for s, c in zip(out, chunks, strict=False)):
        raise ConfigError(f"shards={tuple(shards)} must be a multiple of the chunks {chunks} on every axis")
    return out
