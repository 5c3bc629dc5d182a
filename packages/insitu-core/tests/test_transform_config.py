"""Transforms named in configuration, and transforms completed per array by bind(geom)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import field, write_array

import insitu
from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transform_config import transform_from_config


class AddArrayIndex:
    """Configured without knowing the arrays; bind() completes it with each array's own value."""

    def __init__(
        self, offsets: dict[str, int] | dict[str, float] | None = None, bound: float | None = None
    ) -> None:
        self.offsets = offsets or {}
        self.bound = bound

    def bind(self, geom: ArrayGeometry) -> AddArrayIndex:
        return AddArrayIndex(self.offsets, self.offsets[geom.name])

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        assert self.bound is not None, "used unbound"
        return block + self.bound

    def fingerprint(self) -> str:
        return f"AddArrayIndex({self.bound})"


def test_bind_completes_a_transform_for_each_array(tmp_path: Path) -> None:
    a, b = field(8, (3,)), field(8, (3,), seed=1)
    write_array(tmp_path, "a", a, (4, 3))
    write_array(tmp_path, "b", b, (4, 3))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, ["a", "b"])
    manifest = insitu.split_by_chunk(geoms["a"], (1.0,), names=["train"])
    shared = AddArrayIndex({"a": 10.0, "b": 20.0})
    with insitu.InSituDataset(store, manifest, geoms, chunk_transforms=[shared], batch_size=8) as data:
        batch = next(iter(data.train))
        rows = batch.sample_indices
        np.testing.assert_allclose(batch["a"], a[rows] + 10.0)
        np.testing.assert_allclose(batch["b"], b[rows] + 20.0)


def test_a_configuration_needs_a_known_name() -> None:
    assert transform_from_config(len) is len  # a transform object passes through
    with pytest.raises(insitu.ConfigError, match=r"needs a 'name' string"):
        transform_from_config({"dtype": "float16"})
    with pytest.raises(insitu.ConfigError, match=r"unknown transform 'no_such_thing'; registered transforms"):
        transform_from_config({"name": "no_such_thing"})


def test_configurations_in_the_dataset_are_resolved(tmp_path: Path, monkeypatch: Any) -> None:
    from insitu.arrays import transform_config

    class Registered:
        def __init__(self, obj: Any) -> None:
            self.obj = obj

    class Double:
        def __init__(self, factor: float = 2.0) -> None:
            self.factor = factor

        def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
            return block * self.factor

    class FakeRegistry:
        def entries(self, kind: str) -> dict[str, Any]:
            return {"Double": Registered(Double)}

    monkeypatch.setattr(transform_config, "get_registry", FakeRegistry)
    a = field(8, (3,))
    write_array(tmp_path, "a", a, (4, 3))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, ["a"])
    manifest = insitu.split_by_chunk(geoms["a"], (1.0,), names=["train"])
    with insitu.InSituDataset(
        store, manifest, geoms, chunk_transforms={"a": [{"name": "double", "factor": 3.0}]}, batch_size=8
    ) as data:
        batch = next(iter(data.train))
        np.testing.assert_allclose(batch["a"], a[batch.sample_indices] * 3.0)
    with pytest.raises(insitu.ConfigError, match=r"transform 'double' does not take \{'scale': 2\}"):
        transform_from_config({"name": "double", "scale": 2})


def test_a_view_describes_the_batches_its_batch_transforms_deliver(tmp_path: Path) -> None:
    """Adapters declare shapes before reading: the description runs the batch transforms on zeros."""
    from insitu.batch import Batch

    write_array(tmp_path, "a", field(8, (3,)), (4, 3))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, ["a"])
    manifest = insitu.split_by_chunk(geoms["a"], (1.0,), names=["train"])

    def to_model(batch: Batch) -> Batch:
        return batch.replace({"inputs": batch["a"][:, :2].astype("f8"), "target": batch["a"][:, 2]})

    with insitu.InSituDataset(store, manifest, geoms, batch_size=4, batch_transforms=[to_model]) as data:
        view = data.train
        assert view.labels == ("inputs", "target")
        assert view.sample_shapes == {"inputs": (2,), "target": ()}
        assert view.dtypes == {"inputs": np.dtype("f8"), "target": np.dtype("f4")}
        batch = next(iter(view))
        assert {k: (v.shape[1:], v.dtype) for k, v in batch.items()} == {
            k: (view.sample_shapes[k], view.dtypes[k]) for k in view.labels
        }


def test_arrays_sharing_a_name_get_their_own_chains(tmp_path: Path) -> None:
    """An OME-NGFF image and its labels are both arrays named "0": a transform keyed "0" is refused
    (it would run on both), keyed by path it runs on that array alone, and bound transforms and CF
    decoding stay per array."""
    import zarr

    root = zarr.open_group(tmp_path / "ome.zarr", mode="w", zarr_format=3)
    root.create_array("0", shape=(12, 4), chunks=(4, 4), dtype="u2")[...] = 1
    root.create_array("labels/cells/0", shape=(12, 4), chunks=(6, 4), dtype="u1")[...] = 2
    store = insitu.open_store(tmp_path / "ome.zarr")
    image = insitu.open_geometries(store, ["0"])["0"]
    mask = insitu.open_geometries(store, ["0"], path="labels/cells")["0"]
    manifest = insitu.split_by_chunk(image, (1.0,), names=["train"])
    geoms = {"image": image, "mask": mask}
    double = AddArrayIndex({"0": 3})
    with pytest.raises(insitu.ConfigError, match=r"chunk_transforms key '0' names 2 arrays .*key it by path"):
        insitu.InSituDataset(store, manifest, geoms, chunk_transforms={"0": [double]})
    by_path = {"labels/cells/0": [AddArrayIndex({"0": 3})]}
    with insitu.InSituDataset(store, manifest, geoms, chunk_transforms=by_path, batch_size=12) as data:
        batch = next(iter(data.train))
        assert batch["image"].dtype == np.uint16
        np.testing.assert_array_equal(batch["mask"], 5)
    by_label = {"mask": [AddArrayIndex({"0": 7})]}
    with insitu.InSituDataset(store, manifest, geoms, chunk_transforms=by_label, batch_size=12) as data:
        batch = next(iter(data.train))
        np.testing.assert_array_equal(batch["mask"], 9)
        np.testing.assert_array_equal(batch["image"], 1)
