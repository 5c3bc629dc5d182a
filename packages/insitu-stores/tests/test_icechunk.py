"""Icechunk: pinned versions, the snapshot in the cache fingerprint, virtual chunk containers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import write_fits
from s3_servers import S3Server

import insitu
from insitu.errors import StaleCacheError
from insitu_stores import IcechunkReadStore, StoreNotFoundError, StorePermissionError, icechunk_store


def _commit(repo: Any, values: np.ndarray, message: str, branch: str = "main") -> str:
    session = repo.writable_session(branch)
    root = zarr.open_group(session.store, mode="a", zarr_format=3)
    if "t2m" in root:
        root["t2m"][...] = values
    else:
        root.create_array("t2m", shape=values.shape, dtype=values.dtype, chunks=(3, *values.shape[1:]))[
            ...
        ] = values
    return str(session.commit(message))


@pytest.fixture
def versions(tmp_path: Path) -> dict[str, Any]:
    """A local repository with two commits on main, a tag on the first, a branch 'dev' with a third."""
    import icechunk

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    first = np.arange(12 * 4, dtype="f4").reshape(12, 4)
    snap1 = _commit(repo, first, "first")
    repo.create_tag("v1", snapshot_id=snap1)
    snap2 = _commit(repo, first + 100, "second")
    repo.create_branch("dev", snapshot_id=snap2)
    snap3 = _commit(repo, first + 200, "third", branch="dev")
    return {"url": f"icechunk://{tmp_path / 'repo'}", "snaps": (snap1, snap2, snap3), "first": first}


def _read(store: Any) -> np.ndarray:
    return np.asarray(zarr.open_array(store, path="t2m", mode="r")[...])


def test_branch_tag_and_snapshot_pin_the_version(versions: dict[str, Any]) -> None:
    url, (snap1, _snap2, snap3), first = versions["url"], versions["snaps"], versions["first"]
    np.testing.assert_array_equal(_read(icechunk_store(url)), first + 100)  # main by default
    np.testing.assert_array_equal(_read(icechunk_store(url, tag="v1")), first)
    np.testing.assert_array_equal(_read(icechunk_store(url, branch="dev")), first + 200)
    np.testing.assert_array_equal(_read(icechunk_store(url, snapshot=snap1)), first)
    np.testing.assert_array_equal(_read(insitu.open_store(f"{url}?snapshot={snap3}")), first + 200)
    assert icechunk_store(url, branch="dev").snapshot_id == snap3
    assert icechunk_store(url.replace("icechunk://", "icechunk+file://"), tag="v1").snapshot_id == snap1


def test_open_store_dispatches_icechunk_urls(versions: dict[str, Any]) -> None:
    store = insitu.open_store(versions["url"] + "?tag=v1")
    assert isinstance(store, IcechunkReadStore)
    assert store.read_only
    with pytest.raises(ValueError, match="read-only"):
        insitu.open_store(versions["url"], mode="r+")


def test_identity_names_the_snapshot(versions: dict[str, Any]) -> None:
    url, (snap1, snap2, _), _ = versions["url"], versions["snaps"], versions["first"]
    a, b = icechunk_store(url, snapshot=snap1), icechunk_store(url, branch="main")
    assert snap1 in a.insitu_identity()
    assert snap2 in b.insitu_identity()
    assert a.insitu_identity() != b.insitu_identity()
    assert icechunk_store(url, tag="v1").insitu_identity() == a.insitu_identity()


def test_persisted_cache_never_serves_another_snapshot(versions: dict[str, Any], tmp_path: Path) -> None:
    url, (snap1, snap2, _), first = versions["url"], versions["snaps"], versions["first"]
    cache = tmp_path / "cache"

    def epoch(store: Any, persist: Any = True) -> np.ndarray:
        geoms = insitu.open_geometries(store)
        manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
        out = np.zeros_like(first)
        with insitu.InSituDataset(
            store, manifest, geoms, batch_size=4, cache_dir=cache, persist=persist
        ) as ds:
            for batch in ds.train:
                out[batch.sample_indices] = batch["t2m"]
        return out

    np.testing.assert_array_equal(epoch(icechunk_store(url, snapshot=snap1)), first)
    np.testing.assert_array_equal(epoch(icechunk_store(url, tag="v1")), first)  # same snapshot: reused
    with pytest.raises(StaleCacheError, match="built from other data"):
        epoch(icechunk_store(url, snapshot=snap2))
    np.testing.assert_array_equal(epoch(icechunk_store(url, snapshot=snap2), persist="rebuild"), first + 100)


def test_missing_versions_and_repositories_are_named(versions: dict[str, Any], tmp_path: Path) -> None:
    url = versions["url"]
    with pytest.raises(StoreNotFoundError, match=r"has no branch 'nope' \(its branches: dev, main\)"):
        icechunk_store(url, branch="nope")
    with pytest.raises(StoreNotFoundError, match=r"has no tag 'v9' \(its tags: v1\)"):
        icechunk_store(url, tag="v9")
    with pytest.raises(StoreNotFoundError, match="has no snapshot 'AAAAAAAAAAAAAAAAAAAA'"):
        icechunk_store(url, snapshot="AAAAAAAAAAAAAAAAAAAA")
    with pytest.raises(StoreNotFoundError, match=r"no Icechunk repository at icechunk://.*elsewhere"):
        icechunk_store(f"icechunk://{tmp_path / 'elsewhere'}")


# -- virtual chunk containers -----------------------------------------------------------------------
def _virtual_repo(storage: Any, prefix: str, container_store: Any, files: list[tuple[str, int, int]]) -> Any:
    """A repository whose one array's chunks are byte ranges of FITS files under ``prefix``."""
    import icechunk

    config = icechunk.RepositoryConfig.default()
    config.set_virtual_chunk_container(icechunk.VirtualChunkContainer(prefix, container_store))
    repo = icechunk.Repository.create(storage, config=config)
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w", zarr_format=3)
    root.create_array(
        "flux",
        shape=(len(files), 8, 4),
        chunks=(1, 8, 4),
        dtype=">f4",
        compressors=None,
        serializer={"name": "bytes", "configuration": {"endian": "big"}},
        fill_value=0,
    )
    for i, (location, offset, length) in enumerate(files):
        session.store.set_virtual_ref(f"flux/c/{i}/0/0", location, offset=offset, length=length)
    session.commit("virtual references to FITS images")
    return repo


def _fits_images(directory: Path, n: int) -> tuple[list[Path], list[tuple[int, int]], np.ndarray]:
    from astropy.io import fits

    paths, spans, values = [], [], []
    for i in range(n):
        path = directory / f"img{i}.fits"
        values.append(write_fits(path, seed=i)["FLUX"])
        with fits.open(path) as hdul:
            info = hdul["FLUX"].fileinfo()
            spans.append((int(info["datLoc"]), 8 * 4 * 4))
        paths.append(path)
    return paths, spans, np.stack(values)


def test_local_virtual_chunks_need_explicit_authorisation(tmp_path: Path) -> None:
    import icechunk

    files, spans, expected = _fits_images(tmp_path, 3)
    prefix = f"file://{tmp_path}/"
    refs = [(p.as_uri(), off, n) for p, (off, n) in zip(files, spans, strict=True)]
    _virtual_repo(
        icechunk.local_filesystem_storage(str(tmp_path / "repo")),
        prefix,
        icechunk.local_filesystem_store(str(tmp_path)),
        refs,
    )
    url = f"icechunk://{tmp_path / 'repo'}"

    with pytest.raises(
        StorePermissionError, match=rf"virtual chunks under '{prefix}', which were not authorised"
    ):
        zarr.open_array(icechunk_store(url), path="flux", mode="r")[...]

    store = icechunk_store(url, virtual_chunks={prefix: None})
    np.testing.assert_array_equal(_read_flux(store), expected)
    seen = _engine_epoch(store, "flux", expected)
    assert seen == list(range(3))


def test_s3_virtual_chunks_authorised_with_credentials(s3: S3Server, tmp_path: Path) -> None:
    import icechunk
    import obstore

    bucket = s3.new_bucket("virtual")
    files, spans, expected = _fits_images(tmp_path, 4)
    raw = s3.obstore(bucket)
    refs = []
    for path, (off, n) in zip(files, spans, strict=True):
        obstore.put(raw, f"fits/{path.name}", path.read_bytes())
        refs.append((f"s3://{bucket}/fits/{path.name}", off, n))
    prefix = f"s3://{bucket}/fits/"
    storage = s3.icechunk_storage(bucket)
    container = icechunk.s3_store(
        region="us-east-1",
        endpoint_url=s3.endpoint,
        allow_http=True,
        s3_compatible=True,
        force_path_style=True,
    )
    _virtual_repo(storage, prefix, container, refs)
    url = f"icechunk+s3://{bucket}/repo"

    with pytest.raises(StorePermissionError, match="not authorised"):
        _read_flux(icechunk_store(url, **s3.options()))
    creds = {"access_key_id": "x", "secret_access_key": "x"}
    store = icechunk_store(url, virtual_chunks={prefix: creds}, **s3.options())
    assert _engine_epoch(store, "flux", expected) == list(range(4))


def _read_flux(store: Any) -> np.ndarray:
    return np.asarray(zarr.open_array(store, path="flux", mode="r")[...])


def _engine_epoch(store: Any, name: str, expected: np.ndarray) -> list[int]:
    geoms = insitu.open_geometries(store, variables=[name])
    manifest = insitu.split_by_chunk(geoms[name], (1.0,))
    seen: list[int] = []
    with insitu.InSituDataset(store, manifest, geoms, batch_size=2) as ds:
        for batch in ds.train:
            np.testing.assert_array_equal(batch[name], expected[batch.sample_indices])
            seen.extend(batch.sample_indices.tolist())
    return sorted(seen)
