"""Coarsen: block means and maxima by integer factors, NaN-aware, checked against numpy."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import insitu
from insitu.errors import ConfigError
from insitu.testing import TransformConformance
from insitu_transforms.coarsen import Coarsen

DIMS = ("level", "latitude", "longitude")


def reference(block: np.ndarray, fy: int, fx: int, reduce: Any) -> np.ndarray:
    """Blocks of the last two axes, reduced with an explicit loop over output cells."""
    rows, levels, h, w = block.shape
    out = np.empty((rows, levels, h // fy, w // fx), dtype=np.float64)
    for i in range(h // fy):
        for j in range(w // fx):
            cell = block[:, :, i * fy : (i + 1) * fy, j * fx : (j + 1) * fx].astype(np.float64)
            out[:, :, i, j] = reduce(cell.reshape(rows, levels, -1), axis=-1)
    return out


class TestCoarsenConformance(TransformConformance):
    def make_transform(self) -> Coarsen:
        return Coarsen({0: 2, 1: 5})

    def make_other_transform(self) -> Coarsen:
        return Coarsen({0: 2, 1: 5}, how="max")

    def expected_shape(self, block: np.ndarray) -> tuple[int, ...]:
        return (block.shape[0], 3, 1)


def test_mean_matches_numpy_and_ignores_nan() -> None:
    rng = np.random.default_rng(0)
    block = rng.normal(280.0, 10.0, size=(5, 3, 12, 16)).astype("f4")
    block[rng.random(block.shape) < 0.2] = np.nan
    block[0, 0, :4, :4] = np.nan  # one block entirely NaN
    coarsen = Coarsen({"latitude": 4, "longitude": 4}, dims=DIMS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "mean of empty slice" warning for the all-NaN block
        out = coarsen("t", block)
    assert out.shape == (5, 3, 3, 4)
    assert out.dtype == np.float32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = reference(block, 4, 4, np.nanmean)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    assert np.isnan(out[0, 0, 0, 0])
    assert np.isnan(out).sum() == 1


def test_max_matches_nanmax() -> None:
    rng = np.random.default_rng(1)
    block = rng.standard_normal((4, 2, 8, 9)).astype("f8")
    block[rng.random(block.shape) < 0.3] = np.nan
    block[1, 1, 2:4, 3:6] = np.nan
    out = Coarsen({"latitude": 2, "longitude": 3}, how="max", dims=DIMS)("t", block)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = reference(block, 2, 3, np.nanmax)
    np.testing.assert_array_equal(out, want)
    assert out.dtype == np.float64


def test_integer_fields_mean_to_float32_and_max_keeps_the_dtype() -> None:
    block = np.arange(2 * 1 * 4 * 4, dtype="i2").reshape(2, 1, 4, 4)
    mean = Coarsen({"latitude": 2, "longitude": 2}, dims=DIMS)
    out = mean("t", block)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, reference(block, 2, 2, np.mean))
    top = Coarsen({"latitude": 2, "longitude": 2}, how="max", dims=DIMS)("t", block)
    assert top.dtype == np.int16
    np.testing.assert_array_equal(top, reference(block, 2, 2, np.max))


def test_trim_drops_the_remainder_and_exact_names_shape_and_factor() -> None:
    block = np.random.default_rng(2).standard_normal((3, 2, 10, 7)).astype("f4")
    trimmed = Coarsen({"latitude": 4, "longitude": 3}, boundary="trim", dims=DIMS)
    out = trimmed("t", block)
    assert out.shape == (3, 2, 2, 2)
    np.testing.assert_allclose(out, reference(block[:, :, :8, :6], 4, 3, np.mean), rtol=1e-6)
    exact = Coarsen({"latitude": 4}, dims=DIMS)
    with pytest.raises(
        ConfigError, match=r"factor latitude=4 does not divide 10.*array 't2m' \(sample shape \(2, 10, 7\)\)"
    ):
        exact.out_spec((3, 2, 10, 7), np.dtype("f4"), name="t2m")
    with pytest.raises(ConfigError, match="does not divide"):
        exact("t2m", block)


@pytest.mark.parametrize(
    ("coarsen", "sample_shape", "dtype"),
    [
        (Coarsen({"latitude": 4, "longitude": 4}, dims=DIMS), (3, 12, 16), "f4"),
        (Coarsen({"latitude": 5}, boundary="trim", dims=DIMS), (3, 12, 16), "f2"),
        (Coarsen({-1: 8}, how="max"), (3, 12, 16), "i4"),
        (Coarsen({"level": 3, "longitude": 2}, dims=DIMS), (3, 12, 16), "u1"),
        (Coarsen({"latitude": 2}, dims=DIMS, labels=["other"]), (3, 12, 16), "f4"),
    ],
)
def test_out_spec_matches_the_output(coarsen: Coarsen, sample_shape: tuple[int, ...], dtype: str) -> None:
    for rows in (4, 1):  # a full slab, then a short last one
        block = (np.random.default_rng(3).random((rows, *sample_shape)) * 100).astype(dtype)
        shape, declared = coarsen.out_spec(block.shape, block.dtype, name="t2m")
        out = coarsen("t2m", block)
        assert out.shape == shape
        assert out.dtype == declared


def test_bad_parameters_are_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown dimension\(s\) \['lattitude'\]"):
        Coarsen({"lattitude": 2}, dims=DIMS)
    with pytest.raises(ConfigError, match="need the arrays' dimension names"):  # unbound, outside a dataset
        Coarsen({"latitude": 2}).out_spec((2, 3, 12, 16), np.dtype("f4"), name="t")
    with pytest.raises(ConfigError, match="factor latitude=0"):
        Coarsen({"latitude": 0}, dims=DIMS)
    with pytest.raises(ConfigError, match=r"factor latitude=2\.5"):
        Coarsen({"latitude": 2.5}, dims=DIMS)  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="how must be one of"):
        Coarsen({"latitude": 2}, how="median", dims=DIMS)
    with pytest.raises(ConfigError, match="boundary must be one of"):
        Coarsen({"latitude": 2}, boundary="pad", dims=DIMS)
    with pytest.raises(ConfigError, match=r"factor latitude=32 is larger than the field.*\(3, 12, 16\)"):
        Coarsen({"latitude": 32}, boundary="trim", dims=DIMS).out_spec(
            (2, 3, 12, 16), np.dtype("f4"), name="t"
        )
    with pytest.raises(ConfigError, match="has dimensions"):  # names that do not match the sample's axes
        Coarsen({"latitude": 2}, dims=DIMS).out_spec((2, 12, 16), np.dtype("f4"), name="t")


def test_fingerprint_names_every_parameter() -> None:
    base = Coarsen({"latitude": 2}, dims=DIMS)
    others = [
        Coarsen({"latitude": 4}, dims=DIMS),
        Coarsen({"latitude": 2}, how="max", dims=DIMS),
        Coarsen({"latitude": 2}, boundary="trim", dims=DIMS),
        Coarsen({"latitude": 2}, dims=("level", "longitude", "latitude")),
        Coarsen({"latitude": 2}, dims=DIMS, labels=["t2m"]),
    ]
    assert len({base.fingerprint(), *(o.fingerprint() for o in others)}) == 1 + len(others)
    assert Coarsen({"latitude": 2}, dims=DIMS).fingerprint() == base.fingerprint()


class Counting:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        with self.lock:
            self.calls += 1
        return self.inner(name, block)

    def out_spec(self, shape: tuple[int, ...], dtype: Any, *, name: str) -> tuple[tuple[int, ...], Any]:
        return self.inner.out_spec(shape, dtype, name=name)

    def fingerprint(self) -> str:
        return "Counting:" + self.inner.fingerprint()


def test_coarsen_through_the_engine(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    data = rng.normal(250.0, 20.0, size=(20, 3, 16, 24)).astype("f4")
    data[rng.random(data.shape) < 0.05] = np.nan
    group = zarr.open_group(tmp_path, mode="w")
    arr = group.create_array(
        "z", shape=data.shape, chunks=(5, 3, 8, 12), dtype="f4", dimension_names=("time", *DIMS)
    )
    arr[...] = data
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store)
    coarsen = Counting(Coarsen({"latitude": 4, "longitude": 4}, dims=geoms))
    # Without dims, the dataset binds the names of each array: the same coarse field.
    bound = Coarsen({"latitude": 4, "longitude": 4}).bind(geoms["z"])
    assert bound("z", data[:5]).shape == (5, 3, 4, 6)
    np.testing.assert_array_equal(bound("z", data[:5]), coarsen.inner("z", data[:5]))
    manifest = insitu.split_by_chunk(geoms["z"], (0.6, 0.4))
    with insitu.InSituDataset(store, manifest, batch_size=3, chunk_transforms=[coarsen]) as ds:
        assert ds.train.sample_shapes == {"z": (3, 4, 6)}
        assert ds.pool.arrays["z"].slot_nbytes == 5 * 3 * 4 * 6 * 4  # the pool holds the coarse field
        batches = list(ds.train) + list(ds.val)
        assert coarsen.calls == 4  # once per slab of 5 samples: 20 samples, 4 slabs
        assert ds.stats["chunks_decoded"] == 4 * 4  # each slab is 2 x 2 stored chunks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = reference(data, 4, 4, np.nanmean)
    for b in batches:
        np.testing.assert_allclose(b["z"], want[b.sample_indices], rtol=1e-6)
    assert sorted(np.concatenate([b.sample_indices for b in batches]).tolist()) == list(range(20))


class _Namespace:
    """numpy seen through another array module's door: only what block_reduce may use."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        return getattr(np, name)


@pytest.mark.parametrize("how", ["mean", "max"])
@pytest.mark.parametrize("dtype", ["f4", "i2"])
def test_block_reduce_through_another_array_module_gives_the_host_result(how: str, dtype: str) -> None:
    from insitu_transforms.coarsen import block_reduce

    rng = np.random.default_rng(3)
    block = (rng.normal(size=(3, 2, 9, 10)) * 100).astype(dtype)
    if dtype == "f4":
        block[0, 0, :3, :2] = np.nan  # a block of NaN only
        block[1, 1, 4, 5] = np.nan
    coarsen = Coarsen({1: 3, 2: 2}, how=how)
    xp = _Namespace()
    out_dtype = coarsen.out_spec(block.shape, block.dtype, name="x")[1]
    got = block_reduce(xp, block, {1: 3, 2: 2}, how, out_dtype)
    np.testing.assert_array_equal(got, coarsen("x", block))
    assert got.dtype == out_dtype
    assert xp.calls, "the reduction must go through the array module it is given"
    np.testing.assert_array_equal(coarsen.reduce(np, "x", block), coarsen("x", block))


@pytest.mark.parametrize("how", ["mean", "max"])
def test_factors_of_one_give_a_new_array_not_a_view_of_the_block(how: str) -> None:
    block = np.arange(2 * 3 * 4, dtype="f4").reshape(2, 3, 4)
    out = Coarsen({0: 1, 1: 1}, how=how)("x", block)
    np.testing.assert_array_equal(out, block)
    assert not np.shares_memory(out, block)  # the engine may reuse the block's buffer
