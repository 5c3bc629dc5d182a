"""Arrays pooled chunk by chunk, for patch sampling: one stored chunk is one pool unit.

Whole cross-sections are pooled as *slabs*: one chunk index along the sample
axis, every chunk of the other axes, laid out sample axis first, so a batch is
one ``np.take`` over sample rows. A patch reads a box of the array, a few
chunks wide on every axis it names, so its pool unit is the stored chunk
itself (the inner chunk of a shard): unit ``u`` is chunk ``unravel(u)`` of the
array's chunk grid, in C order (the flat chunk ids the patch planner's
:func:`~insitu.plan.patches_reads.patch_array_needs` lists).

:class:`ChunkUnits` describes such an array to the pool and the loader in the
slab vocabulary they already speak: a "slab" is one chunk, one "sample" long
(``chunk_len == 1``) whose "sample" is the whole chunk (``sample_shape ==
chunk_shape``). So an arena of ``n`` slots is ``(n, *chunk_shape)``, a slot
holds one decoded chunk in the array's own axis order, and slot bookkeeping,
eviction, bad-chunk marks, transforms and the persisted cache work unchanged.
:class:`ChunkReader` places a decoded chunk whole into its slot.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.layout import ArrayReader
from insitu.errors import ConfigError


class ChunkUnits(ArrayGeometry):
    """An array pooled one stored chunk per slot (see the module docstring).

    Built with :meth:`of` from the array's own geometry, which :attr:`source` returns; every
    field is the source's, only the derived slab sizes differ.
    """

    @classmethod
    def of(cls, geom: ArrayGeometry) -> ChunkUnits:
        """The chunk units of ``geom``, unshifted and without its selection: a unit is a stored
        chunk whole (the patch grid places patches inside the selection, and the gather picks
        the selected indices out of the chunks)."""
        if geom.static:
            raise ConfigError(f"array {geom.name!r} is static: it is delivered whole, not in patches")
        fields = {name: getattr(geom, name) for name in geom.__dataclass_fields__}
        fields["offset"] = 0
        fields["alias"] = None
        fields["selection"] = None
        return cls(**fields)

    @property
    def source(self) -> ArrayGeometry:
        """The array's own geometry (slabs along the sample axis)."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return ArrayGeometry(**fields)

    @cached_property
    def grid(self) -> tuple[int, ...]:
        """Chunks per axis."""
        return tuple(math.ceil(n / c) for n, c in zip(self.shape, self.chunk_shape, strict=True))

    @cached_property
    def n_samples(self) -> int:
        """Units: one per stored chunk."""
        return math.prod(self.grid)

    @cached_property
    def sample_shape(self) -> tuple[int, ...]:
        """One unit: a whole chunk, in the array's axis order."""
        return tuple(self.chunk_shape)

    @cached_property
    def chunk_len(self) -> int:
        """One unit per slot."""
        return 1

    @cached_property
    def n_slabs(self) -> int:
        """Units: one per stored chunk."""
        return self.n_samples

    def chunk_coords(self, unit: int) -> tuple[int, ...]:
        """Chunk grid coordinates of ``unit``."""
        return tuple(int(i) for i in np.unravel_index(unit, self.grid))

    def describe(self) -> dict[str, Any]:
        """The source's description, marked as pooled by chunk (a persisted cache of slabs of the
        same array is another cache)."""
        return {**super().describe(), "units": "chunks"}


class ChunkReader(ArrayReader):
    """Reads an array one stored chunk per unit and decodes each straight into its slot."""

    def __init__(self, units: ChunkUnits, *args: Any, **kwargs: Any) -> None:
        super().__init__(units.source, *args, **kwargs)
        self.units = units
        self.chunks_per_slab = 1
        self.whole_slab = False

    def slab_chunks(self, slab: int) -> list[tuple[int, ...]]:
        """The one chunk of unit ``slab``."""
        return [self.units.chunk_coords(slab)]

    def rows_in_slab(self, slab: int) -> int:
        """Every unit is one row."""
        return 1

    def place(self, coords: tuple[int, ...], raw: Any, slot_view: np.ndarray) -> None:
        """Decode one chunk into its slot (``(1, *chunk_shape)``)."""
        self.decoder.decode(raw, out=slot_view[0])

    def fill(self, coords: tuple[int, ...], value: Any, slot_view: np.ndarray) -> None:
        """Write ``value`` over the slot (a missing or bad chunk)."""
        slot_view[...] = value


def assemble_box(
    lo: tuple[int, ...],
    hi: tuple[int, ...],
    chunk_shape: tuple[int, ...],
    dtype: np.dtype[Any],
    chunk_of: Callable[[tuple[int, ...]], np.ndarray],
) -> np.ndarray:
    """The values of an array over ``[lo, hi)``, copied from each chunk it touches
    (``chunk_of(index)``: the chunk at that index of the chunk grid, cut at the array's end)."""
    out = np.empty(tuple(h - a for a, h in zip(lo, hi, strict=True)), dtype=dtype)
    ranges = [range(a // c, (h - 1) // c + 1) for a, h, c in zip(lo, hi, chunk_shape, strict=True)]
    for index in itertools.product(*ranges):
        data = chunk_of(index)
        src, dst = [], []
        for i, start, stop, c in zip(index, lo, hi, chunk_shape, strict=True):
            c0 = i * c
            a, b = max(start, c0), min(stop, c0 + c)
            src.append(slice(a - c0, b - c0))
            dst.append(slice(a - start, b - start))
        out[tuple(dst)] = data[tuple(src)]
    return out
