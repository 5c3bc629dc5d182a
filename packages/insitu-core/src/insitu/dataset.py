"""``InSituDataset``: the user-facing engine, owning its running parts and its views.

The constructor's keywords are the public contract; they are validated once
into option objects (:mod:`insitu.options`) that the engine, the order and
the views read. The constructor is the list of assembly steps, each a call
to the floor that owns it: the store, the labels, the plans, what the arrays
become and what the pool holds, then the running parts
(:mod:`insitu.engine.parts`). A dataset is usable without ``close()``: a script that never
closes it exits promptly, since finalisers only signal the engine's threads
and never start or wait for one.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from zarr.abc.store import Store

from insitu.arrays.labels import ArrayGeometry, ChunkTransform, resolve_labels
from insitu.engine.concurrency import LimitChange
from insitu.engine.gather import BatchTransform, batch_transform_chain
from insitu.engine.parts import (
    identity_of_data,
    size_patch_pool,
    size_pool,
    start_parts,
    weighted_summaries,
)
from insitu.errors import ConfigError, DatasetClosedError
from insitu.options import (
    DEFAULT_BLOCK_CHUNKS,
    DEFAULT_CACHE_BUDGET,
    BadChunkPolicy,
    cache_options,
    check_rank,
    read_options,
    shard_options,
)
from insitu.plan.plans import (
    EpochPlan,
    PatchPlans,
    PatchSpec,
    Segment,
    SpatialSplit,
    dataset_plans,
    sample_splits,
    weighting_from_options,
)
from insitu.plan.resume_state import STATE_FORMAT
from insitu.plan.splits import SplitManifest
from insitu.stats import CacheChecks, PassReport, Stats
from insitu.stats import logger as stats_logger
from insitu.store.capabilities import check_retry_owner
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
        sample axis is the one every sampled array is read along. With ``patch``, also a split
        in space (:func:`~insitu.split_by_region`): no patch of one split reads another's cells.
    geometries
        The labels to deliver (``{label: geometry}`` or a sequence, shifted windows included);
        ``None``: every array of the store. Arrays without the sample dimension are static
        fields, read once and delivered whole with every batch.
    batch_size
        Samples per batch.
    block_chunks
        Chunks shuffled together in one block: the shuffle-quality dial. Residency is about two
        blocks. ``"auto"``: 16, doubled while a block holds under 2 MiB of decoded data (at most
        1024), so small chunks come in blocks that pay for the engine's work per block and per
        decode job. With ``patch``, ``"auto"`` is 16 regions.
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
    patch
        Sample n-dimensional patches instead of whole cross-sections: ``{dimension: size}`` by
        name (or axis number), e.g. ``{"y": 256, "x": 256}``. Dimensions not named keep their
        whole extent; the sample dimension has size 1 unless named. Each stored chunk is decoded
        once per epoch while the pool holds it until its last patch; batches carry
        ``patch_origins``. See ``docs/patches.md``.
    patch_stride
        Steps between patch origins per named dimension (overlap = size - stride); default: the
        size for ``"grid"`` (no overlap), 1 for ``"random"`` (any origin).
    patch_sampling
        ``"grid"`` (every position once per epoch) or ``"random"`` (``patches_per_epoch``
        positions drawn uniformly, a pure function of seed, epoch, rank and world size).
    patches_per_epoch
        Patches a ``"random"`` epoch draws over all ranks (default: as many as the
        non-overlapping grid has).
    patch_edge
        At the end of a dimension: ``"shift"`` (the last patch moved inward; the default),
        ``"pad"`` (filled with the fill value, NaN for floats; ``batch.patch_mask(label)``) or
        ``"drop"`` (incomplete patches left out).
    patch_weights
        Random patches weighted by a mask: the name of a sampled array; each position is drawn
        with probability proportional to the fraction of its patch where the mask is nonzero.
        Regions where the mask is empty are never read, for any array. Drawn from per-region
        summaries computed once (kept under ``cache_dir`` when given), without rejection; see
        ``docs/imaging.md``.
    patch_min_coverage
        With ``patch_weights``: draw uniformly among the positions whose coverage is at least
        this fraction, instead of in proportion to it.
    balance
        Random patches balanced over the classes of an integer label array (the class at each
        patch's centre): its name for equal frequencies, or ``{name: {class: share}}``.
    """

    def __init__(
        self,
        store: Store | str,
        manifest: SplitManifest | SpatialSplit,
        geometries: Mapping[str, ArrayGeometry] | Sequence[ArrayGeometry] | None = None,
        *,
        batch_size: int = 32,
        block_chunks: int | str = DEFAULT_BLOCK_CHUNKS,
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
        patch: Mapping[str | int, int] | None = None,
        patch_stride: Mapping[str | int, int] | None = None,
        patch_sampling: str = "grid",
        patches_per_epoch: int | None = None,
        patch_edge: str = "shift",
        patch_weights: str | None = None,
        patch_min_coverage: float | None = None,
        balance: str | Mapping[str, Mapping[int, float]] | None = None,
    ) -> None:
        self._closed = True  # until construction succeeds: a half-built dataset has nothing to release
        # The keywords, validated once into options.
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
        self.patch_spec = patch_spec(patch, patch_stride, patch_sampling, patches_per_epoch, patch_edge)
        self.weighting = weighting_from_options(
            patch_weights,
            patch_min_coverage,
            balance,
            sampling=None if self.patch_spec is None else self.patch_spec.sampling,
        )
        given_retry = retry
        retry = _checked_inputs(manifest, retry, patched=self.patch_spec is not None)
        batch_transforms = batch_transform_chain(batch_transforms)
        # The store, and which single layer retries its reads.
        self.store = open_store(store)  # a Store passes through
        check_retry_owner(self.store, given_retry)
        # The labels (discovery, geometries=None, reads metadata under the chunks' policy), and the
        # epoch plans over the samples at which every label can be read. A split in space (patches
        # only) leaves the sample axis whole in every split.
        sample_axis = _sample_axis_of(manifest, geometries)
        labels = self._labels = resolve_labels(self.store, geometries, sample_axis, given_retry)
        self.labels, self.statics, self.sample_dim = labels.sampled, labels.statics, labels.sample_dim
        sample_manifest, spatial = sample_splits(manifest, self.labels)
        self.manifest, self.spatial_split = sample_manifest, spatial
        if self.patch_spec is None:  # a block of patches is regions, sized by the patch plans
            self.options = self.options.with_chunk_bytes(
                sample_manifest.chunk_len * sum(g.sample_nbytes for g in self.labels)
            )
        self._plans = dataset_plans(
            sample_manifest,
            self.labels,
            self.options,
            self.sharding,
            patch=self.patch_spec,
            spatial=spatial,
            weighting=self.weighting,
        )
        self.anchor_range, self.unused_anchors = self._plans.anchors, self._plans.unused_anchors
        # What each array becomes after its chunk transforms, and how much of it the pool holds.
        outputs = labels.outputs(
            chunk_transforms, cf_decode, nan_fill=self.on_bad_chunk is BadChunkPolicy.NAN
        )
        # A weighted draw's region summaries: made (or loaded) with the first plan of each split.
        self.summaries: Any = None  # an insitu.engine.patch_summaries.SummaryCache when weighted
        if isinstance(self._plans, PatchPlans) and self.weighting is not None:
            self.summaries = weighted_summaries(
                self.store, self._plans, outputs.label_specs, self.cache_options
            )
        patches = None
        if isinstance(self._plans, PatchPlans):  # arrays pooled by chunk, batches of patches
            patches, memory = size_patch_pool(
                labels, outputs, self._plans, self.options, self.cache_options, world_size=self.world_size
            )
        else:
            memory = size_pool(
                labels,
                outputs,
                sample_manifest,
                self.options,
                self.cache_options,
                world_size=self.world_size,
                n_samples=self.anchor_range[1] - self.anchor_range[0],
            )
        self.label_specs = outputs.label_specs if patches is None else patches.label_specs
        # The running parts: pool, engine, static fields, gatherer, restored slabs, iteration service.
        self._start_lifetime()
        self._parts = start_parts(
            self.store,
            labels,
            outputs,
            memory,
            options=self.options,
            cache=self.cache_options,
            on_bad_chunk=self.on_bad_chunk,
            retry=retry,
            decoders=decoders,
            batch_transforms=batch_transforms,
            patches=patches,
        )
        # What the statistics read (pool, cache, engine) and what views use (static values, passes).
        self.pool, self._cache, self.engine = self._parts.pool, self._parts.cache, self._parts.engine
        self.static_values, self.passes = self._parts.static_values, self._parts.passes
        self._closed = False

    def _start_lifetime(self) -> None:
        """What the dataset tracks over its life: epoch, callbacks, views and live iterators."""
        self._epoch = 0
        self._stats_callbacks: list[Callable[[PassReport], Any]] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()
        # Weak: an iterator dropped mid-epoch (``break``) is collected, and its finaliser unregisters it.
        self._iterators: weakref.WeakSet[ViewIterator] = weakref.WeakSet()
        self._views: dict[tuple[str, int, int], DatasetView] = {}

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
        return self._parts.gatherer.describe(self.anchor_range[0], self.sample_dim)

    @property
    def coords(self) -> dict[str, np.ndarray]:
        """Coordinate values of every dimension the labels deliver (selections applied), and of
        the sample dimension (every sample). A dimension two labels select differently is left
        out: read it per label with :meth:`coords_of`."""
        return self._labels.coords()

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
        return self._labels.coords_of(label)

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
        identity = identity_of_data(self.store, self._labels.every)
        if isinstance(self._plans, PatchPlans):  # a state of other patches would resume elsewhere
            identity["patches"] = json.dumps(self._plans.describe(), sort_keys=True)
        return identity

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
        self._parts.close()

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
            self._parts.abandon()


def _checked_inputs(manifest: object, retry: object, *, patched: bool) -> RetryPolicy:
    """The retry policy to use, after refusing a manifest or policy of the wrong type by name (a
    split in space only with patches)."""
    if isinstance(manifest, SpatialSplit):
        if not patched:
            raise ConfigError(
                "a SpatialSplit splits patch positions in space: give patch= sizes, or split whole "
                "cross-sections along the sample axis with split_by_chunk"
            )
    elif not isinstance(manifest, SplitManifest):
        raise ConfigError(
            f"manifest must be a SplitManifest (or, with patch=, a SpatialSplit), got "
            f"{type(manifest).__name__}: {manifest!r}"
        )
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigError(f"retry must be an insitu.RetryPolicy, got {type(retry).__name__}: {retry!r}")
    return retry or RetryPolicy()


def patch_spec(
    patch: Mapping[str | int, int] | None,
    stride: Mapping[str | int, int] | None,
    sampling: str,
    per_epoch: int | None,
    edge: str,
) -> PatchSpec | None:
    """The patch the keywords ask for (validated, each bad value named); None for whole
    cross-sections, after refusing patch options given without ``patch``."""
    if patch is None:
        given = {
            "patch_stride": (stride, None),
            "patch_sampling": (sampling, "grid"),
            "patches_per_epoch": (per_epoch, None),
            "patch_edge": (edge, "shift"),
        }
        stray = [f"{name}={value!r}" for name, (value, default) in given.items() if value != default]
        if stray:
            raise ConfigError(
                f"{', '.join(stray)} given without patch=; name the patch sizes, e.g. patch={{'y': 256, 'x': 256}}"
            )
        return None
    return PatchSpec(size=patch, stride=stride, sampling=sampling, patches_per_epoch=per_epoch, edge=edge)


def _sample_axis_of(
    manifest: SplitManifest | SpatialSplit,
    geometries: Mapping[str, ArrayGeometry] | Sequence[ArrayGeometry] | None,
) -> str | int:
    """The sample axis every label is read along: the manifest array's (by dimension name when it
    has one); with a split in space, that of the first geometry given."""
    if isinstance(manifest, SplitManifest):
        return manifest.sample_dim if manifest.sample_dim is not None else manifest.sample_axis
    given = list(geometries.values()) if isinstance(geometries, Mapping) else list(geometries or ())
    if not given or not isinstance(given[0], ArrayGeometry):
        raise ConfigError(
            "with a SpatialSplit, give the arrays to sample (geometries=[...]): the first is the reference"
        )
    first = given[0]
    return first.sample_dim if first.sample_dim is not None else first.sample_axis
