"""``InSituDataset`` and its split views: the user-facing engine."""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import os
import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from zarr.abc.store import Store

from insitu.arrays import open_geometries
from insitu.batch import Batch
from insitu.epoch import END, BatchTransform, EpochRun
from insitu.errors import ConfigError, DatasetClosedError
from insitu.fetch import RetryPolicy
from insitu.geometry import ArrayGeometry
from insitu.loop import get_loop, run_sync, submit
from insitu.order import epoch_order
from insitu.plan import EpochPlan, plan_epoch
from insitu.pool import ArrayPool, ChunkPool, allocate_arena
from insitu.scheduler import BAD_CHUNK_POLICIES, ChunkTransform, Engine
from insitu.splits import SplitManifest

STATE_FORMAT = "insitu.ViewState/1"
DEFAULT_CACHE_BUDGET = 1 << 30  # 1 GiB: residency for a few blocks plus a useful cache


class InSituDataset:
    """Shuffled, split-aware batches read in place from a Zarr store.

    One instance owns one chunk pool (cache and batch-assembly buffer) that
    every view shares. See the README for the parameters; each is validated
    here and a bad value is named in the error.
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
        cache_budget_bytes: int = DEFAULT_CACHE_BUDGET,
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
    ) -> None:
        _positive("batch_size", batch_size)
        _positive("block_chunks", block_chunks)
        _positive("max_inflight", max_inflight)
        _positive("prefetch", prefetch)
        _positive("readahead_blocks", readahead_blocks)
        if on_bad_chunk not in BAD_CHUNK_POLICIES:
            raise ConfigError(f"on_bad_chunk={on_bad_chunk!r}; expected one of {BAD_CHUNK_POLICIES}")
        _check_rank(rank, world_size)
        if uneven not in ("drop", "pad"):
            raise ConfigError(f"uneven={uneven!r}; expected 'drop' or 'pad'")
        if persist and cache_dir is None:
            raise ConfigError("persist=True needs a cache_dir to keep decoded chunks in")
        if persist not in (False, True, "rebuild"):
            raise ConfigError(f"persist={persist!r}; expected False, True or 'rebuild'")

        if isinstance(store, str):
            from insitu.stores import open_store

            store = open_store(store)
        self.store = store
        self.manifest = manifest
        self.labels = _labels(store, geometries, manifest)
        self.batch_size = batch_size
        self.block_chunks = block_chunks
        self.seed = seed
        self.shuffle = shuffle
        self.prefetch = prefetch
        self.drop_last = drop_last
        self.rank = rank
        self.world_size = world_size
        self.uneven = uneven
        self._progress: dict[tuple[str, int, int], tuple[int, int]] = {}  # view key -> (epoch, batches done)
        self._resume: dict[tuple[str, int, int], tuple[int, int]] = {}  # view key -> (epoch, first batch)
        self.readahead_blocks = readahead_blocks
        self.on_bad_chunk = on_bad_chunk
        self.batch_transforms = tuple(batch_transforms)
        self.anchor_range = self._anchor_range()
        self._check_splits()

        arrays = {g.path: g.shift(-g.offset) for g in self.labels}
        transforms = _chunk_transforms(chunk_transforms, arrays.values())
        threads = decode_threads or max(1, os.cpu_count() or 1)
        self._closed = False
        self._epoch = 0
        self._lock = threading.Lock()
        self._runs: set[EpochRun] = set()
        self._plans: dict[tuple[str, int], EpochPlan] = {}
        slots = _slots_per_array(arrays, cache_budget_bytes, block_chunks * manifest.chunk_len, self.labels)
        self._cache = None
        if cache_dir is not None:
            from insitu.cache import PersistentCache

            self._cache = PersistentCache(
                cache_dir, store, arrays, slots, transforms, persist=persist, budget=cache_budget_bytes
            )
            arenas = self._cache.arenas
        else:
            arenas = {path: allocate_arena(g, slots[path]) for path, g in arrays.items()}
        pools = {path: ArrayPool(g, slots[path], arenas[path]) for path, g in arrays.items()}
        self.pool = ChunkPool(pools, cache_budget_bytes)
        loop = get_loop()
        self._engine = Engine(
            store,
            arrays,
            self.pool,
            loop,
            max_inflight=max_inflight,
            decode_threads=threads,
            on_bad_chunk=on_bad_chunk,
            chunk_transforms=transforms,
            retry=retry or RetryPolicy(),
            decoders=decoders,
        )
        if self._cache is not None:
            try:
                run_sync(self._cache.restore(self.pool, self._engine))
            except BaseException:
                self._closed = True
                self._engine.shutdown_threads()
                raise

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
        for name in self.manifest.names:
            s = self.manifest.samples(name)
            if not ((s >= lo) & (s < hi)).any():
                raise ConfigError(
                    f"split {name!r} has no valid anchor: its samples lie outside [{lo}, {hi}) "
                    f"given offsets {[g.offset for g in self.labels]}"
                )

    # -- views ------------------------------------------------------------------
    def view(self, split: str, *, rank: int | None = None, world_size: int | None = None) -> DatasetView:
        """The view of one split (``"all"``: every split, in order), optionally for one rank."""
        if split != "all":
            self.manifest.chunks(split)  # raises for an unknown split
        rank = self.rank if rank is None else rank
        world_size = self.world_size if world_size is None else world_size
        _check_rank(rank, world_size)
        return DatasetView(
            self, split, shuffle=self.shuffle and split == "train", rank=rank, world_size=world_size
        )

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
                order = epoch_order(
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
                plan = plan_epoch(order, self.labels, self.batch_size, self.drop_last)
                if len(self._plans) > 8:
                    self._plans.clear()
                self._plans[key] = plan
        return plan

    # -- statistics and lifetime -------------------------------------------------
    @property
    def stats(self) -> dict[str, Any]:
        """Live counters: reads, bytes, decodes, hits and hit rate, bad/missing chunks, resident
        bytes, and, from the consumer's side, throughput and the fraction of time spent waiting
        for data (``stall_fraction``: near 0 means the model, not the loader, sets the pace)."""
        out: dict[str, Any] = self._engine.stats.as_dict()
        out["resident_bytes"] = self.pool.resident_bytes
        out["peak_resident_bytes"] = self.pool.peak_resident_bytes
        out["budget_bytes"] = self.pool.budget_bytes
        uses = out["slab_hits"] + out["slabs_loaded"]
        out["hit_rate"] = out["slab_hits"] / uses if uses else 0.0
        busy = out["iterating_s"]
        out["stall_fraction"] = out["waiting_s"] / busy if busy else 0.0
        out["samples_per_s"] = out["samples"] / busy if busy else 0.0
        return out

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran; views of a closed dataset cannot be iterated."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise DatasetClosedError("this InSituDataset is closed; create a new one to read again")

    def close(self) -> None:
        """Stop every running view, release threads and flush a persistent cache."""
        if self._closed:
            return
        self._closed = True
        for run in list(self._runs):
            get_loop().call_soon_threadsafe(run.cancel)
        run_sync(self._engine.aclose())
        self._engine.shutdown_threads()
        if self._cache is not None:
            self._cache.save(self.pool)

    def __enter__(self) -> InSituDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not getattr(self, "_closed", True):
                self.close()
        except Exception:
            pass


class DatasetView:
    """One split of a dataset, on one rank. Iterate for batches; ``len()`` is batches per epoch."""

    def __init__(
        self, dataset: InSituDataset, split: str, *, shuffle: bool, rank: int = 0, world_size: int = 1
    ):
        self.dataset = dataset
        self.split = split
        self.shuffle = shuffle
        self.rank = rank
        self.world_size = world_size

    def shard(self, rank: int, world_size: int) -> DatasetView:
        """This split as seen by ``rank`` of ``world_size``: disjoint chunks, equal batch counts."""
        return self.dataset.view(self.split, rank=rank, world_size=world_size)

    def for_rank(self, rank: int, world_size: int, *, source: str = "the caller") -> DatasetView:
        """The view ``rank`` of ``world_size`` reads: this view sharded, or this view itself when it
        is already sharded that way; sharded any other way is a ConfigError naming ``source``
        (e.g. ``"torch.distributed"``), the authority for ``rank`` and ``world_size``."""
        if self.world_size == 1:
            return self.shard(rank, world_size) if world_size > 1 else self
        if (self.rank, self.world_size) != (rank, world_size):
            raise ConfigError(
                f"the view is already sharded as rank {self.rank} of {self.world_size}, but {source} says "
                f"rank {rank} of {world_size}; pass the unsharded view"
            )
        return self

    @property
    def _key(self) -> tuple[str, int, int]:
        return (self.split, self.rank, self.world_size)

    @property
    def batch_size(self) -> int:
        return self.dataset.batch_size

    @property
    def drop_last(self) -> bool:
        return self.dataset.drop_last

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(g.label for g in self.dataset.labels)

    @property
    def sample_shapes(self) -> dict[str, tuple[int, ...]]:
        return {g.label: g.sample_shape for g in self.dataset.labels}

    @property
    def dtypes(self) -> dict[str, np.dtype[Any]]:
        return {g.label: g.dtype for g in self.dataset.labels}

    def set_epoch(self, epoch: int) -> None:
        """Same as ``dataset.set_epoch``."""
        self.dataset.set_epoch(epoch)

    def plan(self) -> EpochPlan:
        return self.dataset.plan(self.split, self.shuffle, rank=self.rank, world_size=self.world_size)

    def __len__(self) -> int:
        return self.plan().n_batches

    def sample_order(self) -> np.ndarray:
        """Anchors in the order this epoch delivers them (before batching)."""
        plan = self.plan()
        n = plan.n_batches * plan.batch_size if self.drop_last else len(plan.order.anchors)
        return plan.order.anchors[:n].copy()

    def __iter__(self) -> Iterator[Batch]:
        ds = self.dataset
        ds._check_open()
        plan = self.plan()
        start = 0
        resume = ds._resume.pop(self._key, None)
        if resume is not None and resume[0] == ds.epoch:
            start = min(resume[1], plan.n_batches)
        run = EpochRun(
            ds._engine,
            plan,
            ds.labels,
            split=self.split,
            epoch=ds.epoch,
            prefetch=ds.prefetch,
            readahead_blocks=ds.readahead_blocks,
            batch_transforms=ds.batch_transforms,
            skip_bad=ds.on_bad_chunk == "skip",
            start_batch=start,
        )
        _check_budget(ds, plan, run)
        ds._progress[self._key] = (ds.epoch, start)
        return _consume(ds, run, self._key)

    # -- exact resume -----------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where this view stands: epoch and batches handed out, plus what must match to resume.

        Load it with :meth:`load_state_dict` on a view of an identically built
        dataset (same manifest, seed, batch size, ranks...), in this or
        another process: the next iteration continues with the next batch.
        """
        ds = self.dataset
        epoch, done = ds._progress.get(self._key, (ds.epoch, 0))
        return {"format": STATE_FORMAT, "epoch": epoch, "batches_done": done, **self._identity()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict`: sets the epoch; the next iteration skips the batches done."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            fmt = state.get("format") if isinstance(state, Mapping) else type(state).__name__
            raise ConfigError(f"not an insitu view state (format={fmt!r}, expected {STATE_FORMAT!r})")
        mine = self._identity()
        for key, value in mine.items():
            if state.get(key) != value:
                what = "resuming with a different world size is not supported" if key == "world_size" else ""
                raise ConfigError(
                    f"state does not match this view: {key}={state.get(key)!r} in the state, "
                    f"{value!r} here{'; ' + what if what else ''}"
                )
        epoch, done = int(state["epoch"]), int(state["batches_done"])
        if epoch < 0 or done < 0:
            raise ConfigError(
                f"state has a negative epoch or batch count: epoch={epoch}, batches_done={done}"
            )
        self.dataset.set_epoch(epoch)
        self.dataset._resume[self._key] = (epoch, done)
        self.dataset._progress[self._key] = (epoch, done)

    def _identity(self) -> dict[str, Any]:
        ds = self.dataset
        return {
            "split": self.split,
            "shuffle": self.shuffle,
            "seed": ds.seed,
            "batch_size": ds.batch_size,
            "drop_last": ds.drop_last,
            "block_chunks": ds.block_chunks,
            "rank": self.rank,
            "world_size": self.world_size,
            "uneven": ds.uneven,
            "labels": [g.label for g in ds.labels],
            "manifest": hashlib.sha256(ds.manifest.to_json().encode()).hexdigest()[:16],
        }

    def __repr__(self) -> str:
        return f"DatasetView(split={self.split!r}, shuffle={self.shuffle}, batch_size={self.batch_size})"


def _consume(ds: InSituDataset, run: EpochRun, key: tuple[str, int, int]) -> Iterator[Batch]:
    loop = get_loop()
    ds._runs.add(run)
    cfut = submit(run.main())
    stats = ds._engine.stats
    started = time.perf_counter()
    try:
        while True:
            t0 = time.perf_counter()
            try:
                item = run.out.get(timeout=0.5)
            except queue.Empty:
                stats.waiting_s += time.perf_counter() - t0
                if cfut.done() and run.out.empty():
                    cfut.result()  # re-raise a crash of the run itself
                    raise RuntimeError("insitu: epoch ended without a final marker") from None
                continue
            stats.waiting_s += time.perf_counter() - t0
            if item is END:
                return
            if isinstance(item, BaseException):
                raise item
            loop.call_soon_threadsafe(run.release_credit)
            ds._progress[key] = (run.epoch, item.index + 1)  # counted as handed out once yielded
            yield item
    finally:
        stats.iterating_s += time.perf_counter() - started
        ds._runs.discard(run)
        loop.call_soon_threadsafe(run.cancel)
        with contextlib.suppress(concurrent.futures.CancelledError, Exception):
            cfut.result(timeout=60)


def _check_budget(ds: InSituDataset, plan: EpochPlan, run: EpochRun) -> None:
    """Refuse, with numbers, a budget that would stall the pipeline instead of hanging."""
    for path, apool in ds.pool.arrays.items():
        need = plan.max_slots(path, plan.batch_span)
        others = sum(r.plan.max_slots(path, r.plan.batch_span + ds.readahead_blocks) for r in ds._runs)
        if need + others > apool.n_slots:
            g = apool.geom
            extra = " while another view is being iterated" if others else ""
            raise ConfigError(
                f"cache_budget_bytes={ds.pool.budget_bytes} gives array {g.path!r} {apool.n_slots} slot(s) of "
                f"{g.slab_nbytes} bytes, but iterating {run.split!r}{extra} needs {need + others}; "
                f"raise cache_budget_bytes or lower block_chunks={ds.block_chunks}"
            )


def _check_rank(rank: Any, world_size: Any) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ConfigError(f"world_size must be a positive integer, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ConfigError(f"rank={rank!r} must be in [0, world_size={world_size})")


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


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
        geoms = list(geometries.values())
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
        if other.sample_axis != g.sample_axis:
            raise ConfigError(
                f"labels {other.label!r} and {g.label!r} read {g.path!r} with different sample axes"
            )
    return tuple(geoms)


def _chunk_transforms(
    spec: Sequence[ChunkTransform] | Mapping[str, Sequence[ChunkTransform]], arrays: Any
) -> dict[str, tuple[ChunkTransform, ...]]:
    names = {g.name for g in arrays}
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - names)
        if unknown:
            raise ConfigError(f"chunk_transforms name unknown array(s) {unknown}; arrays are {sorted(names)}")
        return {k: tuple(v) for k, v in spec.items()}
    for t in spec:
        if not callable(t):
            raise ConfigError(f"chunk transform {t!r} is not callable")
    return {n: tuple(spec) for n in names} if spec else {}


def _slots_per_array(
    arrays: Mapping[str, ArrayGeometry], budget: int, block_samples: int, labels: Sequence[ArrayGeometry]
) -> dict[str, int]:
    """Split the byte budget across arrays in proportion to what one block needs of each."""
    _positive("cache_budget_bytes", budget)
    need: dict[str, float] = {}
    for path, g in arrays.items():
        offs = [lab.offset for lab in labels if lab.path == path]
        spread = max(offs) - min(offs)
        slabs = min(g.n_slabs, -(-block_samples // g.chunk_len) + 1 + -(-spread // g.chunk_len))
        need[path] = slabs * g.slab_nbytes
    total = sum(need.values())
    slots = {}
    for path, g in arrays.items():
        share = budget * need[path] / total
        slots[path] = int(min(g.n_slabs, share // g.slab_nbytes))
        if slots[path] < 1:
            raise ConfigError(
                f"cache_budget_bytes={budget} is too small: array {path!r} needs {g.slab_nbytes} bytes per "
                f"chunk row and gets a share of {int(share)}"
            )
    return slots
