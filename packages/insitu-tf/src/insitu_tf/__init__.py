"""TensorFlow adapter for insitu: views as tf.data.Datasets."""

from __future__ import annotations

from insitu_tf.adapter import as_tf_dataset

__all__ = ["as_tf_dataset"]
