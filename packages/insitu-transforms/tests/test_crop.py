"""Crop (a fixed region, chunk transform) and RandomCrop (a window per sample, batch transform)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import insitu
from insitu.arrays.transforms import output_spec
from insitu.batch import Batch
from insitu.errors import ConfigError
from insitu.testing import TransformConformance
from insitu_transforms.crop import Crop, RandomCrop, uniform_draws

DIMS = ("latitude", "longitude")
LAT = np.linspace(75.0, -75.0, 16)  # north to south, 10° apart
LON = np.arange(32) * 11.25


def write_store(root: Path, *, n: int = 24, chunks: tuple[int, ...] = (6, 8, 16)) -> dict[str, np.ndarray]:
    """A (time, latitude, longitude) field whose values identify their sample, a static mask, and
    coordinates."""
    rng = np.random.default_rng(0)
    data = {
        "t2m": (rng.standard_normal((n, 16, 32)) + np.arange(n)[:, None, None] * 10).astype("f4"),
        "lsm": rng.random((16, 32)).astype("f4"),
    }
    group = zarr.open_group(root, mode="w")
    t2m = group.create_array(
        "t2m", shape=data["t2m"].shape, chunks=chunks, dtype="f4", dimension_names=("time", *DIMS)
    )
    t2m[...] = data["t2m"]
    lsm = group.create_array("lsm", shape=(16, 32), chunks=(16, 32), dtype="f4", dimension_names=DIMS)
    lsm[...] = data["lsm"]
    for name, values in {"time": np.arange(n, dtype="i8"), "latitude": LAT, "longitude": LON}.items():
        coord = group.create_array(
            name, shape=values.shape, chunks=values.shape, dtype=values.dtype, dimension_names=(name,)
        )
        coord[...] = values
    return data


class Counting:
    """Wraps a chunk transform and counts its calls per array and first sample value (thread-safe:
    the engine runs chunk transforms on its decode threads)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[str, float]] = []
        self.lock = threading.Lock()

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        with self.lock:
            self.calls.append((name, float(block.flat[0])))
        return self.inner(name, block)

    def out_spec(self, shape: tuple[int, ...], dtype: Any, *, name: str) -> tuple[tuple[int, ...], Any]:
        return self.inner.out_spec(shape, dtype, name=name)

    def fingerprint(self) -> str:
        return "Counting:" + self.inner.fingerprint()


def batch_of(
    arrays: dict[str, np.ndarray], samples: Any, *, epoch: int = 0, statics: tuple[str, ...] = ()
) -> Batch:
    samples = np.asarray(samples, dtype=np.int64)
    reads = {k: samples for k in arrays if k not in statics}
    return Batch(arrays, samples, reads, "train", epoch)


# --- Crop ------------------------------------------------------------------------------------


class TestCropConformance(TransformConformance):
    def make_transform(self) -> Crop:
        return Crop({0: slice(1, 4), -1: slice(None, -1)})

    def make_other_transform(self) -> Crop:
        return Crop({0: slice(1, 5)})

    def expected_shape(self, block: np.ndarray) -> tuple[int, ...]:
        return (block.shape[0], 3, block.shape[2] - 1)


def test_crop_by_name_and_by_position_matches_numpy_slicing() -> None:
    block = np.random.default_rng(1).standard_normal((5, 3, 16, 32)).astype("f4")
    by_name = Crop(latitude=slice(2, 10), longitude=slice(-8, None), dims=("level", *DIMS))
    np.testing.assert_array_equal(by_name("t", block), block[:, :, 2:10, -8:])
    by_position = Crop({1: slice(2, 10), 2: slice(24, 32)})
    np.testing.assert_array_equal(by_position("t", block), block[:, :, 2:10, 24:])
    assert by_name.fingerprint() != by_position.fingerprint()  # which axis is cut is part of the identity


@pytest.mark.parametrize(
    ("crop", "sample_shape"),
    [
        (Crop(latitude=slice(2, 10), dims=DIMS), (16, 32)),
        (Crop(latitude=slice(None, 4), longitude=slice(3, -3), dims=DIMS), (16, 32)),
        (Crop({-1: slice(5, 6)}), (4, 16, 32)),
        (Crop(latitude=slice(0, 16), labels=["other"], dims=DIMS), (16, 32)),
    ],
)
def test_crop_out_spec_matches_the_output(crop: Crop, sample_shape: tuple[int, ...]) -> None:
    for rows in (6, 2):  # the full chunk length, then a short last slab
        block = np.zeros((rows, *sample_shape), "f4")
        shape, dtype = crop.out_spec(block.shape, block.dtype, name="t2m")
        out = crop("t2m", block)
        assert out.shape == shape
        assert out.dtype == dtype


def test_crop_larger_than_the_field_names_the_bound_and_the_shape() -> None:
    crop = Crop(latitude=slice(10, 40), dims=DIMS)
    with pytest.raises(ConfigError, match=r"latitude=slice\(10, 40\) is larger than the field.*\(16, 32\)"):
        crop.out_spec((6, 16, 32), np.dtype("f4"), name="t2m")
    with pytest.raises(ConfigError, match=r"slice\(-20, None\) is larger"):
        Crop({0: slice(-20, None)}).out_spec((6, 16, 32), np.dtype("f4"), name="t2m")
    with pytest.raises(ConfigError, match="selects nothing"):
        Crop({0: slice(5, 5)}).out_spec((6, 16, 32), np.dtype("f4"), name="t2m")
    with pytest.raises(ConfigError, match="out of range"):
        Crop({2: slice(0, 1)}).out_spec((6, 16, 32), np.dtype("f4"), name="t2m")


def test_crop_refuses_unknown_dimensions_and_names_without_dims() -> None:
    with pytest.raises(ConfigError, match=r"unknown dimension\(s\) \['latitde'\]"):
        Crop(latitde=slice(0, 4), dims=DIMS)
    unbound = Crop(latitude=slice(0, 4))  # names wait for a dataset to bind each array's geometry
    with pytest.raises(ConfigError, match="need the arrays' dimension names"):
        unbound.out_spec((6, 16, 32), np.dtype("f4"), name="t2m")
    with pytest.raises(ConfigError, match="takes no step"):
        Crop(latitude=slice(0, 4, 2), dims=DIMS)
    with pytest.raises(ConfigError, match="integer indices"):
        Crop(latitude=slice(60.0, 30.0), dims=DIMS)
    with pytest.raises(ConfigError, match="needs a region"):
        Crop()


def test_crop_through_the_engine_runs_once_per_chunk_and_sizes_the_pool(tmp_path: Path) -> None:
    data = write_store(tmp_path)
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, include_static=True)
    crop = Counting(Crop(latitude=slice(2, 10), longitude=slice(4, 20), dims=geoms))
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
    with insitu.InSituDataset(store, manifest, geoms, batch_size=5, chunk_transforms=[crop]) as ds:
        assert ds.train.sample_shapes == {"t2m": (8, 16), "lsm": (8, 16)}
        assert ds.pool.arrays["t2m"].arena.shape[1:] == (8, 16)
        batches = list(ds.train)
        # One call per slab (4 chunks along time) and one for the static field: none repeated.
        assert sorted(name for name, _ in crop.calls) == ["lsm"] + ["t2m"] * 4
        assert len(set(crop.calls)) == 5
        ds.set_epoch(1)
        list(ds.train)  # the pool holds every slab: the next epoch decodes nothing again
        assert len(crop.calls) == 5
    for b in batches:
        np.testing.assert_array_equal(b["t2m"], data["t2m"][b.sample_indices, 2:10, 4:20])
        np.testing.assert_array_equal(b["lsm"], data["lsm"][None, 2:10, 4:20])
    assert sorted(np.concatenate([b.sample_indices for b in batches]).tolist()) == list(range(24))


def test_crop_larger_than_the_field_fails_at_dataset_construction(tmp_path: Path) -> None:
    write_store(tmp_path)
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
    crop = Crop(latitude=slice(10, 40), dims=geoms)
    with pytest.raises(
        ConfigError,
        match=r"slice\(10, 40\) is larger than the field: array 't2m' has sample shape \(16, 32\)",
    ):
        insitu.InSituDataset(store, manifest, geoms, chunk_transforms=[crop])


def test_crop_by_value_matches_a_selection(tmp_path: Path) -> None:
    data = write_store(tmp_path)
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store)
    box = {"latitude": slice(45, -15), "longitude": slice(30, 100)}
    crop = Crop.by_value(geoms, **box)
    selected = geoms["t2m"].sel(**box)
    lat = np.flatnonzero((LAT <= 45) & (LAT >= -15))
    lon = np.flatnonzero((LON >= 30) & (LON <= 100))
    assert crop.region == (("latitude", lat[0], lat[-1] + 1), ("longitude", lon[0], lon[-1] + 1))
    spec = output_spec(geoms["t2m"], [crop])
    assert spec.sample_shape == selected.sample_shape
    np.testing.assert_array_equal(crop("t2m", data["t2m"][:3]), data["t2m"][:3][:, lat][:, :, lon])
    # The same box given as coordinate values with explicit dimension names.
    same = Crop.by_value({"latitude": LAT, "longitude": LON}, dims=DIMS, **box)
    assert same.region == crop.region


def test_crop_by_value_refuses_what_is_not_one_run() -> None:
    with pytest.raises(ConfigError, match="not one contiguous run"):
        Crop.by_value({"longitude": LON}, dims=DIMS, longitude=slice(340, 20))  # across the seam
    with pytest.raises(ConfigError, match="is a slice"):
        Crop.by_value({"latitude": LAT}, dims=DIMS, latitude=45.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no coordinate values"):
        Crop.by_value({"latitude": LAT}, dims=DIMS, level=slice(1, 2))
    with pytest.raises(ConfigError, match="selects nothing"):
        Crop.by_value({"latitude": LAT}, dims=DIMS, latitude=slice(81, 89))


# --- RandomCrop -------------------------------------------------------------------------------


def windows(batch: Batch, crop: RandomCrop, label: str) -> np.ndarray:
    """The reference: each row's window cut with a Python loop, from the offsets the crop reports."""
    offs = crop.offsets(batch)[label]
    lat, lon = offs["latitude"], offs["longitude"]
    sizes = dict(crop.size)
    rows = batch[label] if batch[label].shape[0] == batch.size else np.repeat(batch[label], batch.size, 0)
    return np.stack(
        [
            rows[i, lat[i] : lat[i] + sizes["latitude"], lon[i] : lon[i] + sizes["longitude"]]
            for i in range(batch.size)
        ]
    )


def test_random_crop_cuts_each_rows_window() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((9, 16, 32)).astype("f4")
    crop = RandomCrop({"latitude": 5, "longitude": 7}, seed=3, dims=DIMS)
    batch = batch_of({"x": x}, np.arange(100, 109))
    out = crop(batch)
    assert out["x"].shape == (9, 5, 7)
    assert out["x"].dtype == x.dtype
    np.testing.assert_array_equal(out["x"], windows(batch, crop, "x"))
    np.testing.assert_array_equal(out.sample_indices, batch.sample_indices)
    assert len({(int(a), int(b)) for a, b in zip(*crop.offsets(batch)["x"].values(), strict=True)}) > 1


def test_random_crop_window_depends_only_on_seed_epoch_and_sample() -> None:
    x = np.random.default_rng(4).standard_normal((40, 16, 32)).astype("f4")
    crop = RandomCrop({"latitude": 8, "longitude": 8}, seed=7, dims=DIMS)

    def offsets_by_sample(order: np.ndarray, size: int, epoch: int) -> dict[int, tuple[int, int]]:
        found = {}
        for start in range(0, len(order), size):
            rows = order[start : start + size]
            offs = crop.offsets(batch_of({"x": x[rows]}, rows, epoch=epoch))["x"]
            for i, s in enumerate(rows):
                found[int(s)] = (int(offs["latitude"][i]), int(offs["longitude"][i]))
        return found

    ordered = offsets_by_sample(np.arange(40), 8, epoch=0)
    shuffled = offsets_by_sample(np.random.default_rng(0).permutation(40), 7, epoch=0)
    assert ordered == shuffled  # batch size and order do not matter
    later = offsets_by_sample(np.arange(40), 8, epoch=1)
    assert sum(ordered[s] != later[s] for s in range(40)) > 30  # another epoch, other windows
    other_seed = RandomCrop({"latitude": 8, "longitude": 8}, seed=8, dims=DIMS)
    b = batch_of({"x": x}, np.arange(40))
    assert not np.array_equal(other_seed.offsets(b)["x"]["latitude"], crop.offsets(b)["x"]["latitude"])
    fixed = RandomCrop({"latitude": 8, "longitude": 8}, seed=7, dims=DIMS, per_epoch=False)
    for dim in DIMS:
        np.testing.assert_array_equal(
            fixed.offsets(batch_of({"x": x}, np.arange(40), epoch=0))["x"][dim],
            fixed.offsets(batch_of({"x": x}, np.arange(40), epoch=5))["x"][dim],
        )


def test_random_crop_offsets_cover_every_valid_offset_uniformly() -> None:
    n, size, draws = 16, 8, 45_000
    choices = n - size + 1
    crop = RandomCrop({"latitude": size, "longitude": size}, seed=11, dims=DIMS)
    x = np.zeros((draws, n, n), "f4")
    offs = crop.offsets(batch_of({"x": x}, np.arange(draws), epoch=2))["x"]
    expected = draws / choices
    for dim in DIMS:
        counts = np.bincount(offs[dim], minlength=choices)
        assert len(counts) == choices  # never beyond the last valid offset
        assert counts.min() > 0
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        assert chi2 < 35.0, (dim, counts)  # 8 degrees of freedom: p < 1e-4 above 31
    # The two dimensions are drawn independently: their joint counts are uniform over 81 cells.
    joint = np.bincount(offs["latitude"] * choices + offs["longitude"], minlength=choices**2)
    chi2 = float(((joint - draws / choices**2) ** 2 / (draws / choices**2)).sum())
    assert chi2 < 150.0  # 80 degrees of freedom: p < 1e-5 above 140


def test_uniform_draws_are_in_range_and_keyed_by_every_part() -> None:
    samples = np.arange(10_000)
    u = uniform_draws(0, 0, samples, 1)
    assert u.min() >= 0.0
    assert u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01
    for other in (
        uniform_draws(1, 0, samples, 1),
        uniform_draws(0, 1, samples, 1),
        uniform_draws(0, 0, samples, 2),
    ):
        assert not np.any(other == u)
    np.testing.assert_array_equal(uniform_draws(0, 0, samples[::-1], 1), u[::-1])


def test_random_crop_aligns_labels_by_default_and_can_draw_them_independently() -> None:
    x = np.random.default_rng(5).standard_normal((12, 16, 32)).astype("f4")
    batch = batch_of({"t2m": x, "t2m+4": x + 1, "u10": x + 2}, np.arange(12))
    aligned = RandomCrop({"latitude": 6, "longitude": 6}, dims={"t2m": DIMS, "u10": DIMS})
    out = aligned(batch)
    np.testing.assert_array_equal(out["t2m+4"], out["t2m"] + 1)  # the shifted label shares the window
    np.testing.assert_array_equal(out["u10"], out["t2m"] + 2)
    apart = RandomCrop({"latitude": 6, "longitude": 6}, dims={"t2m": DIMS, "u10": DIMS}, independent=True)
    offs = apart.offsets(batch)
    assert not np.array_equal(offs["t2m"]["latitude"], offs["u10"]["latitude"])
    out = apart(batch)
    np.testing.assert_array_equal(out["u10"], windows(batch, apart, "u10"))


def test_random_crop_leaves_static_fields_alone_unless_asked() -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, 16, 32)).astype("f4")
    lsm = rng.random((1, 16, 32)).astype("f4")
    batch = batch_of({"x": x, "lsm": lsm}, np.arange(20, 25), statics=("lsm",))
    out = RandomCrop({"latitude": 4, "longitude": 4}, dims=DIMS)(batch)
    assert out["x"].shape == (5, 4, 4)
    assert out["lsm"] is lsm
    crop = RandomCrop({"latitude": 4, "longitude": 4}, dims=DIMS, statics=True)
    out = crop(batch)
    assert out["lsm"].shape == (5, 4, 4)  # one window per row, aligned with the rows of x
    np.testing.assert_array_equal(out["lsm"], windows(batch, crop, "lsm"))
    offs = crop.offsets(batch)
    np.testing.assert_array_equal(offs["lsm"]["latitude"], offs["x"]["latitude"])


def test_random_crop_passes_labels_without_the_dimensions_and_limits_to_labels() -> None:
    x = np.zeros((3, 16, 32), "f4")
    series = np.arange(6, dtype="f4").reshape(3, 2)
    batch = batch_of({"x": x, "series": series, "y": x}, np.arange(3))
    crop = RandomCrop({"latitude": 4}, dims={"x": DIMS, "y": DIMS, "series": ("station",)}, labels=["x"])
    out = crop(batch)
    assert out["series"] is series
    assert out["y"] is x
    assert out["x"].shape == (3, 4, 32)


def test_random_crop_errors_name_the_value() -> None:
    x = np.zeros((3, 16, 32), "f4")
    with pytest.raises(
        ConfigError, match=r"size latitude=20 is larger than the field: label 'x' has sample shape \(16, 32\)"
    ):
        RandomCrop({"latitude": 20}, dims=DIMS)(batch_of({"x": x}, np.arange(3)))
    with pytest.raises(ConfigError, match=r"unknown dimension\(s\) \['lat'\]"):
        RandomCrop({"lat": 4}, dims=DIMS)
    with pytest.raises(ConfigError, match="positive integer"):
        RandomCrop({"latitude": 0}, dims=DIMS)
    with pytest.raises(ConfigError, match="seed"):
        RandomCrop({0: 4}, seed=-1)


def test_random_crop_through_the_engine_is_the_same_whatever_the_batching(tmp_path: Path) -> None:
    data = write_store(tmp_path)
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
    crop = RandomCrop({"latitude": 8, "longitude": 8}, seed=1, dims=geoms)

    def windows_by_sample(batch_size: int, shuffle: bool, epoch: int) -> dict[int, np.ndarray]:
        with insitu.InSituDataset(
            store,
            manifest,
            geoms,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=batch_size,
            batch_transforms=[crop],
        ) as ds:
            ds.set_epoch(epoch)
            found = {}
            for b in ds.train:
                offs = crop.offsets(b, ds.train.pooled_sample_shapes)[
                    "t2m"
                ]  # recomputed from the delivered batch
                for i, s in enumerate(b.sample_indices.tolist()):
                    lat, lon = offs["latitude"][i], offs["longitude"][i]
                    np.testing.assert_array_equal(b["t2m"][i], data["t2m"][s, lat : lat + 8, lon : lon + 8])
                    found[s] = b["t2m"][i]
            return found

    first = windows_by_sample(4, True, epoch=0)
    second = windows_by_sample(7, False, epoch=0)
    assert sorted(first) == list(range(24))
    for s in range(24):
        np.testing.assert_array_equal(first[s], second[s])
    later = windows_by_sample(4, True, epoch=1)
    assert sum(not np.array_equal(first[s], later[s]) for s in range(24)) > 12


def test_crop_without_dims_is_bound_to_each_array_by_the_dataset(tmp_path: Path) -> None:
    data = write_store(tmp_path)
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, include_static=True)
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
    crop = Crop(latitude=[2, 10], longitude=slice(4, 20))  # a [start, stop] pair, as a config gives it
    assert crop.bind(geoms["t2m"]).fingerprint() != crop.fingerprint()
    assert crop.bind(geoms["t2m"])("t2m", data["t2m"][:2]).shape == (2, 8, 16)
    with insitu.InSituDataset(store, manifest, geoms, batch_size=5, chunk_transforms=[crop]) as ds:
        assert ds.train.sample_shapes == {"t2m": (8, 16), "lsm": (8, 16)}
        for b in ds.train:
            np.testing.assert_array_equal(b["t2m"], data["t2m"][b.sample_indices, 2:10, 4:20])
            np.testing.assert_array_equal(b["lsm"], data["lsm"][None, 2:10, 4:20])
    with pytest.raises(
        ConfigError,
        match=r"array '(t2m|lsm)' has no dimension\(s\) \['lat'\] \(its dimensions: \['latitude', 'longitude'\]\)",
    ):
        insitu.InSituDataset(store, manifest, geoms, chunk_transforms=[Crop(lat=slice(0, 4))])
    on_lsm = Crop(level=slice(0, 1), labels=["lsm"])  # limited to an array: the others are not checked
    with pytest.raises(ConfigError, match="array 'lsm' has no dimension"):
        insitu.InSituDataset(store, manifest, geoms, chunk_transforms=[on_lsm])
    with insitu.InSituDataset(
        store, manifest, geoms, chunk_transforms={"t2m": [Crop(latitude=slice(0, 4), labels=["t2m"])]}
    ) as ds:
        assert ds.train.sample_shapes == {"t2m": (4, 32), "lsm": (16, 32)}
