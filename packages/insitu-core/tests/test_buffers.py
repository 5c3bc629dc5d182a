"""Batch arrays are owned, aligned for zero-copy hand-off, and their memory is recycled."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from insitu.engine.buffers import ALIGN, BufferPool


@pytest.mark.parametrize("shape", [(3, 5), (4, 1 << 18)])  # below and above the pooling threshold
def test_arrays_are_aligned_contiguous_and_writable(shape: tuple[int, ...]) -> None:
    pool = BufferPool()
    for _ in range(5):
        a = pool.empty(shape, np.dtype("f4"))
        assert a.shape == shape
        assert a.dtype == np.float32
        assert a.ctypes.data % ALIGN == 0
        assert a.flags.c_contiguous
        assert a.flags.writeable
        a[...] = 1.5
        assert float(a.sum()) == 1.5 * a.size


def test_memory_returns_only_when_every_view_is_gone() -> None:
    pool = BufferPool()
    a = pool.empty((4, 1 << 18), np.dtype("f4"))
    a[...] = 7
    first = a.ctypes.data
    view = a[1:]
    del a
    gc.collect()
    b = pool.empty((4, 1 << 18), np.dtype("f4"))
    second = b.ctypes.data
    assert second != first, "memory reused while a view of it was alive"
    assert (view == 7).all()
    del view, b
    gc.collect()
    c = pool.empty((4, 1 << 18), np.dtype("f4"))
    assert c.ctypes.data in {first, second}, "released memory is reused for the next batch"
