"""A store wrapper that records every read, so tests can prove what was fetched and how often."""

from __future__ import annotations

import collections
import threading
from typing import Any

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, Store
from zarr.storage import WrapperStore


def is_chunk_key(key: str) -> bool:
    """True for chunk or shard keys; False for metadata (``zarr.json``, ``.zarray``, ``.zattrs``...)."""
    name = key.rsplit("/", 1)[-1]
    return not (name == "zarr.json" or name.startswith(".z"))


class RecordingStore(WrapperStore[Any]):
    """Wraps a store and records the key and byte range of every ``get``, in order (thread-safe)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.reads: list[tuple[str, ByteRequest | None]] = []
        self._lock = threading.Lock()

    def _with_store(self, store: Store) -> RecordingStore:
        return type(self)(store)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """Record ``(key, byte_range)``, then read through the wrapped store."""
        with self._lock:
            self.reads.append((key, byte_range))
        return await self._store.get(key, prototype, byte_range)

    @property
    def gets(self) -> collections.Counter[str]:
        """Reads per key, metadata included."""
        with self._lock:
            return collections.Counter(key for key, _ in self.reads)

    def chunk_gets(self) -> collections.Counter[str]:
        """Reads per chunk (or shard) key; metadata reads left out."""
        with self._lock:
            return collections.Counter(key for key, _ in self.reads if is_chunk_key(key))

    def chunk_reads(self) -> list[str]:
        """Chunk (or shard) keys in the order they were read."""
        with self._lock:
            return [key for key, _ in self.reads if is_chunk_key(key)]
