"""Where decoded slabs live: fresh arenas in memory, or the arenas of a persisted cache
directory (restored from an earlier run, saved at ``close()``)."""

from __future__ import annotations

from collections.abc import Mapping

from zarr.abc.store import Store

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transforms import ChunkTransform, SlabSpec
from insitu.engine.cache import PersistentCache
from insitu.engine.pool import ArrayPool, ChunkPool, allocate_arena
from insitu.options import CacheOptions
from insitu.plan.budget import MemoryPlan


def open_pool(
    store: Store,
    arrays: Mapping[str, ArrayGeometry],
    specs: Mapping[str, SlabSpec],
    memory: MemoryPlan,
    options: CacheOptions,
    transforms: Mapping[str, tuple[ChunkTransform, ...]],
) -> tuple[ChunkPool, PersistentCache | None]:
    """The pool of ``arrays`` sized by ``memory``, with its persisted cache when ``options`` name a
    directory (the cache holds that directory's lock until released)."""
    cache = None
    if options.cache_dir is not None:
        cache = PersistentCache(options, store, arrays, specs, memory.slots, transforms)
        arenas = cache.arenas
    else:
        arenas = {path: allocate_arena(g, memory.slots[path], specs[path]) for path, g in arrays.items()}
    pools = {path: ArrayPool(g, memory.slots[path], arenas[path], specs[path]) for path, g in arrays.items()}
    # Heap arenas only may be committed ahead (a persisted cache's arenas are files).
    return ChunkPool(pools, memory.budget_bytes, heap_arenas=cache is None), cache
