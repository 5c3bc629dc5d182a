"""``InSituDataset``: the user-facing engine, owning the pool, the loader and the views.

The constructor's keywords are the public contract; they are validated once
into option objects (:mod:`insitu.options`) that the engine, the order and
the views read. A dataset is usable without ``close()``: a script that never
closes it exits promptly, since finalisers only signal the engine's threads
and never start or wait for one.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from zarr.abc.store import Store

from insitu.arrays.chains import ChunkChains, check_nan_fill, chunk_chains
from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.labels import resolve_labels
from insitu.arrays.lazycoords import LazyCoords, LazyValues
from insitu.arrays.statics import read_statics, static_spec
from insitu.arrays.transforms import ChunkTransform, SlabSpec, output_spec
from insitu.batch import Batch
from insitu.engine.cache import metadata_digest, store_digest
from insitu.engine.concurrency import LimitChange
from insitu.engine.gather import BatchTransform, Gatherer, batch_transform_chain
from insitu.engine.loader import Engine
from insitu.engine.residency import open_pool
from insitu.errors import ConfigError, DatasetClosedError
from insitu.options import (
    DEFAULT_CACHE_BUDGET,
    BadChunkPolicy,
    cache_options,
    check_rank,
    read_options,
    shard_options,
)
from insitu.plan.anchors import anchor_range, unused_anchors
from insitu.plan.budget import MemoryPlan, plan_memory
from insitu.plan.elastic import Segment
from insitu.plan.limits import check_fits
from insitu.plan.plans import EpochPlans
from insitu.plan.reads import EpochPlan
from insitu.plan.resume_state import STATE_FORMAT
from insitu.plan.splits import SplitManifest
from insitu.stats import CacheChecks, PassReport, Stats
from insitu.stats import logger as stats_logger
from insitu.store.capabilities import RetriesItself
from insitu.store.loop import get_loop, in_loop_thread, loop_exited, run_sync
from insitu.store.opener import open_store, redact_urls
from insitu.store.retry import RetryPolicy
from insitu.views import DatasetView, ViewIterator

logger = logging.getLogger("insitu")

__all__ = ["DEFAULT_CACHE_BUDGET", "STATE_FORMAT", "DatasetView", "InSituDataset"]


class InSituDataset:
    """Shuffled, split-aware batches read in place from a Zarr store.

    One instance owns one chunk pool (cache and batch-assembly buffer) that
    every view shares. Each parameter is validated here and a bad value is a
    :class:`~insitu.errors.ConfigError` naming it. Use it as a context manager
    (or call :meth:`close`) to release its threads and flush a persistent
    cache at a known point; without that, it is released when collected.

    Parameters
    ----------
    store
        A zarr Store, or a path or URL for :func:`~insitu.open_store`.
    manifest
        The splits (:func:`~insitu.split_by_chunk`, :func:`~insitu.split_by_coord`); its
        sample axis is the one every sampled array is read along.
    geometries
        The labels to deliver (``{label: geometry}`` or a sequence, shifted windows included);
        ``None``: every array of the store. Arrays without the sample dimension are static
        fields, read once and delivered whole with every batch.
    batch_size
        Samples per batch.
    block_chunks
        Chunks shuffled together in one block: the shuffle-quality dial. Residency is about two
        blocks.
    max_inflight
        The most store reads in flight: a cap under which the engine picks the number itself
        (starting at 32). 512 lets one-sample chunks 100 ms away keep two decoders busy; the
        read-ahead's byte cap bounds what that many reads hold.
    seed
        The shuffle seed; with the epoch (:meth:`set_epoch`) it fixes each epoch's order.
    shuffle
        Whether the ``train`` view shuffles (other splits are always read in order).
    prefetch
        Batches assembled ahead of the consumer.
    drop_last
        Drop a short last batch.
    cache_budget_bytes
        Decoded bytes the pool may cache: ``"auto"`` (the whole dataset when it fits in a quarter
        of the available memory, else that quarter), ``0`` (nothing: every pass streams) or a
        byte count.
    cache_dir
        A directory for memory-mapped arenas instead of anonymous memory.
    persist
        ``True`` keeps decoded chunks in ``cache_dir`` across runs (a cache of other data raises
        ``StaleCacheError``; a slab whose source changed is read again); ``"rebuild"`` rebuilds
        what does not match instead of raising.
    on_bad_chunk
        A chunk that cannot be read or decoded: ``"raise"``, ``"nan"`` (filled with NaN) or
        ``"skip"`` (its samples dropped); the last two count it in :attr:`stats`.
    chunk_transforms
        Applied to each decoded chunk before it enters the pool: a sequence for every array, or
        ``{array: sequence}``; configurations (``{"name": ...}``) resolve through the registry.
    batch_transforms
        Applied to each assembled :class:`~insitu.Batch`, in order.
    rank
        The rank the views read by default, in ``[0, world_size)``.
    world_size
        The number of ranks the views are sharded across by default: disjoint chunks per rank,
        equal batch counts.
    uneven
        How ranks with unequal sample counts are evened: ``"drop"`` (every rank stops at the
        shortest's count) or ``"pad"`` (a rank repeats its own samples; batches carry ``valid``).
    decode_threads
        Decode workers; ``None``: one per CPU.
    readahead_blocks
        Blocks loaded ahead of the batch being assembled.
    retry
        The retry policy for transient store errors (a store that retries itself keeps its own).
    decoders
        Names of registered decoders to try, in order; ``None``: all. An array none of them
        handles is read through zarr's own codec pipeline.
    cf_decode
        Apply CF decoding (scale, offset, fill values, valid range) to arrays that carry CF
        attributes: for all, or ``{array: bool}``.
    """

    def __init__(
        self,
        store: Store | str,
        manifest: SplitManifest,
        geometries: Mapping[str, ArrayGeometry] | Sequence[ArrayGeometry] | None = None,
        *,
        batch_size: int = 32,
        block_chunks: int = 16,
        max_inflight: int = 512,
        seed: int = 0,
        shuffle: bool = True,
        prefetch: int = 2,
        drop_last: bool = False,
        cache_budget_bytes: int | str = DEFAULT_CACHE_BUDGET,
        cache_dir: str | os.PathLike[str] | None = None,
        persist: bool | str = False,
        on_bad_chunk: str = "raise",
        chunk_transforms: Sequence[ChunkTransform] | Mapping[str, Sequence[ChunkTransform]] = (),
        batch_transforms: Sequence[BatchTransform] = (),
        rank: int = 0,
        world_size: int = 1,
        uneven: str = "drop",
        decode_threads: int | None = None,
        readahead_blocks: int = 2,
        retry: RetryPolicy | None = None,
        decoders: Sequence[str] | None = None,
        cf_decode: bool | Mapping[str, bool] = True,
    ) -> None:
        self._closed = True  # until construction succeeds: a half-built dataset has nothing to release
        self.options = read_options(
            batch_size=batch_size,
            block_chunks=block_chunks,
            max_inflight=max_inflight,
            prefetch=prefetch,
            readahead_blocks=readahead_blocks,
            decode_threads=decode_threads,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
        )
        self.cache_options = cache_options(
            budget_bytes=cache_budget_bytes, cache_dir=cache_dir, persist=persist
        )
        self.sharding = shard_options(rank=rank, world_size=world_size, uneven=uneven)
        self.on_bad_chunk = BadChunkPolicy.parse(on_bad_chunk)
        given_retry = retry
        retry = _checked_inputs(manifest, retry)
        batch_transforms = batch_transform_chain(batch_transforms)
        self.store = store if isinstance(store, Store) else open_store(store)
        _check_retry_owner(self.store, given_retry)
        self.manifest = manifest
        # Discovery (geometries=None) reads metadata under the same policy as the chunks.
        labels = resolve_labels(self.store, geometries, _sample_axis_of(manifest), given_retry)
        self.labels, self.statics, self.sample_dim = labels.sampled, labels.statics, labels.sample_dim
        self.anchor_range = anchor_range(self.labels, manifest)
        self.unused_anchors = unused_anchors(manifest, self.anchor_range, self.labels)
        arrays = labels.pooled
        chains = chunk_chains(chunk_transforms, cf_decode, [*arrays.values(), *self.statics], labels.every)
        if self.on_bad_chunk is BadChunkPolicy.NAN:
            check_nan_fill(list(arrays.values()), chains)
        specs = {path: output_spec(g, chains.of(path)) for path, g in arrays.items()}
        self.label_specs: dict[str, SlabSpec] = {g.label: specs[g.path] for g in self.labels}
        statics = {g.label: static_spec(g, chains.of(g.path)).nbytes for g in self.statics}
        given = self.cache_options.budget_bytes
        memory = plan_memory(
            arrays, specs, self.labels, manifest, world_size=self.world_size, given=given, statics=statics
        )
        in_memory = self.cache_options.cache_dir is None
        check_fits(
            arrays,
            specs,
            self.labels,
            memory.slots,
            self.options,
            n_samples=self.anchor_range[1] - self.anchor_range[0],
            pool_in_memory=in_memory,
        )
        self._plans = EpochPlans(manifest, self.labels, self.anchor_range, self.options, self.sharding)
        self._start_lifetime()
        self._start(arrays, specs, memory, chains, retry, decoders, batch_transforms)
        self._closed = False

    def _start(
        self,
        arrays: Mapping[str, ArrayGeometry],
        specs: Mapping[str, SlabSpec],
        memory: MemoryPlan,
        chains: ChunkChains,
        retry: RetryPolicy,
        decoders: Sequence[str] | None,
        batch_transforms: Sequence[BatchTransform],
    ) -> None:
        """Pool (or persisted cache), engine, static fields, gatherer, restored slabs: in that order,
        and a step that fails releases what the steps before it hold (threads, the cache lock)."""
        with contextlib.ExitStack() as undo:  # a failed step releases what the steps before it hold
            self.pool, self._cache = open_pool(
                self.store, arrays, specs, memory, self.cache_options, chains.transforms
            )
            if self._cache is not None:
                undo.callback(self._cache.release)
            self.engine = self._start_engine(chains, retry, decoders)
            undo.callback(self.engine.shutdown_threads)
            self.static_values = run_sync(
                read_statics(self.store, self.engine.fetcher, self.statics, chains.transforms)
            )
            self.gatherer = Gatherer(
                self.pool,
                self.labels,
                batch_transforms,
                statics=self.static_values,
                sample_coord=self._sample_coord(),
            )
            undo.callback(self.gatherer.shutdown)
            if self._cache is not None:
                run_sync(self._cache.restore(self.pool, self.engine))
            undo.pop_all()

    def _start_lifetime(self) -> None:
        """What the dataset tracks over its life: epoch, callbacks, views and live iterators."""
        self._epoch = 0
        self._stats_callbacks: list[Callable[[PassReport], Any]] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()
        # Weak: an iterator dropped mid-epoch (``break``) is collected, and its finaliser unregisters it.
        self._iterators: weakref.WeakSet[ViewIterator] = weakref.WeakSet()
        self._views: dict[tuple[str, int, int], DatasetView] = {}

    def _start_engine(
        self, chains: ChunkChains, retry: RetryPolicy, decoders: Sequence[str] | None
    ) -> Engine:
        return Engine(
            self.store,
            self.pool,
            get_loop(),
            max_inflight=self.options.max_inflight,
            decode_threads=self.options.decode_threads,
            on_bad_chunk=self.on_bad_chunk,
            chunk_transforms=chains.transforms,
            retry=retry,
            decoders=decoders,
            track_sources=self.cache_options.persist,
            error_fills=chains.error_fills,
        )

    def _sample_coord(self) -> tuple[str, np.ndarray | LazyValues] | None:
        """The sample coordinate as batches carry it: maybe still being read (insitu.arrays.lazycoords)."""
        dim = self.sample_dim
        if dim is None:
            return None
        coords = self.labels[0].coords
        # A failed read stays lazy: its error is raised where the values are used, not here.
        ready = not isinstance(coords, LazyCoords) or (coords.ready and not coords.failed)
        values = coords.get(dim) if ready else LazyValues(coords, dim)
        return None if values is None else (dim, values)

    # -- the options users read back --------------------------------------------
    @property
    def batch_size(self) -> int:
        """Samples per batch (the last batch may be short unless ``drop_last``)."""
        return self.options.batch_size

    @property
    def block_chunks(self) -> int:
        """Chunks shuffled together in one block: the shuffle-quality dial (residency is about two blocks)."""
        return self.options.block_chunks

    @property
    def seed(self) -> int:
        """The shuffle seed; with the epoch, it fixes every epoch's order on every machine."""
        return self.options.seed

    @property
    def shuffle(self) -> bool:
        """Whether the ``train`` view shuffles (the other splits are always read in order)."""
        return self.options.shuffle

    @property
    def prefetch(self) -> int:
        """Batches assembled ahead of the consumer."""
        return self.options.prefetch

    @property
    def readahead_blocks(self) -> int:
        """Blocks loaded ahead of the batch being assembled."""
        return self.options.readahead_blocks

    @property
    def drop_last(self) -> bool:
        """Whether a short last batch is dropped."""
        return self.options.drop_last

    @property
    def rank(self) -> int:
        """The rank views read by default (0 when unsharded)."""
        return self.sharding.rank

    @property
    def world_size(self) -> int:
        """The number of ranks the split is sharded across by default (1: unsharded)."""
        return self.sharding.world_size

    @property
    def uneven(self) -> str:
        """How uneven ranks are evened: ``"drop"`` stops every rank at the shortest rank's sample count,
        ``"pad"`` repeats a rank's own samples (batches then carry a ``valid`` mask)."""
        return self.sharding.uneven

    @functools.cached_property
    def delivered_arrays(self) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
        """``{label: (sample shape, dtype)}`` of the arrays batches deliver, batch transforms
        included: found by running the batch transforms once on a batch of zeros of the pooled
        shapes (a framework adapter declares these before any data is read). A transform that
        fails on zeros leaves the description of the pooled arrays."""
        pooled: dict[str, tuple[tuple[int, ...], np.dtype[Any]]] = {
            label: (spec.sample_shape, spec.dtype) for label, spec in self.label_specs.items()
        }
        pooled |= {label: (v.shape[1:], v.dtype) for label, v in self.static_values.items()}
        transforms = self.gatherer.batch_transforms
        if not transforms:
            return pooled
        n = 2
        anchors = np.full(n, self.anchor_range[0], dtype=np.int64)
        data = {
            label: np.zeros((1 if label in self.static_values else n, *shape), dtype)
            for label, (shape, dtype) in pooled.items()
        }
        reads = {g.label: anchors + g.offset for g in self.labels}
        batch = Batch(data, anchors, reads, "describe", 0, 0, None, sample_dim=self.sample_dim)
        try:
            for t in transforms:
                batch = t(batch)
        except Exception:
            stats_logger.debug("batch transforms fail on zeros; describing the pooled arrays", exc_info=True)
            return pooled
        return {label: (tuple(np.shape(v)[1:]), np.asarray(v).dtype) for label, v in batch.items()}

    @property
    def coords(self) -> dict[str, np.ndarray]:
        """Coordinate values of every dimension the labels deliver (selections applied), and of
        the sample dimension (every sample). A dimension two labels select differently is left
        out: read it per label with :meth:`coords_of`."""
        found: dict[str, np.ndarray] = {}
        clash: set[str] = set()
        geoms = [*self.labels, *self.statics]
        for g in geoms:
            for dim in g.delivered_dims:
                values = g.coord(dim) if dim is not None else None
                if dim is None or values is None:
                    continue
                if dim in found and not np.array_equal(found[dim], values):
                    clash.add(dim)
                found.setdefault(dim, values)
        if self.sample_dim is not None and self.sample_dim in self.labels[0].coords:
            found[self.sample_dim] = self.labels[0].coords[self.sample_dim]
        return {d: v for d, v in found.items() if d not in clash}

    def label_coords(self, label: str) -> dict[str, np.ndarray]:
        """Deprecated spelling of :meth:`coords_of`."""
        warnings.warn(
            "InSituDataset.label_coords(label) is deprecated: use coords_of(label), as on a Batch",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.coords_of(label)

    def coords_of(self, label: str) -> dict[str, np.ndarray]:
        """Coordinate values of the dimensions of one delivered sample of ``label`` (static: of the
        delivered array), selection applied. ``batch.coords_of(label)`` gives the sample
        coordinate of each row of a batch."""
        for g in (*self.labels, *self.statics):
            if g.label == label:
                return {d: v for d in g.delivered_dims if d is not None and (v := g.coord(d)) is not None}
        raise ConfigError(
            f"unknown label {label!r}; labels are {[g.label for g in (*self.labels, *self.statics)]}"
        )

    # -- views ------------------------------------------------------------------
    def view(self, split: str, *, rank: int | None = None, world_size: int | None = None) -> DatasetView:
        """The view of one split (``"all"``: every split, in order), optionally for one rank.

        The same view object is returned for the same (split, rank, world size), so a state
        loaded into ``ds.train`` is where the next ``for batch in ds.train`` resumes."""
        if split != "all":
            self.manifest.check_split(split)
        rank = self.rank if rank is None else rank
        world_size = self.world_size if world_size is None else world_size
        check_rank(rank, world_size)
        key = (split, int(rank), int(world_size))
        with self._lock:
            view = self._views.get(key)
            if view is None:
                shuffle = self.shuffle and split == "train"
                view = self._views[key] = DatasetView(
                    self, split, shuffle=shuffle, rank=int(rank), world_size=int(world_size)
                )
        return view

    @property
    def train(self) -> DatasetView:
        """Shuffled training view."""
        return self.view("train")

    @property
    def val(self) -> DatasetView:
        """Deterministic validation view."""
        return self.view("val")

    @property
    def test(self) -> DatasetView:
        """Deterministic test view."""
        return self.view("test")

    @property
    def all(self) -> DatasetView:
        """Every sample of every split, in order."""
        return self.view("all")

    # -- epochs -------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch whose shuffle order the views use next (see :meth:`set_epoch`)."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose shuffle order the views use next."""
        if not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ConfigError(f"epoch must be a non-negative integer, got {epoch!r}")
        self._epoch = int(epoch)

    def plan(
        self,
        split: str,
        shuffle: bool,
        epoch: int | None = None,
        *,
        rank: int = 0,
        world_size: int = 1,
        resumed_from: tuple[Segment, ...] = (),
    ) -> EpochPlan:
        """The read plan of ``split`` for ``epoch`` (default: the current one) on one rank; with
        ``resumed_from``, of the rest the epoch's earlier segments at other world sizes left."""
        epoch = self._epoch if epoch is None else epoch
        return self._plans.get(
            split, shuffle, epoch, rank=rank, world_size=world_size, resumed_from=resumed_from
        )

    @functools.cached_property
    def data_identity(self) -> dict[str, str]:
        """What resume states record of the data they were made on: a digest of the store's identity
        and one of every read array's Zarr metadata (computed once; no read of the store)."""
        arrays = {g.path: metadata_digest(g.metadata) for g in (*self.labels, *self.statics)}
        return {"store": store_digest(self.store), "arrays": metadata_digest(arrays)}

    # -- statistics and lifetime -------------------------------------------------
    @property
    def stats(self) -> Stats:
        """A snapshot of the live counters (:class:`insitu.stats.Stats`, also readable as a mapping):
        reads, retries, bytes, decodes, hits and hit rate, bad/missing chunks, resident bytes, and,
        from the consumer's side, throughput and the fraction of time spent waiting for data
        (``stall_fraction``: near 0 means the model, not the loader, sets the pace)."""
        # Persisted slabs checked when this dataset opened: reused, dropped because their stored
        # bytes changed since, or dropped as damaged (persist="rebuild").
        checks = CacheChecks.from_counts(self._cache.counts) if self._cache is not None else CacheChecks()
        return Stats.from_records(*self.engine.counters(), checks)

    @property
    def inflight_trajectory(self) -> tuple[LimitChange, ...]:
        """How many requests the engine has allowed in flight to the store over this dataset's life:
        each change with its time (seconds from the first read), the new limit and why (``"rising"``,
        ``"latency"``, ``"probe"``; backoffs ``"throttled"``, ``"timeout"``, ``"retried"``,
        ``"error"``). Empty for local files, which are read in the decode threads."""
        return self.engine.inflight_trajectory()

    def add_stats_callback(self, callback: Callable[[PassReport], Any]) -> None:
        """Call ``callback(report)`` when each pass over a view ends (an epoch, or a pass stopped
        early by the iterator's ``close()``), on the consumer's thread: export to a metrics system here.
        A callback that raises is logged and skipped; training goes on."""
        if not callable(callback):
            raise ConfigError(f"a stats callback must be callable, got {callback!r}")
        self._stats_callbacks.append(callback)

    def remove_stats_callback(self, callback: Callable[[PassReport], Any]) -> None:
        """Stop calling a callback added with :meth:`add_stats_callback`."""
        self._stats_callbacks.remove(callback)

    def report_pass(self, report: PassReport) -> None:
        """Log one ended pass at INFO (``insitu.epoch``; WARNING when it met bad chunks) and hand it
        to the stats callbacks."""
        level = logging.WARNING if report.engine.get("bad_chunks", 0) else logging.INFO
        stats_logger.log(level, "%s", report.line())
        for callback in list(self._stats_callbacks):
            try:
                callback(report)
            except Exception:
                stats_logger.warning("stats callback %r failed; skipped", callback, exc_info=True)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran; views of a closed dataset cannot be iterated."""
        return self._closed

    def check_open(self) -> None:
        """Raise if the dataset cannot be read here: ``DatasetClosedError`` once closed, ``ConfigError``
        in a process forked after it was built."""
        if self._closed:
            raise DatasetClosedError("this InSituDataset is closed; create a new one to read again")
        if os.getpid() != self._pid:
            # Threads do not survive fork: the engine's loop and decode threads are the parent's.
            raise ConfigError(
                f"this InSituDataset was built in process {self._pid} and cannot be iterated in forked "
                f"process {os.getpid()}; build the dataset in the process that iterates it"
            )

    # -- iterators (called by ViewIterator) ---------------------------------------------------------
    def register(self, it: ViewIterator) -> None:
        """Track a new iterator (a closing dataset wakes every one). Any number may run at once:
        a pass never waits for pool slots, so iterators cannot starve each other."""
        with self._lock:
            self.check_open()
            self._iterators.add(it)

    def unregister(self, it: ViewIterator) -> None:
        """Stop tracking an iterator that has ended or been closed."""
        with self._lock:
            self._iterators.discard(it)

    # -- lifetime ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every running view, release threads and flush a persistent cache.

        Safe from any thread. From the engine's own loop thread (a callback, a
        finaliser running there) it signals everything to stop without waiting.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            iterators = list(self._iterators)
        for it in iterators:
            it.wake_closed()
        if in_loop_thread():
            self._abandon()
            return
        if loop_exited():  # close() from an exit handler that ran after the loop stopped
            self.engine.abandon()
            self.gatherer.shutdown(wait=False)
            if self._cache is not None:
                try:
                    self._cache.save(self.pool)  # the slabs that finished loading, as close() promises
                finally:
                    self._cache.release()
            return
        run_sync(self.engine.aclose())
        self.engine.shutdown_threads()
        self.gatherer.shutdown()
        if self._cache is not None:
            try:
                self._cache.save(self.pool)
            finally:
                self._cache.release()

    def _abandon(self) -> None:
        """Release without waiting for or starting any thread (finalisers, the loop thread).

        A persistent cache is not saved: its index was removed when this run
        adopted it, so the next run starts from an empty, never a wrong, cache."""
        self.engine.abandon()
        self.gatherer.shutdown(wait=False)
        if self._cache is not None:
            self._cache.release()

    def __repr__(self) -> str:
        labels = ", ".join(g.label for g in self.labels)
        statics = ", ".join(g.label for g in self.statics)
        splits = ", ".join(f"{name}={len(self.manifest.chunk_ids(name))}" for name in self.manifest.splits)
        state = "closed" if self._closed else f"epoch {self.epoch}"
        return (
            f"<InSituDataset {redact_urls(repr(self.store))}: labels [{labels}]"
            + (f", static [{statics}]" if statics else "")
            + f", chunks per split {{{splits}}}, batch_size={self.batch_size}, "
            f"block_chunks={self.block_chunks}, {state}>"
        )

    def __enter__(self) -> InSituDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        with contextlib.suppress(Exception):
            for it in list(self._iterators):
                it.wake_closed()
            self._abandon()


def _checked_inputs(manifest: object, retry: object) -> RetryPolicy:
    """The retry policy to use, after refusing a manifest or policy of the wrong type by name."""
    if not isinstance(manifest, SplitManifest):
        raise ConfigError(f"manifest must be a SplitManifest, got {type(manifest).__name__}: {manifest!r}")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigError(f"retry must be an insitu.RetryPolicy, got {type(retry).__name__}: {retry!r}")
    return retry or RetryPolicy()


def _check_retry_owner(store: Store, retry: RetryPolicy | None) -> None:
    """A store that retries by itself runs every read under its own policy; a different ``retry=``
    here would be silently ignored, so it is refused, saying where the policy belongs."""
    if retry is None or not isinstance(store, RetriesItself):
        return
    own = store.insitu_retry_policy
    if own != retry:
        raise ConfigError(
            f"retry={retry!r} would not apply: the store {getattr(store, 'url', None) or store} retries by "
            f"itself under its own policy ({own!r}); give the policy to the store instead, e.g. "
            "insitu.open_store(url, retry=...) or obstore_store(url, retry=...)"
        )


def _sample_axis_of(manifest: SplitManifest) -> str | int:
    """The manifest array's sample axis: by dimension name when it has one."""
    return manifest.sample_dim if manifest.sample_dim is not None else manifest.sample_axis
