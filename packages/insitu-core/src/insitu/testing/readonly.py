"""``ReadOnlyStoreConformance``: the kit for stores nobody can write through.

A virtual store (byte-range references into FITS or HDF5 files) or a public
archive cannot take the kit's reference hierarchy, so the subclass supplies
the store and the values it must hold instead; the checks that do not need a
writable twin run the same way: values through zarr, the engine reading every
sample once, absent keys, and byte ranges consistent with the whole object.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest

from insitu.store.keys import chunk_key_encoder
from insitu.testing.capabilities import CapabilityChecks, Subject
from insitu.testing.stores import _get


class ReadOnlyStoreConformance(CapabilityChecks):
    """Subclass with a ``Test`` prefix and implement :meth:`open_store` and :meth:`expected`.

    The optional capabilities the store declares are checked on the first
    chunk of the first expected array (see :class:`~insitu.testing.capabilities.CapabilityChecks`).
    """

    tmp_path: Path

    @pytest.fixture(autouse=True)
    def _insitu_tmp_path(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    def open_store(self) -> Store:
        """The plugin's store, over data the subclass prepared under ``self.tmp_path``."""
        raise NotImplementedError("ReadOnlyStoreConformance subclasses implement open_store()")

    def expected(self) -> Mapping[str, np.ndarray]:
        """``{array path: values}`` the store must serve (sample axis first)."""
        raise NotImplementedError("ReadOnlyStoreConformance subclasses implement expected()")

    def capability_subject(self) -> Subject:
        """The first chunk of the first expected array, and a key past its chunk grid."""
        store = self.open_store()
        path = next(iter(self.expected()))
        arr = zarr.open_array(store, path=path, mode="r")
        encode = chunk_key_encoder(arr.metadata.to_dict(), path)
        key = encode((0,) * arr.ndim)
        data = _get(store, key)
        assert data is not None, f"{key}: the first chunk is missing"
        return Subject(store, key, data, encode(tuple(n + 7 for n in arr.shape)))

    def reopened_store(self) -> Store:
        """The store opened again with :meth:`open_store`."""
        return self.open_store()

    def test_reads_expected_arrays(self) -> None:
        """zarr reads every expected array through the store, with the expected values."""
        store = self.open_store()
        for path, values in self.expected().items():
            np.testing.assert_array_equal(
                zarr.open_array(store, path=path, mode="r")[...], values, err_msg=path
            )

    def test_engine_reads_every_sample_once(self) -> None:
        """The insitu engine itself, over this store: each sample once, values equal the expected ones."""
        import insitu

        store = self.open_store()
        for path, values in self.expected().items():
            group, _, name = path.rpartition("/")
            geoms = insitu.open_geometries(store, variables=[name], path=group)
            manifest = insitu.split_by_chunk(geoms[name], (1.0,))
            seen: list[int] = []
            with insitu.InSituDataset(store, manifest, geoms, batch_size=3, block_chunks=2) as ds:
                for batch in ds.train:
                    np.testing.assert_array_equal(batch[name], values[batch.sample_indices], err_msg=path)
                    seen.extend(batch.sample_indices.tolist())
            assert sorted(seen) == list(range(values.shape[0])), f"{path}: samples"

    def test_absent_keys_return_none(self) -> None:
        """Keys past the chunk grid read as ``None``, whole or by range."""
        store = self.open_store()
        for path in self.expected():
            arr = zarr.open_array(store, path=path, mode="r")
            beyond = chunk_key_encoder(arr.metadata.to_dict(), path)(
                tuple(n + 7 for n in arr.shape)
            )  # past the grid
            assert _get(store, beyond) is None, beyond
            assert _get(store, beyond, RangeByteRequest(0, 4)) is None, beyond

    def test_byte_ranges_match_the_whole_chunk(self) -> None:
        """Range, offset and suffix requests of the first chunk equal the slices of the whole chunk."""
        store = self.open_store()
        for path in self.expected():
            arr = zarr.open_array(store, path=path, mode="r")
            key = chunk_key_encoder(arr.metadata.to_dict(), path)((0,) * arr.ndim)
            whole = _get(store, key)
            assert whole is not None, f"{key}: the first chunk is missing"
            assert len(whole) > 8, f"{key}: the first chunk is too small to test ranges"
            assert _get(store, key, RangeByteRequest(2, 7)) == whole[2:7]
            assert _get(store, key, OffsetByteRequest(3)) == whole[3:]
            assert _get(store, key, SuffixByteRequest(4)) == whole[-4:]
