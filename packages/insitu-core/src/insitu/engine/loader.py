"""Loading slabs into the pool: async fetch under one budget, decode in threads, transform.

:class:`Engine` holds what every array shares: the store's fetcher and its
``max_inflight`` budget, the decode threads and the counters. Each array has
an :class:`ArrayLoader` that knows its layout (through its reader), its pool
and its chunk transforms; it is given its settings (:class:`LoadSettings`) and
the engine's shared parts (:class:`LoadServices`) at construction, and never
reads the engine itself. ``Engine.load`` is called on the event loop with
freshly reserved pool entries. Local files are read inside decode threads;
other stores are fetched with ``Store.get`` under the ``max_inflight``
semaphore. Sharded arrays first read each shard's index (cached), then fetch
the inner chunks they need as coalesced byte ranges. When every piece of a
slab is placed, the array's chunk transforms run once, and the slab becomes
ready.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store

from insitu.arrays.chunk_units import ChunkReader, ChunkUnits
from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.layout import ArrayReader, Piece, Read
from insitu.arrays.transforms import ChunkTransform, chain_runner, source_spec
from insitu.engine.concurrency import AdaptiveLimiter, ConcurrencyController, FetchGovernor, LimitChange
from insitu.engine.fetch_queue import FetchQueue
from insitu.engine.jobs import CallJob, ChunkReadError, DecodeJob, DecodePump, ReadItem
from insitu.engine.pool import ArrayPool, ChunkPool, Slab
from insitu.engine.scatter import ScratchBuffers
from insitu.errors import BadChunkError, ConfigError, InSituError, StoreUnavailableError
from insitu.options import BadChunkPolicy
from insitu.stats import BadChunkKind, CounterRecord, EngineCounters, InflightGauges, PoolGauges
from insitu.store.codecs import ChunkSizeError, UnsupportedCodec
from insitu.store.fetch import ChunkFetcher
from insitu.store.retry import RetryPolicy
from insitu.store.zarr_reads import SLAB_SOURCES, FetchingStore


@dataclass(frozen=True)
class EngineSettings:
    """The dataset's settings the engine and its loaders read, in one record built where the
    dataset's options are (``insitu.engine.parts``): a new knob is a field here, the line that
    fills it there, and the place that uses it; no part reads another's settings back."""

    max_inflight: int  # the cap on requests in flight (the controller picks the number under it)
    decode_threads: int
    on_bad_chunk: BadChunkPolicy
    retry: RetryPolicy
    decoders: Sequence[str] | None = None  # registered decoders to try, in order (None: all)
    track_sources: bool = False  # record what each slab was read from (a persisted cache checks it on reuse)


@dataclass(frozen=True)
class LoadSettings:
    """What one array's loader is told at construction: the engine's settings and its own fill."""

    engine: EngineSettings
    error_fill: Any  # written over the samples of a chunk that fails (None: on_bad_chunk="raise")

    @property
    def on_bad_chunk(self) -> BadChunkPolicy:
        """What a chunk that cannot be read or decoded becomes."""
        return self.engine.on_bad_chunk

    @property
    def track_sources(self) -> bool:
        """Whether each slab records what it was read from."""
        return self.engine.track_sources


@dataclass(frozen=True)
class LoadServices:
    """The engine's parts every array's loader shares (built once by :class:`Engine`)."""

    fetcher: ChunkFetcher
    pump: DecodePump
    scratch: ScratchBuffers  # per decode thread: where streamed slabs decode
    governor: FetchGovernor  # the request budget every remote read holds a slot of
    fetches: FetchQueue
    counters: EngineCounters
    spawn: Callable[[Coroutine[Any, Any, None]], None]  # run a task the engine cancels on close


_RUNNING: set[asyncio.Task[Any]] = set()  # every engine's live tasks (see Engine.spawn)


class Engine:
    """The shared part of loading: store fetcher and request budget, decode threads, counters."""

    def __init__(
        self,
        store: Store,
        pool: ChunkPool,
        loop: asyncio.AbstractEventLoop,
        settings: EngineSettings,
        *,
        chunk_transforms: Mapping[str, Sequence[ChunkTransform]],
        error_fills: Mapping[str, Any] | None = None,
    ) -> None:
        max_inflight, decode_threads = settings.max_inflight, settings.decode_threads
        self.store = store
        self.pool = pool
        self.loop = loop
        self._tasks: set[asyncio.Task[Any]] = set()
        self.fetcher = ChunkFetcher(store, settings.retry)
        self.executor = ThreadPoolExecutor(decode_threads, thread_name_prefix="insitu-io")  # cache checks
        self.pump = DecodePump(loop, decode_threads)
        # Requests in flight to the store: chosen by a controller, at most max_inflight (see
        # insitu.engine.concurrency); every remote read holds a slot of this one limiter.
        self.inflight = AdaptiveLimiter(
            ConcurrencyController(max_inflight, start=min(max_inflight, START_INFLIGHT))
        )
        self.fetches = FetchQueue(self.inflight, self.spawn, workers=max_inflight)
        self.concurrency = FetchGovernor(
            self.inflight,
            demand=self.fetches.has_queued,
            decode_busy_s=self.pump.busy_s,
            retries=self.fetcher.congestion_signals,
        )
        self.stats = EngineCounters()
        if not self.fetcher.reads_files:
            # A remote store's round trips leave cores idle in which fresh pool pages can be
            # committed. Local files keep the decoders busy; there the thread measured slower
            # (first batch 7-11 ms later, cold pass no faster on the 2-core reference machine).
            pool.start_prefault()
        services = LoadServices(
            fetcher=self.fetcher,
            pump=self.pump,
            scratch=ScratchBuffers(),
            governor=self.concurrency,
            fetches=self.fetches,
            counters=self.stats,
            spawn=self.spawn,
        )
        # The raw value a bad integer chunk is filled with, by array path: CF decoding turns it into NaN.
        fills = error_fills or {}
        self.loaders = {
            path: ArrayLoader(
                apool,
                _reader_for(apool.geom, settings.decoders),
                tuple(chunk_transforms.get(apool.geom.path, ())),
                LoadSettings(settings, _error_fill(apool.geom, settings.on_bad_chunk, fills)),
                services,
            )
            for path, apool in pool.arrays.items()
        }

    def load(self, path: str, entries: Sequence[Slab], priority: int = 0) -> None:
        """Start loading freshly reserved entries of array ``path`` (each holds one load pin).

        ``priority``: lower decodes first (the epoch passes the block number, so the block the
        consumer waits for is not queued behind read-ahead blocks whose bytes arrived with it)."""
        self.loaders[path].load(entries, priority)

    @property
    def adapts_inflight(self) -> bool:
        """True when reads go over the loop to a store, under the adaptive limit (not local files)."""
        return not self.fetcher.reads_files

    @property
    def inflight_limit(self) -> int:
        """Requests the controller allows in flight to the store now."""
        return self.concurrency.limit

    @property
    def outstanding_reads(self) -> int:
        """Whole-chunk GETs queued, and reads holding a slot of the limit (shard and zarr reads too)."""
        return self.fetches.outstanding

    def inflight_limits(self, since: int = 0) -> tuple[int, ...]:
        """The requests-in-flight limit in force at change ``since`` and each chosen after it
        (empty for local files, read in the decode threads without a limit)."""
        if not self.adapts_inflight:
            return ()
        return self.concurrency.limits_since(since)

    def inflight_trajectory(self) -> tuple[LimitChange, ...]:
        """Every change of the requests-in-flight limit so far (empty for local files)."""
        return self.concurrency.trajectory() if self.adapts_inflight else ()

    def counters(self) -> tuple[CounterRecord, ...]:
        """The engine's counters and gauges, as records :meth:`insitu.stats.Stats.from_records`
        snapshots: its own, the retries and timeouts of whichever layer retried, the pool's bytes
        and the requests-in-flight limit (zero for local files)."""
        pool = self.pool
        return (
            self.stats,
            self.fetcher.totals(),
            PoolGauges(pool.resident_bytes, pool.peak_resident_bytes, pool.budget_bytes),
            self.concurrency.gauges() if self.adapts_inflight else InflightGauges(),
        )

    # -- housekeeping --------------------------------------------------------
    def spawn(self, coro: Any) -> None:
        """Run ``coro`` as a task on the engine's loop, cancelled by :meth:`aclose`."""
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        # Held from the module too, until it ends: otherwise an idle fetch worker is only in a cycle
        # with its engine, and the garbage collector destroys it pending ("Task was destroyed but
        # it is pending!" at ERROR) in the same pass that runs the dataset's finaliser, before the
        # cancellation that finaliser schedules can run.
        _RUNNING.add(task)
        task.add_done_callback(_RUNNING.discard)

    async def aclose(self) -> None:
        """Stop taking decode work and cancel the engine's tasks, waiting until they have ended (on the loop)."""
        self.pump.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def abandon(self) -> None:
        """Stop without waiting for anything (finalisers, the loop's own thread): queued work is
        dropped, running tasks are cancelled on the loop, threads exit after their current job."""
        if not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is shutting down: nothing runs there
                self.loop.call_soon_threadsafe(self._cancel_tasks)
        self.pool.stop_prefault()
        self.pump.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)

    def _cancel_tasks(self) -> None:
        self.pump.close()
        for t in list(self._tasks):
            t.cancel()

    def shutdown_threads(self) -> None:
        """Wait for the decode threads and the cache-check threads to finish their work and exit."""
        self.pool.stop_prefault()
        self.pump.shutdown()
        self.executor.shutdown(wait=True, cancel_futures=False)


class ArrayLoader:
    """Loads the slabs of one array: reads, decodes, places and transforms them."""

    def __init__(
        self,
        apool: ArrayPool,
        reader: ArrayReader | None,
        transforms: tuple[ChunkTransform, ...],
        settings: LoadSettings,
        services: LoadServices,
    ) -> None:
        self.apool = apool
        self.geom = apool.geom
        self.path = apool.geom.path
        self.reader = reader
        self.settings = settings
        self.stats = services.counters
        self.fetcher = services.fetcher
        self._pump = services.pump
        self._scratch = services.scratch
        self._governor = services.governor
        self._fetches = services.fetches
        self._spawn = services.spawn
        self.transform = chain_runner(self.geom.name, transforms, apool.spec) if transforms else None
        # Transforms that change shape or dtype: chunks decode into a scratch slab, and the
        # transformed slab is written to the (differently sized) slot.
        self.uses_scratch = apool.spec != source_spec(self.geom)
        # A streamed slab of one chunk with no transform is decoded and scattered by one decode
        # job, into that thread's scratch; any other streamed slab decodes into a scratch slab of
        # its own and is transformed and scattered once every chunk of it is in.
        self.streams_in_job = reader is not None and reader.chunks_per_slab == 1 and self.transform is None
        self._items_per_job = items_per_job(self.geom.slab_nbytes)
        # GETs answered in this turn of the loop, by priority, waiting to go to the threads together.
        self._fetched: dict[int, list[ReadItem]] = {}
        self._sample_nbytes = apool.spec.sample_nbytes
        # Every slab but a short last one holds chunk_len rows: its bytes, counted per slab loaded.
        self._full_slabs = self.geom.n_samples // self.geom.chunk_len
        self._full_slab_nbytes = self.geom.chunk_len * self._sample_nbytes
        self._shard_index: dict[tuple[int, ...], asyncio.Future[np.ndarray | None]] = {}
        self._zarr_array: Any = None

    def target(self, entry: Slab) -> np.ndarray | None:
        """Where the chunks of a loading slab decode (None: the decode job chooses, see
        :class:`insitu.engine.jobs.DecodeJob`)."""
        if entry.scratch is not None:
            return entry.scratch
        return None if entry.dests is not None else self.apool.view(entry.slot)  # streamed: no slot

    def load(self, entries: Sequence[Slab], priority: int) -> None:
        """Start loading ``entries`` (slabs of this array): reads, decode jobs at ``priority``, then
        transforms; each entry's waiters are told when it is ready or failed."""
        reader = self.reader
        track, uses_scratch, own_scratch = (
            self.settings.track_sources,
            self.uses_scratch,
            not self.streams_in_job,
        )
        pending = 1 if reader is None else reader.chunks_per_slab
        for e in entries:  # one pass: this runs for every slab a cold pass loads, on the loop
            streamed = e.dests is not None
            if track:
                e.sources = None if streamed else []
            if uses_scratch or (streamed and own_scratch):
                e.scratch = np.empty(self.geom.slab_shape, self.geom.dtype)
            e.pending = pending
        if reader is None:
            for e in entries:
                self._spawn(self._load_via_zarr(e))
            return
        target = self.target
        if reader.geom.is_sharded:
            by_slab = {e.slab: e for e in entries}
            for shard, wanted in reader.shards_of(by_slab).items():
                self._spawn(self._load_shard(shard, wanted, by_slab, priority))
            return
        single = reader.single_reads([e.slab for e in entries])
        if single is not None:  # one stored chunk per slab: the reads pair with the entries
            # Tuples, not lists: the collector stops tracking a tuple of slot views (arrays are
            # not tracked) at its first look, so a block's reads in flight add less to every
            # collection that finds them still loading.
            items = [ReadItem(read, (e,), (target(e),)) for e, read in zip(entries, single, strict=True)]
        else:
            by_slab, items = {e.slab: e for e in entries}, []
            for slab, read in reader.reads(by_slab):  # one slot view per slab, shared by its pieces
                entry, n = by_slab[slab], len(read.pieces)
                items.append(ReadItem(read, (entry,) * n, (target(entry),) * n))
        self._dispatch(items, priority)

    def _item(self, read: Read, targets: list[Slab]) -> ReadItem:
        return ReadItem(read, targets, [self.target(t) for t in targets])

    def _dispatch(self, items: list[ReadItem], priority: int = 0) -> None:
        """Local files: read and decode in workers, several reads per job. Else: fetch each on the loop."""
        if not self.fetcher.reads_files:
            fetches = self._fetches
            for item in items:
                fetches.put(priority, self, item)
            return
        self.stats.reads += len(items)
        pump = self._pump
        # Enough jobs to occupy every thread, few enough that one loop-to-thread hop
        # (and one completion callback) serves several chunks.
        per_job = max(1, min(self._items_per_job, -(-len(items) // pump.threads)))
        for i in range(0, len(items), per_job):
            pump.submit(self._job(items[i : i + per_job], local=True), priority)

    def _job(self, items: list[ReadItem], *, local: bool = False) -> DecodeJob:
        assert self.reader is not None
        return DecodeJob(
            self.reader,
            items,
            on_done=self._job_done,
            local=self.fetcher if local else None,
            fill_on_error=self.settings.error_fill,
            track_sources=self.settings.track_sources,
            scratch=self._scratch,
        )

    async def fetch_then_decode(self, item: ReadItem, priority: int = 0) -> None:
        """One GET (the caller, the fetch queue, holds a slot of the engine's request budget), then
        its decode; a failure reaches the waiters of ``item``'s slabs."""
        read = item.read
        governor = self._governor
        try:
            if self.settings.track_sources and self.fetcher.capabilities.object_versions:
                # Asked before the GET: a rewrite in between makes the cached slab look
                # stale next time (a re-read), never a changed object look unchanged.
                version = await self.fetcher.version(read.key)
                item.source = "absent" if version is None else f"v:{version}"
            self.stats.reads += 1
            item.raw = await self.fetcher.get(read.key, read.byte_range)
        except Exception as exc:
            governor.failed(exc)
            self.fail_read(item, exc)
            return
        governor.succeeded(item.raw)
        self._decode_fetched(item, priority)

    def _decode_fetched(self, item: ReadItem, priority: int) -> None:
        """Queue the decode of a fetched ``item`` with the others answered in this turn of the loop.

        A round trip's answers arrive together; sent to the threads as a few jobs (as local reads
        are) rather than a job each, they cost one queue hand-off, one wake-up and one report per
        job instead of per chunk. The jobs go out at the loop's next turn."""
        ready = self._fetched.get(priority)
        if ready is not None:
            ready.append(item)
            return
        self._fetched[priority] = [item]
        if len(self._fetched) == 1:  # the first this turn: one flush serves them all
            self._pump.loop.call_soon(self._flush_fetched)

    def _flush_fetched(self) -> None:
        fetched, self._fetched = self._fetched, {}
        pump = self._pump
        for priority, items in fetched.items():
            per_job = max(1, min(self._items_per_job, -(-len(items) // pump.threads)))
            for i in range(0, len(items), per_job):
                pump.submit(self._job(items[i : i + per_job]), priority)

    async def _load_shard(
        self,
        shard: tuple[int, ...],
        wanted: list[tuple[int, tuple[int, ...]]],
        by_slab: dict[int, Slab],
        priority: int = 0,
    ) -> None:
        reader = self.reader
        assert reader is not None
        try:
            index = await self._get_shard_index(shard)
        except Exception as exc:
            for slab, coords in wanted:
                read = Read(reader.shard_key(shard), None, (Piece(coords, 0, None),))
                self.fail_read(self._item(read, [by_slab[slab]]), exc)
            return
        reads, missing = reader.coalesced_reads(shard, index, wanted)
        if missing:  # absent inner chunks: a job with no bytes writes the fill value
            fill = Read(reader.shard_key(shard), None, tuple(Piece(c, 0, None) for _, c in missing))
            self._pump.submit(self._job([self._item(fill, [by_slab[s] for s, _ in missing])]), priority)
        items = [self._item(read, [by_slab[s] for s in slabs]) for slabs, read in reads]
        if len(items) > 1 and self.fetcher.reads_many_ranges:
            # Several runs of one shard (a sparse selection): one multi-range request, not one per run.
            await self._fetch_ranges_then_decode(reader.shard_key(shard), items, priority)
        elif items:
            self._dispatch(items, priority)

    async def _fetch_ranges_then_decode(self, key: str, items: list[ReadItem], priority: int = 0) -> None:
        ranges = [item.read.byte_range for item in items]
        try:
            async with self._governor.limiter:
                self.stats.reads += 1
                parts = await self.fetcher.get_ranges(key, [r for r in ranges if r is not None])
        except Exception as exc:
            for item in items:
                self.fail_read(item, exc)
            return
        for i, item in enumerate(items):
            item.raw = None if parts is None else parts[i]
        self._pump.submit(self._job(items), priority)

    async def _get_shard_index(self, shard: tuple[int, ...]) -> np.ndarray | None:
        reader = self.reader
        assert reader is not None
        fut = self._shard_index.get(shard)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._shard_index[shard] = fut
            try:
                where, n = reader.index_range()
                async with self._governor.limiter:
                    self.stats.reads += 1
                    if where == "suffix":
                        raw = await self.fetcher.get(reader.shard_key(shard), suffix=n)
                    else:
                        raw = await self.fetcher.get(reader.shard_key(shard), byte_range=(0, n))
                fut.set_result(None if raw is None else reader.decode_index(raw))
            except Exception as exc:
                del self._shard_index[shard]
                fut.set_exception(exc)
                fut.exception()  # retrieved here; re-raised to every waiter below
        return await asyncio.shield(fut)

    async def _load_via_zarr(self, entry: Slab) -> None:
        """Fallback for codecs the direct decoder does not know: zarr reads the region."""
        g = self.geom
        if self._zarr_array is None:
            # Through the fetcher: zarr's reads are retried, timed out and tracked like ours.
            store = FetchingStore(self.fetcher.store, self.fetcher, self.stats)
            self._zarr_array = zarr.open_array(store=store, path=self.path, mode="r").async_array
        c = g.chunk_len
        lo, hi = entry.slab * c, min((entry.slab + 1) * c, g.n_samples)
        region, axis = _zarr_region(g, entry.slab)
        token = SLAB_SOURCES.set(entry.sources)  # None unless a persisted cache tracks sources
        try:
            async with self._governor.limiter:
                self.stats.reads += 1
                # Orthogonal: a selection on other axes reads only the chunks it touches.
                data = await self._zarr_array.get_orthogonal_selection(region)
        except StoreUnavailableError as exc:  # FetchingStore's: the store did not deliver
            self._piece_done(entry, exc)
            return
        except Exception as exc:
            self._piece_done(entry, BadChunkError(self.path, f"samples {lo}:{hi}", repr(exc)), _bad_kind(exc))
            return
        finally:
            SLAB_SOURCES.reset(token)
        view = self.target(entry)
        assert view is not None  # zarr-read slabs decode into their slot or a scratch slab

        def place() -> None:
            if isinstance(g, ChunkUnits):  # one chunk (an edge chunk is short): the rest is fill
                unit = view[0]
                got = np.asarray(data)
                if got.shape != unit.shape:
                    unit[...] = g.fill_value if g.fill_value is not None else 0
                unit[tuple(slice(0, n) for n in got.shape)] = got
                return
            view[: hi - lo] = np.moveaxis(np.asarray(data), axis, 0)

        def done(res: Any) -> None:
            err = _error_or_none(res)
            bad = None if err is None else BadChunkError(self.path, f"samples {lo}:{hi}", repr(err))
            self._piece_done(entry, bad, _bad_kind(err))

        self.stats.chunks_decoded += 1
        self._pump.submit(CallJob(place, done))

    # -- completion (loop thread) ----------------------------------------------------------------
    def _job_done(self, job: DecodeJob, results: Any) -> None:
        stats = self.stats
        if isinstance(results, BaseException):  # the job itself failed (not a chunk's bytes): raise
            for item in job.items:
                for entry in item.targets:
                    if entry.error is None:
                        entry.error = results
                    self._piece_done(entry, None)
            return
        # Counted once per job: this loop runs for every chunk read, on the loop.
        read_bytes = decoded = 0
        simple = self.transform is None and not self.uses_scratch  # a loaded slab is ready as placed
        for item, (nbytes, errors, missing) in zip(job.items, results, strict=True):
            read_bytes += nbytes
            if item.source is not None:
                read = item.read
                for entry in item.targets:
                    if entry.sources is not None:
                        entry.sources.append((read.key, read.byte_range, item.source))
            if missing:
                stats.missing_chunks += len(item.targets)
            if errors is None:  # every piece placed (the fill value, for a missing object)
                if not missing:
                    decoded += len(item.targets)
                for entry in item.targets:
                    entry.pending -= 1
                    if entry.pending == 0:
                        if not simple or entry.error is not None:
                            self._slab_complete(entry)
                        elif entry.dests is None:
                            self._pooled_ready(entry)
                        elif entry.scratch is None:  # streamed: its rows went to its batches in the job
                            self._streamed_ready(entry)
                        else:
                            self._slab_complete(entry)
                continue
            for piece, entry, err in zip(item.read.pieces, item.targets, errors, strict=True):
                if err is None:
                    if not missing:
                        stats.chunks_decoded += 1
                    self._piece_done(entry, None)
                elif isinstance(err, ChunkReadError):  # a local file that could not be read
                    self._piece_done(entry, self.fetcher.unavailable(item.read.key, err.error, self.path))
                else:
                    bad = BadChunkError(self.path, _piece_key(item.read, piece), repr(err))
                    self._piece_done(entry, bad, _bad_kind(err))
        stats.bytes_read += read_bytes
        stats.chunks_decoded += decoded

    def fail_read(self, item: ReadItem, exc: BaseException) -> None:
        """Every piece of ``item`` failed with ``exc``, raised while fetching it: a store outage
        fails its slabs whatever ``on_bad_chunk`` says; anything else makes them bad chunks."""
        if _is_outage(exc):  # the store did not deliver the bytes: an error whatever on_bad_chunk says
            error = self.fetcher.unavailable(item.read.key, exc, self.path)
            for entry in item.targets:
                self._piece_done(entry, error)
            return
        fill = self.settings.error_fill
        for piece, entry, view in zip(item.read.pieces, item.targets, item.views, strict=True):
            if fill is not None and self.reader is not None:
                if view is not None:
                    self.reader.fill(piece.coords, fill, view)
                elif entry.dests is not None:  # streamed in the job: its batch rows take the fill
                    entry.dests.fill(fill)
            self._piece_done(entry, BadChunkError(self.path, _piece_key(item.read, piece), repr(exc)))

    def _piece_done(
        self, entry: Slab, error: InSituError | None, kind: BadChunkKind = BadChunkKind.DECODE
    ) -> None:
        if error is not None:
            if self.settings.on_bad_chunk is BadChunkPolicy.RAISE or isinstance(error, StoreUnavailableError):
                if entry.error is None:
                    entry.error = error
            else:
                self.stats.count_bad_chunk(kind)
                entry.bad = True
        entry.pending -= 1
        if entry.pending == 0:
            self._slab_complete(entry)

    def _slab_complete(self, entry: Slab) -> None:
        """Every chunk of ``entry`` is in (or failed): scatter, transform or finish it."""
        if entry.dests is not None and entry.scratch is not None and entry.error is None:  # streamed
            self._scatter_streamed(entry)
        elif entry.error is None and self.transform is not None:
            self._transform(entry)
        else:
            self._finish_slab(entry, entry.error)

    def _scatter_streamed(self, entry: Slab) -> None:
        """A streamed slab placed in a scratch slab of its own: transform it, then copy its rows to
        their batch rows, in a worker."""
        assert entry.scratch is not None
        assert entry.dests is not None
        src = entry.scratch[: self.apool.rows(entry.slab)]
        dests, transform = entry.dests, self.transform

        def run() -> None:
            dests.scatter(transform(src) if transform is not None else src)

        self._pump.submit(CallJob(run, lambda res: self._finish_slab(entry, _error_or_none(res))))

    def _transform(self, entry: Slab) -> None:
        """Run the chunk transforms on the placed slab in a worker, then finish it."""
        assert self.transform is not None
        rows = self.apool.rows(entry.slab)
        placed = self.target(entry)
        assert placed is not None  # a pooled slab: its slot or its scratch slab
        src = placed[:rows]
        dst = self.apool.view(entry.slot)[:rows]
        transform = self.transform

        def run() -> None:
            out = transform(src)
            if out is not dst:
                dst[...] = out

        self._pump.submit(CallJob(run, lambda res: self._finish_slab(entry, _error_or_none(res))))

    def _pooled_ready(self, entry: Slab) -> None:
        """A pooled slab placed whole in its slot, with no transform to run: what
        :meth:`_finish_slab` does for it, without the branches for the other cases (this runs for
        every slab a cold pass loads, on the loop)."""
        apool, stats, slab = self.apool, self.stats, entry.slab
        if slab < self._full_slabs:
            stats.bytes_decoded += self._full_slab_nbytes
        else:
            stats.bytes_decoded += apool.rows(slab) * self._sample_nbytes
        stats.slabs_loaded += 1
        apool.slab_to_slot[slab] = entry.slot
        if entry.bad:
            apool.bad[slab] = True
        entry.finish(None)
        apool.unpin(entry, None)  # the load pin

    def _streamed_ready(self, entry: Slab) -> None:
        """A streamed slab whose rows are in their batch rows: counted, then its block is told."""
        stats, slab = self.stats, entry.slab
        if slab < self._full_slabs:
            stats.bytes_decoded += self._full_slab_nbytes
        else:
            stats.bytes_decoded += self.apool.rows(slab) * self._sample_nbytes
        stats.slabs_streamed += 1
        entry.finish(None)

    def _finish_slab(self, entry: Slab, error: BaseException | None) -> None:
        entry.scratch = None
        if entry.dests is not None:  # streamed, never in the pool: nothing to mark or unpin
            if error is None:
                self._streamed_ready(entry)
            else:
                entry.finish(error)
        elif error is None:
            self._pooled_ready(entry)
        else:
            self.apool.discard(entry)
            entry.finish(error)
            self.apool.unpin(entry, None)  # the load pin


# Reads handed to one decode job at most (local files): fewer hops per chunk, yet several jobs per
# block. Small chunks take more per job, up to JOB_BYTES of decoded data: a job's hand-off to a
# thread and its report back cost the same for 256 bytes as for 256 kB.
MIN_ITEMS_PER_JOB = 8
MAX_ITEMS_PER_JOB = 64
JOB_BYTES = 2 << 20


def items_per_job(slab_nbytes: int) -> int:
    """Reads one decode job takes at most, for slabs of ``slab_nbytes`` decoded bytes."""
    return max(MIN_ITEMS_PER_JOB, min(MAX_ITEMS_PER_JOB, JOB_BYTES // max(1, slab_nbytes)))


# Requests in flight to a remote store before the controller has measured anything (the
# former fixed default): from there it doubles while throughput follows.
START_INFLIGHT = 32


def _reader_for(geom: ArrayGeometry, decoders: Sequence[str] | None) -> ArrayReader | None:
    """The first registered decoder (in ``decoders`` order, default: all) that handles
    this array's codecs; None means zarr's own pipeline reads it."""
    from insitu.plugins.registry import get_registry

    registered = get_registry().decoders
    source = geom.source if isinstance(geom, ChunkUnits) else geom
    for name in decoders if decoders is not None else registered:
        decoder = registered[name](source) if name in registered else _unknown_decoder(name, registered)
        if decoder is not None:
            try:
                if isinstance(geom, ChunkUnits):
                    return ChunkReader(geom, decoder)
                return ArrayReader(geom, decoder)
            except (UnsupportedCodec, ValueError):  # e.g. a shard index codec we cannot read
                return None
    return None


def _zarr_region(geom: ArrayGeometry, slab: int) -> tuple[tuple[Any, ...], int]:
    """What zarr reads for one slab (or, pooled by chunk, one chunk's box), and where the sample
    axis lands in the result."""
    if isinstance(geom, ChunkUnits):
        coords = geom.chunk_coords(slab)
        box = tuple(
            slice(i * c, min((i + 1) * c, n))
            for i, c, n in zip(coords, geom.chunk_shape, geom.shape, strict=True)
        )
        return box, geom.sample_axis
    c = geom.chunk_len
    return geom.orthogonal_region(slice(slab * c, min((slab + 1) * c, geom.n_samples)))


def _unknown_decoder(name: str, registered: Mapping[str, Any]) -> Any:
    raise ConfigError(f"unknown decoder {name!r}; registered decoders: {sorted(registered)}")


def _piece_key(read: Read, piece: Piece) -> str:
    return read.key if read.byte_range is None else f"{read.key} (inner chunk {piece.coords})"


def _error_fill(geom: ArrayGeometry, policy: BadChunkPolicy, error_fills: Mapping[str, Any]) -> Any:
    """What a chunk of ``geom`` that fails is filled with: nothing under ``on_bad_chunk="raise"``,
    NaN for floats, else the array's raw error fill (which CF decoding turns into NaN) or its fill value."""
    if policy is BadChunkPolicy.RAISE:
        return None
    if geom.dtype.kind in "fc":
        return np.nan
    return error_fills.get(geom.path, geom.fill_value)


def _bad_kind(error: BaseException | None) -> BadChunkKind:
    """Which ``bad_chunks_*`` counter an exception from decoding a chunk belongs to."""
    return BadChunkKind.SIZE if isinstance(error, ChunkSizeError) else BadChunkKind.DECODE


def _is_outage(error: BaseException) -> bool:
    """For an error raised while *fetching* (never decoding): True when the store failed to deliver
    (a connection, a timeout, a refusal, a store's own error type), told apart by type."""
    return isinstance(error, (OSError, TimeoutError, StoreUnavailableError))


def _error_or_none(result: Any) -> BaseException | None:
    return result if isinstance(result, BaseException) else None
