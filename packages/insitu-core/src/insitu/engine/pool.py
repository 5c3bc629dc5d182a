"""The decoded-chunk pool: batch-assembly buffer and cache in one.

Each array gets one *arena*: a preallocated ndarray (heap, or a memory-mapped
file under ``cache_dir``) of ``n_slots`` slabs laid end to end, sample axis
first. A batch is then one ``np.take`` over the arena, whatever chunks its
samples came from. Slots are the unit of the byte budget: a slot counts as
resident from the moment it is reserved for a load, so the sum of slot bytes
in use can never exceed ``cache_budget_bytes``.

Unpinned slabs stay resident as cache. Eviction takes, in order: slabs no
running epoch needs again (least recently used first), then the slab whose
next use is furthest away (Belady), so a slab shared by two blocks of one
epoch is decoded once when the budget allows.

A slab that is ready and unpinned keeps no :class:`Slab` object: it is its
slot in ``slab_to_slot`` and its place in the eviction order, both plain
integers, and an object is made again when a block pins it. A cache of a
million slabs then adds nothing for the garbage collector to walk, where an
object per slab made every full collection of a pass over small chunks
slower as the cache filled.

All bookkeeping runs on the engine's event-loop thread; decode and gather
threads only touch arena rows of slabs that are pinned.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import mmap
from collections import OrderedDict

import numpy as np

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transforms import SlabSpec
from insitu.engine.prefault import ArenaPrefaulter
from insitu.engine.scatter import Destinations

LOADING, READY, FAILED = 0, 1, 2


class BlockWaiter:
    """Counts the slabs of one block still loading; resolves ``future`` when none are.

    One waiter (one asyncio future) per block instead of one future per slab:
    at one sample per chunk, a future's callbacks alone cost more than the
    rest of the per-chunk bookkeeping.
    """

    __slots__ = ("future", "remaining")

    def __init__(self, future: asyncio.Future[None], remaining: int) -> None:
        self.future = future
        self.remaining = remaining

    def slab_done(self, entry: Slab) -> None:
        """One slab of the block finished; the first failure fails the block, the last success resolves it."""
        if self.future.done():
            return
        if entry.error is not None:
            self.future.set_exception(entry.error)
            self.future.exception()  # retrieved: the emitter re-raises it
            return
        self.remaining -= 1
        if self.remaining == 0:
            self.future.set_result(None)


class Slab:
    """One resident (or loading) slab of one array."""

    __slots__ = (
        "bad",
        "dests",
        "error",
        "pending",
        "pins",
        "scratch",
        "slab",
        "slot",
        "sources",
        "state",
        "waiters",
    )

    def __init__(self, slab: int, slot: int, pins: int = 0, state: int = LOADING) -> None:
        self.slab = slab
        self.slot = slot
        self.pins = pins
        self.state = state
        self.bad = False  # holds a filled-in bad chunk (on_bad_chunk="nan"/"skip")
        self.error: BaseException | None = None
        self.pending = 0  # chunks still to be placed
        # Where chunks decode while loading, when chunk transforms change shape or dtype (the slot
        # holds the transformed output); None: they decode straight into the slot.
        self.scratch: np.ndarray | None = None
        # (key, byte range, source) of every read that filled this slab, when a persisted cache
        # tracks them: how it tells on reuse whether the stored bytes changed since.
        self.sources: list[tuple[str, tuple[int, int] | None, str]] | None = None
        # Blocks waiting for this slab's load. An empty tuple until a block waits: a pool of a
        # million cached slabs then holds no list per slab for the garbage collector to walk.
        self.waiters: list[BlockWaiter] | tuple[()] = ()
        # Streamed (not pooled): the batch rows this slab's decoded rows are copied to; slot is -1.
        self.dests: Destinations | None = None

    @classmethod
    def streamed(cls, slab: int, dests: Destinations) -> Slab:
        """A slab decoded outside the pool, straight into the batch rows ``dests``."""
        entry = cls(slab, -1)
        entry.dests = dests
        return entry

    @property
    def is_streamed(self) -> bool:
        """Whether the slab is decoded straight into batch rows instead of a pool slot."""
        return self.dests is not None

    def finish(self, error: BaseException | None) -> None:
        """Mark the load done (or failed) and tell every waiting block."""
        self.state = READY if error is None else FAILED
        self.error = error
        waiters, self.waiters = self.waiters, ()
        for w in waiters:
            w.slab_done(self)

    def __repr__(self) -> str:
        return f"Slab(slab={self.slab}, slot={self.slot}, pins={self.pins}, state={self.state})"


class ResidentBytes:
    """Bytes of slots in use across a pool's arrays, and the most ever: kept as slots are taken and
    given back, so reading it costs the same with 5 arrays or 5,000 (summing every array on each
    load made a group of 5,000 arrays take minutes to its first batch)."""

    __slots__ = ("now", "peak")

    def __init__(self, now: int = 0) -> None:
        self.now = now
        self.peak = now

    def add(self, nbytes: int) -> None:
        """Count ``nbytes`` more in use (negative: given back), raising the peak when passed."""
        self.now += nbytes
        if self.now > self.peak:
            self.peak = self.now


class ArrayPool:
    """Slots for the slabs of one array, each sized for ``spec``: the slab after chunk transforms."""

    def __init__(self, geom: ArrayGeometry, n_slots: int, arena: np.ndarray, spec: SlabSpec) -> None:
        self.geom = geom
        self.spec = spec
        self._slot_nbytes = spec.nbytes  # asked once per slot taken: the spec never changes
        self.n_slots = n_slots
        self.arena = arena
        # int32: 4 bytes a slab of the whole array (40 MB at ten million chunks); slots never near 2**31.
        self.slab_to_slot = np.full(geom.n_slabs, -1, dtype=np.int32)
        self.bad = np.zeros(geom.n_slabs, dtype=bool)  # slab holds a filled-in bad chunk
        # Slabs loading or pinned (or tracking their sources for a persisted cache); a ready,
        # unpinned slab has none: it is its slot in slab_to_slot (see the module docstring).
        self.entries: dict[int, Slab] = {}
        # Slots [_fresh, n_slots) were never handed out; _free holds slots given back since. (A
        # list of every slot up front costs a Python int per slot: seconds at millions of slots.)
        self._fresh = 0
        self._free: list[int] = []
        self._spare: OrderedDict[int, None] = OrderedDict()  # unpinned, no planned use: LRU order
        self._wanted: list[tuple[int, int, int]] = []  # heap of (-next_use, seq, slab)
        # Unpinned slabs with a planned use, and that use: a heap item whose use differs is stale.
        self._wanted_at: dict[int, int] = {}
        self._seq = itertools.count()
        self.resident = ResidentBytes()  # shared by every array once a ChunkPool holds this one

    @property
    def has_spare(self) -> bool:
        """True when resident slabs wait unpinned with no planned use (a cache for later passes)."""
        return bool(self._spare)

    @property
    def high_water_slots(self) -> int:
        """Slots ``[0, this)`` have been handed out at least once (their pages are committed)."""
        return self._fresh

    @property
    def slots_in_use(self) -> int:
        """Slots holding (or loading) a slab."""
        return self._fresh - len(self._free)

    @property
    def slot_nbytes(self) -> int:
        """Bytes of one slot (one slab after chunk transforms)."""
        return self.spec.nbytes

    def view(self, slot: int) -> np.ndarray:
        """The slot's memory in the arena, ``chunk_len`` samples long."""
        c = self.geom.chunk_len
        return self.arena[slot * c : (slot + 1) * c]

    def rows(self, slab: int) -> int:
        """Valid samples in ``slab`` (the last one may be short)."""
        c = self.geom.chunk_len
        return min(c, self.geom.n_samples - slab * c)

    def get(self, slab: int) -> Slab | None:
        """The entry of a resident or loading ``slab``; ``None`` when it is not in the pool. A ready
        slab kept without an entry gets one again here (it is about to be pinned)."""
        entry = self.entries.get(slab)
        if entry is None:
            slot = int(self.slab_to_slot[slab])
            if slot >= 0:
                entry = self.entries[slab] = Slab(slab, slot, state=READY)
                entry.bad = bool(self.bad[slab])
        return entry

    def pin(self, entry: Slab) -> None:
        """Keep ``entry`` resident (not evictable) until a matching :meth:`unpin`."""
        entry.pins += 1
        self._spare.pop(entry.slab, None)
        self._wanted_at.pop(entry.slab, None)

    def unpin(self, entry: Slab, next_use: int | None) -> None:
        """Release one pin; once none are left, the slab becomes evictable: by LRU when ``next_use`` is
        ``None``, else the slab needed last goes first. A ready slab then drops its entry."""
        entry.pins -= 1
        slab = entry.slab
        if entry.pins > 0 or self.entries.get(slab) is not entry:
            return
        if next_use is None:
            self._spare[slab] = None
            self._spare.move_to_end(slab)
        else:
            self._wanted_at[slab] = next_use
            heapq.heappush(self._wanted, (-next_use, next(self._seq), slab))
        if entry.state == READY and entry.sources is None:
            del self.entries[slab]

    def planned_use(self, slab: int) -> int | None:
        """The next planned use of an unpinned resident ``slab`` (None: none, or pinned)."""
        return self._wanted_at.get(slab)

    def expect(self, slabs: np.ndarray, first_use: np.ndarray) -> None:
        """A starting pass will use ``slabs`` first at blocks ``first_use``: resident ones waiting as
        spare (a previous epoch's, or adopted from a persisted cache) get that as their next use,
        so eviction takes slabs nobody needs first and keeps the ones needed soonest."""
        if not self._spare:
            return
        # Looked up for the spare slabs only (at most the pool's slots), not a dict of the epoch.
        spare = np.fromiter(self._spare, dtype=np.int64, count=len(self._spare))
        first_of = np.full(self.geom.n_slabs, -1, dtype=np.int64)
        first_of[slabs] = first_use
        uses = first_of[spare]
        for slab, use in zip(spare[uses >= 0].tolist(), uses[uses >= 0].tolist(), strict=True):
            del self._spare[slab]  # spare slabs are unpinned: pin() takes a slab out of the spares
            self._wanted_at[slab] = use
            heapq.heappush(self._wanted, (-use, next(self._seq), slab))

    @property
    def free_slots(self) -> int:
        """Slots a reservation can take without evicting."""
        return len(self._free) + self.n_slots - self._fresh

    def reserve_free(self, slabs: list[int], *, pins: int = 1) -> list[Slab]:
        """:meth:`reserve` for each of ``slabs``, all from free slots (at least as many as
        ``slabs``, see :attr:`free_slots`): one step for a block's slabs instead of one each."""
        if len(slabs) > self.free_slots:
            raise ValueError(f"{len(slabs)} slabs for {self.free_slots} free slots")
        free, entries = self._free, self.entries
        from_free = min(len(free), len(slabs))
        slots = [free.pop() for _ in range(from_free)]
        start = self._fresh
        self._fresh += len(slabs) - from_free
        slots += range(start, self._fresh)
        self.resident.add(len(slabs) * self._slot_nbytes)
        out = []
        for slab, slot in zip(slabs, slots, strict=True):
            entry = entries[slab] = Slab(slab, slot, pins=pins)
            out.append(entry)
        return out

    def reserve(self, slab: int, *, evict: bool = True, pins: int = 1) -> Slab | None:
        """Take a slot for ``slab``, pinned ``pins`` times: a free one, else (with ``evict``) one
        whose slab is not needed soonest; None if there is none."""
        # The free-slot path inlined: it runs once per slab a cold pass loads, on the loop.
        if self._free:
            slot: int | None = self._free.pop()
            self.resident.add(self._slot_nbytes)
        elif self._fresh < self.n_slots:
            slot = self._fresh
            self._fresh += 1
            self.resident.add(self._slot_nbytes)
        else:
            slot = self._evict() if evict else None
        if slot is None:
            return None
        entry = Slab(slab, slot, pins=pins)
        self.entries[slab] = entry
        return entry

    def adopt(self, slots: dict[int, int]) -> None:
        """Register slabs already present in their slots (a persisted cache), unpinned."""
        taken = set(slots.values())
        top = max(taken, default=-1) + 1
        before = self.slots_in_use
        self._free = [s for s in [*self._free, *range(self._fresh, top)] if s not in taken]
        self._fresh = max(self._fresh, top)
        self.resident.add((self.slots_in_use - before) * self.slot_nbytes)
        for slab, slot in slots.items():  # ready and unpinned: no entry (see get)
            self.slab_to_slot[slab] = slot
            self._spare[slab] = None

    def mark_ready(self, entry: Slab) -> None:
        """Record a loaded slab's slot, so gathers index it."""
        self.slab_to_slot[entry.slab] = entry.slot

    def discard(self, entry: Slab) -> None:
        """Drop an entry whose load failed; its slot becomes free."""
        if self.entries.get(entry.slab) is entry:
            del self.entries[entry.slab]
            self.slab_to_slot[entry.slab] = -1
            self.bad[entry.slab] = False
            self._spare.pop(entry.slab, None)
            self._wanted_at.pop(entry.slab, None)
            self._free.append(entry.slot)
            self.resident.add(-self.slot_nbytes)

    def ready_slabs(self) -> list[tuple[int, int, Slab | None]]:
        """Every ready slab as ``(slab, slot, entry)``; the entry is None for a slab kept without one."""
        out = []
        for slab in np.flatnonzero(self.slab_to_slot >= 0).tolist():
            entry = self.entries.get(slab)
            if entry is None or entry.state == READY:
                out.append((slab, int(self.slab_to_slot[slab]), entry))
        return out

    def _evict(self) -> int | None:
        # Both orders hold unpinned slabs only (pin() takes a slab out of them), hence ready ones.
        if self._spare:
            slab, _ = self._spare.popitem(last=False)
            return self._drop(slab)
        while self._wanted:
            neg_use, _, slab = heapq.heappop(self._wanted)
            if self._wanted_at.get(slab) == -neg_use:
                del self._wanted_at[slab]
                return self._drop(slab)
        return None

    def _drop(self, slab: int) -> int:
        self.entries.pop(slab, None)
        slot = int(self.slab_to_slot[slab])
        self.slab_to_slot[slab] = -1
        self.bad[slab] = False
        return slot


def allocate_arena(geom: ArrayGeometry, n_slots: int, spec: SlabSpec | None = None) -> np.ndarray:
    """An uninitialised heap arena: pages are only committed as slots are written.

    A private anonymous mapping, with no huge-page hint. Measured on the 2-core
    reference machine (decoding zstd chunks into a fresh arena, two threads):
    a private mapping filled at ~70% of the speed of refilling warm memory; a
    shared anonymous mapping (what ``mmap.mmap(-1, n)`` gives by default) pays
    shmem page faults and filled at ~20%; ``np.empty`` and ``MADV_HUGEPAGE``,
    which ask for transparent huge pages, filled at ~30%, since the kernel
    compacts memory on first touch (THP defrag "madvise"). The mapping is
    returned to the OS when the arena dies.
    """
    sample_shape, dtype = (geom.sample_shape, geom.dtype) if spec is None else (spec.sample_shape, spec.dtype)
    shape = (n_slots * geom.chunk_len, *sample_shape)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = max(1, count * dtype.itemsize)
    if hasattr(mmap, "MAP_PRIVATE"):
        buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    else:  # Windows: anonymous mappings are private pagefile-backed memory already
        buf = mmap.mmap(-1, nbytes)
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


class ChunkPool:
    """Per-array slot pools under one byte budget, shared by every view of a dataset.

    A pass never waits for a slot: a slab the pool cannot take is streamed
    (:mod:`insitu.engine.scatter`).
    """

    def __init__(self, arrays: dict[str, ArrayPool], budget_bytes: int, *, heap_arenas: bool = True) -> None:
        self.arrays = arrays
        self.budget_bytes = budget_bytes
        self.heap_arenas = heap_arenas  # False: memory-mapped files of a persisted cache
        self.prefaulter: ArenaPrefaulter | None = None
        self._resident = ResidentBytes(sum(p.slots_in_use * p.slot_nbytes for p in arrays.values()))
        for p in arrays.values():
            p.resident = self._resident

    def start_prefault(self) -> None:
        """Commit fresh heap-arena pages ahead of the decoders, in idle CPU time (see
        :mod:`insitu.engine.prefault`); once, and never for a persisted cache's file arenas."""
        if self.heap_arenas and self.prefaulter is None:
            self.prefaulter = ArenaPrefaulter(list(self.arrays.values()))

    def stop_prefault(self) -> None:
        """Stop committing arena pages ahead of the decoders (never blocks)."""
        if self.prefaulter is not None:
            self.prefaulter.stop()

    @property
    def resident_bytes(self) -> int:
        """Bytes of slots holding (or loading) a slab."""
        return self._resident.now

    @property
    def peak_resident_bytes(self) -> int:
        """The most bytes of slots ever held at once."""
        return self._resident.peak
