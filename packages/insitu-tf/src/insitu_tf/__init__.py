"""TensorFlow adapter for insitu: views as tf.data.Datasets, per rank or per tf.distribute pipeline."""

from __future__ import annotations

from insitu_tf.adapter import AUTOTUNE, as_tf_dataset, consumed_state, dataset_fn, rank_view

__all__ = ["AUTOTUNE", "as_tf_dataset", "consumed_state", "dataset_fn", "rank_view"]
