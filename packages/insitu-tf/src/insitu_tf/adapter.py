"""Hand insitu views to TensorFlow as ``tf.data.Dataset``.

tensorflow is imported inside the function: importing this module (which the
plugin registry does) must not pull in a framework.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import tensorflow as tf


def _import_tf() -> Any:
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise ImportError("insitu-tf needs TensorFlow: pip install tensorflow (or tensorflow-cpu)") from exc
    return tf


def as_tf_dataset(view: Any) -> tf.data.Dataset:
    """A ``tf.data.Dataset`` of ``{label: tf.Tensor}``, one element per insitu batch.

    The element spec is exact: each label's dtype and sample shape come from
    the view, and the batch dimension is fixed at ``view.batch_size`` when the
    view drops the last partial batch, ``None`` otherwise. Each iteration of
    the dataset (each Keras epoch) is one pass over the view; call
    ``ds.set_epoch(e)`` between passes for a new order. The dataset is
    prefetched with ``tf.data.AUTOTUNE``.

    For Keras, map elements to ``(inputs, targets)``:
    ``as_tf_dataset(view).map(lambda b: (b["x"], b["y"]))``.
    """
    tf = _import_tf()
    labels = tuple(view.labels)
    batch_dim = view.batch_size if view.drop_last else None
    signature = {
        label: tf.TensorSpec(
            shape=(batch_dim, *view.sample_shapes[label]), dtype=tf.as_dtype(np.dtype(view.dtypes[label]))
        )
        for label in labels
    }

    def generate() -> Iterator[dict[str, np.ndarray]]:
        for batch in view:
            yield {label: batch[label] for label in labels}

    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    return dataset.prefetch(tf.data.AUTOTUNE)


__all__ = ["as_tf_dataset"]
