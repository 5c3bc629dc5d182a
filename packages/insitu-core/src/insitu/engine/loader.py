"""Loading slabs into the pool: async fetch under one budget, decode in threads, transform.

:class:`Engine` holds what every array shares: the store's fetcher and its
``max_inflight`` budget, the decode threads and the counters. Each array has
an :class:`ArrayLoader` that knows its layout (through its reader), its pool
and its chunk transforms. ``Engine.load`` is called on the event loop with
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
import heapq
import itertools
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.layout import ArrayReader, Piece, Read
from insitu.arrays.transforms import ChunkTransform, chain_runner, source_spec
from insitu.engine.concurrency import ConcurrencyController, FetchGovernor
from insitu.engine.jobs import CallJob, ChunkReadError, DecodeJob, DecodePump, ReadItem
from insitu.engine.pool import ArrayPool, ChunkPool, Slab
from insitu.engine.scatter import ScratchBuffers
from insitu.errors import BadChunkError, ConfigError, InSituError, StoreUnavailableError
from insitu.options import BadChunkPolicy
from insitu.store.codecs import ChunkSizeError, UnsupportedCodec
from insitu.store.fetch import ChunkFetcher
from insitu.store.retry import RetryPolicy
from insitu.store.zarr_reads import SLAB_SOURCES, FetchingStore


@dataclass
class EngineStats:
    """Counters a user can read from ``dataset.stats``."""

    reads: int = 0  # GETs issued (whole chunks, byte ranges and shard indexes)
    bytes_read: int = 0
    chunks_decoded: int = 0
    slabs_loaded: int = 0  # decoded into the pool
    slabs_streamed: int = 0  # decoded outside the pool, straight into batch rows (not cached)
    slab_hits: int = 0  # slab uses served by the pool without a load
    missing_chunks: int = 0  # absent from the store: fill value
    bad_chunks: int = 0  # failed to read/decode (on_bad_chunk="nan"/"skip"), of which:
    bad_chunks_read: int = 0  # always 0: a store that fails to deliver raises StoreUnavailableError
    bad_chunks_size: int = 0  # ... the bytes decode (or are stored) at another size than the chunk's
    bad_chunks_decode: int = 0  # ... the codecs rejected the bytes
    batches: int = 0
    samples: int = 0
    skipped_samples: int = 0
    dropped_batches: int = 0  # batches skipping left empty (or short, with drop_last): not delivered
    iterating_s: float = 0.0  # consumer wall time inside view iteration
    waiting_s: float = 0.0  # ... of which spent waiting for the next batch (the loader was behind)

    def as_dict(self) -> dict[str, float]:
        """The counters as a plain dict."""
        return asdict(self)


_RUNNING: set[asyncio.Task[Any]] = set()  # every engine's live tasks (see Engine.spawn)


class Engine:
    """The shared part of loading: store fetcher and request budget, decode threads, counters."""

    def __init__(
        self,
        store: Store,
        pool: ChunkPool,
        loop: asyncio.AbstractEventLoop,
        *,
        max_inflight: int,
        decode_threads: int,
        on_bad_chunk: BadChunkPolicy,
        chunk_transforms: Mapping[str, Sequence[ChunkTransform]],
        retry: RetryPolicy,
        decoders: Sequence[str] | None = None,
        track_sources: bool = False,
        error_fills: Mapping[str, Any] | None = None,
    ) -> None:
        self.store = store
        # The raw value a bad integer chunk is filled with, by array path: CF decoding turns it into NaN.
        self.error_fills = dict(error_fills or {})
        self.track_sources = track_sources
        self.pool = pool
        self.loop = loop
        self.fetcher = ChunkFetcher(store, retry)
        self.executor = ThreadPoolExecutor(decode_threads, thread_name_prefix="insitu-io")  # cache checks
        self.pump = DecodePump(loop, decode_threads)
        self.scratch = ScratchBuffers()  # per decode thread: where streamed slabs decode
        self.fetches = FetchQueue(self, max_inflight)
        # Requests in flight to the store: chosen by a controller, at most max_inflight (see
        # insitu.engine.concurrency); every remote read holds a slot of this one limiter.
        self.concurrency = FetchGovernor(
            ConcurrencyController(max_inflight, start=min(max_inflight, START_INFLIGHT)),
            demand=self.fetches.has_queued,
            decode_busy_s=self.pump.busy_s,
            retries=self._retries_so_far,
        )
        self.inflight = self.concurrency.limiter
        self.on_bad_chunk = on_bad_chunk
        self.stats = EngineStats()
        if not self.fetcher.reads_files:
            # A remote store's round trips leave cores idle in which fresh pool pages can be
            # committed. Local files keep the decoders busy; there the thread measured slower
            # (first batch 7-11 ms later, cold pass no faster on the 2-core reference machine).
            pool.start_prefault()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.loaders = {
            path: ArrayLoader(
                self,
                apool,
                _reader_for(apool.geom, decoders),
                tuple(chunk_transforms.get(apool.geom.path, ())),
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

    def inflight_limits(self, since: int = 0) -> tuple[int, ...]:
        """The requests-in-flight limit in force at change ``since`` and each chosen after it
        (empty for local files, read in the decode threads without a limit)."""
        if not self.adapts_inflight:
            return ()
        return tuple(self.concurrency.controller.limits_since(since))

    def _retries_so_far(self) -> int:
        fetcher = self.fetcher
        own = fetcher.retries + fetcher.timeouts
        return own + (fetcher.store_retries or 0) if fetcher.capabilities.reports_retries else own

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
        engine: Engine,
        apool: ArrayPool,
        reader: ArrayReader | None,
        transforms: tuple[ChunkTransform, ...],
    ) -> None:
        self.engine = engine
        self.apool = apool
        self.geom = apool.geom
        self.path = apool.geom.path
        self.reader = reader
        self.stats = engine.stats
        self.fetcher = engine.fetcher
        self.transform = chain_runner(self.geom.name, transforms, apool.spec) if transforms else None
        # Transforms that change shape or dtype: chunks decode into a scratch slab, and the
        # transformed slab is written to the (differently sized) slot.
        self.uses_scratch = apool.spec != source_spec(self.geom)
        # A streamed slab of one chunk with no transform is decoded and scattered by one decode
        # job, into that thread's scratch; any other streamed slab decodes into a scratch slab of
        # its own and is transformed and scattered once every chunk of it is in.
        self.streams_in_job = reader is not None and reader.chunks_per_slab == 1 and self.transform is None
        self._shard_index: dict[tuple[int, ...], asyncio.Future[np.ndarray | None]] = {}
        self._zarr_array: Any = None

    def target(self, entry: Slab) -> np.ndarray | None:
        """Where the chunks of a loading slab decode (None: the decode job chooses, see
        :class:`insitu.engine.jobs.DecodeJob`)."""
        if entry.scratch is not None:
            return entry.scratch
        return None if entry.is_streamed else self.apool.view(entry.slot)

    def load(self, entries: Sequence[Slab], priority: int) -> None:
        """Start loading ``entries`` (slabs of this array): reads, decode jobs at ``priority``, then
        transforms; each entry's waiters are told when it is ready or failed."""
        if self.engine.track_sources:
            for e in entries:
                e.sources = [] if not e.is_streamed else None
        for e in entries:
            if self.uses_scratch or (e.is_streamed and not self.streams_in_job):
                e.scratch = np.empty(self.geom.slab_shape, self.geom.dtype)
        reader = self.reader
        if reader is None:
            for e in entries:
                e.pending = 1
                self.engine.spawn(self._load_via_zarr(e))
            return
        for e in entries:
            e.pending = reader.chunks_per_slab
        by_slab = {e.slab: e for e in entries}
        if reader.geom.is_sharded:
            for shard, wanted in reader.shards_of(by_slab).items():
                self.engine.spawn(self._load_shard(shard, wanted, by_slab, priority))
            return
        items = [self._item(read, [by_slab[slab]] * len(read.pieces)) for slab, read in reader.reads(by_slab)]
        self._dispatch(items, priority)

    def _item(self, read: Read, targets: list[Slab]) -> ReadItem:
        return ReadItem(read, targets, [self.target(t) for t in targets])

    def _dispatch(self, items: list[ReadItem], priority: int = 0) -> None:
        """Local files: read and decode in workers, several reads per job. Else: fetch each on the loop."""
        if not self.fetcher.reads_files:
            fetches = self.engine.fetches
            for item in items:
                fetches.put(priority, self, item)
            return
        self.stats.reads += len(items)
        pump = self.engine.pump
        # Enough jobs to occupy every thread, few enough that one loop-to-thread hop
        # (and one completion callback) serves several chunks.
        per_job = max(1, min(MAX_ITEMS_PER_JOB, -(-len(items) // pump.threads)))
        for i in range(0, len(items), per_job):
            pump.submit(self._job(items[i : i + per_job], local=True), priority)

    def _job(self, items: list[ReadItem], *, local: bool = False) -> DecodeJob:
        assert self.reader is not None
        return DecodeJob(
            self.reader,
            items,
            on_done=self._job_done,
            local=self.fetcher if local else None,
            fill_on_error=self._error_fill(),
            track_sources=self.engine.track_sources,
            scratch=self.engine.scratch,
        )

    async def _fetch_then_decode(self, item: ReadItem, priority: int = 0) -> None:
        """One GET (the caller holds a slot of the engine's request budget), then its decode."""
        read = item.read
        governor = self.engine.concurrency
        try:
            if self.engine.track_sources and self.fetcher.capabilities.object_versions:
                # Asked before the GET: a rewrite in between makes the cached slab look
                # stale next time (a re-read), never a changed object look unchanged.
                version = await self.fetcher.version(read.key)
                item.source = "absent" if version is None else f"v:{version}"
            self.stats.reads += 1
            item.raw = await self.fetcher.get(read.key, read.byte_range)
        except Exception as exc:
            governor.failed(exc)
            self._fail_pieces(item, exc)
            return
        governor.succeeded(item.raw)
        self.engine.pump.submit(self._job([item]), priority)

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
                self._fail_pieces(self._item(read, [by_slab[slab]]), exc)
            return
        reads, missing = reader.coalesced_reads(shard, index, wanted)
        if missing:  # absent inner chunks: a job with no bytes writes the fill value
            fill = Read(reader.shard_key(shard), None, tuple(Piece(c, 0, None) for _, c in missing))
            self.engine.pump.submit(self._job([self._item(fill, [by_slab[s] for s, _ in missing])]), priority)
        items = [self._item(read, [by_slab[s] for s in slabs]) for slabs, read in reads]
        if len(items) > 1 and self.fetcher.reads_many_ranges:
            # Several runs of one shard (a sparse selection): one multi-range request, not one per run.
            await self._fetch_ranges_then_decode(reader.shard_key(shard), items, priority)
        elif items:
            self._dispatch(items, priority)

    async def _fetch_ranges_then_decode(self, key: str, items: list[ReadItem], priority: int = 0) -> None:
        ranges = [item.read.byte_range for item in items]
        try:
            async with self.engine.inflight:
                self.stats.reads += 1
                parts = await self.fetcher.get_ranges(key, [r for r in ranges if r is not None])
        except Exception as exc:
            for item in items:
                self._fail_pieces(item, exc)
            return
        for i, item in enumerate(items):
            item.raw = None if parts is None else parts[i]
        self.engine.pump.submit(self._job(items), priority)

    async def _get_shard_index(self, shard: tuple[int, ...]) -> np.ndarray | None:
        reader = self.reader
        assert reader is not None
        fut = self._shard_index.get(shard)
        if fut is None:
            fut = self.engine.loop.create_future()
            self._shard_index[shard] = fut
            try:
                where, n = reader.index_range()
                async with self.engine.inflight:
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
            store = FetchingStore(self.engine.store, self.fetcher, self.stats)
            self._zarr_array = zarr.open_array(store=store, path=self.path, mode="r").async_array
        c = g.chunk_len
        lo, hi = entry.slab * c, min((entry.slab + 1) * c, g.n_samples)
        region, axis = g.orthogonal_region(slice(lo, hi))
        token = SLAB_SOURCES.set(entry.sources)  # None unless a persisted cache tracks sources
        try:
            async with self.engine.inflight:
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
            view[: hi - lo] = np.moveaxis(np.asarray(data), axis, 0)

        def done(res: Any) -> None:
            err = _error_or_none(res)
            bad = None if err is None else BadChunkError(self.path, f"samples {lo}:{hi}", repr(err))
            self._piece_done(entry, bad, _bad_kind(err))

        self.stats.chunks_decoded += 1
        self.engine.pump.submit(CallJob(place, done))

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
        for item, (nbytes, errors, missing) in zip(job.items, results, strict=True):
            stats.bytes_read += nbytes
            if item.source is not None:
                read = item.read
                for entry in item.targets:
                    if entry.sources is not None:
                        entry.sources.append((read.key, read.byte_range, item.source))
            if missing:
                stats.missing_chunks += len(item.targets)
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

    def _fail_pieces(self, item: ReadItem, exc: BaseException) -> None:
        if _is_outage(exc):  # the store did not deliver the bytes: an error whatever on_bad_chunk says
            error = self.fetcher.unavailable(item.read.key, exc, self.path)
            for entry in item.targets:
                self._piece_done(entry, error)
            return
        fill = self._error_fill()
        for piece, entry, view in zip(item.read.pieces, item.targets, item.views, strict=True):
            if fill is not None and self.reader is not None:
                if view is not None:
                    self.reader.fill(piece.coords, fill, view)
                elif entry.dests is not None:  # streamed in the job: its batch rows take the fill
                    entry.dests.fill(fill)
            self._piece_done(entry, BadChunkError(self.path, _piece_key(item.read, piece), repr(exc)))

    def _piece_done(self, entry: Slab, error: InSituError | None, kind: str = "") -> None:
        if error is not None:
            if self.engine.on_bad_chunk is BadChunkPolicy.RAISE or isinstance(error, StoreUnavailableError):
                if entry.error is None:
                    entry.error = error
            else:
                self.stats.bad_chunks += 1
                counter = f"bad_chunks_{kind or 'decode'}"
                setattr(self.stats, counter, getattr(self.stats, counter) + 1)
                entry.bad = True
        entry.pending -= 1
        if entry.pending == 0:
            if entry.is_streamed and entry.scratch is not None and entry.error is None:
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

        self.engine.pump.submit(CallJob(run, lambda res: self._finish_slab(entry, _error_or_none(res))))

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

        self.engine.pump.submit(CallJob(run, lambda res: self._finish_slab(entry, _error_or_none(res))))

    def _finish_slab(self, entry: Slab, error: BaseException | None) -> None:
        entry.scratch = None
        if entry.is_streamed:  # never in the pool: nothing to mark or unpin
            if error is None:
                self.stats.slabs_streamed += 1
            entry.finish(error)
            return
        apool = self.apool
        if error is not None:
            apool.discard(entry)
        else:
            self.stats.slabs_loaded += 1
            apool.mark_ready(entry)
            if entry.bad:
                apool.bad[entry.slab] = True
        entry.finish(error)
        apool.unpin(entry, None)  # the load pin

    def _error_fill(self) -> Any:
        if self.engine.on_bad_chunk is BadChunkPolicy.RAISE:
            return None
        if self.geom.dtype.kind in "fc":
            return np.nan
        return self.engine.error_fills.get(self.geom.path, self.geom.fill_value)


# Reads handed to one decode job at most (local files): fewer hops per chunk, yet several jobs per block.
MAX_ITEMS_PER_JOB = 8
# Requests in flight to a remote store before the controller has measured anything (the
# former fixed default): from there it doubles while throughput follows.
START_INFLIGHT = 32


class FetchQueue:
    """Whole-chunk GETs of remote stores in block order, served by ``workers`` long-lived tasks.

    A task per GET cost the loop a task, its done callback and a set update per chunk; here a GET
    is a heap push and a wake-up of an idle worker, and the chunks of the block the consumer
    waits for go out before read-ahead ones queued earlier (lower ``priority`` first). Workers
    start on the first GET, as engine tasks (cancelled with the engine); there are ``max_inflight``
    of them, and each takes a slot of the engine's adaptive limiter (shared with shard and zarr
    reads) *before* taking a GET off the heap, so the limit the controller chose is what is in
    flight, and the GET that goes out when a slot frees is the most urgent one queued then.
    """

    def __init__(self, engine: Engine, workers: int) -> None:
        self.engine = engine
        self.workers = workers
        self._heap: list[tuple[int, int, ArrayLoader, ReadItem]] = []
        self._seq = itertools.count()
        self._idle: list[asyncio.Future[None]] = []
        self._started = False

    def has_queued(self) -> bool:
        """True when GETs wait for a worker slot (demand above the chosen concurrency)."""
        return bool(self._heap)

    @property
    def outstanding(self) -> int:
        """GETs queued or holding a slot of the limiter (shard and zarr reads included)."""
        return len(self._heap) + self.engine.inflight.in_use

    def put(self, priority: int, loader: ArrayLoader, item: ReadItem) -> None:
        """Queue one GET (on the loop)."""
        heapq.heappush(self._heap, (priority, next(self._seq), loader, item))
        if not self._started:
            self._started = True
            for _ in range(self.workers):
                self.engine.spawn(self._work())
        while self._idle:
            waiter = self._idle.pop()
            if not waiter.done():
                waiter.set_result(None)
                break

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        limiter = self.engine.inflight
        while True:
            if not self._heap:
                waiter = loop.create_future()
                self._idle.append(waiter)
                await waiter
                continue
            async with limiter:
                if self._heap:  # another worker may have taken it while this one waited for a slot
                    await self._serve_next()

    async def _serve_next(self) -> None:
        # Its own frame: an idle worker keeps nothing of its last chunk alive.
        priority, _, loader, item = heapq.heappop(self._heap)
        try:
            await loader._fetch_then_decode(item, priority)
        except Exception as exc:  # a worker must outlive any one chunk; its waiters learn why
            loader._fail_pieces(item, exc)


def _reader_for(geom: ArrayGeometry, decoders: Sequence[str] | None) -> ArrayReader | None:
    """The first registered decoder (in ``decoders`` order, default: all) that handles
    this array's codecs; None means zarr's own pipeline reads it."""
    from insitu.plugins.registry import get_registry

    registered = get_registry().decoders
    for name in decoders if decoders is not None else registered:
        decoder = registered[name](geom) if name in registered else _unknown_decoder(name, registered)
        if decoder is not None:
            try:
                return ArrayReader(geom, decoder)
            except (UnsupportedCodec, ValueError):  # e.g. a shard index codec we cannot read
                return None
    return None


def _unknown_decoder(name: str, registered: Mapping[str, Any]) -> Any:
    raise ConfigError(f"unknown decoder {name!r}; registered decoders: {sorted(registered)}")


def _piece_key(read: Read, piece: Piece) -> str:
    return read.key if read.byte_range is None else f"{read.key} (inner chunk {piece.coords})"


def _bad_kind(error: BaseException | None) -> str:
    """Which ``bad_chunks_*`` counter an exception from decoding a chunk belongs to."""
    return "size" if isinstance(error, ChunkSizeError) else "decode"


def _is_outage(error: BaseException) -> bool:
    """For an error raised while *fetching* (never decoding): True when the store failed to deliver
    (a connection, a timeout, a refusal, a store's own error type), told apart by type."""
    return isinstance(error, (OSError, TimeoutError, StoreUnavailableError))


def _error_or_none(result: Any) -> BaseException | None:
    return result if isinstance(result, BaseException) else None
