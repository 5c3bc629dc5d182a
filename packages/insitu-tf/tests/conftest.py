from __future__ import annotations

from collections.abc import Iterator

import pytest
import tensorflow as tf

import insitu
from insitu.testing import linear_regression_view

# Two logical CPU devices, so tf.distribute.MirroredStrategy has two replicas to feed. This has
# to happen before TensorFlow initialises its devices, which the first test would do.
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
)


@pytest.fixture
def view() -> Iterator[insitu.DatasetView]:
    """The train split of a linear problem, ``y = x @ w + b``, read through a real InSituDataset."""
    with linear_regression_view() as train:
        yield train
