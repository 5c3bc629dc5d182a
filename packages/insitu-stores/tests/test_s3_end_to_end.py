"""The engine, end to end, over a real S3 API on loopback: every sample once, values as plain zarr reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import write_fits
from s3_servers import S3Server

import insitu
from insitu_stores import (
    FsspecLoopStore,
    IcechunkReadStore,
    ObstoreStore,
    StorePermissionError,
    VirtualStore,
    virtual_store,
)

LAYOUTS = {
    # name: (zarr_format, chunks, shards)
    "v3": (3, (4, 6, 5), None),
    "v3_sharded": (3, (2, 3, 5), (8, 6, 5)),
    "v2": (2, (5, 6, 5), None),
}


def _values(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(30, 6, 5)).astype("float32")


def _write_layouts(store: Any) -> None:
    for seed, (name, (fmt, chunks, shards)) in enumerate(LAYOUTS.items()):
        root = zarr.open_group(store, path=name, mode="w", zarr_format=fmt)
        kwargs: dict[str, Any] = {"chunks": chunks}
        if shards is not None:
            kwargs["shards"] = shards
        arr = root.create_array("t2m", shape=(30, 6, 5), dtype="float32", **kwargs)
        arr[...] = _values(seed)


def _epoch(store: Any, path: str, name: str) -> dict[str, list[int]]:
    """One epoch of every split; checks values against plain zarr and returns the samples seen."""
    plain = zarr.open_array(store, path=f"{path}/{name}" if path else name, mode="r")[...]
    geoms = insitu.open_geometries(store, variables=[name], path=path)
    manifest = insitu.split_by_chunk(geoms[name], (0.6, 0.2, 0.2), seed=1)
    seen: dict[str, list[int]] = {}
    with insitu.InSituDataset(store, manifest, geoms, batch_size=4, block_chunks=2, max_inflight=8) as ds:
        for split in ("train", "val", "test"):
            seen[split] = []
            for batch in getattr(ds, split):
                np.testing.assert_array_equal(
                    batch[name], plain[batch.sample_indices], err_msg=f"{path} {split}"
                )
                seen[split].extend(batch.sample_indices.tolist())
    all_seen = sorted(i for v in seen.values() for i in v)
    assert all_seen == list(range(plain.shape[0])), f"{path}: every sample exactly once per epoch"
    return seen


@pytest.fixture(scope="module")
def layouts(s3: S3Server) -> str:
    bucket = s3.new_bucket("layouts")
    _write_layouts(s3.zarr_store(bucket, "data.zarr"))
    return bucket


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize(("backend", "kind"), [("obstore", ObstoreStore), ("fsspec", FsspecLoopStore)])
def test_engine_reads_every_layout_over_s3(
    s3: S3Server, layouts: str, layout: str, backend: str, kind: type
) -> None:
    store = insitu.open_store(f"s3://{layouts}/data.zarr", backend=backend, **s3.options())
    assert isinstance(store, kind)
    seen = _epoch(store, layout, "t2m")
    assert all(seen.values()), "each split holds samples"


@pytest.mark.parametrize("backend", ["obstore", "fsspec"])
def test_anonymous_access_reads_a_public_bucket(s3: S3Server, backend: str) -> None:
    bucket = s3.new_bucket("public")
    target = s3.zarr_store(bucket, "data.zarr")
    arr = zarr.create_array(target, name="t2m", shape=(30, 6, 5), chunks=(3, 6, 5), dtype="f4")
    arr[...] = _values(0)
    url = f"s3://{bucket}/data.zarr"
    # Unsigned requests: refused until the bucket's policy lets anyone read it.
    private = insitu.open_store(url, backend=backend, endpoint=s3.endpoint, anonymous=True)
    with pytest.raises(StorePermissionError, match=url):
        zarr.open_array(private, path="t2m", mode="r")
    s3.make_public(bucket)
    store = insitu.open_store(url, backend=backend, endpoint=s3.endpoint, anonymous=True)
    _epoch(store, "", "t2m")


def test_s3_url_defaults_to_obstore(s3: S3Server, layouts: str) -> None:
    store = insitu.open_store(f"s3://{layouts}/data.zarr", **s3.options())
    assert isinstance(store, ObstoreStore)


def test_engine_reads_icechunk_repository_in_the_bucket(s3: S3Server) -> None:
    import icechunk

    bucket = s3.new_bucket("icechunk")
    storage = s3.icechunk_storage(bucket)
    repo = icechunk.Repository.create(storage)
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w", zarr_format=3)
    for name, seed, shards in (("t2m", 10, None), ("u10", 11, (8, 6, 5))):
        arr = root.create_array(name, shape=(30, 6, 5), dtype="float32", chunks=(2, 6, 5), shards=shards)
        arr[...] = _values(seed)
    session.commit("two arrays")

    store = insitu.open_store(f"icechunk+s3://{bucket}/repo?branch=main", **s3.options())
    assert isinstance(store, IcechunkReadStore)
    for name in ("t2m", "u10"):
        _epoch(store, "", name)


def test_engine_reads_virtual_fits_objects_in_the_bucket(s3: S3Server, tmp_path: Path) -> None:
    import obstore

    bucket = s3.new_bucket("fits")
    raw = s3.obstore(bucket)
    expected = []
    for i in range(5):
        local = tmp_path / f"exposure{i}.fits"
        expected.append(write_fits(local, seed=i))
        obstore.put(raw, f"night1/exposure{i}.fits", local.read_bytes())
    urls = [f"s3://{bucket}/night1/exposure{i}.fits" for i in range(5)]

    store = virtual_store(urls, **s3.options())
    assert isinstance(store, VirtualStore)
    group = zarr.open_group(store, mode="r")
    cube = np.stack([e["PRIMARY"] for e in expected])
    np.testing.assert_array_equal(group["PRIMARY"][...], cube)  # BSCALE/BZERO applied
    np.testing.assert_array_equal(group["FLUX"][...], np.stack([e["FLUX"] for e in expected]))
    assert "TAB" not in group  # tables are not streamed

    geoms = insitu.open_geometries(store, variables=["PRIMARY", "FLUX"])
    manifest = insitu.split_by_chunk(geoms["PRIMARY"], (1.0,))
    seen = []
    with insitu.InSituDataset(store, manifest, geoms, batch_size=2, block_chunks=2) as ds:
        for batch in ds.train:
            np.testing.assert_array_equal(batch["PRIMARY"], cube[batch.sample_indices])
            np.testing.assert_array_equal(
                batch["FLUX"], np.stack([expected[i]["FLUX"] for i in batch.sample_indices])
            )
            seen.extend(batch.sample_indices.tolist())
    assert sorted(seen) == list(range(5))


def test_engine_reads_a_virtual_hdf5_object_in_the_bucket(s3: S3Server, tmp_path: Path) -> None:
    import h5py
    import obstore

    values = np.random.default_rng(7).normal(size=(24, 5, 3)).astype("f4")
    with h5py.File(tmp_path / "fields.h5", "w") as f:
        f.create_dataset("u10", data=values, chunks=(4, 5, 3), compression="gzip")
    bucket = s3.new_bucket("hdf")
    obstore.put(s3.obstore(bucket), "fields.h5", (tmp_path / "fields.h5").read_bytes())
    store = virtual_store(f"s3://{bucket}/fields.h5", **s3.options())
    _epoch(store, "", "u10")
