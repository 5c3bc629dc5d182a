"""``StoreConformance``: the checks every store plugin runs against its own stores."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.buffer import default_buffer_prototype

from insitu.testing import _aio
from insitu.testing.capabilities import CapabilityChecks, Subject
from insitu.testing.reference import GROUP_ATTRIBUTES, ReferenceArray, write_reference


@dataclass(frozen=True)
class WrittenReference:
    """The reference as written through ``target`` and reopened as ``store``."""

    target: Store
    store: Store
    arrays: tuple[ReferenceArray, ...]


def _get(store: Store, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
    buf = _aio.run(store.get(key, default_buffer_prototype(), byte_range))
    return None if buf is None else buf.to_bytes()


async def _collect(listing: Callable[[], AsyncIterator[str]]) -> set[str]:
    # The listing call itself runs on the kit's loop: some stores (obstore through zarr 3.1)
    # need a running loop when list_dir() is called, not only while it is iterated.
    return {k async for k in listing()}


class StoreConformance(CapabilityChecks):
    """Base class for a store plugin's conformance tests.

    Subclass it in a test module (with a ``Test`` prefix so pytest collects
    it) and implement :meth:`writable_target` and :meth:`open_read_store`::

        class TestMyStore(StoreConformance):
            def writable_target(self):
                return zarr.storage.LocalStore(self.tmp_path / "ref")

            def open_read_store(self, target):
                return insitu.open_store(f"myscheme://{self.tmp_path}/ref")

    The kit writes a small reference hierarchy (v3, v3 sharded and v2 arrays,
    each with chunks never written) through the target with zarr, then checks
    that the plugin's store reads it back: values through zarr, keys, byte
    ranges, missing keys and concurrent gets. ``self.tmp_path`` is a fresh
    directory per test.

    Each optional capability the store declares (:mod:`insitu.store.capabilities`:
    raw and multi-range reads, identity, object versions, its own retry
    policy) is checked too; override :meth:`other_read_store` to have the
    identity check also tell two locations apart.
    """

    tmp_path: Path

    @pytest.fixture(autouse=True)
    def _insitu_tmp_path(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    def writable_target(self) -> Store:
        """A writable zarr Store at a fresh, empty location."""
        raise NotImplementedError("StoreConformance subclasses implement writable_target()")

    def open_read_store(self, target: Store) -> Store:
        """The store your plugin builds for the location of ``target``, opened after writing."""
        raise NotImplementedError("StoreConformance subclasses implement open_read_store()")

    @functools.cached_property
    def reference(self) -> WrittenReference:
        """Write the reference once per test and open the plugin's store over it."""
        target = self.writable_target()
        arrays = write_reference(target)
        for array in arrays:
            for key in array.missing_keys:
                if _aio.run(target.exists(key)):
                    raise RuntimeError(
                        f"the writable target stored {key!r}, which the reference leaves missing"
                    )
        return WrittenReference(target, self.open_read_store(target), arrays)

    def capability_subject(self) -> Subject:
        """The first reference array's present chunk, and one of its chunks never written."""
        ref = self.reference
        array = ref.arrays[0]
        data = _get(ref.target, array.present_key)
        assert data is not None, f"the target lost {array.present_key!r}"
        missing = array.missing_keys[0] if array.missing_keys else "no-such-key"
        return Subject(ref.store, array.present_key, data, missing)

    def reopened_store(self) -> Store:
        """The plugin's store opened again over the reference's target."""
        return self.open_read_store(self.reference.target)

    def rewrite(self, key: str, data: bytes) -> bool:
        """Writes ``data`` through the writable target the reference was written with."""
        _aio.run(self.reference.target.set(key, default_buffer_prototype().buffer.from_bytes(data)))
        return True

    def test_reads_reference_arrays(self) -> None:
        """zarr reads every reference array through the store, with the reference's shape, dtype and values."""
        ref = self.reference
        for array in ref.arrays:
            got = zarr.open_array(store=ref.store, path=array.path, mode="r", zarr_format=array.zarr_format)
            values = np.asarray(got[...])
            assert got.shape == array.expected.shape, array.path
            assert values.dtype == array.expected.dtype, f"{array.path}: dtype {values.dtype}"
            np.testing.assert_array_equal(values, array.expected, err_msg=f"values of {array.path}")

    def test_engine_reads_every_sample_once(self) -> None:
        """The insitu engine itself, over this store: each sample once, values equal the source."""
        import insitu

        ref = self.reference
        for array in ref.arrays:
            group, name = array.path.rsplit("/", 1)
            geoms = insitu.open_geometries(ref.store, variables=[name], path=group)
            manifest = insitu.split_by_chunk(geoms[name], (1.0,))
            seen: list[int] = []
            with insitu.InSituDataset(ref.store, manifest, geoms, batch_size=3, block_chunks=2) as ds:
                for batch in ds.train:
                    np.testing.assert_array_equal(
                        batch[name], array.expected[batch.sample_indices], err_msg=array.path
                    )
                    seen.extend(batch.sample_indices.tolist())
            assert sorted(seen) == list(range(array.expected.shape[0])), f"{array.path}: samples"

    def test_reads_region_across_missing_chunk(self) -> None:
        """A region spanning chunks never written reads equal to the reference (the fill value there)."""
        ref = self.reference
        for array in ref.arrays:
            got = zarr.open_array(store=ref.store, path=array.path, mode="r", zarr_format=array.zarr_format)
            region = tuple(slice(1, n - 1) for n in array.expected.shape)
            np.testing.assert_array_equal(got[region], array.expected[region], err_msg=array.path)

    def test_reads_attributes(self) -> None:
        """Group and array attributes read back as written."""
        ref = self.reference
        for array in ref.arrays:
            group = zarr.open_group(store=ref.store, path=array.path.split("/")[0], mode="r")
            assert dict(group.attrs) == GROUP_ATTRIBUTES
            assert dict(group[array.path.split("/")[1]].attrs) == array.attributes

    def test_missing_keys_return_none(self) -> None:
        """Missing keys read as ``None`` (whole or by range) and do not exist."""
        ref = self.reference
        keys = [k for a in ref.arrays for k in a.missing_keys] + ["v3/no-such-array/zarr.json", "nope"]
        for key in keys:
            assert _get(ref.store, key) is None, f"get({key!r}) of a missing key must return None"
            assert _get(ref.store, key, RangeByteRequest(0, 4)) is None, f"ranged get of missing {key!r}"
            assert not _aio.run(ref.store.exists(key)), f"exists({key!r}) of a missing key"

    def test_present_keys_match_target(self) -> None:
        """Present chunk and metadata keys exist and serve the bytes the target holds."""
        ref = self.reference
        for array in ref.arrays:
            for key in (
                array.present_key,
                f"{array.path}/zarr.json" if array.zarr_format == 3 else f"{array.path}/.zarray",
            ):
                assert _aio.run(ref.store.exists(key)), f"exists({key!r})"
                assert _get(ref.store, key) == _get(ref.target, key), f"bytes of {key!r}"

    def test_byte_range_requests(self) -> None:
        """Every kind of byte-range request (range, offset, suffix, up to the whole object) returns the
        matching slice of the target's bytes."""
        ref = self.reference
        for array in ref.arrays:
            key = array.present_key
            full = _get(ref.target, key)
            assert full is not None, key
            assert len(full) > 8, key
            n = len(full)
            requests: list[tuple[ByteRequest, bytes]] = [
                (RangeByteRequest(0, n), full),
                (RangeByteRequest(1, n // 2), full[1 : n // 2]),
                (RangeByteRequest(n - 3, n), full[n - 3 :]),
                (OffsetByteRequest(0), full),
                (OffsetByteRequest(n // 3), full[n // 3 :]),
                (SuffixByteRequest(4), full[-4:]),
                (SuffixByteRequest(n), full),
            ]
            for request, want in requests:
                assert _get(ref.store, key, request) == want, f"{request} of {key!r}"

    def test_concurrent_gets(self) -> None:
        """Many concurrent GETs of the same keys all return the target's bytes."""
        ref = self.reference
        keys = [a.present_key for a in ref.arrays] * 8
        prototype = default_buffer_prototype()

        async def fetch_all() -> list[bytes | None]:
            bufs = await asyncio.gather(*(ref.store.get(k, prototype) for k in keys))
            return [None if b is None else b.to_bytes() for b in bufs]

        assert _aio.run(fetch_all()) == [_get(ref.target, k) for k in keys]

    def test_lists_keys(self) -> None:
        """A store that supports listing lists the target's keys by prefix, by directory and in full."""
        ref = self.reference
        if not ref.store.supports_listing:
            pytest.skip("the store does not support listing")
        for prefix in ("v3/", "v2/"):
            want = _aio.run(_collect(functools.partial(ref.target.list_prefix, prefix)))
            got = _aio.run(_collect(functools.partial(ref.store.list_prefix, prefix)))
            assert got == want, f"list_prefix({prefix!r})"
        assert _aio.run(_collect(lambda: ref.store.list_dir("v3"))) == {"zarr.json", "dense", "sharded"}
        everything = _aio.run(_collect(ref.store.list))
        assert {a.present_key for a in ref.arrays} <= everything
        assert not {k for a in ref.arrays for k in a.missing_keys} & everything
