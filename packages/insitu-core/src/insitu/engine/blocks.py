"""The blocks of a pass that are live: produced, not yet released.

A block becomes live when the producer reaches it: it pins the slabs it
needs that are resident (or loading), reserves slots for the others, and
streams those the pool will not take straight into its batch rows. The
emitter waits for its loads, reads where its streamed rows went, and releases
it after its last batch is gathered, each pinned slab going back to the pool
with its next use in the pass as its eviction priority.

A :class:`LiveBlock` holds everything one block keeps in that time, so a pass
of a million blocks costs nothing up front and a block's state leaves in one
piece.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from insitu.engine.pool import FAILED, READY, ArrayPool, BlockWaiter, Slab
from insitu.plan.reads import ArrayNeeds


def find_slabs(ids: np.ndarray, slabs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Look each of ``slabs`` up in the sorted, non-empty ``ids``: its index there (clamped to the
    last, so it is a valid index even where the slab is absent) and whether it is there."""
    at = np.minimum(np.searchsorted(ids, slabs), len(ids) - 1)
    return at, ids[at] == slabs


@dataclass(eq=False, slots=True)
class StreamedSlabs:
    """The slabs of one array a block streams into its batch rows: sorted ``ids``, their entries."""

    ids: np.ndarray
    entries: list[Slab]
    # The bad flags, worked out on the first ask: every batch the block feeds asks, once its loads
    # are done, and a block of 1,024 one-sample slabs feeds 32 batches of 32.
    _bad: np.ndarray | None = field(default=None, init=False, repr=False)
    _bad_known: bool = field(default=False, init=False, repr=False)

    def locate(self, slabs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each of ``slabs`` is among the streamed ones, and whether it is one (see :func:`find_slabs`)."""
        return find_slabs(self.ids, slabs)

    def bad_flags(self) -> np.ndarray | None:
        """Per streamed slab, whether it holds a filled-in bad chunk; None when none does. Ask once
        the block's loads are done: the answer is kept from then on."""
        if not self._bad_known:
            flags = np.fromiter((e.bad for e in self.entries), dtype=bool, count=len(self.entries))
            self._bad = flags if flags.any() else None
            self._bad_known = True
        return self._bad


@dataclass(eq=False, slots=True)
class LiveBlock:
    """One block between the producer and its release: the slabs it pinned, those it streams,
    and the waiter the emitter awaits until its loads are done."""

    index: int
    # Per array, in the order of the block's needs (so releasing pairs each with its next use);
    # None: streamed, or not pinned yet when the producer stopped.
    pinned: dict[str, list[Slab | None]] = field(default_factory=dict)
    streams: dict[str, StreamedSlabs] = field(default_factory=dict)
    waiter: BlockWaiter | None = None

    def pin_resident(self, path: str, apool: ArrayPool, slabs: list[int]) -> list[int]:
        """Pin those of ``slabs`` that are resident (or loading), before any slot is reserved, so
        reserving cannot evict them; returns the positions in ``slabs`` of the missing ones."""
        held: list[Slab | None] = [None] * len(slabs)
        self.pinned[path] = held
        if not (apool.slab_to_slot[slabs] >= 0).any() and apool.entries.keys().isdisjoint(slabs):
            return list(range(len(slabs)))  # none resident nor loading (a cold pass): no lookup each
        missing = []
        for i, s in enumerate(slabs):
            e = apool.get(s)
            if e is None:
                missing.append(i)
            else:
                apool.pin(e)
                held[i] = e
        return missing

    def reserve_missing(
        self,
        path: str,
        apool: ArrayPool,
        slabs: list[int],
        missing: list[int],
        next_use: list[int] | None,
        *,
        evict: bool = False,
    ) -> tuple[list[Slab], list[int]]:
        """Reserve and pin a slot for each missing slab, evicting for one only when this pass needs
        it again later (``next_use``; None: no slab is needed twice) or ``evict`` says so, else
        taking a free slot only. Returns the entries to load into the pool and the slabs it has no
        slot for."""
        held = self.pinned[path]
        if apool.free_slots >= len(missing):  # a slot for each without evicting (a cold pass)
            # Pinned twice at once: the load's pin (its completion releases it) and the block's.
            taken = apool.reserve_free([slabs[i] for i in missing], pins=2)
            for i, slab in zip(missing, taken, strict=True):
                held[i] = slab
            return taken, []
        if not apool.free_slots and not evict and (next_use is None or all(next_use[i] < 0 for i in missing)):
            return [], [slabs[i] for i in missing]  # no slot to take nor to evict for: all streamed
        fresh: list[Slab] = []
        streamed: list[int] = []
        for i in missing:
            s = slabs[i]
            e = apool.reserve(s, evict=evict or (next_use is not None and next_use[i] >= 0), pins=2)
            if e is None:
                streamed.append(s)
                continue
            fresh.append(e)
            held[i] = e
        return fresh, streamed

    def entries(self) -> list[Slab]:
        """Every slab the block reads from: the pinned ones, then the streamed ones (in that order,
        so the first failed one is the error the block raises)."""
        entries = [e for held in self.pinned.values() for e in held if e is not None]
        entries += [e for stream in self.streams.values() for e in stream.entries]
        return entries

    def watch(self, loop: asyncio.AbstractEventLoop) -> BlockWaiter | None:
        """Set (and return) the block's waiter: one for every slab not ready yet (None: all ready)."""
        loading = [e for e in self.entries() if e.state != READY]
        if not loading:
            return None
        waiter = self.waiter = BlockWaiter(loop.create_future(), len(loading))
        for e in loading:
            if e.state == FAILED:
                waiter.slab_done(e)
            else:
                if isinstance(e.waiters, list):
                    e.waiters.append(waiter)
                else:  # the first block to wait for it
                    e.waiters = [waiter]
        return waiter

    def forget_settled_waiters(self) -> None:
        """Drop the waiters already settled from the slabs this block reads (a settled waiter of a
        failed block holds its error; a slab still loading must not keep that error alive)."""
        for e in self.entries():
            if e.waiters:
                e.waiters = [w for w in e.waiters if not w.future.done()] or ()

    def take_waiter(self) -> BlockWaiter | None:
        """The waiter, handed over once (the emitter awaits it; nothing else needs it after)."""
        waiter, self.waiter = self.waiter, None
        return waiter

    def release(self, pools: Mapping[str, ArrayPool], needs: Mapping[str, ArrayNeeds]) -> None:
        """Unpin every slab the block pinned, each with the next block of the pass that needs it."""
        b = self.index
        for path, entries in self.pinned.items():
            array_needs = needs[path]
            apool = pools[path]
            if array_needs.next_use is None:  # no slab of this epoch is needed by two blocks
                for e in entries:
                    if e is not None:
                        apool.unpin(e, None)
                continue
            lo = int(array_needs.starts[b])
            nexts = array_needs.next_use[lo : lo + len(entries)].tolist()
            for e, nu in zip(entries, nexts, strict=True):
                if e is not None:  # None: the producer was cancelled before pinning it
                    apool.unpin(e, nu if nu >= 0 else None)
