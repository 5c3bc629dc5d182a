from __future__ import annotations

from collections.abc import Iterator

import pytest
import tensorflow as tf
from zarr.storage import MemoryStore

import insitu
from insitu.synthetic import make_linear_regression

# Two logical CPU devices, so tf.distribute.MirroredStrategy has two replicas to feed. This has
# to happen before TensorFlow initialises its devices, which the first test would do.
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
)


@pytest.fixture
def view() -> Iterator[insitu.DatasetView]:
    """The train split of a linear problem, ``y = x @ w + b``, read through a real InSituDataset."""
    store = MemoryStore()
    make_linear_regression(store, n_samples=512, n_features=4, chunks=64, seed=0)
    geoms = insitu.open_geometries(store, variables=["x", "y"])
    manifest = insitu.split_by_chunk(geoms["x"], fractions=(0.75, 0.25), names=("train", "val"))
    with insitu.InSituDataset(store, manifest, batch_size=32, seed=0) as ds:
        yield ds.train
