"""Every store plugin passes insitu's conformance kit (values, keys, ranges, listings, the engine)."""

from __future__ import annotations

import asyncio
import functools
import itertools
from pathlib import Path
from typing import Any

import pytest
from s3_servers import S3Server
from zarr.abc.store import Store
from zarr.storage import LocalStore, MemoryStore

from insitu.testing import StoreConformance, WrittenReference, write_reference
from insitu_stores import arraylake_store, fsspec_store, icechunk_store, obstore_store

_prefixes = itertools.count()


class _S3Target:
    """Writes the reference into a fresh prefix of a bucket on the loopback S3 server."""

    tmp_path: Path

    @pytest.fixture(autouse=True)
    def _server(self, s3: S3Server) -> None:
        self.s3 = s3
        self.bucket = s3.new_bucket("conform")
        self.prefix = f"ref{next(_prefixes)}.zarr"

    def writable_target(self) -> Store:
        return self.s3.zarr_store(self.bucket, self.prefix)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


class TestObstoreLocal(StoreConformance):
    def writable_target(self) -> Store:
        return LocalStore(self.tmp_path / "ref")

    def open_read_store(self, target: Store) -> Store:
        return obstore_store((self.tmp_path / "ref").as_uri())

    def other_read_store(self) -> Store:
        (self.tmp_path / "other").mkdir(exist_ok=True)
        return obstore_store((self.tmp_path / "other").as_uri())


class TestObstoreS3(_S3Target, StoreConformance):
    def open_read_store(self, target: Store) -> Store:
        return obstore_store(self.url, **self.s3.options())

    def other_read_store(self) -> Store:
        return obstore_store(f"{self.url}-other", **self.s3.options())


class TestFsspecLocal(StoreConformance):
    def writable_target(self) -> Store:
        return LocalStore(self.tmp_path / "ref")

    def open_read_store(self, target: Store) -> Store:
        return fsspec_store((self.tmp_path / "ref").as_uri())


class TestFsspecS3(_S3Target, StoreConformance):
    def open_read_store(self, target: Store) -> Store:
        return fsspec_store(self.url, **self.s3.options())

    def other_read_store(self) -> Store:
        return fsspec_store(f"{self.url}-other", **self.s3.options())


class _IcechunkReference(StoreConformance):
    """Icechunk holds Zarr v3 only: the kit's v3 arrays go in, its v2 array is left out.

    The reference is written with zarr into a scratch store, and its v3 keys are
    copied byte for byte into a writable session, then committed; the kit
    compares the committed snapshot, opened read-only, against those keys.
    """

    def repository(self) -> Any:
        raise NotImplementedError

    def open_snapshot(self, repo: Any, snapshot: str) -> Store:
        raise NotImplementedError

    @functools.cached_property
    def reference(self) -> WrittenReference:
        scratch = MemoryStore()
        arrays = tuple(a for a in write_reference(scratch) if a.zarr_format == 3)
        v3_only = MemoryStore({k: v for k, v in scratch._store_dict.items() if k.startswith("v3/")})
        repo = self.repository()
        session = repo.writable_session("main")

        async def copy() -> None:
            for key, value in v3_only._store_dict.items():
                await session.store.set(key, value)

        asyncio.run(copy())
        snapshot = session.commit("conformance reference")
        self.reopen = lambda: self.open_snapshot(repo, snapshot)
        return WrittenReference(v3_only, self.open_snapshot(repo, snapshot), arrays)

    def reopened_store(self) -> Store:
        self.reference  # noqa: B018  (writes the repository and remembers how to open it)
        return self.reopen()

    def writable_target(self) -> Store:  # the reference property above replaces the kit's writer
        raise NotImplementedError

    def open_read_store(self, target: Store) -> Store:
        raise NotImplementedError


class TestIcechunkLocal(_IcechunkReference):
    def repository(self) -> Any:
        import icechunk

        return icechunk.Repository.create(icechunk.local_filesystem_storage(str(self.tmp_path / "repo")))

    def open_snapshot(self, repo: Any, snapshot: str) -> Store:
        return icechunk_store(f"icechunk://{self.tmp_path / 'repo'}", snapshot=snapshot)


class TestIcechunkS3(_IcechunkReference):
    @pytest.fixture(autouse=True)
    def _server(self, s3: S3Server) -> None:
        self.s3 = s3
        self.bucket = s3.new_bucket("icechunk")

    def repository(self) -> Any:
        import icechunk

        storage = self.s3.icechunk_storage(self.bucket)
        return icechunk.Repository.create(storage)

    def open_snapshot(self, repo: Any, snapshot: str) -> Store:
        return icechunk_store(f"icechunk+s3://{self.bucket}/repo", branch="main", **self.s3.options())


class StandInArraylake:
    """What arraylake_store needs from ``arraylake.Client``: ``get_repo(name)`` returning a Repository."""

    def __init__(self, repos: dict[str, Any]) -> None:
        self.repos = repos
        self.asked: list[str] = []

    def get_repo(self, name: str) -> Any:
        self.asked.append(name)
        return self.repos[name]


class TestArraylakeStandIn(TestIcechunkLocal):
    def open_snapshot(self, repo: Any, snapshot: str) -> Store:
        client = StandInArraylake({"earth/era5": repo})
        store = arraylake_store("earth/era5", client=client, snapshot=snapshot)
        assert client.asked == ["earth/era5"]
        return store
