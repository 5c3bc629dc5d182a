"""insitu plugin: registers the TensorFlow adapter (tensorflow itself loads on first call)."""

from __future__ import annotations

from insitu.plugin_api import RegisterAdapter, hookimpl
from insitu_tf.adapter import as_tf_dataset


@hookimpl
def insitu_register_adapters(register: RegisterAdapter) -> None:
    """``as_tf_dataset`` (view -> tf.data.Dataset)."""
    register("as_tf_dataset", as_tf_dataset)
