"""Pool memory: private anonymous arenas, bulk page commits that never change values, and the
background commit of fresh arena pages ahead of the decoders, on idle cores only."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transforms import source_spec
from insitu.engine.pages import can_populate, populate_for_write
from insitu.engine.pool import ArrayPool, allocate_arena
from insitu.engine.prefault import ArenaPrefaulter, IdleCores


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


def _pool(slab_bytes: int, n_slots: int) -> ArrayPool:
    n = slab_bytes // 4
    geom = ArrayGeometry(name="a", path="a", shape=(n_slots, n), dtype=np.dtype("f4"), chunk_shape=(1, n))
    return ArrayPool(geom, n_slots, allocate_arena(geom, n_slots), source_spec(geom))


def _always() -> bool:
    return True  # the commit-ahead tests: a core is free, whatever the machine's load meanwhile


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s  # generous: the thread only runs on idle CPU time
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.skipif(not can_populate(), reason="MADV_POPULATE_WRITE unavailable (Linux < 5.14)")
def test_prefault_commits_arena_pages_a_bounded_distance_ahead_of_the_slots_taken() -> None:
    pool = _pool(1 << 20, 48)  # 48 one-MiB slots
    prefault = ArenaPrefaulter([pool], ahead_bytes=8 << 20, start_after_bytes=0, spare=_always)
    try:
        assert _wait_for(lambda: prefault.committed_bytes == 8 << 20)
        time.sleep(0.05)
        assert prefault.committed_bytes == 8 << 20  # no further while no slot is taken
        for slab in range(16):  # the decoders commit the slots they take: it goes on from there
            pool.reserve(slab)
        assert _wait_for(lambda: prefault.committed_bytes == 16 << 20)
        time.sleep(0.05)
        assert prefault.committed_bytes == 16 << 20
        for slab in range(16, 48):
            pool.reserve(slab)
        assert prefault.thread is not None
        prefault.thread.join(60)  # every slot taken: nothing left to commit, the thread ends
        assert not prefault.thread.is_alive()
    finally:
        prefault.stop()


@pytest.mark.skipif(not can_populate(), reason="MADV_POPULATE_WRITE unavailable (Linux < 5.14)")
def test_prefault_waits_until_the_first_batch_is_in() -> None:
    # The first slots are the first batch's: the thread must not compete with their decode.
    pool = _pool(1 << 20, 32)
    prefault = ArenaPrefaulter([pool], ahead_bytes=4 << 20, start_after_bytes=8 << 20, spare=_always)
    try:
        for slab in range(7):
            pool.reserve(slab)
        time.sleep(0.2)
        assert prefault.committed_bytes == 0
        pool.reserve(7)  # 8 MiB handed out: it starts, 4 MiB ahead of them
        assert _wait_for(lambda: prefault.committed_bytes == 4 << 20)
    finally:
        prefault.stop()


@pytest.mark.skipif(not can_populate(), reason="MADV_POPULATE_WRITE unavailable (Linux < 5.14)")
def test_prefault_stops_on_request_and_when_its_pool_is_collected() -> None:
    stopped = ArenaPrefaulter([_pool(1 << 20, 64)], ahead_bytes=4 << 20, start_after_bytes=0, spare=_always)
    stopped.stop()
    collected = ArenaPrefaulter([_pool(1 << 20, 64)], ahead_bytes=4 << 20, start_after_bytes=0, spare=_always)
    for prefault in (stopped, collected):
        assert prefault.thread is not None
        prefault.thread.join(60)
        assert not prefault.thread.is_alive()


def test_prefault_keeps_what_decoders_already_wrote() -> None:
    pool = _pool(64 << 10, 64)
    entry = pool.reserve(0)
    assert entry is not None
    slot = pool.view(entry.slot)
    slot[...] = np.arange(slot.size, dtype="f4").reshape(slot.shape)
    prefault = ArenaPrefaulter([pool], ahead_bytes=1 << 30, start_after_bytes=0, spare=_always)
    try:
        if prefault.thread is not None:
            prefault.thread.join(60)
        np.testing.assert_array_equal(pool.view(entry.slot).ravel(), np.arange(slot.size, dtype="f4"))
    finally:
        prefault.stop()


@pytest.mark.skipif(not can_populate(), reason="MADV_POPULATE_WRITE unavailable (Linux < 5.14)")
def test_prefault_commits_nothing_while_no_core_is_spare() -> None:
    # On a machine whose cores are all busy, committing pages only moves the decoders' own
    # kernel work to another thread: it waits, and goes on once a core is free.
    spare = [False]
    pool = _pool(1 << 20, 32)
    prefault = ArenaPrefaulter([pool], ahead_bytes=8 << 20, start_after_bytes=0, spare=lambda: spare[0])
    try:
        assert _wait_for(lambda: prefault.busy_looks >= 3)
        assert prefault.committed_bytes == 0
        spare[0] = True
        assert _wait_for(lambda: prefault.committed_bytes == 8 << 20)
    finally:
        prefault.stop()


def _write_stat(path: Any, idle: int, total: int, cores: int = 2) -> None:
    # /proc/stat's first line: user nice system idle iowait irq softirq steal guest guest_nice
    busy = total - idle
    lines = [f"cpu  {busy - 3} 1 2 {idle - 5} 5 0 0 0 0 0"]
    lines += [f"cpu{i} 0 0 0 0 0 0 0 0 0 0" for i in range(cores)]
    lines.append("intr 1 2 3")
    path.write_text("\n".join(lines) + "\n")


def test_idle_cores_reads_the_idle_share_of_every_core_over_each_window(tmp_path: Any) -> None:
    stat = tmp_path / "stat"
    _write_stat(stat, idle=1000, total=5000)
    probe = IdleCores(str(stat), window_s=0.0)
    assert probe.spare() is False  # nothing known before a window has passed
    _write_stat(stat, idle=1010, total=5200)  # 10 of 200 ticks idle on 2 cores: 0.1 of a core
    assert probe.spare() is False
    _write_stat(stat, idle=1060, total=5400)  # 50 of 200: half a core, enough
    assert probe.spare() is True
    _write_stat(stat, idle=1160, total=5600)  # a whole core idle
    assert probe.spare() is True
    _write_stat(stat, idle=1161, total=5800)
    assert probe.spare() is False


def test_idle_cores_keeps_its_answer_until_the_window_ends(tmp_path: Any) -> None:
    stat = tmp_path / "stat"
    _write_stat(stat, idle=0, total=1000)
    probe = IdleCores(str(stat), window_s=3600.0)
    assert probe.spare() is False
    _write_stat(stat, idle=500, total=1200)  # idle now, but the hour-long window is still open
    assert probe.spare() is False


def test_idle_cores_counts_its_own_thread_time_as_idle(tmp_path: Any) -> None:
    # The committing thread's own ticks show as busy; they were free when it took them, and
    # counting them busy would make it stop as soon as it started.
    stat = tmp_path / "stat"
    _write_stat(stat, idle=0, total=1000)
    probe = IdleCores(str(stat), window_s=0.0)
    probe.spare()
    start = time.thread_time()
    while time.thread_time() - start < 0.25:  # 25 ticks of this thread's CPU
        pass
    _write_stat(stat, idle=0, total=1040)  # 40 ticks on 2 cores, none idle but ours
    assert probe.spare() is True


@pytest.mark.parametrize("content", [None, "", "cpu  x y z\n", "cpu  1 2\ncpu0 1 2\n", "intr 1\n"])
def test_idle_cores_says_spare_where_proc_stat_cannot_be_read(tmp_path: Any, content: str | None) -> None:
    # What the thread did before it looked: commit on nice 19.
    stat = tmp_path / "stat"
    if content is not None:
        stat.write_text(content)
    probe = IdleCores(str(stat), window_s=0.0)
    assert probe.spare() is True
    assert probe.spare() is True
    assert probe.readable is False
