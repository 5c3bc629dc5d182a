"""The pinned staging ring: a few page-locked host buffers, each holding one batch on its way to the device.

A host-to-device copy runs asynchronously only from page-locked memory, and
page-locking is slow (a system call per allocation, often milliseconds), so
the ring allocates its slots once, sized from the first batch, and reuses
them. A slot is rewritten only after the copy that read it has finished: the
ring waits on the event recorded after that copy (normally long done, so the
wait costs nothing). Memory is bounded by ``slots`` times the largest batch.

Filling a slot is a host memcpy. One thread copies at ~10 GB/s, a fraction
of what a PCIe 5 link moves from pinned memory (~50 GB/s), so with
``copy_threads > 1`` large arrays are split into row ranges of at least
:data:`SPLIT_BYTES` and copied in parallel (numpy releases the GIL for plain
copies). Gathering straight into the slot would save this copy altogether;
the engine's gather writes into its own buffers today.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from insitu_gpu.backend import Backend, Event

#: Smallest piece one copy thread takes: below it, a thread hop costs more than it saves.
SPLIT_BYTES = 4 << 20

#: Each array in a slot starts on this boundary (what CUDA's copy engines like; 256 covers every dtype).
ALIGN = 256


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def host_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """``dtype`` in native byte order: devices (and DLPack) hold native values only."""
    return dtype if dtype.isnative else dtype.newbyteorder("=")


@dataclass
class Slot:
    """One page-locked buffer and the copy that last read it."""

    index: int
    buffer: np.ndarray | None = None
    busy: Event | None = None
    views: dict[str, np.ndarray] = field(default_factory=dict)


class PinnedRing:
    """``slots`` page-locked buffers used in turn; see the module docstring."""

    def __init__(self, backend: Backend, slots: int, *, copy_threads: int = 1) -> None:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"pinned slots must be a positive integer, got {slots!r}")
        if isinstance(copy_threads, bool) or not isinstance(copy_threads, int) or copy_threads < 1:
            raise ValueError(f"copy_threads must be a positive integer, got {copy_threads!r}")
        self.copy_threads = copy_threads
        self._pool: ThreadPoolExecutor | None = None
        self._backend = backend
        self._slots = [Slot(i) for i in range(slots)]
        self._next = 0
        self._slot_bytes = 0
        self.allocations = 0  # page-locked buffers allocated (slots, plus regrowth for a larger batch)
        self.waits = 0  # times a slot's previous copy was still running when it came round again
        self.staged_bytes = 0

    @property
    def slots(self) -> int:
        """Number of pinned slots in the ring."""
        return len(self._slots)

    @property
    def nbytes(self) -> int:
        """Page-locked bytes held now."""
        return sum(0 if s.buffer is None else int(s.buffer.nbytes) for s in self._slots)

    def stage(self, arrays: Mapping[str, np.ndarray]) -> Slot:
        """The next slot, its previous copy finished, holding a copy of ``arrays`` (``slot.views``)."""
        slot = self._slots[self._next]
        self._next = (self._next + 1) % len(self._slots)
        if slot.busy is not None:
            if not slot.busy.query():
                self.waits += 1
            slot.busy.synchronize()
            slot.busy = None
        layout: list[tuple[str, np.ndarray, int]] = []
        offset = 0
        for label, array in arrays.items():
            layout.append((label, array, offset))
            offset += _aligned(array.nbytes)
        if slot.buffer is None or slot.buffer.nbytes < offset:
            # Sized from the first batch; a later, larger batch (another layout) regrows the slot once.
            self._slot_bytes = max(self._slot_bytes, offset)
            slot.buffer = None  # drop the old buffer before page-locking a new one
            slot.buffer = self._backend.pinned_empty(max(self._slot_bytes, ALIGN))
            self.allocations += 1
        views: dict[str, np.ndarray] = {}
        pieces: list[tuple[np.ndarray, np.ndarray]] = []
        for label, array, start in layout:
            dtype = host_dtype(array.dtype)
            view = slot.buffer[start : start + array.nbytes].view(dtype).reshape(array.shape)
            pieces += _split(view, array, self.copy_threads)
            views[label] = view
        if len(pieces) > 1:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.copy_threads, thread_name_prefix="insitu-gpu-ring")
            for done in [self._pool.submit(_copy, dst, src) for dst, src in pieces]:
                done.result()
        else:
            for dst, src in pieces:
                _copy(dst, src)
        slot.views = views
        self.staged_bytes += offset
        return slot

    def hold(self, slot: Slot, copied: Event) -> None:
        """``slot`` may be rewritten once ``copied`` (recorded after the copies reading it) has passed."""
        slot.busy = copied

    def close(self) -> None:
        """Stop the copy threads (the buffers go with the ring)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    np.copyto(dst, src, casting="equiv")


def _split(dst: np.ndarray, src: np.ndarray, threads: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(dst, src)`` row ranges for up to ``threads`` copiers, each at least :data:`SPLIT_BYTES`."""
    rows = dst.shape[0] if dst.ndim else 1
    parts = min(threads, rows, max(1, dst.nbytes // SPLIT_BYTES))
    if parts <= 1:
        return [(dst, src)]
    bounds = np.linspace(0, rows, parts + 1).astype(int)
    return [(dst[a:b], src[a:b]) for a, b in pairwise(bounds.tolist()) if b > a]
