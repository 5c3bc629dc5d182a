"""Store capabilities are protocols, found once per store and used by the fetcher and the cache."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore, MemoryStore, WrapperStore

from insitu.store.capabilities import (
    ByteRangeReads,
    IdentifiedStore,
    MultiRangeReads,
    RawReads,
    RetriesItself,
    capabilities_of,
    local_file_version,
    object_version,
    store_identity,
)
from insitu.store.fetch import ChunkFetcher
from insitu.store.retry import RetryPolicy


def _local(tmp_path: Path) -> LocalStore:
    group = zarr.open_group(LocalStore(tmp_path / "a.zarr"), mode="w")
    group.create_array("v", shape=(8,), chunks=(4,), dtype="f8")[...] = np.arange(8.0)
    return LocalStore(tmp_path / "a.zarr", read_only=True)


class Watched(WrapperStore[Any]):
    """Declares multi-range reads and a retry policy, and counts how often the engine looks."""

    looks = 0

    def _with_store(self, store: Any) -> Watched:
        return Watched(store)

    @property
    def insitu_retry_policy(self) -> RetryPolicy:
        type(self).looks += 1
        return RetryPolicy(retries=0)

    async def insitu_get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[Any] | None:
        data = await self._store.get(key, zarr.buffer.default_buffer_prototype())
        return None if data is None else [data.to_bytes()[a:b] for a, b in ranges]


def test_every_zarr_store_reads_byte_ranges_and_nothing_more(tmp_path: Path) -> None:
    for store in (MemoryStore(), _local(tmp_path)):
        assert isinstance(store, ByteRangeReads)
        assert not isinstance(store, (RawReads, MultiRangeReads, IdentifiedStore, RetriesItself))
    assert capabilities_of(MemoryStore()).names() == ()
    assert capabilities_of(_local(tmp_path)).names() == ("object_versions",)  # size and mtime


def test_declared_capabilities_are_found(tmp_path: Path) -> None:
    caps = capabilities_of(Watched(_local(tmp_path)))
    assert caps.multi_range_reads
    assert caps.retries_itself
    assert caps.retry_policy == RetryPolicy(retries=0)
    # Object versions come from the local directory the wrapper holds (wrappers pass bytes through).
    assert caps.names() == ("multi_range_reads", "object_versions", "retries_itself")


def test_the_fetcher_looks_at_capabilities_once_not_per_read(tmp_path: Path) -> None:
    store = Watched(_local(tmp_path))
    fetcher = ChunkFetcher(store, RetryPolicy())
    looks = Watched.looks

    async def read_many() -> list[Any]:
        wholes = [await fetcher.get("v/c/0") for _ in range(20)]
        parts = [await fetcher.get_ranges("v/c/1", [(0, 2), (4, 6)]) for _ in range(20)]
        return wholes + parts

    got = asyncio.run(read_many())
    assert all(g is not None for g in got)
    assert Watched.looks == looks, "capabilities are read when the fetcher is built, never per read"
    assert fetcher.reads_many_ranges


def test_identity_comes_from_the_store_or_its_location(tmp_path: Path) -> None:
    class Named(WrapperStore[Any]):
        def insitu_identity(self) -> str:
            return "named:1"

    class Attribute(WrapperStore[Any]):
        insitu_identity = "attribute:1"

    local = _local(tmp_path)
    assert store_identity(Named(local)) == "named:1"
    assert store_identity(Attribute(local)) == "attribute:1"
    assert store_identity(local) == f"file://{(tmp_path / 'a.zarr').resolve()}"
    assert store_identity(WrapperStore(local)) == store_identity(local), "a wrapper names what it wraps"
    assert store_identity(LocalStore(tmp_path / "a.zarr")) == store_identity(local), "stable across opens"
    assert store_identity(LocalStore(tmp_path / "b.zarr")) != store_identity(local)


def test_the_cache_names_stores_with_the_same_function() -> None:
    from insitu.engine import cache

    assert cache.store_identity is store_identity


def test_local_file_versions_follow_size_and_mtime(tmp_path: Path) -> None:
    store = _local(tmp_path)
    before = asyncio.run(object_version(store, "v/c/0"))
    assert before == local_file_version(tmp_path / "a.zarr" / "v" / "c" / "0")
    assert asyncio.run(object_version(store, "v/c/9")) is None
    (tmp_path / "a.zarr" / "v" / "c" / "0").write_bytes(b"other bytes")
    assert asyncio.run(object_version(store, "v/c/0")) != before


def test_a_store_without_versions_says_so() -> None:
    with pytest.raises(TypeError, match="reports no object versions"):
        asyncio.run(object_version(MemoryStore(), "k"))


def test_the_identity_of_an_unknown_store_hides_credentials_its_str_shows() -> None:
    from insitu.store.capabilities import store_identity

    class Shows:  # a third-party store that names itself by its URL
        def __str__(self) -> str:
            return "https://reader:PWsecret99@example.org/x.zarr"

    ident = store_identity(Shows())  # type: ignore[arg-type]
    assert "PWsecret99" not in ident
    assert "example.org/x.zarr" in ident
