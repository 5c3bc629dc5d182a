"""Device transforms (numpy backend) give what the host path gives, through a real dataset."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests_support import open_dataset

import insitu
from insitu_gpu import DeviceChain, DeviceStage

transforms = pytest.importorskip("insitu_transforms")
from insitu_transforms import Cast, Coarsen, Crop, FillNaN, Grid, Regrid, StandardScaler  # noqa: E402

SCALER = StandardScaler({"t2m": 280.0, "z": 3.0}, {"t2m": 9.5, "z": 250.0})


def regrid(data: dict[str, np.ndarray], method: str) -> Regrid:
    target = Grid.from_coords(np.linspace(45.0, -45.0, 7), np.linspace(10.0, 340.0, 12))
    return Regrid(Grid.from_coords(data["lat"], data["lon"]), target, method, cache_dir=False)


# (chunk transforms for the dataset, batch transforms for the dataset, exact?)
CASES: dict[str, Callable[[dict[str, np.ndarray]], tuple[list[Any], list[Any], bool]]] = {
    "cast": lambda d: ([Cast("float16")], [], True),
    "cast-some": lambda d: ([Cast("float64", labels=["z"])], [], True),
    "fillnan": lambda d: ([FillNaN(-1.5)], [], True),
    "crop-by-name": lambda d: ([Crop(lat=slice(2, 10), lon=slice(3, -1))], [], True),
    "crop-some": lambda d: ([Crop({1: slice(0, 5)}, labels=["t2m"])], [], True),
    "coarsen-mean": lambda d: ([Coarsen({"lat": 2, "lon": 4})], [], False),
    "coarsen-max": lambda d: ([Coarsen({"lat": 3, "lon": 2}, how="max")], [], True),
    "coarsen-trim": lambda d: ([Coarsen({"lat": 5}, boundary="trim")], [], False),
    "scaler": lambda d: ([], [SCALER], True),
    "regrid-bilinear": lambda d: ([regrid(d, "bilinear")], [], False),
    "regrid-conservative": lambda d: ([regrid(d, "conservative")], [], False),
    "chain": lambda d: (
        [Crop(lat=slice(0, 8)), Coarsen({"lon": 2}), FillNaN(0.0), Cast("float32")],
        [SCALER],
        False,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_device_transforms_equal_the_host_path(
    store_path: Path, store_data: dict[str, np.ndarray], case: str
) -> None:
    chunk, batch, exact = CASES[case](store_data)
    with open_dataset(store_path, chunk_transforms=chunk, batch_transforms=batch) as ds:
        host = [{k: np.array(v) for k, v in b.items()} for b in ds.train]
    with open_dataset(store_path) as ds, DeviceStage(ds.train, transforms=[*chunk, *batch]) as stage:
        device = [{k: np.asarray(v) for k, v in b.items()} for b in stage]
        assert stage.stats["transforms"] == [type(t).__name__ for t in [*chunk, *batch]]
    assert len(device) == len(host)
    for d, h in zip(device, host, strict=True):
        assert d.keys() == h.keys()
        for label in h:
            assert d[label].dtype == h[label].dtype, label
            assert d[label].shape == h[label].shape, label
            if exact:
                np.testing.assert_array_equal(d[label], h[label])
            else:
                # float64 sums in another order: equal to the last bit or two of float32.
                np.testing.assert_allclose(d[label], h[label], rtol=2e-6, atol=1e-6, equal_nan=True)
    if "nan" in case or case == "chain":
        assert not any(np.isnan(d["t2m"]).any() for d in device)


def test_coarsen_mean_and_max_leave_out_nan_like_the_host() -> None:
    block = np.arange(2 * 4 * 4, dtype="float32").reshape(2, 4, 4)
    block[0, :2, :2] = np.nan  # a block of NaN only
    block[1, 0, 0] = np.nan  # one NaN among four
    for how in ("mean", "max"):
        t = Coarsen({0: 2, 1: 2}, how=how)
        got = DeviceChain([t])(np, {"x": block})["x"]
        np.testing.assert_allclose(got, t("x", block), rtol=1e-7, equal_nan=True)
        assert np.isnan(got[0, 0, 0])
        assert not np.isnan(got[1, 0, 0])


def test_regrid_leaves_out_nan_and_marks_unreached_cells() -> None:
    lat, lon = np.linspace(30.0, -30.0, 7), np.linspace(0.0, 60.0, 13)
    field = np.random.default_rng(1).normal(size=(3, 7, 13)).astype("float32")
    field[1, 3, 4] = np.nan
    field[2] = np.nan
    t = Regrid(
        Grid.from_coords(lat, lon), Grid.from_coords([20.0, 0.0, -20.0], [10.0, 30.0, 50.0]), cache_dir=False
    )
    got = DeviceChain([t])(np, {"x": field})["x"]
    np.testing.assert_allclose(got, t("x", field), rtol=2e-6, equal_nan=True)
    assert np.isnan(got[2]).all()
    assert not np.isnan(got[:2]).any()


def test_named_dimensions_without_geometries_fail_like_the_host() -> None:
    chain = DeviceChain([Crop(lat=slice(0, 2))])
    with pytest.raises(insitu.ConfigError, match="dimension name"):
        chain(np, {"x": np.zeros((1, 4, 4), "float32")})
    with pytest.raises(insitu.ConfigError, match="dimension name"):
        Crop(lat=slice(0, 2))("x", np.zeros((1, 4, 4), "float32"))


def test_a_scaler_for_other_labels_is_refused_with_the_host_message() -> None:
    with pytest.raises(insitu.ConfigError, match="none of them is covered"):
        DeviceChain([StandardScaler({"a": 0.0}, {"a": 1.0})])(np, {"b": np.zeros((2, 3), "float32")})


def test_transforms_without_a_device_version_are_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"RandomCrop has no device version.*StandardScaler"):
        DeviceChain([transforms.RandomCrop({0: 2}, seed=0)])
    with pytest.raises(TypeError, match="function has no device version"):
        DeviceChain([lambda name, block: block])
