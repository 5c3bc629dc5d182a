"""Committing a pool's fresh pages ahead of the decoders, on CPU time nothing else wants.

A cold pass with a cache writes every decoded byte into arena pages never
touched before, and the kernel zeroes each page as it is committed: on the
2-core reference machine that ran at 1-2 GB/s against 16-30 GB/s for
rewriting warm memory, a cost the decode threads pay inside the pass while a
streamed pass (``cache_budget_bytes=0``) does not. Huge pages would commit
the same memory four times faster where they are free, but where memory is
fragmented the kernel compacts it on first touch (THP defrag "madvise") and
the pass got two to three times more system time instead, so arenas stay on
small pages.

Here one thread per pool, at the idle scheduling class (``SCHED_IDLE``; nice
19 where that is refused), commits each heap arena's pages a few megabytes at
a time, at most ``ahead_bytes`` past the slots handed out so far. It only
gets a core the decode threads leave idle (start-up, a store's round trips, a
consumer busy with its model), so the slots are committed by the time they
are written; while the decoders keep every core busy it gets none, and they
commit their own pages as before (:func:`insitu.plan.memory.populate_for_write`).
It holds its pools weakly and stops when they are collected, when
:meth:`ArenaPrefaulter.stop` is called (``close()``) or when every arena is
committed.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from insitu.plan.memory import can_populate, populate_for_write

#: Bytes committed per step (one madvise call), between checks for a stop.
STEP_BYTES = 4 << 20
#: How far past the slots handed out the thread commits: enough for the decoders' next blocks,
#: little enough that a pass which stops early has not committed the whole budget.
AHEAD_BYTES = 64 << 20
#: How long the thread sleeps when it is ``ahead_bytes`` ahead, before looking again.
POLL_S = 0.005


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

    def __init__(self, pools: Sequence[FillingArena], *, ahead_bytes: int = AHEAD_BYTES) -> None:
        self.ahead_bytes = ahead_bytes
        self._stop = threading.Event()
        self._pools = [weakref.ref(p) for p in pools if p.arena.nbytes > 0]
        self._done = [0] * len(self._pools)  # per arena: bytes below this are committed
        self._committed = 0
        self.thread: threading.Thread | None = None
        if self._pools and can_populate():
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
        while not self._stop.is_set():
            progressed, unfinished = self._step()
            if not unfinished:
                return
            if not progressed:
                self._stop.wait(POLL_S)

    def _step(self) -> tuple[bool, bool]:
        """Commit one step of the first arena that is behind its limit: (did anything, is any
        arena left to commit)."""
        unfinished = False
        for i, ref in enumerate(self._pools):
            pool = ref()
            if pool is None:  # its dataset is gone: nothing of it to commit
                continue
            arena = pool.arena
            total = arena.nbytes
            # The decoders commit the slots they write; go on from where they will write next.
            filled = pool.high_water_slots * pool.slot_nbytes
            start = self._done[i] = max(self._done[i], filled)
            if start >= total:
                continue
            unfinished = True
            end = min(total, filled + self.ahead_bytes, start + STEP_BYTES)
            if end <= start:
                continue
            flat = arena.reshape(-1).view("u1")
            populate_for_write(flat[start:end])
            self._done[i] = end
            self._committed += end - start
            return True, True
        return False, unfinished


def _lowest_priority() -> None:
    """Give the calling thread only CPU time nothing else wants (Linux: per-thread)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return
    except (AttributeError, OSError):
        pass
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
