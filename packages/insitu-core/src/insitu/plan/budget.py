"""How big the decoded-chunk cache is: the ``"auto"`` budget, and its split across arrays.

What caching each array takes and how many slots a budget admits are answered by the memory
model (:mod:`insitu.plan.memory_model`); this module chooses the budget.

The pool is a cache for later passes, nothing more: a pass never waits for
pool slots, since a slab the pool cannot take is streamed into its batches
(:mod:`insitu.engine.scatter`). So the budget trades memory for the speed of every
pass after the first:

* ``"auto"`` (the default) caches the whole dataset when it fits in a quarter
  of the memory available to this process (``MemAvailable``, or a cgroup's
  limit when lower); a bigger dataset gets that quarter, and its later passes
  find that share of their slabs cached. The first pass costs the same either
  way; a dataset that fits is served from memory from the second pass on.
* ``0`` caches nothing: every pass streams, holding only its read-ahead
  (the least memory, the fastest single pass; every pass reads and decodes
  again).
* any other number of bytes caches up to that many.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transforms import SlabSpec
from insitu.errors import ConfigError
from insitu.plan.limits import address_space_left
from insitu.plan.memory_model import dataset_bytes, slots_per_array
from insitu.plan.splits import SplitManifest

logger = logging.getLogger("insitu")

#: The share of available memory an ``"auto"`` cache may take.
AUTO_FRACTION = 0.25
#: The cap used when available memory cannot be read (not Linux, no /proc).
FALLBACK_CAP = 1 << 30


def available_memory() -> int | None:
    """Bytes of memory this process could still use: ``MemAvailable``, lowered to what a cgroup
    (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) leaves; None where neither can be read."""
    found: list[int] = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except OSError:
        pass
    for limit, usage in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            cap = Path(limit).read_text().strip()
            used = int(Path(usage).read_text().strip())
        except (OSError, ValueError):
            continue
        if cap.isdigit() and int(cap) < 1 << 60:  # "max" or a huge number: no limit
            found.append(max(0, int(cap) - used))
    return min(found) if found else None


def auto_budget(need: Mapping[str, int], static_bytes: int = 0) -> int:
    """The ``"auto"`` budget for a dataset needing ``need`` bytes per array (static fields aside):
    a quarter of the memory available, or of the address space left under ``ulimit -v`` when less."""
    available = available_memory()
    address = address_space_left()
    if address is not None:
        available = address.nbytes if available is None else min(available, address.nbytes)
    cap = FALLBACK_CAP if available is None else int(available * AUTO_FRACTION)
    total = sum(need.values())
    budget = max(0, min(total, cap - static_bytes))
    if budget < total:
        logger.info(
            "cache_budget_bytes='auto': the dataset's %d MB of decoded slabs exceed %d MB (a quarter of "
            "the memory available); caching that much, later passes read the rest again",
            total >> 20,
            budget >> 20,
        )
    return budget


@dataclass(frozen=True)
class MemoryPlan:
    """What the pool may hold: ``budget_bytes`` in all, as ``slots`` slabs per array path."""

    budget_bytes: int
    slots: dict[str, int]


def plan_memory(
    arrays: Mapping[str, ArrayGeometry],
    specs: Mapping[str, SlabSpec],
    labels: Sequence[ArrayGeometry],
    manifest: SplitManifest,
    *,
    world_size: int,
    given: int | None,
    statics: Mapping[str, int],
) -> MemoryPlan:
    """The pool's budget and its split across arrays: ``given`` bytes (``None``: ``"auto"``) less
    what the static fields (``{label: bytes}``) keep resident for the dataset's life."""
    static_bytes = sum(statics.values())
    need = dataset_bytes(arrays, specs, labels, manifest, world_size)
    if given is None:
        budget = auto_budget(need, static_bytes)
    else:
        budget = max(0, given - static_bytes)
        if statics and 0 < given <= static_bytes:
            raise ConfigError(
                f"static field(s) {sorted(statics)} take {static_bytes} bytes, the whole "
                f"cache_budget_bytes={given}; raise the budget, select a region, or pass 0 to cache "
                "nothing but the static fields"
            )
    return MemoryPlan(budget, slots_per_array(arrays, specs, budget, need))


__all__ = [
    "AUTO_FRACTION",
    "MemoryPlan",
    "auto_budget",
    "available_memory",
    "plan_memory",
]
