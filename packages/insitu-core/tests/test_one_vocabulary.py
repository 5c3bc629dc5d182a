"""Names the user passes are checked where they are passed, and the API speaks one vocabulary:
``sample_dim`` for the sample dimension, ``coords_of(label)`` for a label's coordinates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import insitu
from insitu import ConfigError


@pytest.fixture
def store(tmp_path: Path) -> Any:
    group = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=3)
    t2m = group.create_array(
        "t2m", shape=(12, 4, 6), chunks=(3, 4, 6), dtype="f4", dimension_names=("time", "lat", "lon")
    )
    t2m[...] = np.arange(12 * 4 * 6, dtype="f4").reshape(12, 4, 6)
    lsm = group.create_array("lsm", shape=(4, 6), chunks=(4, 6), dtype="f4", dimension_names=("lat", "lon"))
    lsm[...] = 1.0
    return insitu.open_store(tmp_path / "s.zarr")


def test_an_unknown_sample_dim_names_itself_and_the_dimensions_that_exist(store: Any) -> None:
    with pytest.raises(ConfigError, match=r"'valid_time'.*\['lat', 'lon', 'time'\]"):
        insitu.open_geometries(store, sample_dim="valid_time")


def test_sample_axis_still_works_and_says_to_use_sample_dim(store: Any) -> None:
    with pytest.warns(DeprecationWarning, match="sample_dim"):
        old = insitu.open_geometries(store, sample_axis="time", include_static=True)
    new = insitu.open_geometries(store, sample_dim="time", include_static=True)
    assert old == new
    assert new.sample_dim == "time"
    assert new["lsm"].static


def test_cf_decode_on_open_geometries_says_where_it_goes(store: Any) -> None:
    with pytest.raises(ConfigError, match=r"InSituDataset\(\.\.\.\) and from_xarray"):
        insitu.open_geometries(store, cf_decode=False)


@pytest.mark.parametrize(
    "split",
    [insitu.split_by_chunk, lambda g: insitu.split_by_coord(g, {"train": (0, 3)})],
    ids=["by_chunk", "by_coord"],
)
def test_a_static_array_is_not_split(store: Any, split: Any) -> None:
    lsm = insitu.open_geometries(store, include_static=True)["lsm"]
    with pytest.raises(ConfigError, match="'lsm' is static"):
        split(lsm)


def test_coords_of_on_the_dataset_and_the_old_name(store: Any) -> None:
    geoms = insitu.open_geometries(store, include_static=True)
    manifest = insitu.split_by_chunk(geoms["t2m"], (0.5, 0.5), names=("train", "val"))
    with insitu.InSituDataset(store, manifest, geoms, batch_size=2) as ds:
        assert ds.coords_of("lsm") == {}  # no coordinate arrays in this store
        with pytest.warns(DeprecationWarning, match="coords_of"):
            assert ds.label_coords("lsm") == {}
        shown = repr(ds)
        assert "labels [t2m]" in shown
        assert "static [lsm]" in shown
        assert "train=2" in shown
        assert "batch_size=2" in shown
    assert "closed" in repr(ds)
