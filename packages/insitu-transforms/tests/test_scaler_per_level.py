"""StandardScaler per level (per dimension): one streaming pass, numpy's answer, saved with its manifest."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import insitu
from insitu.batch import Batch
from insitu.errors import ConfigError
from insitu_transforms.scaler import SCALER_FORMAT, StandardScaler, manifest_digest

LEVELS = np.array([1000.0, 850.0, 700.0, 500.0, 250.0])
N_TIME = 48


def write_store(root: Path) -> dict[str, np.ndarray]:
    """Geopotential-like ``z`` (time, level, latitude, longitude): a large mean per level against a
    small spread (where naive sums of squares lose digits), some NaN; and a surface ``t2m``."""
    rng = np.random.default_rng(0)
    z = (50_000.0 - LEVELS[None, :, None, None] * 40.0) + rng.normal(0, 1, (N_TIME, 5, 6, 8)) * (
        1.0 + np.arange(5)[None, :, None, None]
    )
    z = z.astype("f4")
    z[rng.random(z.shape) < 0.05] = np.nan
    t2m = (rng.normal(285.0, 12.0, (N_TIME, 6, 8))).astype("f4")
    group = zarr.open_group(root, mode="w")
    arr = group.create_array(
        "z",
        shape=z.shape,
        chunks=(8, 3, 3, 4),
        dtype="f4",
        dimension_names=("time", "level", "latitude", "longitude"),
    )
    arr[...] = z
    arr = group.create_array(
        "t2m",
        shape=t2m.shape,
        chunks=(8, 3, 4),
        dtype="f4",
        dimension_names=("time", "latitude", "longitude"),
    )
    arr[...] = t2m
    coords = {
        "time": np.arange(N_TIME, dtype="i8"),
        "level": LEVELS,
        "latitude": np.linspace(50.0, 0.0, 6),
        "longitude": np.arange(8) * 45.0,
    }
    for name, values in coords.items():
        c = group.create_array(
            name, shape=values.shape, chunks=values.shape, dtype=values.dtype, dimension_names=(name,)
        )
        c[...] = values
    return {"z": z, "t2m": t2m}


@pytest.fixture
def store(tmp_path: Path) -> tuple[Any, dict[str, np.ndarray]]:
    data = write_store(tmp_path / "store.zarr")
    return insitu.open_store(tmp_path / "store.zarr"), data


def open_dataset(store: Any, fractions: tuple[float, ...] = (1.0,), **kwargs: Any) -> insitu.InSituDataset:
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["z"], fractions)
    return insitu.InSituDataset(store, manifest, geoms, **{"batch_size": 7, **kwargs})


def batch_of(**arrays: np.ndarray) -> Batch:
    n = next(iter(arrays.values())).shape[0]
    return Batch(arrays, np.arange(n), {k: np.arange(n) for k in arrays})


def test_per_level_fit_matches_numpy_and_reads_each_chunk_once(
    store: tuple[Any, dict[str, np.ndarray]],
) -> None:
    zstore, data = store
    with open_dataset(zstore) as ds:
        scaler = StandardScaler.fit(ds, per=("level",))
        # One pass: every stored chunk decoded exactly once (z: 6 x 2 x 2 x 2, t2m: 6 x 2 x 2).
        assert ds.stats["chunks_decoded"] == 48 + 24
    mean, std = scaler.stats("z")  # type: ignore[misc]
    assert mean.shape == std.shape == (5, 1, 1)  # broadcasts against (B, level, lat, lon)
    z = data["z"].astype(np.float64)
    np.testing.assert_allclose(mean.ravel(), np.nanmean(z, axis=(0, 2, 3)), rtol=1e-6)
    np.testing.assert_allclose(std.ravel(), np.nanstd(z, axis=(0, 2, 3)), rtol=1e-6)
    # t2m has no level: one mean and std for the whole field.
    t_mean, t_std = scaler.stats("t2m")  # type: ignore[misc]
    assert t_mean.shape == ()
    np.testing.assert_allclose(t_mean, data["t2m"].astype(np.float64).mean(), rtol=1e-9)
    np.testing.assert_allclose(t_std, data["t2m"].astype(np.float64).std(), rtol=1e-7)
    assert scaler.per("z") == ("level",)
    assert scaler.per("t2m") == ()


def test_fit_reads_the_split_it_is_given(store: tuple[Any, dict[str, np.ndarray]]) -> None:
    zstore, data = store
    with open_dataset(zstore, (0.5, 0.5)) as ds:
        train = ds.manifest.samples("train")
        for scaler in (
            StandardScaler.fit(ds, per="level", labels=["z"]),
            StandardScaler.fit(ds.train, per=(0,), labels=["z"]),  # by position: the axis after time
        ):
            mean, std = scaler.stats("z")  # type: ignore[misc]
            z = data["z"][train].astype(np.float64)
            np.testing.assert_allclose(mean.ravel(), np.nanmean(z, axis=(0, 2, 3)), rtol=1e-6)
            np.testing.assert_allclose(std.ravel(), np.nanstd(z, axis=(0, 2, 3)), rtol=1e-6)
            assert scaler.split == "train"
            assert scaler.labels == ("z",)
        val = StandardScaler.fit(ds, per="level", labels=["z"], split="val")
        assert val.split == "val"
        assert not np.allclose(val.stats("z")[0], scaler.stats("z")[0], rtol=1e-9)  # type: ignore[index]


def test_streaming_merge_matches_numpy_for_any_batching() -> None:
    rng = np.random.default_rng(3)
    x = (1e4 + rng.normal(0.0, 0.5, (60, 4, 3, 5))).astype("f8")
    x[rng.random(x.shape) < 0.1] = np.nan
    x[:7, 2] = np.nan  # whole batches with no finite value at one level
    want_mean = np.nanmean(x, axis=(0, 1, 3))
    want_std = np.nanstd(x, axis=(0, 1, 3))
    for sizes in ([60], [7, 1, 13, 39], [1] * 60):
        bounds = np.cumsum([0, *sizes])
        batches = [batch_of(x=x[a:b]) for a, b in itertools.pairwise(bounds)]
        scaler = StandardScaler.fit(batches, per=("lat",), dims={"x": ("member", "lat", "lon")})
        mean, std = scaler.stats("x")  # type: ignore[misc]
        assert mean.shape == (1, 3, 1)
        np.testing.assert_allclose(mean.ravel(), want_mean, rtol=1e-12)
        np.testing.assert_allclose(std.ravel(), want_std, rtol=1e-9)


def test_default_fit_stays_a_scalar_per_label(store: tuple[Any, dict[str, np.ndarray]]) -> None:
    zstore, data = store
    with open_dataset(zstore) as ds:
        scaler = StandardScaler.fit(ds)
    mean, std = scaler.stats("z")  # type: ignore[misc]
    assert mean.shape == ()
    np.testing.assert_allclose(mean, np.nanmean(data["z"].astype(np.float64)), rtol=1e-9)
    np.testing.assert_allclose(std, np.nanstd(data["z"].astype(np.float64)), rtol=1e-7)


def test_a_per_level_scaler_standardises_each_level(store: tuple[Any, dict[str, np.ndarray]]) -> None:
    zstore, data = store
    zdata = data["z"]
    with open_dataset(zstore) as ds:
        scaler = StandardScaler.fit(ds, per=("level",), labels=["z"])
    geoms = insitu.open_geometries(zstore)
    manifest = insitu.split_by_chunk(geoms["z"], (1.0,))
    with insitu.InSituDataset(
        zstore,
        manifest,
        {"z": geoms["z"], "z+1": geoms["z"].shift(1)},
        batch_size=7,
        batch_transforms=[scaler],
    ) as ds:
        batches = list(ds.train)
    z = np.concatenate([b["z"] for b in batches]).astype(np.float64)
    # Within float32 arithmetic on values near 5e4 (steps of 4e-3), over the 47 anchors z+1 allows.
    np.testing.assert_allclose(np.nanmean(z, axis=(0, 2, 3)), 0.0, atol=0.05)
    np.testing.assert_allclose(np.nanstd(z, axis=(0, 2, 3)), 1.0, rtol=0.02)
    mean, std = scaler.stats("z")  # type: ignore[misc]
    for b in batches:
        want = (zdata[b.sample_indices].astype(np.float64) - mean) / std
        np.testing.assert_allclose(b["z"], want, atol=5e-3)
    shifted = np.concatenate([b["z+1"] for b in batches])  # the shifted label uses z's statistics
    assert abs(float(np.nanmean(shifted))) < 0.05


def test_save_and_load_with_the_manifest(store: tuple[Any, dict[str, np.ndarray]], tmp_path: Path) -> None:
    zstore, _ = store
    with open_dataset(zstore, (0.75, 0.25)) as ds:
        scaler = StandardScaler.fit(ds, per=("level",))
        manifest = ds.manifest
    path = tmp_path / "scaler.json"
    scaler.save(path)  # the manifest it was fitted with
    doc = json.loads(path.read_text())
    assert doc["format"] == SCALER_FORMAT
    assert doc["split"] == "train"
    assert doc["manifest_sha256"] == manifest_digest(manifest)
    assert insitu.SplitManifest.from_json(json.dumps(doc["manifest"])) == manifest
    z = doc["labels"]["z"]
    assert (z["variable"], z["dims"], z["per"], z["shape"]) == (
        "z",
        ["level", "latitude", "longitude"],
        ["level"],
        [5, 1, 1],
    )
    assert doc["labels"]["t2m"]["per"] == []

    loaded = StandardScaler.load(path, manifest=manifest)
    assert loaded.fingerprint() == scaler.fingerprint()  # statistics written exactly
    assert loaded.per("z") == ("level",)
    assert loaded.manifest == manifest
    x = np.random.default_rng(1).normal(48_000, 5.0, (3, 5, 6, 8)).astype("f4")
    np.testing.assert_array_equal(loaded.transform("z", x), scaler.transform("z", x))

    other = insitu.split_by_chunk(insitu.open_geometries(zstore)["z"], (0.5, 0.5))
    with pytest.raises(ConfigError, match=r"another manifest.*differ in \['splits'\]"):
        StandardScaler.load(path, manifest=other)
    bare = tmp_path / "bare.json"
    StandardScaler({"z": 1.0}, {"z": 2.0}).save(bare)
    assert StandardScaler.load(bare).stats("z") is not None
    with pytest.raises(ConfigError, match="saved without a split manifest"):
        StandardScaler.load(bare, manifest=manifest)
    not_a_scaler = tmp_path / "manifest.json"
    not_a_scaler.write_text(manifest.to_json())
    with pytest.raises(ConfigError, match="is not a StandardScaler file"):
        StandardScaler.load(not_a_scaler)


def test_applying_a_scaler_to_what_it_does_not_cover_names_labels_and_shapes(
    store: tuple[Any, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    zstore, _ = store
    with open_dataset(zstore) as ds:
        scaler = StandardScaler.fit(ds, per=("level",), labels=["z"])
    path = tmp_path / "z.json"
    scaler.save(path)
    loaded = StandardScaler.load(path)
    with pytest.raises(
        ConfigError, match=r"statistics for \['z'\] \(variables \{'z': 'z'\}\).*holds \['u10', 'v10'\]"
    ):
        loaded(batch_of(u10=np.zeros((2, 4)), v10=np.zeros((2, 4))))
    three_levels = np.zeros((2, 3, 6, 8), "f4")
    with pytest.raises(ConfigError, match=r"per \['level'\] of shape \(5, 1, 1\).*sample shape \(3, 6, 8\)"):
        loaded(batch_of(z=three_levels))
    with pytest.raises(ConfigError, match=r"sample shape \(6, 8\)"):
        loaded.inverse("z", np.zeros((2, 6, 8), "f4"))


def test_bad_per_dimensions_are_named(store: tuple[Any, dict[str, np.ndarray]]) -> None:
    zstore, _ = store
    with open_dataset(zstore) as ds:
        with pytest.raises(ConfigError, match=r"unknown dimension\(s\) \['levle'\].*'level'"):
            StandardScaler.fit(ds, per=("levle",))
        with pytest.raises(ConfigError, match="out of range"):
            StandardScaler.fit(ds, per=(3,), labels=["z"])
    with pytest.raises(ConfigError, match="need the arrays' dimension names"):
        StandardScaler.fit([batch_of(x=np.zeros((2, 3)))], per=("level",))
    x = np.ones((4, 3, 2))
    x[:, 1] = np.nan
    with pytest.raises(ValueError, match=r"no finite value at index\(es\) \[\[1, 0\]\]"):
        StandardScaler.fit([batch_of(x=x)], per=(0,))
