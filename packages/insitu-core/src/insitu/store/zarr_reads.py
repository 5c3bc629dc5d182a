"""Arrays whose codecs only zarr's pipeline decodes still read through the engine's fetcher.

``ArrayLoader`` reads such an array with ``AsyncArray.getitem`` over a
:class:`FetchingStore`: every GET zarr makes goes through the
:class:`~insitu.store.fetch.ChunkFetcher`, so it is retried and timed out under the
dataset's single retry policy, and, for a persisted cache, records which
stored bytes each slab came from (the same sources the direct decoder
records), so a rewritten source is detected on reuse for these arrays too.
"""

from __future__ import annotations

import contextvars
import zlib
from typing import Any

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, RangeByteRequest, Store
from zarr.storage import WrapperStore

from insitu.store.fetch import ChunkFetcher

# The (key, byte range, source) list of the slab whose region zarr is reading in this task. Tasks
# zarr spawns for the chunks of that region copy the context, so they append to the same list.
SLAB_SOURCES: contextvars.ContextVar[list[tuple[str, tuple[int, int] | None, str]] | None] = (
    contextvars.ContextVar("insitu_slab_sources", default=None)
)


def is_chunk_key(key: str) -> bool:
    """Whether ``key`` names chunk data rather than metadata (``zarr.json``, ``.zarray`` and the like)."""
    name = key.rsplit("/", 1)[-1]
    return not (name == "zarr.json" or name.startswith(".z"))


class FetchingStore(WrapperStore[Store]):
    """zarr's view of the dataset's store, with every read made by the engine's fetcher."""

    def __init__(self, store: Store, fetcher: ChunkFetcher, stats: Any = None) -> None:
        super().__init__(store)
        self._fetcher = fetcher
        self._stats = stats  # the engine's counters: zarr's reads count in bytes_read like ours

    def _with_store(self, store: Store) -> FetchingStore:
        return FetchingStore(store, self._fetcher, self._stats)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """zarr's read of ``key``, made through the engine's fetcher: retried, counted in ``bytes_read``,
        and, while a slab's sources are being recorded, its object version or checksum noted."""
        fetcher = self._fetcher
        sources = SLAB_SOURCES.get()
        tracked = sources is not None and is_chunk_key(key)
        span = (byte_range.start, byte_range.end) if isinstance(byte_range, RangeByteRequest) else None
        source = None
        if tracked and fetcher.capabilities.object_versions:
            version = await fetcher.version(key)  # before the read, as the direct path does
            source = "absent" if version is None else f"v:{version}"
        try:
            buf = await fetcher.retrying(lambda: self._store.get(key, prototype, byte_range))
        except (OSError, TimeoutError) as exc:  # not delivered: an outage, not a bad chunk
            raise fetcher.unavailable(key, exc) from exc
        if buf is not None and self._stats is not None and is_chunk_key(key):
            self._stats.bytes_read += len(buf)
        if tracked and sources is not None and (byte_range is None or span is not None):
            if source is None:
                source = "absent" if buf is None else f"crc:{zlib.crc32(buf.as_numpy_array().data)}"
            sources.append((key, span, source))
        return buf

    async def get_partial_values(self, prototype: BufferPrototype, key_ranges: Any) -> list[Buffer | None]:
        """Several reads, one after another, each through :meth:`get`."""
        return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]
