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
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from zarr.abc.store import Store

from insitu.arrays.discovery import open_geometries
from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.lazycoords import LazyCoords, LazyValues
from insitu.arrays.statics import read_statics, static_spec
from insitu.arrays.transforms import ChunkTransform, SlabSpec, output_spec
from insitu.batch import Batch
from insitu.engine.gather import BatchTransform, Gatherer
from insitu.engine.loader import Engine
from insitu.engine.pool import ArrayPool, ChunkPool, allocate_arena
from insitu.errors import ConfigError, DatasetClosedError
from insitu.options import (
    DEFAULT_CACHE_BUDGET,
    BadChunkPolicy,
    cache_options,
    check_rank,
    read_options,
    shard_options,
)
from insitu.plan.budget import auto_budget, dataset_bytes, slots_per_array
from insitu.plan.memory import without_hugepage_hint
from insitu.plan.order import order_with_runs
from insitu.plan.reads import EpochPlan, plan_epoch
from insitu.plan.splits import SplitManifest
from insitu.stats import PassReport, Stats
from insitu.stats import logger as stats_logger
from insitu.store.loop import get_loop, in_loop_thread, loop_exited, run_sync
from insitu.store.retry import RetryPolicy
from insitu.transform_config import bind_to_array, transforms_from_config
from insitu.views import STATE_FORMAT, DatasetView, ViewIterator

logger = logging.getLogger("insitu")

__all__ = ["DEFAULT_CACHE_BUDGET", "STATE_FORMAT", "DatasetView", "InSituDataset"]


class InSituDataset:
    """Shuffled, split-aware batches read in place from a Zarr store.

    One instance owns one chunk pool (cache and batch-assembly buffer) that
    every view shares. See the README for the parameters; each is validated
    here and a bad value is named in the error. Use it as a context manager
    (or call :meth:`close`) to release its threads and flush a persistent
    cache at a known point; without that, it is released when collected.
    """

    def __init__(
        self,
        store: Store | str,
        manifest: SplitManifest,
        geometries: Mapping[str, ArrayGeometry] | Sequence[ArrayGeometry] | None = None,
        *,
        batch_size: int = 32,
        block_chunks: int = 16,
        max_inflight: int = 32,
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
        if not isinstance(manifest, SplitManifest):
            raise ConfigError(
                f"manifest must be a SplitManifest, got {type(manifest).__name__}: {manifest!r}"
            )
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigError(f"retry must be an insitu.RetryPolicy, got {type(retry).__name__}: {retry!r}")
        batch_transforms = transforms_from_config(batch_transforms)
        for t in batch_transforms:
            if not callable(t):
                raise ConfigError(f"batch transform {t!r} is not callable")

        if not isinstance(store, Store):  # a path or URL; anything else is refused by name there
            from insitu.store.opener import open_store

            store = open_store(store)
        self.store = store
        self.manifest = manifest
        every = _labels(store, geometries, manifest)
        self.labels = tuple(g for g in every if not g.static)
        self.statics = tuple(g for g in every if g.static)
        if not self.labels:
            raise ConfigError(
                f"every label is static ({[g.label for g in every]}); at least one array must have the "
                "sample dimension"
            )
        self.anchor_range = self._anchor_range()
        self._check_splits()

        arrays = {g.path: g.shift(-g.offset) for g in self.labels}
        every_array = [*arrays.values(), *self.statics]
        transforms = _chunk_transforms(chunk_transforms, every_array, self.labels + self.statics)
        transforms, error_fills = _with_cf_decoding(
            transforms, every_array, cf_decode, self.labels + self.statics
        )
        if self.on_bad_chunk is BadChunkPolicy.NAN:
            ints = {
                g.name: str(g.dtype)
                for g in arrays.values()
                if g.dtype.kind not in "fc" and g.path not in error_fills
            }
            if ints:
                raise ConfigError(
                    f"on_bad_chunk='nan' cannot mark bad chunks of integer array(s) {ints}: their samples "
                    "would hold the fill value, which looks like data (and no CF fill value decodes to NaN); use on_bad_chunk='skip' (or 'raise')"
                )
        specs = {path: output_spec(g, transforms.get(path, ())) for path, g in arrays.items()}
        static_bytes = sum(static_spec(g, transforms.get(g.path, ())).nbytes for g in self.statics)
        self.label_specs: dict[str, SlabSpec] = {g.label: specs[g.path] for g in self.labels}
        self._epoch = 0
        self._stats_callbacks: list[Callable[[PassReport], Any]] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()
        # Weak: an iterator dropped mid-epoch (``break``) is collected, and its finaliser unregisters it.
        self._iterators: weakref.WeakSet[ViewIterator] = weakref.WeakSet()
        self._views: dict[tuple[str, int, int], DatasetView] = {}
        self._plans: dict[tuple[str, int], EpochPlan] = {}
        # Static fields stay resident for the dataset's life: the pool gets what they leave.
        need = dataset_bytes(arrays, specs, self.labels, manifest, self.sharding.world_size)
        given = self.cache_options.budget_bytes
        if given is None:
            budget = auto_budget(need, static_bytes)
        else:
            budget = max(0, given - static_bytes)
            if self.statics and 0 < given <= static_bytes:
                raise ConfigError(
                    f"static field(s) {[g.label for g in self.statics]} take {static_bytes} bytes, the whole "
                    f"cache_budget_bytes={given}; raise the budget, select a region, or pass 0 to cache "
                    "nothing but the static fields"
                )
        slots = slots_per_array(arrays, specs, budget, need)
        self._cache = None
        if self.cache_options.cache_dir is not None:
            from insitu.engine.cache import PersistentCache

            self._cache = PersistentCache(self.cache_options, store, arrays, specs, slots, transforms)
            arenas = self._cache.arenas
        else:
            arenas = {path: allocate_arena(g, slots[path], specs[path]) for path, g in arrays.items()}
        pools = {path: ArrayPool(g, slots[path], arenas[path], specs[path]) for path, g in arrays.items()}
        self.pool = ChunkPool(pools, budget)
        self.engine = Engine(
            store,
            self.pool,
            get_loop(),
            max_inflight=self.options.max_inflight,
            decode_threads=self.options.decode_threads,
            on_bad_chunk=self.on_bad_chunk,
            chunk_transforms=transforms,
            retry=retry or RetryPolicy(),
            decoders=decoders,
            track_sources=self.cache_options.persist,
            error_fills=error_fills,
        )
        self.sample_dim = _sample_dim(self.labels)
        # The sample coordinate as batches carry it: maybe still being read (insitu.arrays.lazycoords).
        values = (
            self._sample_values(self.labels[0].coords, self.sample_dim)
            if self.sample_dim is not None
            else None
        )
        self._closed = False
        try:
            self.static_values = run_sync(read_statics(store, self.engine.fetcher, self.statics, transforms))
        except BaseException:
            self._closed = True
            self.engine.shutdown_threads()
            raise
        self.gatherer = Gatherer(
            self.pool,
            self.labels,
            batch_transforms,
            statics=self.static_values,
            sample_coord=None if values is None or self.sample_dim is None else (self.sample_dim, values),
        )
        if self._cache is not None:
            try:
                run_sync(self._cache.restore(self.pool, self.engine))
            except BaseException:
                self._closed = True
                self.engine.shutdown_threads()
                self.gatherer.shutdown()
                self._cache.release()
                raise

    @staticmethod
    def _sample_values(coords: Mapping[str, np.ndarray], dim: str) -> np.ndarray | LazyValues | None:
        if isinstance(coords, LazyCoords) and not coords.ready:
            return LazyValues(coords, dim)
        return coords.get(dim)

    # -- the options users read back --------------------------------------------
    @property
    def batch_size(self) -> int:
        return self.options.batch_size

    @property
    def block_chunks(self) -> int:
        return self.options.block_chunks

    @property
    def seed(self) -> int:
        return self.options.seed

    @property
    def shuffle(self) -> bool:
        return self.options.shuffle

    @property
    def prefetch(self) -> int:
        return self.options.prefetch

    @property
    def readahead_blocks(self) -> int:
        return self.options.readahead_blocks

    @property
    def drop_last(self) -> bool:
        return self.options.drop_last

    @property
    def rank(self) -> int:
        return self.sharding.rank

    @property
    def world_size(self) -> int:
        return self.sharding.world_size

    @property
    def uneven(self) -> str:
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
        out: read it per label with :meth:`label_coords`."""
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
        """Coordinate values of the dimensions of one delivered sample of ``label`` (static: of the
        delivered array), selection applied."""
        for g in (*self.labels, *self.statics):
            if g.label == label:
                return {d: v for d in g.delivered_dims if d is not None and (v := g.coord(d)) is not None}
        raise ConfigError(
            f"unknown label {label!r}; labels are {[g.label for g in (*self.labels, *self.statics)]}"
        )

    # -- validation -----------------------------------------------------------
    def _anchor_range(self) -> tuple[int, int]:
        n = self.manifest.n_samples
        for g in self.labels:
            if g.n_samples != n:
                raise ConfigError(
                    f"sample-axis length of {g.label!r} is {g.n_samples}, but the manifest "
                    f"(built on {self.manifest.label!r}) has {n}; every label must share the sample axis"
                )
        lo = max(max(-g.offset for g in self.labels), 0)
        hi = min(n - g.offset for g in self.labels)
        if lo >= hi:
            offsets = {g.label: g.offset for g in self.labels}
            raise ConfigError(f"offsets {offsets} leave no valid anchor in {n} samples")
        return lo, hi

    def _check_splits(self) -> None:
        lo, hi = self.anchor_range
        #: Per split, samples that cannot be anchors: a shifted label would read outside the array.
        self.unused_anchors: dict[str, int] = {}
        for name in self.manifest.names:
            total = self.manifest.count_samples(name)
            if total == 0:
                continue  # an empty split (fraction 0) is allowed and yields nothing
            valid = self.manifest.count_samples(name, within=(lo, hi))
            if valid == 0:
                raise ConfigError(
                    f"split {name!r} has no valid anchor: its samples lie outside [{lo}, {hi}) "
                    f"given offsets {[g.offset for g in self.labels]}"
                )
            unused = total - valid
            if unused:
                self.unused_anchors[name] = unused
                offsets = {g.label: g.offset for g in self.labels if g.offset}
                message = (
                    f"split {name!r}: {unused} of its {total} samples are not delivered: with offsets "
                    f"{offsets} only samples {lo}..{hi - 1} have every label inside the arrays"
                )
                # Expected at the ends of the data with windows; a split the user bounded by date
                # (split_by_coord) losing samples deserves a warning, so it is not silent.
                level = logging.WARNING if getattr(self.manifest, "ranges", None) else logging.INFO
                logger.log(level, "%s", message)

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
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose shuffle order the views use next."""
        if not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ConfigError(f"epoch must be a non-negative integer, got {epoch!r}")
        self._epoch = int(epoch)

    def plan(
        self, split: str, shuffle: bool, epoch: int | None = None, *, rank: int = 0, world_size: int = 1
    ) -> EpochPlan:
        """The read plan of ``split`` for ``epoch`` (default: the current one) on one rank."""
        epoch = self._epoch if epoch is None else epoch
        key = (f"{split}:{int(shuffle)}:{rank}/{world_size}", epoch)
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                with without_hugepage_hint():
                    order, runs = order_with_runs(
                        self.manifest,
                        split,
                        anchor_range=self.anchor_range,
                        epoch=epoch,
                        seed=self.seed,
                        shuffle=shuffle,
                        block_chunks=self.block_chunks,
                        rank=rank,
                        world_size=world_size,
                        uneven=self.uneven,
                        first_block_chunks=-(-self.batch_size // self.manifest.chunk_len),
                    )
                    plan = plan_epoch(order, self.labels, self.batch_size, self.drop_last, runs)
                # Plans of other epochs are dropped (a running pass keeps its own): at millions of
                # chunks each is hundreds of MB, and epochs go forward.
                self._plans = {k: p for k, p in self._plans.items() if k[1] == epoch}
                self._plans[key] = plan
        return plan

    # -- statistics and lifetime -------------------------------------------------
    @property
    def stats(self) -> Stats:
        """A snapshot of the live counters (:class:`insitu.stats.Stats`, also readable as a mapping):
        reads, retries, bytes, decodes, hits and hit rate, bad/missing chunks, resident bytes, and,
        from the consumer's side, throughput and the fraction of time spent waiting for data
        (``stall_fraction``: near 0 means the model, not the loader, sets the pace)."""
        out: dict[str, Any] = self.engine.stats.as_dict()
        # Retries of transient store errors, by whichever single layer retried them (the engine
        # for plain stores, the store itself for stores that retry and count).
        store_retries = self.engine.fetcher.store_retries
        out["retries"] = self.engine.fetcher.retries + (store_retries or 0)
        out["timeouts"] = self.engine.fetcher.timeouts
        # Persisted slabs checked when this dataset opened: reused, dropped because their stored
        # bytes changed since, or dropped as damaged (persist="rebuild").
        counts = self._cache.counts if self._cache is not None else {}
        out["cache_verified_slabs"] = counts.get("verified", 0)
        out["cache_stale_slabs"] = counts.get("stale", 0)
        out["cache_corrupt_slabs"] = counts.get("corrupt", 0)
        out["resident_bytes"] = self.pool.resident_bytes
        out["peak_resident_bytes"] = self.pool.peak_resident_bytes
        out["budget_bytes"] = self.pool.budget_bytes
        return Stats.from_counters(out)

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
        """Log one ended pass at INFO (``insitu.epoch``) and hand it to the stats callbacks."""
        stats_logger.info("%s", report.line())
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


def _labels(
    store: Store,
    geometries: Mapping[str, ArrayGeometry] | Sequence[ArrayGeometry] | None,
    manifest: SplitManifest,
) -> tuple[ArrayGeometry, ...]:
    if geometries is None:
        # Same sample axis as the manifest's array: by dimension name when it has one.
        axis = manifest.sample_dim if manifest.sample_dim is not None else manifest.sample_axis
        geoms = list(open_geometries(store, sample_axis=axis).values())
    elif isinstance(geometries, Mapping):
        # The keys name the batch fields: {"x": g, "y": g.shift(3)} gives batches keyed x and y.
        geoms = []
        for key, g in geometries.items():
            if not isinstance(key, str) or not key:
                raise ConfigError(
                    f"geometries keys name the batch fields and must be non-empty strings, got {key!r}"
                )
            geoms.append(g.named(key) if isinstance(g, ArrayGeometry) else g)
    else:
        geoms = list(geometries)
    if not geoms:
        raise ConfigError("geometries is empty; pass at least one ArrayGeometry")
    for g in geoms:
        if not isinstance(g, ArrayGeometry):
            raise ConfigError(f"geometries must be ArrayGeometry objects, got {type(g).__name__}: {g!r}")
    labels = [g.label for g in geoms]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ConfigError(f"duplicate label(s) {dupes}; shift one of them or drop the duplicate")
    by_path: dict[str, ArrayGeometry] = {}
    for g in geoms:
        other = by_path.setdefault(g.path, g)
        if other.sample_axis != g.sample_axis or other.static != g.static:
            raise ConfigError(
                f"labels {other.label!r} and {g.label!r} read {g.path!r} with different sample axes"
            )
        if other.selection != g.selection:
            raise ConfigError(
                f"labels {other.label!r} and {g.label!r} read {g.path!r} with different selections; "
                "an array is pooled once: select the union in one label and split it in a batch transform"
            )
    return tuple(geoms)


def _with_cf_decoding(
    transforms: dict[str, tuple[ChunkTransform, ...]],
    arrays: Sequence[ArrayGeometry],
    cf_decode: bool | Mapping[str, bool],
    labels: Sequence[ArrayGeometry],
) -> tuple[dict[str, tuple[ChunkTransform, ...]], dict[str, Any]]:
    """Each array's chain (by array path) with CF decoding first where the array carries CF
    attributes and it is not turned off, and the raw value that marks a bad chunk so that decoding
    makes it NaN."""
    from insitu.arrays.cf import cf_transform_for

    if isinstance(cf_decode, Mapping):
        bad = {k: v for k, v in cf_decode.items() if not isinstance(v, (bool, np.bool_))}
        if bad:
            raise ConfigError(f"cf_decode values must be True or False, got {bad}")
        chosen = _by_path(cf_decode, arrays, labels, "cf_decode")
        enabled = {g.path: bool(chosen.get(g.path, True)) for g in arrays}
    elif isinstance(cf_decode, (bool, np.bool_)):
        enabled = {g.path: bool(cf_decode) for g in arrays}
    else:
        raise ConfigError(f"cf_decode must be True, False or {{array: bool}}, got {cf_decode!r}")
    out = dict(transforms)
    fills: dict[str, Any] = {}
    for g in arrays:
        if not enabled[g.path]:
            continue
        decode = cf_transform_for(g.metadata, name=g.name)
        if decode is None:
            continue
        out[g.path] = (decode, *transforms.get(g.path, ()))
        if decode.encoding.fill_values and g.dtype.kind not in "fc":
            fills[g.path] = decode.encoding.fill_values[0]
    return out, fills


def _by_path(
    spec: Mapping[str, Any], arrays: Sequence[ArrayGeometry], labels: Sequence[ArrayGeometry], what: str
) -> dict[str, Any]:
    """A per-array mapping keyed by array path; its keys may be paths, names or labels. A name two
    arrays share (``"0"`` of an OME-NGFF image and of its labels) is refused, never applied to both."""
    paths = {g.path for g in arrays}
    out: dict[str, Any] = {}
    for key, value in spec.items():
        found = sorted(
            {g.path for g in arrays if key in (g.path, g.name)} | {g.path for g in labels if g.label == key}
        )
        if not found:
            known = sorted({g.name for g in arrays} | {g.label for g in labels} | paths)
            raise ConfigError(f"{what} names unknown array(s) [{key!r}]; arrays are {known}")
        if len(found) > 1:
            raise ConfigError(
                f"{what} key {key!r} names {len(found)} arrays (paths {found}); key it by path to say which"
            )
        if found[0] in out:
            raise ConfigError(f"{what} gives array {found[0]!r} twice (as {key!r} and another key)")
        out[found[0]] = value
    return out


def _sample_dim(labels: Sequence[ArrayGeometry]) -> str | None:
    names = {g.sample_dim for g in labels}
    return names.pop() if len(names) == 1 else None


def _chunk_transforms(
    spec: Sequence[ChunkTransform] | Mapping[str, Sequence[ChunkTransform]],
    arrays: Sequence[ArrayGeometry],
    labels: Sequence[ArrayGeometry],
) -> dict[str, tuple[ChunkTransform, ...]]:
    """Each array's chain, by array path: configurations (``{"name": ...}``) resolved through the
    registry, and transforms that define ``bind(geom)`` bound to each array they apply to. Mapping
    keys may be array paths, names or labels."""
    geoms = {g.path: g for g in arrays}
    if isinstance(spec, Mapping):
        chains = {
            p: transforms_from_config(v)
            for p, v in _by_path(spec, arrays, labels, "chunk_transforms").items()
        }
    else:
        shared = transforms_from_config(spec)
        chains = dict.fromkeys(geoms, shared) if shared else {}
    out = {}
    for path, chain in chains.items():
        for t in chain:
            if not callable(t) and not hasattr(t, "bind"):
                raise ConfigError(f"chunk transform {t!r} is not callable")
        out[path] = tuple(bind_to_array(t, geoms[path]) for t in chain)
    return out
