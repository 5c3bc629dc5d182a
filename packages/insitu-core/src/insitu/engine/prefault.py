"""Committing a pool's fresh pages ahead of the decoders, on CPU time nothing else wants.

A cold pass with a cache writes every decoded byte into arena pages never
touched before, and the kernel zeroes each page as it is committed: on the
2-core reference machine that ran at 1-2 GB/s against 16-30 GB/s for
rewriting warm memory, paid by the decode threads inside the pass. Huge
pages would commit the same memory four times faster where they are free,
but where memory is fragmented the kernel compacts it on first touch (THP
defrag "madvise") and the pass got two to three times more system time
instead, so arenas stay on small pages.

On a remote store (the engine starts it there only: with local files the
decoders keep the cores busy, and on the reference machine the thread then
delayed the first batch by 7-11 ms and made the cold pass no faster) one
thread per pool, at the lowest priority (nice 19), commits each heap arena's
pages a megabyte at a time, at most ``ahead_bytes`` past the slots handed out
so far, once the decoders have filled the first ``start_after_bytes`` of the
arena (the first batch). It commits only while the machine has a core to
spare (:class:`IdleCores`: at least half a core idle over the last 50 ms, its
own time counted as idle), as a store's round trips or a consumer busy with
its model leave, so those slots are committed by the time they are written.
While every core is busy it only looks every 50 ms, and the decoders commit
their own pages as before (:func:`insitu.engine.pages.populate_for_write`):
committing them then only moved the same kernel work to another thread and
took the memory-map lock from the decoders' own faults (at +20 ms per GET,
with the store's reads taking the cores, a cold pass ran about 5% faster
without the thread). It holds its pools weakly and stops when they are
collected, when :meth:`ArenaPrefaulter.stop` is called (``close()``) or when
every arena is committed.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from insitu.engine.pages import can_populate, populate_for_write

#: Bytes committed per step (one madvise call), between checks for a stop.
STEP_BYTES = 1 << 20
#: How far past the slots handed out the thread commits: enough for the decoders' next blocks,
#: little enough that a pass which stops early has not committed the whole budget.
AHEAD_BYTES = 64 << 20
#: Slots an arena's decoders fill before the thread starts on it: the first batch's slabs go in
#: first. Started at once, it took a core and the memory-map lock from the first block's decode
#: and delayed the first batch by a third to a half on the 2-core reference machine.
START_AFTER_BYTES = 16 << 20
#: How long the thread sleeps when it has nothing to commit, before looking again: doubled each
#: time nothing moved, up to ``MAX_POLL_S`` (an arena the data never fills must not keep waking it).
POLL_S = 0.005
MAX_POLL_S = 0.2
#: The window over which idle cores are measured (``/proc/stat`` counts in 10 ms ticks), which is
#: also how long the thread waits before looking again when no core was free.
IDLE_WINDOW_S = 0.05
#: Idle cores needed, on average over a window, for the thread to commit.
MIN_IDLE_CORES = 0.5


class IdleCores:
    """Whether the machine had a core to spare over the last window, from ``/proc/stat``.

    Idle and iowait ticks of all cores over all ticks, times the number of
    cores; the calling thread's own CPU time counts as idle (what it used was
    free when it took it). Where ``/proc/stat`` cannot be read the answer is
    always yes, which is what the thread assumed before it looked.
    """

    def __init__(self, path: str = "/proc/stat", window_s: float = IDLE_WINDOW_S) -> None:
        self.path = path
        self.window_s = window_s
        self._ticks_per_s = _ticks_per_second()
        # (when, idle ticks, all ticks, this thread's CPU seconds) at the window's start
        self._last: tuple[float, int, int, float] | None = None
        self._verdict = False  # nothing known until a window has passed
        self.readable = True

    def _sample(self) -> tuple[int, int, int] | None:
        """(idle ticks, all ticks, cores) now, or None if unreadable."""
        try:
            with open(self.path) as f:
                lines = f.read().splitlines()
            fields = [int(x) for x in lines[0].split()[1:9]]  # user nice system idle iowait irq softirq steal
        except (OSError, IndexError, ValueError):
            return None
        cores = sum(1 for line in lines[1:] if line.startswith("cpu"))
        if len(fields) < 5 or cores < 1:
            return None
        return fields[3] + fields[4], sum(fields), cores

    def spare(self) -> bool:
        """Whether at least ``MIN_IDLE_CORES`` were idle over the window just ended (the previous
        answer while the window is still open; no before the first window has ended)."""
        if not self.readable:
            return True
        now, own = time.monotonic(), time.thread_time()
        if self._last is not None and now - self._last[0] < self.window_s:
            return self._verdict
        sample = self._sample()
        if sample is None:
            self.readable = False
            return True
        idle, total, cores = sample
        if self._last is not None and total > self._last[2]:
            own_ticks = (own - self._last[3]) * self._ticks_per_s
            idle_cores = (idle - self._last[1] + own_ticks) / (total - self._last[2]) * cores
            self._verdict = idle_cores >= MIN_IDLE_CORES
        self._last = (now, idle, total, own)
        return self._verdict


def _ticks_per_second() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100.0


class FillingArena(Protocol):
    """What the thread reads of a pool (an :class:`insitu.engine.pool.ArrayPool`): its arena, and
    how far the slots handed out reach into it."""

    @property
    def arena(self) -> np.ndarray:
        """The slots' memory, end to end."""
        ...

    @property
    def high_water_slots(self) -> int:
        """Slots ``[0, this)`` were handed out at least once."""
        ...

    @property
    def slot_nbytes(self) -> int:
        """Bytes of one slot."""
        ...


class ArenaPrefaulter:
    """Commits the pages of ``pools``' arenas just ahead of their fill, in a background thread."""

    def __init__(
        self,
        pools: Sequence[FillingArena],
        *,
        ahead_bytes: int = AHEAD_BYTES,
        start_after_bytes: int = START_AFTER_BYTES,
        spare: Callable[[], bool] | None = None,
    ) -> None:
        """``spare()`` says whether a core is free to commit on (default: an :class:`IdleCores`
        made on the thread, since it counts that thread's own time)."""
        self.ahead_bytes = ahead_bytes
        self.start_after_bytes = start_after_bytes
        self._spare = spare
        self.busy_looks = 0  # looks that found no core to spare (the decoders committed meanwhile)
        self._stop = threading.Event()
        # [pool, bytes of its arena below which pages are committed], for arenas not yet done.
        self._todo: list[list[Any]] = [[weakref.ref(p), 0] for p in pools if p.arena.nbytes > 0]
        self._committed = 0
        self.thread: threading.Thread | None = None
        if self._todo and can_populate():
            self.thread = threading.Thread(target=self._run, name="insitu-prefault", daemon=True)
            self.thread.start()

    @property
    def committed_bytes(self) -> int:
        """Bytes of arena this thread has committed so far (slots the decoders reached first aside)."""
        return self._committed

    def stop(self) -> None:
        """Stop committing (never blocks: safe in finalisers and on the loop thread)."""
        self._stop.set()

    def _run(self) -> None:
        _lowest_priority()
        spare = self._spare if self._spare is not None else IdleCores().spare
        wait = POLL_S
        while self._todo and not self._stop.is_set():
            if not spare():
                self.busy_looks += 1
                self._stop.wait(IDLE_WINDOW_S)
                continue
            if self._round():
                wait = POLL_S
            else:
                self._stop.wait(wait)
                wait = min(2 * wait, MAX_POLL_S)

    def _round(self) -> bool:
        """One step for every arena behind its limit (arenas done, or whose pool was collected,
        leave the list); whether anything was committed."""
        progressed = False
        still = []
        for item in self._todo:
            if self._stop.is_set():
                return progressed
            pool = item[0]()
            if pool is None:  # its dataset is gone: nothing of it to commit
                continue
            arena = pool.arena
            total = arena.nbytes
            # The decoders commit the slots they write; go on from where they will write next.
            filled = pool.high_water_slots * pool.slot_nbytes
            start = item[1] = max(item[1], filled)
            end = min(total, filled + self.ahead_bytes, start + STEP_BYTES)
            if filled < min(self.start_after_bytes, total):
                end = start  # not yet: the first batch's slabs are still being decoded
            if end > start:
                populate_for_write(arena.reshape(-1).view("u1")[start:end])
                item[1] = end
                self._committed += end - start
                progressed = True
            del pool, arena  # hold no pool between steps: its dataset may be collected meanwhile
            if item[1] < total:
                still.append(item)
        self._todo = still
        return progressed


def _lowest_priority() -> None:
    """Nice 19 for the calling thread (Linux: per-thread). Not ``SCHED_IDLE``: committing pages
    holds the process's memory-map lock for reading, and a thread that may wait indefinitely for a
    core while holding it would stall every ``mmap`` of the process behind it on a busy machine;
    at nice 19 it still gets a small share, so each step ends soon."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
