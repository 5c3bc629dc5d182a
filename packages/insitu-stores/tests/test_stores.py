from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import Store
from zarr.storage import FsspecStore, LocalStore, ObjectStore

import insitu
import insitu_stores
from insitu.testing import StoreConformance, assert_entry_point
from insitu_stores import fsspec_store, obstore_store
from insitu_stores.plugin import insitu_register_stores


class TestObstoreConformance(StoreConformance):
    def writable_target(self) -> Store:
        return LocalStore(self.tmp_path / "ref")

    def open_read_store(self, target: Store) -> Store:
        return obstore_store((self.tmp_path / "ref").as_uri())


class TestFsspecConformance(StoreConformance):
    def writable_target(self) -> Store:
        return LocalStore(self.tmp_path / "ref")

    def open_read_store(self, target: Store) -> Store:
        return fsspec_store((self.tmp_path / "ref").as_uri())


@pytest.fixture
def local_store(tmp_path: Path) -> tuple[str, np.ndarray]:
    """A v3 store on disk with one chunked array; returns its file:// URL and the values."""
    values = np.arange(24 * 5 * 4, dtype="float32").reshape(24, 5, 4)
    group = zarr.open_group(str(tmp_path / "data.zarr"), mode="w")
    array = group.create_array("t2m", shape=values.shape, chunks=(6, 5, 4), dtype=values.dtype)
    array[:] = values
    return (tmp_path / "data.zarr").as_uri(), values


@pytest.mark.parametrize("builder", [obstore_store, fsspec_store], ids=["obstore", "fsspec"])
def test_stores_are_read_only(builder: Callable[..., Any], local_store: tuple[str, np.ndarray]) -> None:
    store = builder(local_store[0])
    assert store.read_only
    with pytest.raises(ValueError, match="read-only"):
        zarr.open_array(store, path="t2m", mode="r+")


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("s3://bucket/era5.zarr", {"region": "us-east-1", "skip_signature": True}),
        ("gs://bucket/era5.zarr", {}),
        ("az://container/era5.zarr", {"account_name": "account"}),
        ("https://example.com/era5.zarr", {}),
    ],
)
def test_obstore_builds_cloud_stores_without_network(url: str, options: dict[str, Any]) -> None:
    # Building a store only parses the URL and config; the first request happens on read.
    store = obstore_store(url, **options)
    assert isinstance(store, ObjectStore)
    assert store.read_only


def test_fsspec_passes_storage_options(local_store: tuple[str, np.ndarray]) -> None:
    store = fsspec_store(local_store[0], auto_mkdir=False)
    assert isinstance(store, FsspecStore)


def test_plugin_registers_both_backends() -> None:
    calls: dict[str, dict[str, Any]] = {}

    def register(name: str, builder: Callable[..., Any], **kwargs: Any) -> None:
        calls[name] = {"builder": builder, **kwargs}

    insitu_register_stores(register)
    assert set(calls) == {"obstore", "fsspec"}
    assert calls["obstore"]["builder"] is obstore_store
    assert calls["obstore"]["default"] is True
    assert {"s3", "gs", "az", "http", "https"} <= set(calls["obstore"]["schemes"])
    assert calls["fsspec"]["builder"] is fsspec_store
    assert not calls["fsspec"].get("default", False)


def test_entry_point_is_published_and_loaded() -> None:
    assert_entry_point("stores", "insitu_stores.plugin")


def test_public_names() -> None:
    assert sorted(insitu_stores.__all__) == ["fsspec_store", "obstore_store"]


def test_open_store_dispatches_through_registry(local_store: tuple[str, np.ndarray]) -> None:
    assert insitu.obstore_store is obstore_store
    assert insitu.fsspec_store is fsspec_store
    url, values = local_store
    store = insitu.open_store(url, backend="fsspec")
    np.testing.assert_array_equal(zarr.open_array(store, path="t2m", mode="r")[:], values)
