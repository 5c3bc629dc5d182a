from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import insitu
from insitu.batch import Batch
from insitu.testing import TransformConformance, assert_entry_point, assert_registers
from insitu_transforms import Cast, NanToNum, StandardScaler, base_label


class TestCastConformance(TransformConformance):
    def make_transform(self) -> Cast:
        return Cast("float16")

    def make_other_transform(self) -> Cast:
        return Cast("float64")

    def expected_dtype(self, block: np.ndarray) -> np.dtype[Any]:
        return np.dtype("float16")


class TestNanToNumConformance(TransformConformance):
    def make_transform(self) -> NanToNum:
        return NanToNum(-1.0)

    def make_other_transform(self) -> NanToNum:
        return NanToNum(0.0)

    def sample_block(self) -> np.ndarray:
        block = super().sample_block()
        block[block > 1.0] = np.nan
        return block


class TestStandardScalerConformance(TransformConformance):
    """The kit's determinism, purity, fingerprint and pickling checks, applied as a batch transform."""

    def make_transform(self) -> StandardScaler:
        return StandardScaler({"x": 0.5}, {"x": 2.0})

    def make_other_transform(self) -> StandardScaler:
        return StandardScaler({"x": 0.5}, {"x": 3.0})

    def apply(self, transform: Any, block: np.ndarray) -> np.ndarray:
        return np.asarray(transform(Batch({self.label: block}, np.arange(len(block))))[self.label])


def make_batch(**arrays: np.ndarray) -> Batch:
    n = next(iter(arrays.values())).shape[0]
    return Batch(arrays, np.arange(n))


def batches_of(data: dict[str, np.ndarray], sizes: list[int]) -> list[Batch]:
    out, start = [], 0
    for size in sizes:
        out.append(make_batch(**{k: v[start : start + size] for k, v in data.items()}))
        start += size
    return out


# --- StandardScaler -------------------------------------------------------------------------


def test_scaler_standardises_and_keeps_float_dtype() -> None:
    rng = np.random.default_rng(0)
    t2m = rng.normal(280.0, 12.0, size=(64, 8, 16)).astype("float32")
    scaler = StandardScaler({"t2m": 280.0}, {"t2m": 12.0})
    out = scaler(make_batch(t2m=t2m))
    assert out["t2m"].dtype == np.float32
    assert abs(float(out["t2m"].mean())) < 0.05
    assert abs(float(out["t2m"].std()) - 1.0) < 0.05


def test_scaler_returns_batch_with_provenance() -> None:
    batch = Batch({"x": np.ones((3, 2), "float32")}, np.array([5, 9, 2]), split="train", epoch=4, index=7)
    out = StandardScaler({"x": 1.0}, {"x": 2.0})(batch)
    assert isinstance(out, Batch)
    np.testing.assert_array_equal(out.sample_indices, [5, 9, 2])
    assert (out.split, out.epoch, out.index) == ("train", 4, 7)
    np.testing.assert_array_equal(out["x"], np.zeros((3, 2)))


def test_shifted_label_uses_base_statistics_and_unknown_labels_pass_through() -> None:
    scaler = StandardScaler({"t2m": 10.0}, {"t2m": 2.0})
    other = np.arange(6, dtype="float64").reshape(3, 2)
    out = scaler(make_batch(**{"t2m+24": np.full((3, 2), 14.0, "float32"), "u10": other}))
    np.testing.assert_allclose(out["t2m+24"], 2.0)
    assert out["u10"] is other
    assert base_label("t2m+24") == "t2m"
    assert base_label("t2m-3") == "t2m"
    assert base_label("t2m") == "t2m"


def test_own_statistics_win_over_base_label() -> None:
    scaler = StandardScaler({"t2m": 0.0, "t2m+6": 100.0}, {"t2m": 1.0, "t2m+6": 1.0})
    out = scaler(make_batch(**{"t2m+6": np.full((2, 1), 100.0)}))
    np.testing.assert_allclose(out["t2m+6"], 0.0)


def test_integer_input_becomes_float32() -> None:
    out = StandardScaler({"n": 2.0}, {"n": 2.0}).transform("n", np.arange(4, dtype="int16"))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [-1.0, -0.5, 0.0, 0.5])


def test_array_statistics_broadcast_per_grid_point() -> None:
    climatology = np.array([[270.0, 300.0]])
    scaler = StandardScaler({"t2m": climatology}, {"t2m": [[5.0, 10.0]]})
    out = scaler.transform("t2m", np.array([[[275.0, 290.0]]], "float32"))
    np.testing.assert_allclose(out, [[[1.0, -1.0]]])


def test_inverse_undoes_transform() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(5.0, 3.0, size=(10, 4)).astype("float32")
    scaler = StandardScaler({"x": 5.0}, {"x": 3.0})
    np.testing.assert_allclose(scaler.inverse("x", scaler.transform("x", x)), x, rtol=1e-5)


def test_zero_std_does_not_divide_by_zero() -> None:
    out = StandardScaler({"c": 3.0}, {"c": 0.0}).transform("c", np.full((4,), 3.0, "float32"))
    assert np.all(np.isfinite(out))
    np.testing.assert_array_equal(out, 0.0)


def test_invalid_statistics_are_rejected() -> None:
    with pytest.raises(ValueError, match="same labels"):
        StandardScaler({"a": 0.0}, {"b": 1.0})
    with pytest.raises(ValueError, match="non-negative"):
        StandardScaler({"a": 0.0}, {"a": -1.0})


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=8),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_fit_streaming_matches_whole_array_statistics(sizes: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    t2m = rng.normal(280.0, 15.0, size=(n, 3, 4)).astype("float32")
    t2m[rng.random(t2m.shape) < 0.1] = np.nan  # missing values are ignored
    u10 = rng.normal(0.0, 5.0, size=(n, 2)).astype("float64")
    scaler = StandardScaler.fit(batches_of({"t2m": t2m, "u10": u10}, sizes))
    for label, values in (("t2m", t2m), ("u10", u10)):
        mean, std = scaler.stats(label)  # type: ignore[misc]
        finite = values[np.isfinite(values)].astype(np.float64)
        if finite.size == 0:
            continue
        np.testing.assert_allclose(mean, finite.mean(), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(std, finite.std(), rtol=1e-7, atol=1e-9)


def test_fit_skips_shifted_labels_whose_base_is_present() -> None:
    x = np.arange(20, dtype="float32").reshape(10, 2)
    scaler = StandardScaler.fit(batches_of({"t2m": x, "t2m+3": x + 3}, [5, 5]))
    assert scaler.labels == ("t2m",)
    alone = StandardScaler.fit(batches_of({"t2m+3": x}, [10]))
    assert alone.labels == ("t2m+3",)


def test_fit_respects_labels_and_max_batches() -> None:
    x = np.concatenate([np.zeros((4, 1)), np.full((4, 1), 100.0)])
    scaler = StandardScaler.fit(batches_of({"x": x, "y": x}, [4, 4]), labels=["x"], max_batches=1)
    assert scaler.labels == ("x",)
    mean, _ = scaler.stats("x")  # type: ignore[misc]
    assert float(mean) == 0.0


def test_fit_on_empty_view_raises() -> None:
    with pytest.raises(ValueError, match="no batches"):
        StandardScaler.fit([])


def test_fingerprint_tracks_statistics_and_survives_a_round_trip() -> None:
    a = StandardScaler({"x": 1.0, "y": [1.0, 2.0]}, {"x": 2.0, "y": [3.0, 4.0]})
    same = StandardScaler({"y": [1.0, 2.0], "x": 1.0}, {"y": [3.0, 4.0], "x": 2.0})
    other = StandardScaler({"x": 1.0, "y": [1.0, 2.0]}, {"x": 2.5, "y": [3.0, 4.0]})
    assert a.fingerprint() == same.fingerprint()
    assert a.fingerprint() != other.fingerprint()
    assert StandardScaler.from_dict(a.to_dict()).fingerprint() == a.fingerprint()


# --- chunk transforms -----------------------------------------------------------------------


def test_cast_converts_selected_labels_only() -> None:
    cast = Cast("float16", labels=["t2m"])
    block = np.linspace(0, 1, 12, dtype="float32").reshape(3, 4)
    assert cast("t2m", block).dtype == np.float16
    assert cast("u10", block) is block
    assert Cast("float32")("t2m", block) is block  # no copy when already that dtype


def test_cast_fingerprint_names_dtype_and_labels() -> None:
    assert Cast("float16").fingerprint() != Cast("float32").fingerprint()
    assert Cast("f4", labels=["b", "a"]).fingerprint() == Cast(np.float32, labels=["a", "b"]).fingerprint()


def test_nan_to_num_fills_without_mutating_input() -> None:
    block = np.array([[1.0, np.nan], [np.nan, 4.0]], dtype="float32")
    out = NanToNum(-1.0)("sst", block)
    np.testing.assert_array_equal(out, [[1.0, -1.0], [-1.0, 4.0]])
    assert out.dtype == np.float32
    assert np.isnan(block).sum() == 2


def test_nan_to_num_passes_clean_and_integer_blocks_through() -> None:
    clean = np.ones((2, 2), "float32")
    ints = np.arange(4)
    assert NanToNum()("x", clean) is clean
    assert NanToNum()("x", ints) is ints
    unselected = np.array([np.nan, 1.0])
    assert NanToNum(labels=["y"])("x", unselected) is unselected
    assert NanToNum(0.0).fingerprint() != NanToNum(1.0).fingerprint()


# --- registration ---------------------------------------------------------------------------


def test_plugin_registers_transforms_by_name() -> None:
    names = [
        "StandardScaler",
        "RandomCrop",
        "Cast",
        "FillNaN",
        "NanToNum",
        "Crop",
        "Coarsen",
        "Compose",
        "Regrid",
    ]
    assert_registers("insitu_transforms.plugin", "transforms", names, exact=True)
    assert_entry_point("transforms", "insitu_transforms.plugin")
    assert insitu.StandardScaler is StandardScaler


def _two_array_store(tmp_path: Any) -> tuple[Any, dict[str, np.ndarray]]:
    import zarr
    from zarr.storage import LocalStore

    rng = np.random.default_rng(5)
    data = {name: rng.standard_normal((24, 3, 4)).astype("f4") for name in ("a", "b")}
    group = zarr.open_group(tmp_path, mode="w")
    for name, values in data.items():
        group.create_array(name, shape=values.shape, chunks=(4, 3, 4), dtype=values.dtype)[...] = values
    return LocalStore(tmp_path, read_only=True), data


def test_cast_float16_runs_through_the_engine_and_halves_the_pool(tmp_path: Any) -> None:
    store, data = _two_array_store(tmp_path)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["a"], (1.0,))
    with insitu.InSituDataset(
        store, manifest, batch_size=5, block_chunks=2, chunk_transforms=[Cast("float16", labels=["a"])]
    ) as ds:
        assert ds.train.dtypes == {"a": np.dtype("f2"), "b": np.dtype("f4")}
        assert ds.pool.arrays["a"].arena.dtype == np.dtype("f2")
        assert (
            ds.pool.arrays["a"].slot_nbytes * 2 == ds.pool.arrays["b"].slot_nbytes
        )  # the budget buys twice the rows
        batches = list(ds.train)
    for b in batches:
        np.testing.assert_array_equal(b["a"], data["a"][b.sample_indices].astype("f2"))
        np.testing.assert_array_equal(b["b"], data["b"][b.sample_indices])
    assert sum(b.size for b in batches) == 24
