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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from zarr.abc.store import Store

from insitu.arrays.chunk_units import ChunkUnits
from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.labels import ArrayOutputs, Labels
from insitu.arrays.statics import read_statics
from insitu.arrays.transforms import SlabSpec
from insitu.engine.cache import PersistentCache, metadata_digest, store_digest
from insitu.engine.gather import BatchTransform, Gatherer
from insitu.engine.loader import Engine, EngineSettings
from insitu.engine.passes import PassService
from insitu.engine.patch_gather import PatchGatherer
from insitu.engine.patch_summaries import SummaryCache
from insitu.engine.pool import ChunkPool
from insitu.engine.residency import open_pool
from insitu.errors import ConfigError
from insitu.options import BadChunkPolicy, CacheOptions, ReadOptions
from insitu.plan.budget import MemoryPlan, auto_budget, plan_memory
from insitu.plan.limits import check_fits
from insitu.plan.memory_model import PassFootprint, arena_bytes, pass_footprint
from insitu.plan.patch_plans import PatchPlans, scaled_reads
from insitu.plan.patches_spec import PatchGrid
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


@dataclass(frozen=True)
class PatchPool:
    """What a dataset sampling patches pools: each array one stored chunk per slot
    (:class:`~insitu.arrays.chunk_units.ChunkUnits`), the slot each chunk makes after its chunk
    transforms, what one patch row of each label is, and the patch grid the gatherer places
    patches on."""

    units: dict[str, ChunkUnits]
    specs: dict[str, SlabSpec]
    label_specs: dict[str, SlabSpec]
    grid: PatchGrid


def size_patch_pool(
    labels: Labels,
    outputs: ArrayOutputs,
    plans: PatchPlans,
    options: ReadOptions,
    cache: CacheOptions,
    *,
    world_size: int,
) -> tuple[PatchPool, MemoryPlan]:
    """The pool of a patch dataset: its arrays by chunk, and slots per array for the budget's
    share of their chunks, never fewer than the chunks the blocks in flight of any split's pass
    pin at once (a chunk cannot be streamed; arena pages are committed only as slots fill, so
    those slots cost memory only while a pass holds them)."""
    units: dict[str, ChunkUnits] = {}
    specs: dict[str, SlabSpec] = {}
    for path, g in labels.pooled.items():
        unit = units[path] = ChunkUnits.of(g)
        out = outputs.specs[path]
        if out.sample_shape != g.sample_shape:
            raise ConfigError(
                f"the chunk transforms of array {path!r} change its samples from {g.sample_shape} to "
                f"{out.sample_shape}; patches are placed on the stored array, so only transforms that "
                "keep the shape (CF decoding, casts, normalisation) can run with patch="
            )
        specs[path] = SlabSpec((1, *unit.chunk_shape), out.dtype)
    need = {path: arena_bytes(specs[path], -(-u.n_slabs // world_size)) for path, u in units.items()}
    static_bytes = sum(outputs.static_nbytes.values())
    budget = (
        auto_budget(need, static_bytes)
        if cache.budget_bytes is None
        else max(0, cache.budget_bytes - static_bytes)
    )
    total = sum(need.values())
    window = patch_window_slots(plans, options, world_size=world_size)
    slots = {}
    for path, u in units.items():
        share = budget if total == 0 else budget * need[path] / total
        slots[path] = int(min(u.n_slabs, max(window[path], share // max(1, specs[path].nbytes))))
    memory = MemoryPlan(budget, slots)
    grid = plans.grid
    gather_specs = {}
    for g in labels.sampled:  # one patch row of each label (at its own resolution)
        scale, box = scaled_reads(grid, labels.sampled[0], g)
        read = grid.read_shape if all(k == 1 for k in scale) else box
        gather_specs[g.label] = SlabSpec((1, *(read[d] for d in grid.delivered_axes)), specs[g.path].dtype)
    held = PassFootprint(
        arenas=sum(arena_bytes(specs[p], slots[p]) for p in specs),
        batch_bytes={label: spec.sample_nbytes * options.batch_size for label, spec in gather_specs.items()},
        batches=1 + options.prefetch,
        readahead=0,
        largest_slab=max((spec.nbytes for spec in specs.values()), default=0),
    )
    check_fits(held, units, specs, options, pool_in_memory=cache.cache_dir is None)
    return PatchPool(units, specs, gather_specs, grid), memory


def patch_window_slots(plans: PatchPlans, options: ReadOptions, *, world_size: int) -> dict[str, int]:
    """Per array, the most chunks any split's first-epoch pass pins at once with the read-ahead
    asked for (the blocks of one batch and ``readahead_blocks`` more), plus a margin for other
    epochs' blocks, whose shapes are the same but whose halos differ."""
    found: dict[str, int] = {}
    for split in plans.manifest.names:
        plan = plans.get(split, split == "train" and options.shuffle, 0, rank=0, world_size=world_size)
        window = min(plan.n_blocks, plan.batch_span + options.readahead_blocks + 1)
        for path in plan.arrays:
            found[path] = max(found.get(path, 0), plan.max_slots(path, window))
    return {path: n + -(-n // 8) for path, n in found.items()}


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
    patches: PatchPool | None = None,
) -> EngineParts:
    """Pool (or persisted cache), engine, static fields, gatherer, restored slabs and the iteration
    service: in that order, and a step that fails releases what the steps before it hold. With
    ``patches``, the arrays are pooled by chunk and batches gathered as patches."""
    chains = outputs.chains
    pooled: Mapping[str, ArrayGeometry] = labels.pooled if patches is None else patches.units
    specs = outputs.specs if patches is None else patches.specs
    with contextlib.ExitStack() as undo:
        pool, persisted = open_pool(store, pooled, specs, memory, cache, chains.transforms)
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
        gatherer = (
            Gatherer(
                pool,
                labels.sampled,
                batch_transforms,
                statics=static_values,
                sample_coord=labels.sample_coord(),
            )
            if patches is None
            else PatchGatherer(
                pool,
                labels.sampled,
                patches.grid,
                batch_transforms,
                statics=static_values,
                static_geoms={g.label: g for g in labels.statics},
                sample_coord=labels.sample_coord(),
                patch_coords=labels.patch_coords(patches.grid.named),
            )
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


def weighted_summaries(
    store: Store, plans: PatchPlans, specs: Mapping[str, SlabSpec], cache: CacheOptions
) -> SummaryCache:
    """The summary source of a weighted draw, after checking its array: read as stored (the
    summaries are), and integer for a class balance."""
    weighting, geom = plans.weighting, plans.weighting_label
    if weighting is None or geom is None:
        raise RuntimeError("internal error: summaries asked for a dataset without a weighted draw")
    option = "balance" if weighting.mode == "balance" else "patch_weights"
    delivered = np.dtype(specs[geom.label].dtype)
    if delivered != np.dtype(geom.dtype):
        raise ConfigError(
            f"{option}={weighting.label!r}: the array is delivered as {delivered} but stored as {geom.dtype} "
            f"(CF decoding or a chunk transform); weights are read as stored: pass "
            f"cf_decode={{{geom.name!r}: False}} or drop the transform on it"
        )
    if weighting.mode == "balance" and delivered.kind not in "biu":
        raise ConfigError(
            f"balance={weighting.label!r}: the array holds {delivered}, not integers; balance needs class "
            "labels (an integer array)"
        )
    directory = cache.cache_dir
    summaries = SummaryCache(store, weighting, directory, rebuild=cache.rebuild)
    plans.use_summaries(summaries)
    return summaries
