"""Forecast the 24 h temperature change with a small CNN in Keras, trained in place through insitu.

    python -m examples.advection.train_tf --smoke      # synthetic, seconds
    python -m examples.advection.train_tf              # synthetic, 4 years, a few minutes
    python -m examples.advection.train_tf --store gs://weatherbench2/datasets/era5/1959-2023_01_10-6h-64x32_equiangular_conservative.zarr

``insitu.as_tf_dataset`` turns a split into a ``tf.data.Dataset`` of
``{label: tensor}``, one element per insitu batch (so no ``.batch()``);
``.map`` picks Keras's ``(inputs, targets)`` pair, and ``model.fit`` runs one
epoch over it per insitu epoch. The data definition is
:mod:`examples.advection.data`; the run is :mod:`examples.advection.shared`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

import insitu
from examples.advection import shared
from examples.common import run

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported: no start-up chatter


class Keras:
    name = "tf"
    layout = "NHWC"  # Keras's convolutions take channels last

    def setup(self, seed: int, learning_rate: float, threads: int) -> None:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.keras.utils.set_random_seed(seed)
        # The same initialisation as torch's Conv2d: uniform within 1/sqrt(fan_in).
        init = tf.keras.initializers.VarianceScaling(scale=1 / 3, mode="fan_in", distribution="uniform")
        layers: list[Any] = [tf.keras.Input(shape=(None, None, shared.N_INPUTS))]
        for kernel, width in shared.CONV_LAYERS:
            layers.append(
                tf.keras.layers.Conv2D(
                    width, kernel, padding="same", activation="relu", kernel_initializer=init
                )
            )
        layers.append(tf.keras.layers.Conv2D(1, 1, kernel_initializer=init))
        self.tf = tf
        self.model = tf.keras.Sequential(layers)
        self.model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate), loss="mse")

    def tf_dataset(self, view: insitu.DatasetView) -> Any:
        # The view describes what its batch transform delivers (x, y, dt), and its length.
        return insitu.as_tf_dataset(view)

    def train_epoch(self, view: insitu.DatasetView, max_batches: int | None) -> float:
        batches = self.tf_dataset(view).map(lambda b: (b["x"], b["y"]))
        if max_batches is not None:
            batches = batches.take(max_batches)
        # shuffle=False: insitu already shuffled the training period (Keras cannot shuffle a tf.data input).
        history = self.model.fit(batches, epochs=1, shuffle=False, verbose=0)
        return float(history.history["loss"][-1])

    def predict(self, view: insitu.DatasetView) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for batch in self.tf_dataset(view):
            yield self.model(batch["x"], training=False).numpy(), batch["dt"].numpy()


def main(argv: Sequence[str] | None = None) -> int:
    return shared.main(Keras(), argv, __doc__ or "")


if __name__ == "__main__":
    run(main)
