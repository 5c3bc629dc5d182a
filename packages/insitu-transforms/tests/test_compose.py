"""Compose (chains of chunk or batch transforms), Cast through the engine, and FillNaN."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import insitu
from insitu.arrays.transforms import output_spec, transform_fingerprint
from insitu.batch import Batch
from insitu.errors import ConfigError
from insitu.testing import TransformConformance
from insitu_transforms.chunk import Cast, FillNaN, NanToNum
from insitu_transforms.coarsen import Coarsen
from insitu_transforms.compose import Compose, ComposeBatch
from insitu_transforms.crop import Crop
from insitu_transforms.scaler import StandardScaler

DIMS = ("latitude", "longitude")


class Doubles:
    """A transform whose out_spec does not take the array's name."""

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        return np.concatenate([block, block], axis=-1)

    def out_spec(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[tuple[int, ...], Any]:
        return (*shape[:-1], 2 * shape[-1]), dtype


def add_one(name: str, block: np.ndarray) -> np.ndarray:
    """A plain function: no out_spec, no fingerprint method."""
    return block + 1


class TestComposeConformance(TransformConformance):
    def make_transform(self) -> Compose:
        return Compose([Crop({0: slice(1, 5)}), Coarsen({1: 5}), Cast("float16")])

    def make_other_transform(self) -> Compose:
        return Compose([Crop({0: slice(1, 5)}), Coarsen({1: 5}), Cast("float64")])

    def expected_shape(self, block: np.ndarray) -> tuple[int, ...]:
        return (block.shape[0], 4, 1)

    def expected_dtype(self, block: np.ndarray) -> np.dtype[Any]:
        return np.dtype("float16")


class TestFillNaNConformance(TransformConformance):
    def make_transform(self) -> FillNaN:
        return FillNaN(-1.0)

    def make_other_transform(self) -> FillNaN:
        return FillNaN(0.0)

    def sample_block(self) -> np.ndarray:
        block = super().sample_block()
        block[block > 1.0] = np.nan
        return block


def test_compose_applies_in_order_and_declares_the_chain() -> None:
    block = np.random.default_rng(0).standard_normal((6, 16, 32)).astype("f4")
    members = [
        Crop(latitude=slice(0, 8), dims=DIMS),
        Doubles(),
        add_one,
        Coarsen({"latitude": 2}, dims=DIMS),
        Cast("f2"),
    ]
    chain = Compose(members)
    want = block
    for t in members:
        want = t("t2m", want)
    out = chain("t2m", block)
    np.testing.assert_array_equal(out, want)
    assert chain.out_spec(block.shape, block.dtype, name="t2m") == ((6, 4, 64), np.dtype("f2"))
    assert out.shape == (6, 4, 64)
    # The engine's own composition of the same list agrees with Compose's declaration.
    geom = insitu.ArrayGeometry(
        "t2m", "t2m", (12, 16, 32), np.dtype("f4"), (6, 16, 32), dimension_names=("time", *DIMS)
    )
    assert output_spec(geom, [chain]) == output_spec(geom, members)


def test_compose_passes_the_name_to_transforms_that_take_it() -> None:
    chain = Compose([Cast("f2", labels=["a"]), Doubles()])
    assert chain.out_spec((4, 3), np.dtype("f4"), name="a") == ((4, 6), np.dtype("f2"))
    assert chain.out_spec((4, 3), np.dtype("f4"), name="b") == ((4, 6), np.dtype("f4"))


def test_compose_fingerprint_is_made_of_its_members() -> None:
    a = Compose([Crop({0: slice(0, 2)}), add_one, Cast("f2")])
    same = Compose([Crop({0: slice(0, 2)}), add_one, Cast("f2")])
    assert a.fingerprint() == same.fingerprint()
    assert a == same
    assert Compose([Crop({0: slice(0, 3)}), add_one, Cast("f2")]).fingerprint() != a.fingerprint()
    assert Compose([add_one, Crop({0: slice(0, 2)}), Cast("f2")]).fingerprint() != a.fingerprint()  # order
    assert transform_fingerprint(add_one) in a.fingerprint()
    clone = pickle.loads(pickle.dumps(a))
    assert clone.fingerprint() == a.fingerprint()
    assert Compose([a, Cast("f4")]).fingerprint().startswith("Compose[Compose[")  # nests


def test_compose_of_batch_transforms() -> None:
    x = np.arange(12, dtype="f4").reshape(3, 4)
    batch = Batch({"x": x}, np.arange(3), {"x": np.arange(3)}, "train", 2)

    def plus_ten(b: Batch) -> Batch:
        return b.replace({k: v + 10 for k, v in b.items()})

    scaler = StandardScaler({"x": 10.0}, {"x": 2.0})
    chained = Compose.batch([plus_ten, scaler])
    assert isinstance(chained, ComposeBatch)
    out = chained(batch)
    np.testing.assert_array_equal(out["x"], x / 2.0)
    assert out.epoch == 2
    np.testing.assert_array_equal(Compose([plus_ten, scaler])(batch)["x"], x / 2.0)  # detected from the Batch
    assert not hasattr(chained, "out_spec")  # never mistaken for a chunk transform
    assert chained.fingerprint() != Compose.batch([scaler, plus_ten]).fingerprint()
    with pytest.raises(ConfigError, match="not callable"):
        Compose.batch([plus_ten, 3])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="list of transforms"):
        Compose(add_one)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="one Batch"):
        Compose([add_one])("x")  # type: ignore[call-overload]


# --- through the engine -------------------------------------------------------------------------


def write_store(root: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    data = {name: rng.standard_normal((24, 8, 12)).astype("f4") for name in ("a", "b")}
    data["a"][rng.random(data["a"].shape) < 0.1] = np.nan
    group = zarr.open_group(root, mode="w")
    for name, values in data.items():
        arr = group.create_array(
            name, shape=values.shape, chunks=(4, 8, 12), dtype="f4", dimension_names=("time", *DIMS)
        )
        arr[...] = values
    return data


class Counting:
    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        with self.lock:
            self.calls[name] = self.calls.get(name, 0) + 1
        return block

    def fingerprint(self) -> str:
        return "Counting"


def test_cast_float16_halves_the_pool_and_delivers_the_cast_source(tmp_path: Path) -> None:
    data = write_store(tmp_path)
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["a"], (1.0,))
    opts: dict[str, Any] = {"batch_size": 5, "block_chunks": 2}
    with insitu.InSituDataset(store, manifest, **opts) as plain:
        full = plain.pool.arrays["a"].slot_nbytes, plain.pool.arrays["a"].arena.nbytes
    with insitu.InSituDataset(store, manifest, chunk_transforms={"a": [Cast("float16")]}, **opts) as ds:
        assert ds.train.dtypes == {"a": np.dtype("f2"), "b": np.dtype("f4")}
        assert ds.pool.arrays["a"].slot_nbytes * 2 == full[0]
        assert ds.pool.arrays["a"].arena.dtype == np.dtype("f2")
        batches = list(ds.train)
    for b in batches:
        assert b["a"].dtype == np.float16
        np.testing.assert_array_equal(b["a"], data["a"][b.sample_indices].astype("f2"))  # NaN included
        np.testing.assert_array_equal(b["b"], data["b"][b.sample_indices])
    assert sum(b.size for b in batches) == 24


def test_a_composed_chain_runs_once_per_chunk_through_the_engine(tmp_path: Path) -> None:
    data = write_store(tmp_path)
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store)
    counting = Counting()
    # The Crop names a dimension without dims=: Compose passes the dataset's binding on to it.
    chain = Compose([counting, FillNaN(-5.0), Crop(latitude=slice(2, 6)), Cast("float16")])
    manifest = insitu.split_by_chunk(geoms["a"], (0.5, 0.5))
    with insitu.InSituDataset(store, manifest, batch_size=5, chunk_transforms=[chain]) as ds:
        assert ds.train.sample_shapes == {"a": (4, 12), "b": (4, 12)}
        assert ds.train.dtypes == {"a": np.dtype("f2"), "b": np.dtype("f2")}
        # Counting declares no out_spec: probed on two slabs of zeros per array at construction.
        probed = dict(counting.calls)
        assert probed == {"a": 2, "b": 2}
        batches = list(ds.train) + list(ds.val)
        ran = {k: n - probed[k] for k, n in counting.calls.items()}
        assert ran == {"a": 6, "b": 6}  # 24 samples in chunks of 4: each decoded once
    for b in batches:
        want = np.nan_to_num(data["a"][b.sample_indices], nan=-5.0)[:, 2:6].astype("f2")
        np.testing.assert_array_equal(b["a"], want)


# --- FillNaN ----------------------------------------------------------------------------------


def test_fill_nan_is_the_public_name_and_nan_to_num_its_alias() -> None:
    block = np.array([[1.0, np.nan], [np.nan, 4.0]], dtype="f4")
    out = FillNaN(-1.0)("sst", block)
    np.testing.assert_array_equal(out, [[1.0, -1.0], [-1.0, 4.0]])
    assert np.isnan(block).sum() == 2  # the input is left alone
    old = NanToNum(fill=-1.0)
    assert isinstance(old, FillNaN)
    assert old.fill == old.value == -1.0
    np.testing.assert_array_equal(old("sst", block), out)
    # One identity for the same blocks: caches persisted under either name stay valid.
    assert old.fingerprint() == FillNaN(-1.0).fingerprint() == "NanToNum(-1.0;*)"
    assert FillNaN(value=2.0, labels=["sst"]).fingerprint() != FillNaN(2.0).fingerprint()
    unselected = np.array([np.nan, 1.0])
    assert FillNaN(0.0, labels=["y"])("x", unselected) is unselected


def test_compose_finds_the_output_of_a_plain_member_as_the_engine_does() -> None:
    def mean_last(name: str, block: np.ndarray) -> np.ndarray:
        return block.mean(axis=-1)

    chain = Compose([mean_last, Cast("f2")])
    assert chain.out_spec((4, 3, 5), np.dtype("f4"), name="t") == ((4, 3), np.dtype("f2"))
    block = np.arange(60, dtype="f4").reshape(4, 3, 5)
    out = chain("t", block)
    assert (out.shape, out.dtype) == ((4, 3), np.dtype("f2"))
    geom = insitu.ArrayGeometry(
        "t", "t", (8, 3, 5), np.dtype("f4"), (4, 3, 5), dimension_names=("time", "a", "b")
    )
    assert output_spec(geom, [chain]) == output_spec(geom, [mean_last, Cast("f2")])


def test_compose_refuses_a_plain_member_that_changes_the_number_of_samples() -> None:
    def every_other(name: str, block: np.ndarray) -> np.ndarray:
        return block[::2]

    with pytest.raises(ConfigError, match=r"every_other.*'t'.*changes the number of samples"):
        Compose([Cast("f2"), every_other]).out_spec((4, 3), np.dtype("f4"), name="t")
