"""Bad input fails at construction with an error that names the bad value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import field, write_array

import insitu
from insitu.errors import ConfigError


@pytest.fixture
def setup(tmp_path: Path):
    write_array(tmp_path, "a", field(40, (2, 3)), (4, 2, 3))
    write_array(tmp_path, "b", field(30, (2, 3)), (5, 2, 3))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store)
    return store, geoms, insitu.split_by_chunk(geoms["a"], (0.5, 0.5))


def test_mismatched_sample_lengths(setup) -> None:
    store, geoms, manifest = setup
    with pytest.raises(ConfigError, match=r"'b' is 30.*has 40"):
        insitu.InSituDataset(store, manifest, [geoms["a"], geoms["b"]])


@pytest.mark.parametrize(
    ("fractions", "match"),
    [((0.5, 0.4), "sum to 1"), ((0.99, 0.01), r"\['val'\] would get no chunk"), ((1.2, -0.2), "positive")],
)
def test_bad_fractions(setup, fractions, match) -> None:
    _, geoms, _ = setup
    with pytest.raises(ConfigError, match=match):
        insitu.split_by_chunk(geoms["a"], fractions)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"block_chunks": -1}, "block_chunks"),
        ({"max_inflight": 0}, "max_inflight"),
        ({"on_bad_chunk": "ignore"}, "on_bad_chunk='ignore'"),
        ({"rank": 2, "world_size": 2}, "rank=2"),
        ({"persist": True}, "needs a cache_dir"),
        ({"cache_budget_bytes": -1}, "cache_budget_bytes must be 'auto' or a non-negative integer"),
        ({"cache_budget_bytes": "lots"}, "got 'lots'"),
    ],
)
def test_bad_dataset_arguments(setup, kwargs, match) -> None:
    store, geoms, manifest = setup
    with pytest.raises(ConfigError, match=match):
        insitu.InSituDataset(store, manifest, [geoms["a"]], **kwargs)


def test_offsets_leaving_no_anchor(setup) -> None:
    store, geoms, manifest = setup
    with pytest.raises(ConfigError, match="leave no valid anchor"):
        insitu.InSituDataset(store, manifest, [geoms["a"], geoms["a"].shift(40)])
    with pytest.raises(ConfigError, match="split 'val' has no valid anchor"):
        insitu.InSituDataset(store, manifest, [geoms["a"], geoms["a"].shift(21)])


def test_unknown_variable_and_split(setup) -> None:
    store, geoms, manifest = setup
    with pytest.raises(ConfigError, match=r"unknown variable\(s\) \['t2m'\]"):
        insitu.open_geometries(store, variables=["t2m"])
    with (
        insitu.InSituDataset(store, manifest, [geoms["a"]]) as ds,
        pytest.raises(ConfigError, match="'test'"),
    ):
        _ = ds.test


def test_duplicate_labels(setup) -> None:
    store, geoms, manifest = setup
    with pytest.raises(ConfigError, match=r"duplicate label\(s\) \['a'\]"):
        insitu.InSituDataset(store, manifest, [geoms["a"], geoms["a"]])


def test_unknown_scheme_and_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nosuch"):
        insitu.open_store("nosuch://bucket/x.zarr")
    with pytest.raises(FileNotFoundError, match=r"missing\.zarr"):
        insitu.open_store(str(tmp_path / "missing.zarr"))


def test_not_zarr(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ConfigError, match="no Zarr array or group"):
        insitu.open_geometries(insitu.open_store(tmp_path))


def test_bad_sample_axis(setup) -> None:
    store, _, _ = setup
    with pytest.raises(ConfigError, match="sample_axis=5"):
        insitu.open_geometries(store, variables=["a"], sample_axis=5)
    with pytest.raises(ConfigError, match="has no dimension 'time'"):
        insitu.open_geometries(store, variables=["a"], sample_axis="time")


def test_manifest_json_round_trip_and_bad_json(setup) -> None:
    _, _geoms, manifest = setup
    again = insitu.SplitManifest.from_json(manifest.to_json())
    assert again == manifest
    with pytest.raises(ConfigError, match="not a split manifest"):
        insitu.SplitManifest.from_json('{"format": "other"}')


def _delta_codec():
    try:  # zarr >= 3.2 ships the numcodecs wrappers itself
        from zarr.codecs.numcodecs import Delta
    except ImportError:
        from numcodecs.zarr3 import Delta
    return Delta(dtype="<i4")


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr")
@pytest.mark.parametrize("fmt", [2, 3])
def test_filters_and_the_zarr_fallback(tmp_path: Path, fmt: int) -> None:
    """A delta filter: v2 decodes directly through numcodecs; v3's numcodecs array-to-array
    codec is not one the direct decoder knows, so zarr's own pipeline reads it. Values intact."""
    data = (np.arange(30 * 4, dtype="i4").reshape(30, 4) * 3) % 17
    g = zarr.open_group(tmp_path, mode="a", zarr_format=fmt)
    import numcodecs

    filters = [numcodecs.Delta(dtype="<i4")] if fmt == 2 else [_delta_codec()]
    arr = g.create_array("d", shape=data.shape, chunks=(4, 4), dtype="i4", filters=filters)
    arr[...] = data
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, variables=["d"])
    manifest = insitu.split_by_chunk(geoms["d"], (1.0,))
    with insitu.InSituDataset(store, manifest, batch_size=7) as ds:
        seen = []
        for b in ds.train:
            np.testing.assert_array_equal(b["d"], data[b.sample_indices])
            seen.extend(b.sample_indices.tolist())
        assert sorted(seen) == list(range(30))


def test_default_variables_skip_coordinates(tmp_path: Path) -> None:
    g = zarr.open_group(tmp_path, mode="a")
    t = g.create_array("time", shape=(12,), chunks=(12,), dtype="i8", dimension_names=("time",))
    t[...] = np.arange(12)
    write_array(tmp_path, "t2m", field(12, (2, 3)), (4, 2, 3), dimension_names=("time", "y", "x"))
    store = insitu.open_store(tmp_path)
    assert list(insitu.open_geometries(store, sample_axis="time")) == ["t2m"]
    assert list(insitu.open_geometries(store)) == ["t2m"]
    named = insitu.open_geometries(store, variables=["time", "t2m"], sample_axis="time")
    assert named["time"].sample_shape == ()


def test_default_variables_come_in_name_order(tmp_path: Path) -> None:
    for name in ("zeta", "alpha", "mid"):
        write_array(tmp_path, name, field(8, (2,)), (4, 2))
    store = insitu.open_store(tmp_path)
    assert list(insitu.open_geometries(store)) == ["alpha", "mid", "zeta"]


def test_store_whose_root_is_an_array(tmp_path) -> None:
    # open_geometries opens a group first; an array at the root must still be found.
    arr = zarr.create_array(
        zarr.storage.LocalStore(tmp_path / "a.zarr"), shape=(6, 2), chunks=(2, 2), dtype="i4"
    )
    arr[:] = np.arange(12).reshape(6, 2)
    store = insitu.open_store(tmp_path / "a.zarr")
    geoms = insitu.open_geometries(store)
    assert list(geoms) == ["data"]
    assert geoms["data"].shape == (6, 2)
    with pytest.raises(ConfigError, match=r"unknown variable\(s\) \['x'\]; the store has \['data'\]"):
        insitu.open_geometries(store, variables=["x"])
