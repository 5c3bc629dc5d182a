"""Virtual stores over FITS and HDF5 files: correct values on every virtualizarr version, in place."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import write_fits

import insitu
from insitu.testing import ReadOnlyStoreConformance
from insitu_stores import VirtualStore, virtual_store


def _epoch(store: Any, name: str, expected: np.ndarray) -> list[int]:
    geoms = insitu.open_geometries(store, variables=[name])
    manifest = insitu.split_by_chunk(geoms[name], (1.0,))
    seen: list[int] = []
    with insitu.InSituDataset(store, manifest, geoms, batch_size=3, block_chunks=2) as ds:
        for batch in ds.train:
            np.testing.assert_array_equal(batch[name], expected[batch.sample_indices])
            seen.extend(batch.sample_indices.tolist())
    return sorted(seen)


def test_scaled_fits_image_reads_physical_values(tmp_path: Path) -> None:
    expected = write_fits(tmp_path / "a.fits")
    store = virtual_store(str(tmp_path / "a.fits"), chunk_rows=4)
    cube = zarr.open_array(store, path="PRIMARY", mode="r")
    assert cube.dtype == np.dtype("float64")
    assert cube.chunks == (4, 6, 5)
    np.testing.assert_array_equal(cube[...], expected["PRIMARY"])  # BZERO + BSCALE * stored
    np.testing.assert_array_equal(zarr.open_array(store, path="FLUX", mode="r")[...], expected["FLUX"])
    assert _epoch(store, "PRIMARY", expected["PRIMARY"]) == list(range(12))


def test_unsigned_fits_convention_keeps_integers(tmp_path: Path) -> None:
    from astropy.io import fits

    values = np.arange(40 * 3, dtype="uint16").reshape(40, 3) * 500
    fits.PrimaryHDU(values).writeto(tmp_path / "u.fits")  # stored as int16 with BZERO = 32768
    with fits.open(tmp_path / "u.fits") as hdul:
        assert hdul[0].header["BZERO"] == 32768
    arr = zarr.open_array(virtual_store(str(tmp_path / "u.fits")), path="PRIMARY", mode="r")
    assert arr.dtype == np.dtype("uint16")
    np.testing.assert_array_equal(arr[...], values)
    assert _epoch(virtual_store(str(tmp_path / "u.fits")), "PRIMARY", values) == list(range(40))


def test_default_chunking_divides_the_first_axis(tmp_path: Path) -> None:
    write_fits(tmp_path / "a.fits")
    store = virtual_store(str(tmp_path / "a.fits"), target_chunk_bytes=6 * 5 * 2 * 5)  # room for 5 rows
    assert zarr.open_array(store, path="PRIMARY", mode="r").chunks == (4, 6, 5)  # 4 divides 12, 5 does not
    with pytest.raises(
        ValueError, match=r"chunk_rows=5 must divide the first axis .*\(12 rows\).*\[1, 2, 3, 4, 6, 12\]"
    ):
        virtual_store(str(tmp_path / "a.fits"), chunk_rows=5)


def test_many_files_stack_one_sample_per_file(tmp_path: Path) -> None:
    expected = [write_fits(tmp_path / f"e{i}.fits", seed=i) for i in range(4)]
    store = virtual_store([str(tmp_path / f"e{i}.fits") for i in range(4)], hdus=["FLUX"])
    flux = np.stack([e["FLUX"] for e in expected])
    arr = zarr.open_array(store, path="FLUX", mode="r")
    assert arr.shape == (4, 8, 4)
    assert arr.metadata.dimension_names == ("file", "FLUX_y", "FLUX_x")
    assert _epoch(store, "FLUX", flux) == list(range(4))


def test_files_that_disagree_cannot_stack(tmp_path: Path) -> None:
    from astropy.io import fits

    write_fits(tmp_path / "a.fits")
    fits.HDUList([fits.PrimaryHDU(np.zeros((3, 3), dtype=">f4"))]).writeto(tmp_path / "b.fits")
    with pytest.raises(ValueError, match=r"cannot stack HDU 'PRIMARY': .*b\.fits has shape \(3, 3\)"):
        virtual_store([str(tmp_path / "a.fits"), str(tmp_path / "b.fits")], hdus=["PRIMARY"])


def test_identity_changes_when_a_file_changes(tmp_path: Path) -> None:
    write_fits(tmp_path / "a.fits", seed=0)
    before = virtual_store(str(tmp_path / "a.fits")).insitu_identity()
    assert virtual_store(str(tmp_path / "a.fits")).insitu_identity() == before
    write_fits(tmp_path / "a.fits", seed=1)
    os.utime(tmp_path / "a.fits", (1, 1))  # same size: the modification time must tell them apart
    assert virtual_store(str(tmp_path / "a.fits")).insitu_identity() != before


def test_unknown_paths_are_absent_not_the_root_group(tmp_path: Path) -> None:
    write_fits(tmp_path / "a.fits")
    group = zarr.open_group(virtual_store(str(tmp_path / "a.fits")), mode="r")
    assert sorted(group.array_keys()) == ["FLUX", "PRIMARY"]
    assert "TAB" not in group
    assert "nothing" not in group


def test_missing_file_and_unknown_format_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no such file: .*absent\.fits"):
        virtual_store(str(tmp_path / "absent.fits"))
    (tmp_path / "data.bin").write_bytes(b"1234")
    with pytest.raises(ValueError, match=r"cannot tell the format of .*data\.bin"):
        virtual_store(str(tmp_path / "data.bin"))


def test_open_store_picks_virtual_by_name(tmp_path: Path) -> None:
    expected = write_fits(tmp_path / "a.fits")
    store = insitu.open_store(str(tmp_path / "a.fits"), backend="virtual")
    assert isinstance(store, VirtualStore)
    np.testing.assert_array_equal(zarr.open_array(store, path="FLUX", mode="r")[...], expected["FLUX"])
    with pytest.raises(ValueError, match="virtual stores are read-only"):
        insitu.open_store(str(tmp_path / "a.fits"), backend="virtual", mode="w")


def test_hdf5_datasets_stream_in_place(tmp_path: Path) -> None:
    import h5py

    rng = np.random.default_rng(3)
    chunked = rng.normal(size=(20, 6, 4)).astype("f4")
    contiguous = np.arange(10 * 3, dtype="<i8").reshape(10, 3)
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f.create_dataset("temperature", data=chunked, chunks=(5, 6, 4), compression="gzip")
        f.create_dataset("counts", data=contiguous)
    store = virtual_store(str(tmp_path / "d.h5"))
    np.testing.assert_array_equal(zarr.open_array(store, path="temperature", mode="r")[...], chunked)
    assert _epoch(store, "temperature", chunked) == list(range(20))
    np.testing.assert_array_equal(zarr.open_array(store, path="counts", mode="r")[...], contiguous)


def test_netcdf4_is_read_as_hdf5(tmp_path: Path) -> None:
    import h5py

    values = np.arange(8 * 5, dtype="f8").reshape(8, 5)
    with h5py.File(tmp_path / "d.nc", "w") as f:  # netCDF-4 files are HDF5 files
        f.create_dataset("sst", data=values, chunks=(2, 5))
    arr = zarr.open_array(virtual_store(str(tmp_path / "d.nc")), path="sst", mode="r")
    np.testing.assert_array_equal(arr[...], values)


class TestVirtualFITSConformance(ReadOnlyStoreConformance):
    """The virtual store cannot be written through, so it runs the kit's read-only suite."""

    def open_store(self) -> Any:
        if not (self.tmp_path / "k.fits").exists():
            self._expected = write_fits(self.tmp_path / "k.fits", seed=3)
        return virtual_store(str(self.tmp_path / "k.fits"), chunk_rows=4)

    def expected(self) -> dict[str, np.ndarray]:
        self.open_store()
        return self._expected
