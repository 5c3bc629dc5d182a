"""Builders, registration and URL dispatch."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from s3_servers import S3Server, run
from zarr.buffer import default_buffer_prototype
from zarr.storage import FsspecStore, ObjectStore

import insitu
import insitu_stores
from insitu.plugins.registry import get_registry
from insitu.testing import assert_entry_point, plugin_registrations
from insitu_stores import FsspecLoopStore, ObstoreStore, fsspec_store, obstore_store


@pytest.fixture
def local_store(tmp_path: Path) -> tuple[str, np.ndarray]:
    """A v3 store on disk with one chunked array; returns its file:// URL and the values."""
    values = np.arange(24 * 5 * 4, dtype="float32").reshape(24, 5, 4)
    group = zarr.open_group(str(tmp_path / "data.zarr"), mode="w")
    array = group.create_array("t2m", shape=values.shape, chunks=(6, 5, 4), dtype=values.dtype)
    array[:] = values
    return (tmp_path / "data.zarr").as_uri(), values


@pytest.mark.parametrize("builder", [obstore_store, fsspec_store], ids=["obstore", "fsspec"])
def test_stores_are_read_only_by_default(
    builder: Callable[..., Any], local_store: tuple[str, np.ndarray]
) -> None:
    store = builder(local_store[0])
    assert store.read_only
    with pytest.raises(ValueError, match="read-only"):
        zarr.open_array(store, path="t2m", mode="r+")


@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_open_store_writable_mode_writes(backend: str, tmp_path: Path) -> None:
    url = (tmp_path / "new.zarr").as_uri()
    store = insitu.open_store(url, backend=backend, mode="w")
    zarr.create_array(store, name="a", shape=(4,), dtype="i2")[...] = [1, 2, 3, 4]
    np.testing.assert_array_equal(
        zarr.open_array(insitu.open_store(url), path="a", mode="r")[...], [1, 2, 3, 4]
    )


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("s3://bucket/era5.zarr", {"region": "us-east-1", "anonymous": True}),
        ("s3://bucket/era5.zarr", {"requester_pays": True, "access_key_id": "a", "secret_access_key": "b"}),
        ("s3://bucket/era5.zarr", {"endpoint": "http://127.0.0.1:9", "anonymous": True}),
        ("gs://bucket/era5.zarr", {"anonymous": True}),
        ("az://container/era5.zarr", {"account_name": "account", "anonymous": True}),
        ("https://example.com/era5.zarr", {}),
    ],
)
def test_obstore_builds_cloud_stores_without_network(url: str, options: dict[str, Any]) -> None:
    # Building a store only parses the URL and config; the first request happens on read.
    store = obstore_store(url, **options)
    assert isinstance(store, ObjectStore)
    assert store.read_only
    assert str(store).startswith(url)


def test_fsspec_passes_storage_options(local_store: tuple[str, np.ndarray]) -> None:
    store = fsspec_store(local_store[0], auto_mkdir=False)
    assert isinstance(store, FsspecStore)


def test_missing_local_directory_is_named(tmp_path: Path) -> None:
    for builder in (obstore_store, fsspec_store):
        with pytest.raises(FileNotFoundError, match="nowhere"):
            builder((tmp_path / "nowhere").as_uri())


def test_retry_policy_is_checked() -> None:
    with pytest.raises(ValueError, match="retries must be >= 0"):
        insitu.RetryPolicy(retries=-1)
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        insitu.RetryPolicy(timeout_s=0)


def test_store_retry_is_a_deprecated_name_of_the_one_policy() -> None:
    import insitu_stores.retry

    with pytest.warns(DeprecationWarning, match=r"insitu\.RetryPolicy"):
        alias = insitu_stores.retry.StoreRetry
    assert alias is insitu.RetryPolicy
    policy = alias(retries=1, backoff_s=0.01, max_backoff_s=0.1, timeout_s=2.0, connect_timeout_s=1.0)
    assert obstore_store("memory:///x", retry=policy).insitu_retry_policy is policy


def test_fsspec_store_serves_every_event_loop(s3: S3Server, bucket: str) -> None:
    # s3fs binds its client session to one loop; the same store is used here from two loops
    # of our own, from zarr's loop and from the engine's, and closes every session at the end.
    zarr.create_array(s3.zarr_store(bucket, "d.zarr"), shape=(8, 2), chunks=(2, 2), dtype="i4")[...] = (
        np.arange(16).reshape(8, 2)
    )
    store = fsspec_store(f"s3://{bucket}/d.zarr", **s3.options())
    assert isinstance(store, FsspecLoopStore)
    loops = [asyncio.new_event_loop() for _ in range(2)]
    for loop in loops:
        buf = loop.run_until_complete(store.get("zarr.json", default_buffer_prototype()))
        assert buf is not None
    np.testing.assert_array_equal(zarr.open_array(store, mode="r")[...], np.arange(16).reshape(8, 2))
    geoms = insitu.open_geometries(store)
    (geom,) = geoms.values()
    with insitu.InSituDataset(store, insitu.split_by_chunk(geom, (1.0,)), geoms, batch_size=3) as ds:
        assert sorted(i for b in ds.train for i in b.sample_indices.tolist()) == list(range(8))
    store.close()
    for loop in loops:
        loop.close()


# -- registration and dispatch ----------------------------------------------------------------------
def test_plugin_registers_every_backend() -> None:
    regs = plugin_registrations("insitu_stores.plugin", "stores")
    assert set(regs) == {"obstore", "fsspec", "icechunk", "arraylake", "virtual"}
    assert regs["obstore"].obj.insitu_target is obstore_store
    assert regs["obstore"].default
    assert regs["fsspec"].obj.insitu_target is fsspec_store
    assert not regs["fsspec"].default
    assert {"s3", "gs", "az", "http", "https"} <= set(regs["obstore"].schemes) & set(regs["fsspec"].schemes)
    assert {"icechunk", "icechunk+s3", "icechunk+file"} <= set(regs["icechunk"].schemes)
    assert "arraylake" in regs["arraylake"].schemes
    assert regs["virtual"].schemes == ()


@pytest.mark.parametrize("scheme", ["s3", "gs", "az", "https"])
def test_shared_schemes_default_to_obstore(scheme: str) -> None:
    assert get_registry().store_for_scheme(scheme).name == "obstore"


def test_local_paths_stay_with_core(local_store: tuple[str, np.ndarray]) -> None:
    assert get_registry().store_for_scheme("file").name == "local"
    assert isinstance(insitu.open_store(local_store[0], backend="obstore"), ObstoreStore)


def test_backend_overrides_the_default(s3: S3Server, bucket: str) -> None:
    assert isinstance(insitu.open_store(f"s3://{bucket}/x", **s3.options()), ObstoreStore)
    assert isinstance(
        insitu.open_store(f"s3://{bucket}/x", backend="fsspec", **s3.options()), FsspecLoopStore
    )


def test_loading_the_plugin_imports_no_backend() -> None:
    # insitu loads every plugin on the first open, local paths included: that must stay cheap.
    code = (
        "import sys, insitu.plugins.registry as p; p.get_registry(); "
        "print(sorted(m for m in sys.modules if m.startswith('insitu_stores')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['insitu_stores', 'insitu_stores.plugin', 'insitu_stores.schemes']"


def test_entry_point_is_published_and_loaded() -> None:
    assert_entry_point("stores", "insitu_stores.plugin")


def test_root_names_resolve_to_the_builders() -> None:
    assert insitu.obstore_store is obstore_store
    assert insitu.fsspec_store is fsspec_store
    assert insitu.icechunk_store is insitu_stores.icechunk_store
    assert insitu.arraylake_store is insitu_stores.arraylake_store


def test_open_store_dispatches_through_registry(local_store: tuple[str, np.ndarray]) -> None:
    url, values = local_store
    store = insitu.open_store(url, backend="fsspec")
    np.testing.assert_array_equal(zarr.open_array(store, path="t2m", mode="r")[:], values)


def test_importing_the_plugin_imports_no_optional_backend() -> None:
    code = (
        "import sys, insitu, insitu_stores, insitu_stores.plugin; "
        "insitu.plugins.registry.get_registry().entries('stores'); "
        "print(sorted(m for m in ('icechunk', 'arraylake', 'virtualizarr', 'astropy', 's3fs', 'kerchunk', 'h5py') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_raw_fetches_for_the_engine(s3: S3Server, bucket: str, backend: str) -> None:
    import obstore

    payload = bytes(range(256)) * 8
    obstore.put(s3.obstore(bucket), "x.zarr/blob", payload)
    store = insitu.open_store(f"s3://{bucket}/x.zarr", backend=backend, **s3.options())
    assert bytes(run(store.insitu_get("blob"))) == payload
    assert bytes(run(store.insitu_get("blob", byte_range=(10, 300)))) == payload[10:300]
    assert bytes(run(store.insitu_get("blob", suffix=16))) == payload[-16:]
    assert run(store.insitu_get("absent")) is None
    if backend == "obstore":
        ranges = [(0, 5), (700, 900), (2000, 2048)]
        got = run(store.insitu_get_ranges("blob", ranges))
        assert [bytes(b) for b in got] == [payload[a:b] for a, b in ranges]
        assert run(store.insitu_get_ranges("absent", ranges)) is None
