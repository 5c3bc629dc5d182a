"""Loading slabs into the pool: async fetch under one budget, decode in threads.

``Engine.load`` is called on the event loop with freshly reserved pool
entries. Local files are read inside decode threads; other stores are fetched
with ``Store.get`` under a single ``max_inflight`` semaphore. Sharded arrays
first read each shard's index (cached), then fetch the inner chunks they need
as coalesced byte ranges. When every piece of a slab is placed, chunk
transforms run once, and the slab becomes ready.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store

from insitu.buffers import BufferPool
from insitu.codecs import UnsupportedCodec
from insitu.errors import BadChunkError, ConfigError
from insitu.fetch import ChunkFetcher, RetryPolicy
from insitu.geometry import ArrayGeometry
from insitu.jobs import CallJob, DecodeJob, DecodePump, ReadItem
from insitu.pool import ArrayPool, ChunkPool, Slab
from insitu.reads import ArrayReader, Piece, Read

ChunkTransform = Callable[[str, np.ndarray], np.ndarray]
BAD_CHUNK_POLICIES = ("raise", "nan", "skip")


@dataclass
class EngineStats:
    """Counters a user can read from ``dataset.stats``."""

    reads: int = 0  # GETs issued (whole chunks, byte ranges and shard indexes)
    bytes_read: int = 0
    chunks_decoded: int = 0
    slabs_loaded: int = 0
    slab_hits: int = 0  # slab uses served by the pool without a load
    missing_chunks: int = 0  # absent from the store: fill value
    bad_chunks: int = 0  # failed to read/decode (on_bad_chunk="nan"/"skip")
    batches: int = 0
    samples: int = 0
    skipped_samples: int = 0
    iterating_s: float = 0.0  # consumer wall time inside view iteration
    waiting_s: float = 0.0  # ... of which spent waiting for the next batch (the loader was behind)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


class Engine:
    """Owns the store connection, the decode threads and the pool for one dataset."""

    def __init__(
        self,
        store: Store,
        geoms: Mapping[str, ArrayGeometry],
        pool: ChunkPool,
        loop: asyncio.AbstractEventLoop,
        *,
        max_inflight: int,
        decode_threads: int,
        on_bad_chunk: str,
        chunk_transforms: Mapping[str, Sequence[ChunkTransform]],
        retry: RetryPolicy,
        decoders: Sequence[str] | None = None,
    ) -> None:
        self.store = store
        self.pool = pool
        self.loop = loop
        self.fetcher = ChunkFetcher(store, retry)
        self.readers: dict[str, ArrayReader | None] = {
            path: _reader_for(g, decoders) for path, g in geoms.items()
        }
        self.geoms = dict(geoms)
        self.executor = ThreadPoolExecutor(decode_threads, thread_name_prefix="insitu-io")  # cache checks
        self.gather_executor = ThreadPoolExecutor(1, thread_name_prefix="insitu-gather")
        self.pump = DecodePump(loop, decode_threads)
        self.buffers = BufferPool()
        self.max_items_per_job = 8
        self.inflight = asyncio.Semaphore(max_inflight)
        self.on_bad_chunk = on_bad_chunk
        self.chunk_transforms = chunk_transforms
        self.stats = EngineStats()
        self._space_waiters: list[asyncio.Future[None]] = []
        self._shard_index: dict[tuple[str, tuple[int, ...]], asyncio.Future[np.ndarray | None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._zarr_arrays: dict[str, Any] = {}

    # -- pool space ----------------------------------------------------------
    async def wait_space(self) -> None:
        fut = self.loop.create_future()
        self._space_waiters.append(fut)
        await fut

    def notify_space(self) -> None:
        waiters, self._space_waiters = self._space_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # -- loading -------------------------------------------------------------
    def load(self, path: str, entries: Sequence[Slab], priority: int = 0) -> None:
        """Start loading freshly reserved entries (each holds one load pin).

        ``priority``: lower decodes first (the epoch passes the block number, so the block the
        consumer waits for is not queued behind read-ahead blocks whose bytes arrived with it)."""
        apool = self.pool.arrays[path]
        self.pool.note_resident()
        reader = self.readers[path]
        if reader is None:
            for e in entries:
                e.pending = 1
                self._spawn(self._load_via_zarr(path, apool, e))
            return
        for e in entries:
            e.pending = reader.chunks_per_slab
        by_slab = {e.slab: e for e in entries}
        if reader.geom.is_sharded:
            for shard, wanted in reader.shards_of(by_slab).items():
                self._spawn(self._load_shard(path, reader, apool, shard, wanted, by_slab, priority))
            return
        items = [
            ReadItem(
                read, [by_slab[slab]] * len(read.pieces), [apool.view(by_slab[slab].slot)] * len(read.pieces)
            )
            for slab, read in reader.reads(by_slab)
        ]
        self._dispatch(path, reader, apool, items, priority)

    def _dispatch(
        self, path: str, reader: ArrayReader, apool: ArrayPool, items: list[ReadItem], priority: int = 0
    ) -> None:
        """Local files: read and decode in workers, several reads per job. Else: fetch each on the loop."""
        if not self.fetcher.reads_files:
            for item in items:
                self._spawn(self._fetch_then_decode(path, reader, apool, item, priority))
            return
        self.stats.reads += len(items)
        # Enough jobs to occupy every thread, few enough that one loop-to-thread hop
        # (and one completion callback) serves several chunks.
        per_job = max(1, min(self.max_items_per_job, -(-len(items) // self.pump.threads)))
        for i in range(0, len(items), per_job):
            self.pump.submit(self._job(path, reader, apool, items[i : i + per_job], local=True), priority)

    def _job(
        self, path: str, reader: ArrayReader, apool: ArrayPool, items: list[ReadItem], *, local: bool = False
    ) -> DecodeJob:
        return DecodeJob(
            reader,
            items,
            on_done=lambda job, results: self._job_done(path, apool, job, results),
            local=self.fetcher if local else None,
            fill_on_error=self._error_fill(reader.geom),
        )

    async def _fetch_then_decode(
        self, path: str, reader: ArrayReader, apool: ArrayPool, item: ReadItem, priority: int = 0
    ) -> None:
        read = item.read
        try:
            async with self.inflight:
                self.stats.reads += 1
                item.raw = await self.fetcher.get(read.key, read.byte_range)
        except Exception as exc:
            self._fail_pieces(path, apool, item, exc)
            return
        self.pump.submit(self._job(path, reader, apool, [item]), priority)

    async def _load_shard(
        self,
        path: str,
        reader: ArrayReader,
        apool: ArrayPool,
        shard: tuple[int, ...],
        wanted: list[tuple[int, tuple[int, ...]]],
        by_slab: dict[int, Slab],
        priority: int = 0,
    ) -> None:
        try:
            index = await self._get_shard_index(path, reader, shard)
        except Exception as exc:
            for slab, coords in wanted:
                read = Read(reader.shard_key(shard), None, (Piece(coords, 0, None),))
                self._fail_pieces(path, apool, self._item(apool, read, [by_slab[slab]]), exc)
            return
        reads, missing = reader.coalesced_reads(shard, index, wanted)
        if missing:  # absent inner chunks: a job with no bytes writes the fill value
            fill = Read(reader.shard_key(shard), None, tuple(Piece(c, 0, None) for _, c in missing))
            self.pump.submit(
                self._job(path, reader, apool, [self._item(apool, fill, [by_slab[s] for s, _ in missing])]),
                priority,
            )
        items = [self._item(apool, read, [by_slab[s] for s in slabs]) for slabs, read in reads]
        if len(items) > 1 and self.fetcher.reads_many_ranges:
            # Several runs of one shard (a sparse selection): one multi-range request, not one per run.
            await self._fetch_ranges_then_decode(
                path, reader, apool, reader.shard_key(shard), items, priority
            )
        elif items:
            self._dispatch(path, reader, apool, items, priority)

    async def _fetch_ranges_then_decode(
        self,
        path: str,
        reader: ArrayReader,
        apool: ArrayPool,
        key: str,
        items: list[ReadItem],
        priority: int = 0,
    ) -> None:
        ranges = [item.read.byte_range for item in items]
        try:
            async with self.inflight:
                self.stats.reads += 1
                parts = await self.fetcher.get_ranges(key, [r for r in ranges if r is not None])
        except Exception as exc:
            for item in items:
                self._fail_pieces(path, apool, item, exc)
            return
        for i, item in enumerate(items):
            item.raw = None if parts is None else parts[i]
        self.pump.submit(self._job(path, reader, apool, items), priority)

    @staticmethod
    def _item(apool: ArrayPool, read: Read, targets: list[Slab]) -> ReadItem:
        return ReadItem(read, targets, [apool.view(t.slot) for t in targets])

    async def _get_shard_index(
        self, path: str, reader: ArrayReader, shard: tuple[int, ...]
    ) -> np.ndarray | None:
        key = (path, shard)
        fut = self._shard_index.get(key)
        if fut is None:
            fut = self.loop.create_future()
            self._shard_index[key] = fut
            try:
                where, n = reader.index_range()
                async with self.inflight:
                    self.stats.reads += 1
                    if where == "suffix":
                        raw = await self.fetcher.get(reader.shard_key(shard), suffix=n)
                    else:
                        raw = await self.fetcher.get(reader.shard_key(shard), byte_range=(0, n))
                fut.set_result(None if raw is None else reader.decode_index(raw))
            except Exception as exc:
                del self._shard_index[key]
                fut.set_exception(exc)
                fut.exception()  # retrieved here; re-raised to every waiter below
        return await asyncio.shield(fut)

    async def _load_via_zarr(self, path: str, apool: ArrayPool, entry: Slab) -> None:
        """Fallback for codecs the direct decoder does not know: zarr reads the region."""
        g = apool.geom
        arr = self._zarr_arrays.get(path)
        if arr is None:
            arr = zarr.open_array(store=self.store, path=path, mode="r").async_array
            self._zarr_arrays[path] = arr
        c = g.chunk_len
        lo, hi = entry.slab * c, min((entry.slab + 1) * c, g.n_samples)
        region = tuple(slice(lo, hi) if d == g.sample_axis else slice(None) for d in range(len(g.shape)))
        try:
            async with self.inflight:
                data = await arr.getitem(region)
        except Exception as exc:
            self._piece_done(path, apool, entry, BadChunkError(path, f"samples {lo}:{hi}", repr(exc)))
            return
        view = apool.view(entry.slot)

        def place() -> None:
            view[: hi - lo] = np.moveaxis(np.asarray(data), g.sample_axis, 0)

        def done(res: Any) -> None:
            err = _error_or_none(res)
            self._piece_done(
                path,
                apool,
                entry,
                None if err is None else BadChunkError(path, f"samples {lo}:{hi}", repr(err)),
            )

        self.stats.chunks_decoded += 1
        self.pump.submit(CallJob(place, done))

    # -- completion ----------------------------------------------------------
    def _job_done(self, path: str, apool: ArrayPool, job: DecodeJob, results: Any) -> None:
        stats = self.stats
        for item, (nbytes, errors, missing) in zip(job.items, results, strict=True):
            stats.bytes_read += nbytes
            if missing:
                stats.missing_chunks += len(item.targets)
            for piece, entry, err in zip(item.read.pieces, item.targets, errors, strict=True):
                if err is None:
                    if not missing:
                        stats.chunks_decoded += 1
                    self._piece_done(path, apool, entry, None)
                else:
                    self._piece_done(
                        path, apool, entry, BadChunkError(path, _piece_key(item.read, piece), repr(err))
                    )

    def _fail_pieces(self, path: str, apool: ArrayPool, item: ReadItem, exc: BaseException) -> None:
        reader = self.readers[path]
        fill = self._error_fill(apool.geom)
        for piece, entry, view in zip(item.read.pieces, item.targets, item.views, strict=True):
            if fill is not None and reader is not None:
                reader.fill(piece.coords, fill, view)
            self._piece_done(path, apool, entry, BadChunkError(path, _piece_key(item.read, piece), repr(exc)))

    def _piece_done(self, path: str, apool: ArrayPool, entry: Slab, error: BadChunkError | None) -> None:
        if error is not None:
            if self.on_bad_chunk == "raise":
                if entry.error is None:
                    entry.error = error
            else:
                self.stats.bad_chunks += 1
                entry.bad = True
        entry.pending -= 1
        if entry.pending == 0:
            self._finish_slab(path, apool, entry, entry.error)

    def _finish_slab(self, path: str, apool: ArrayPool, entry: Slab, error: BaseException | None) -> None:
        transforms = self.chunk_transforms.get(apool.geom.name)
        if error is None and transforms and not entry.transformed:
            entry.transformed = True
            rows = min(apool.geom.chunk_len, apool.geom.n_samples - entry.slab * apool.geom.chunk_len)
            fn = _transform_fn(apool.geom.name, transforms, apool.view(entry.slot)[:rows])
            self.pump.submit(
                CallJob(fn, lambda res: self._finish_slab(path, apool, entry, _error_or_none(res)))
            )
            return
        if error is not None:
            apool.discard(entry)
        else:
            self.stats.slabs_loaded += 1
            apool.mark_ready(entry)
            if entry.bad:
                apool.bad[entry.slab] = True
        entry.finish(error)
        apool.unpin(entry, None)  # the load pin
        if self._space_waiters:
            self.notify_space()

    def _error_fill(self, geom: ArrayGeometry) -> Any:
        if self.on_bad_chunk == "raise":
            return None
        return np.nan if geom.dtype.kind in "fc" else geom.fill_value

    # -- housekeeping --------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        self.pump.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def shutdown_threads(self) -> None:
        self.pump.shutdown()
        self.executor.shutdown(wait=True, cancel_futures=False)
        self.gather_executor.shutdown(wait=True)


def _reader_for(geom: ArrayGeometry, decoders: Sequence[str] | None) -> ArrayReader | None:
    """The first registered decoder (in ``decoders`` order, default: all) that handles
    this array's codecs; None means zarr's own pipeline reads it."""
    from insitu.plugins import get_registry

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


def _error_or_none(result: Any) -> BaseException | None:
    return result if isinstance(result, BaseException) else None


def _transform_fn(name: str, transforms: Sequence[ChunkTransform], view: np.ndarray) -> Callable[[], None]:
    def run() -> None:
        block = view
        for t in transforms:
            block = t(name, block)
        if block is not view:
            block = np.asarray(block)
            if block.shape != view.shape or block.dtype != view.dtype:
                raise ValueError(
                    f"chunk transform for {name!r} changed shape/dtype {view.shape}/{view.dtype} "
                    f"to {block.shape}/{block.dtype}; chunk transforms must keep both"
                )
            view[...] = block

    return run
