"""Pool memory: private anonymous arenas, and bulk page commits that never change values."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from insitu.arrays.geometry import ArrayGeometry
from insitu.engine.pool import allocate_arena
from insitu.plan.memory import populate_for_write


def _mapping_of(addr: int) -> str:
    with open("/proc/self/maps") as f:
        for line in f:
            span = line.split(" ", 1)[0]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= addr < hi:
                return line
    raise AssertionError(f"address {addr:#x} not mapped")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_arena_is_private_anonymous_memory() -> None:
    # A shared anonymous mapping is shmem: its first-touch page faults cost several
    # times more than private memory's, which made cold epochs decode-bound on faults.
    geom = ArrayGeometry(
        name="a", path="a", shape=(64, 32, 32), dtype=np.dtype("f4"), chunk_shape=(8, 32, 32)
    )
    arena = allocate_arena(geom, n_slots=4)
    line = _mapping_of(arena.ctypes.data)
    perms = line.split()[1]
    assert perms.endswith("p"), line
    assert "/dev/zero" not in line, line
    assert "SYSV" not in line, line


@pytest.mark.parametrize("offset", [0, 1, 4095, 4097])
def test_populate_keeps_values_and_tolerates_unaligned_views(offset: int) -> None:
    buf = np.arange(3 * 4096, dtype=np.uint8)
    view = buf[offset : offset + 5000] if offset + 5000 <= buf.size else buf[offset:]
    before = view.copy()
    populate_for_write(view)
    np.testing.assert_array_equal(view, before)
    populate_for_write(buf[:10])  # smaller than a page: nothing to do
