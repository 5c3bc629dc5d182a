from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import insitu
from insitu.testing import AdapterConformance, BatchSource, assert_entry_point, assert_registers, make_batches
from insitu_tf import as_tf_dataset


class TestAsTfDatasetConformance(AdapterConformance):
    def adapter(self) -> Any:
        return as_tf_dataset

    def to_numpy(self, value: Any) -> np.ndarray:
        return value.numpy()


def test_element_spec_is_exact(view: Any) -> None:
    spec = as_tf_dataset(view).element_spec
    assert set(spec) == {"x", "y"}
    assert spec["x"] == tf.TensorSpec(shape=(None, 4), dtype=tf.float32)
    assert spec["y"] == tf.TensorSpec(shape=(None, 1), dtype=tf.float32)


def test_batch_dimension_is_fixed_when_the_view_drops_the_last_batch() -> None:
    source = BatchSource(make_batches(2, 8, {"x": "float32"}, {"x": (3,)}), batch_size=8)
    source.drop_last = True
    assert as_tf_dataset(source).element_spec["x"].shape == (8, 3)


def test_every_batch_arrives_in_order(view: Any) -> None:
    expected = [np.array(batch["y"]) for batch in view]
    got = [element["y"].numpy() for element in as_tf_dataset(view)]
    assert len(got) == len(view)
    for want, have in zip(expected, got, strict=True):
        np.testing.assert_array_equal(have, want)


# Keras learns the length of a dataset of unknown cardinality by reaching its end in epoch 1.
@pytest.mark.filterwarnings("ignore:Your input ran out of data:UserWarning")
def test_keras_dense_model_learns(view: Any) -> None:
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1), loss="mse")
    dataset = as_tf_dataset(view).map(lambda b: (b["x"], b["y"]))
    history = model.fit(dataset, epochs=5, shuffle=False, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.01 * losses[0], losses


def test_plugin_registers_the_adapter() -> None:
    assert_registers("insitu_tf.plugin", "adapters", ["as_tf_dataset"], exact=True)
    assert_entry_point("tf", "insitu_tf.plugin")
    assert insitu.as_tf_dataset is as_tf_dataset


def test_importing_the_plugin_does_not_import_tensorflow() -> None:
    code = "import sys, insitu, insitu_tf, insitu_tf.plugin; sys.exit('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
