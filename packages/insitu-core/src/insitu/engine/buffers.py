"""Recycled output buffers for batches.

Every batch owns its arrays: a user may keep them, hand them to torch with
``from_numpy``, or append them to a list. But a fresh multi-megabyte
allocation per batch is a fresh mapping whose pages all fault on first
write, which costs as much kernel time as the copy itself. So a batch array
is a plain ndarray over a small *lease* object that exports the memory of a
pooled private anonymous mapping: when the last array (or tensor, or view)
using a lease is garbage-collected, the lease's finaliser returns the
mapping, still faulted in, to a free list for a later batch of the same size.

A new mapping is not touched when it is made (a ``bytearray`` would be zeroed
there and then): batches are taken on the event loop as blocks are planned,
and their pages fault in where they are first written, in the decode threads.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
from typing import Any

import numpy as np

_MIN_POOLED = 1 << 20  # smaller arrays: malloc already reuses them without page faults
ALIGN = 64  # bytes; what zero-copy hand-off to JAX / TensorFlow on CPU requires


class BufferPool:
    """Free lists of equally sized buffers, at most ``max_free`` kept per size (enough for the
    batches a pass holds in flight: its read-ahead blocks' and the prefetch queue's)."""

    def __init__(self, max_free: int = 32) -> None:
        self.max_free = max_free
        self._free: dict[int, list[mmap.mmap]] = {}
        self._lease_types: dict[int, Any] = {}
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """An uninitialised C-contiguous array, 64-byte aligned, whose memory is recycled after use.

        The alignment is what lets JAX and TensorFlow adopt the array on CPU
        without a copy (both copy anything less aligned).
        """
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes < _MIN_POOLED:
            raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
            start = -raw.ctypes.data % ALIGN
            return raw[start : start + nbytes].view(dtype).reshape(shape)
        with self._lock:
            free = self._free.get(nbytes)
            mem = free.pop() if free else None
            lease_type = self._lease_types.get(nbytes)
            if lease_type is None:
                lease_type = self._lease_types[nbytes] = _lease_type(nbytes, self)
        if mem is None:
            try:
                mem = _mapping(nbytes)
            except OSError as exc:  # ENOMEM: an address-space limit, or no memory left to map
                raise MemoryError(
                    f"cannot map {nbytes:,} bytes for a batch array of shape {shape} {dtype} "
                    f"({exc.strerror}); lower batch_size or raise the process's memory limit"
                ) from exc
        # Mappings are page-aligned, which is more than the 64 bytes JAX and TensorFlow need.
        lease = lease_type.from_buffer(mem)
        lease.mem = mem  # the finaliser hands this back
        return np.frombuffer(lease, dtype=dtype).reshape(shape)

    def give_back(self, mem: mmap.mmap) -> None:
        """Return a buffer's mapping for reuse (kept while its size has fewer than ``max_free`` free)."""
        with self._lock:
            free = self._free.setdefault(len(mem), [])
            if len(free) < self.max_free:
                free.append(mem)
        # Beyond the free list, the mapping goes with the lease (unmapped once nothing exports it).


def _mapping(nbytes: int) -> mmap.mmap:
    """A private anonymous mapping (pages zero-filled lazily, on first write)."""
    if hasattr(mmap, "MAP_PRIVATE"):
        return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return mmap.mmap(-1, nbytes)  # Windows: anonymous mappings are private already


def _lease_type(nbytes: int, pool: BufferPool) -> Any:
    """A ctypes array type over ``nbytes`` whose instances return their memory on deletion.

    ctypes arrays export the buffer protocol on every supported Python, and
    ``from_buffer`` shares the bytearray's memory, so the lease is what numpy
    keeps alive and the pooled bytearray itself is never finalised.
    """

    def __del__(self: Any) -> None:
        pool.give_back(self.mem)

    return type(f"_Lease{nbytes}", (ctypes.c_char * nbytes,), {"__del__": __del__})
