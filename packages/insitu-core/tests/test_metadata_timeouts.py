"""Metadata reads on a store insitu did not build are bounded by the retry policy: discovery
(``open_geometries``, ``InSituDataset(geometries=None)``) and the background read of the
coordinates raise ``StoreTimeoutError`` naming the store and the limit instead of waiting forever."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import finishes
from zarr.abc.store import ByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import MemoryStore, WrapperStore

import insitu
from insitu.errors import StoreTimeoutError
from insitu.store.retry import RetryPolicy

# One attempt of 0.2 s, 0.2 s to connect: the longest call is 0.4 s.
SHORT = RetryPolicy(retries=0, timeout_s=0.2, connect_timeout_s=0.2)


class HungStore(WrapperStore[Any]):
    """Never answers a GET of the keys ``hangs`` selects (a server that accepts and never replies)."""

    def __init__(self, store: Any, hangs: Callable[[str], bool]) -> None:
        super().__init__(store)
        self.hangs = hangs

    def _with_store(self, store: Any) -> HungStore:
        return HungStore(store, self.hangs)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if self.hangs(key):
            await asyncio.Event().wait()
        return await self._store.get(key, prototype, byte_range)

    def __str__(self) -> str:
        return "memory://hung"


def _source() -> MemoryStore:
    root = MemoryStore()
    group = zarr.open_group(root, mode="w")
    group.create_array("x", shape=(16, 4), chunks=(4, 4), dtype="f4", dimension_names=("time", "y"))[...] = (
        np.arange(64, dtype="f4").reshape(16, 4)
    )
    group.create_array("time", shape=(16,), chunks=(16,), dtype="i8", dimension_names=("time",))[...] = (
        np.arange(16)
    )
    return root


def test_open_geometries_on_a_hung_store_times_out_under_the_policy() -> None:
    store = HungStore(_source(), lambda key: True)
    started = time.monotonic()
    with pytest.raises(StoreTimeoutError) as caught:
        finishes(lambda: insitu.open_geometries(store, retry=SHORT), within_s=60, hang="a hung metadata read")
    assert time.monotonic() - started < 30
    assert caught.value.limit_s == pytest.approx(0.4)
    assert "memory://hung" in str(caught.value)
    assert "no answer within 0.4 s opening the arrays' metadata" in str(caught.value)


def test_dataset_discovery_reads_metadata_under_the_datasets_retry_policy() -> None:
    source = _source()
    manifest = insitu.split_by_chunk(insitu.open_geometries(source)["x"], (1.0,))
    store = HungStore(source, lambda key: True)
    started = time.monotonic()
    with pytest.raises(StoreTimeoutError) as caught:
        # The default policy would wait 75 s; the dataset's own is what discovery must use.
        finishes(lambda: insitu.InSituDataset(store, manifest, None, retry=SHORT), within_s=40)
    assert time.monotonic() - started < 30
    assert caught.value.limit_s == pytest.approx(0.4)


def test_a_hung_coordinate_read_fails_where_the_values_are_used() -> None:
    store = HungStore(_source(), lambda key: key.startswith("time/c"))
    geoms = finishes(lambda: insitu.open_geometries(store, sample_dim="time", retry=SHORT), within_s=60)
    with pytest.raises(StoreTimeoutError) as caught:
        finishes(lambda: geoms["x"].coords["time"], within_s=60, hang="a hung coordinate read")
    assert caught.value.limit_s == pytest.approx(0.4)
    assert "reading the coordinate arrays" in str(caught.value)
    # The data itself is still readable: only what needs the coordinates fails.
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
    with insitu.InSituDataset(store, manifest, geoms, batch_size=16, shuffle=False, retry=SHORT) as ds:
        (batch,) = list(ds.train)
        np.testing.assert_array_equal(batch["x"], np.arange(64, dtype="f4").reshape(16, 4))
        with pytest.raises(StoreTimeoutError):
            finishes(lambda: batch.coords["time"], within_s=60, hang="batch.coords on a hung read")
