"""The running parts of one dataset, assembled and released in order.

:func:`size_pool` decides how many slabs of each array the pool holds and
refuses what no pass could map; :func:`start_parts` then builds, in this
order, the pool (or the persisted cache's arenas), the engine, the static
fields (read once through the engine's fetcher), the gatherer, the slabs a
persisted cache restores, and the iteration service the views run passes
through. A step that fails releases what the steps before it hold (threads,
the cache directory's lock). :class:`EngineParts` releases them again, at
``close()`` or, without waiting for any thread, from a finaliser.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from zarr.abc.store import Store

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.labels import ArrayOutputs, Labels
from insitu.arrays.statics import read_statics
from insitu.engine.cache import PersistentCache, metadata_digest, store_digest
from insitu.engine.gather import BatchTransform, Gatherer
from insitu.engine.loader import Engine, EngineSettings
from insitu.engine.passes import PassService
from insitu.engine.pool import ChunkPool
from insitu.engine.residency import open_pool
from insitu.options import BadChunkPolicy, CacheOptions, ReadOptions
from insitu.plan.budget import MemoryPlan, plan_memory
from insitu.plan.limits import check_fits
from insitu.plan.memory_model import pass_footprint
from insitu.plan.splits import SplitManifest
from insitu.store.loop import get_loop, in_loop_thread, loop_exited, run_sync
from insitu.store.retry import RetryPolicy


def size_pool(
    labels: Labels,
    outputs: ArrayOutputs,
    manifest: SplitManifest,
    options: ReadOptions,
    cache: CacheOptions,
    *,
    world_size: int,
    n_samples: int,
) -> MemoryPlan:
    """The pool's budget and slots per array (:func:`~insitu.plan.budget.plan_memory`), after
    refusing, by name, a batch, a slab or a pool no pass could map (``n_samples``: the most
    samples a pass can deliver)."""
    arrays = labels.pooled
    memory = plan_memory(
        arrays,
        outputs.specs,
        labels.sampled,
        manifest,
        world_size=world_size,
        given=cache.budget_bytes,
        statics=outputs.static_nbytes,
    )
    held = pass_footprint(arrays, outputs.specs, labels.sampled, memory.slots, options, n_samples=n_samples)
    check_fits(held, arrays, outputs.specs, options, pool_in_memory=cache.cache_dir is None)
    return memory


@dataclass
class EngineParts:
    """What a dataset runs on: the pool and its persisted cache (if any), the engine, the static
    fields' values, the gatherer, and the iteration service the views use."""

    pool: ChunkPool
    cache: PersistentCache | None
    engine: Engine
    static_values: dict[str, np.ndarray]
    gatherer: Gatherer
    passes: PassService

    def close(self) -> None:
        """Stop the engine's tasks and threads and the gatherer, then save a persistent cache (the
        slabs that finished loading). From the loop's own thread it only signals them (as
        :meth:`abandon`), and after the loop has stopped (an exit handler) it waits for none."""
        if in_loop_thread():
            self.abandon()
            return
        if loop_exited():  # close() from an exit handler that ran after the loop stopped
            self.engine.abandon()
            self.gatherer.shutdown(wait=False)
        else:
            run_sync(self.engine.aclose())
            self.engine.shutdown_threads()
            self.gatherer.shutdown()
        if self.cache is not None:
            try:
                self.cache.save(self.pool)
            finally:
                self.cache.release()

    def abandon(self) -> None:
        """Release without waiting for or starting any thread (finalisers, the loop thread).

        A persistent cache is not saved: its index was removed when this run
        adopted it, so the next run starts from an empty, never a wrong, cache."""
        self.engine.abandon()
        self.gatherer.shutdown(wait=False)
        if self.cache is not None:
            self.cache.release()


def start_parts(
    store: Store,
    labels: Labels,
    outputs: ArrayOutputs,
    memory: MemoryPlan,
    *,
    options: ReadOptions,
    cache: CacheOptions,
    on_bad_chunk: BadChunkPolicy,
    retry: RetryPolicy,
    decoders: Sequence[str] | None,
    batch_transforms: Sequence[BatchTransform],
) -> EngineParts:
    """Pool (or persisted cache), engine, static fields, gatherer, restored slabs and the iteration
    service: in that order, and a step that fails releases what the steps before it hold."""
    chains = outputs.chains
    with contextlib.ExitStack() as undo:
        pool, persisted = open_pool(store, labels.pooled, outputs.specs, memory, cache, chains.transforms)
        if persisted is not None:
            undo.callback(persisted.release)
        settings = EngineSettings(
            max_inflight=options.max_inflight,
            decode_threads=options.decode_threads,
            on_bad_chunk=on_bad_chunk,
            retry=retry,
            decoders=decoders,
            track_sources=cache.persist,
        )
        engine = Engine(
            store,
            pool,
            get_loop(),
            settings,
            chunk_transforms=chains.transforms,
            error_fills=chains.error_fills,
        )
        undo.callback(engine.shutdown_threads)
        static_values = run_sync(read_statics(store, engine.fetcher, labels.statics, chains.transforms))
        gatherer = Gatherer(
            pool,
            labels.sampled,
            batch_transforms,
            statics=static_values,
            sample_coord=labels.sample_coord(),
        )
        undo.callback(gatherer.shutdown)
        if persisted is not None:
            run_sync(persisted.restore(pool, engine))
        passes = PassService(
            engine,
            gatherer,
            prefetch=options.prefetch,
            readahead_blocks=options.readahead_blocks,
            skip_bad=on_bad_chunk is BadChunkPolicy.SKIP,
            drop_last=options.drop_last,
        )
        undo.pop_all()
    return EngineParts(pool, persisted, engine, static_values, gatherer, passes)


def identity_of_data(store: Store, geometries: Sequence[ArrayGeometry]) -> dict[str, str]:
    """What resume states record of the data: a digest of the store's identity and one of every
    read array's Zarr metadata (no read of the store)."""
    arrays = {g.path: metadata_digest(g.metadata) for g in geometries}
    return {"store": store_digest(store), "arrays": metadata_digest(arrays)}
