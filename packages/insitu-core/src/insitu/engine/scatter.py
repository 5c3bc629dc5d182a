"""Streaming a slab straight into the batches that need it, bypassing the pool.

A slab the cache will not keep (its only use in this pass is one block, and
the pool has no free slot for it) is decoded into a small scratch buffer that
each decode thread reuses, and its rows are copied at once into the batch
buffers of that block: every decoded byte is written to memory once, into
recycled buffers whose pages are already mapped, and is never read back out of
a pool arena. On the 2-core reference machine a cold pass that decoded into
fresh pool memory and gathered from it spent about as much thread time on the
fresh pages and the second pass as on decoding itself.

A one-sample chunk feeding exactly one batch row decodes into that row
directly: no scratch, no copy.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np


class Destinations:
    """The batch rows one streamed slab fills: ``(batch array, row, slab row)`` triples."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[tuple[np.ndarray, int, int]] = []

    def add(self, array: np.ndarray, row: int, slab_row: int) -> None:
        """Send slab row ``slab_row`` to row ``row`` of ``array``."""
        self.rows.append((array, row, slab_row))

    def scatter(self, slab: np.ndarray) -> None:
        """Copy each wanted row of the decoded (and transformed) ``slab`` to its batch row."""
        for array, row, src in self.rows:
            array[row] = slab[src]

    def fill(self, value: Any) -> None:
        """Write ``value`` over every destination row (a chunk that could not be read)."""
        for array, row, _ in self.rows:
            array[row] = value

    def direct(self, slab_shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray | None:
        """The one batch row this slab is, shaped as the slab, when the slab is exactly one
        destination row (a one-sample chunk read once): decode there and nothing is copied."""
        if len(self.rows) != 1 or slab_shape[0] != 1:
            return None
        array, row, src = self.rows[0]
        if src != 0 or array.dtype != dtype:
            return None
        view = array[row : row + 1]
        # Batch buffers are C-contiguous as made (BufferPool.empty), so is a row of one; asked after
        # the cheaper tests, since this runs for every streamed chunk, in the decode threads.
        return view.reshape(slab_shape) if view.flags.c_contiguous else None


class ScratchBuffers:
    """One reusable slab-sized buffer per decode thread and (shape, dtype): stays cache-resident
    because the same memory is decoded into again and again."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """This thread's buffer of ``shape`` and ``dtype`` (contents undefined: decoded over each time)."""
        found: dict[tuple[tuple[int, ...], str], np.ndarray] | None = getattr(self._local, "buffers", None)
        if found is None:
            found = self._local.buffers = {}
        key = (shape, dtype.str)
        buf = found.get(key)
        if buf is None:
            buf = found[key] = np.empty(shape, dtype)
        return buf
