"""Batch field names from a geometries mapping, empty splits from zero fractions, and
constructor arguments refused up front with the bad value named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import field, write_array
from zarr.storage import LocalStore

import insitu
from insitu.errors import ConfigError


@pytest.fixture
def setup(tmp_path: Path) -> tuple[LocalStore, insitu.ArrayGeometry, np.ndarray]:
    data = field(40, (3, 5), seed=4)
    write_array(tmp_path, "v", data, (4, 3, 5))
    store = LocalStore(tmp_path, read_only=True)
    return store, insitu.open_geometries(store)["v"], data


def test_mapping_keys_name_the_batch_fields(setup) -> None:
    store, g, data = setup
    manifest = insitu.split_by_chunk(g, (1.0,))
    with insitu.InSituDataset(store, manifest, {"x": g, "y": g.shift(3)}, batch_size=4) as ds:
        assert ds.train.labels == ("x", "y")
        batches = list(ds.train)
    for b in batches:
        assert list(b) == ["x", "y"]
        np.testing.assert_array_equal(b["x"], data[b.sample_indices])
        np.testing.assert_array_equal(b["y"], data[b.sample_indices + 3])
        np.testing.assert_array_equal(b.read_indices["y"], b.sample_indices + 3)
    assert sorted(np.concatenate([b.sample_indices for b in batches]).tolist()) == list(range(37))


def test_mapping_keys_are_checked(setup) -> None:
    store, g, _ = setup
    manifest = insitu.split_by_chunk(g, (1.0,))
    with pytest.raises(ConfigError, match="non-empty strings, got 3"):
        insitu.InSituDataset(store, manifest, {3: g})
    # The same field name twice cannot come from a mapping, but named() can collide with a derived label.
    with pytest.raises(ConfigError, match=r"duplicate label\(s\) \['v\+3'\]"):
        insitu.InSituDataset(store, manifest, [g.shift(3), g.named("v+3")])


def test_zero_fraction_makes_an_empty_split(setup) -> None:
    store, g, _ = setup
    manifest = insitu.split_by_chunk(g, fractions=(1.0, 0.0, 0.0))
    assert manifest.names == ("train", "val", "test")
    assert len(manifest.chunks("train")) == 10
    assert manifest.chunks("val") == () == manifest.chunks("test")
    assert insitu.SplitManifest.from_json(manifest.to_json()) == manifest
    with insitu.InSituDataset(store, manifest, batch_size=4) as ds:
        assert list(ds.val) == []
        assert len(ds.val) == 0
        assert list(ds.view("test", rank=1, world_size=2)) == []
        assert sum(b.size for b in ds.train) == 40


def test_positive_fraction_that_rounds_to_nothing_is_still_an_error(setup) -> None:
    _, g, _ = setup
    with pytest.raises(ConfigError, match=r"split\(s\) \['val'\] would get no chunk"):
        insitu.split_by_chunk(g, fractions=(0.99, 0.01))
    with pytest.raises(ConfigError, match="at least one positive"):
        insitu.split_by_chunk(g, fractions=(0.0, 0.0))
    with pytest.raises(ConfigError, match="non-negative"):
        insitu.split_by_chunk(g, fractions=(1.2, -0.2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"seed": -1}, "seed must be a non-negative integer, got -1"),
        ({"seed": 1.5}, "seed must be a non-negative integer, got 1.5"),
        ({"decode_threads": -1}, "decode_threads must be a positive integer, got -1"),
        (
            {"batch_size": 10**30},
            r"batch_size=10{30} is too large|batch_size=1000000000000000000000000000000 is too large",
        ),
        ({"prefetch": 2.0}, "prefetch must be a positive integer, got 2.0"),
        ({"shuffle": "yes"}, "shuffle must be True or False, got 'yes'"),
        ({"persist": "always", "cache_dir": "/tmp/x"}, "persist='always'"),
        ({"uneven": "wrap"}, "uneven='wrap'"),
        ({"retry": 3}, "retry must be an insitu.RetryPolicy, got int"),
    ],
)
def test_every_argument_is_validated_at_construction(setup, kwargs, match) -> None:
    store, g, _ = setup
    with pytest.raises(ConfigError, match=match):
        insitu.InSituDataset(store, insitu.split_by_chunk(g, (1.0,)), **kwargs)
