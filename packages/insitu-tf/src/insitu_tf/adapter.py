"""Hand insitu views to TensorFlow as ``tf.data.Dataset``.

tensorflow is imported inside the functions: importing this module (which the
plugin registry does) must not pull in a framework.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from insitu.plugin_api import (
    BatchedView,
    ConfigError,
    ShardableView,
    require_batched_view,
    require_shardable_view,
)

if TYPE_CHECKING:
    import tensorflow as tf

AUTOTUNE = -1  # the value of tf.data.AUTOTUNE, usable without importing tensorflow


def _import_tf() -> Any:
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise ImportError("insitu-tf needs TensorFlow: pip install tensorflow (or tensorflow-cpu)") from exc
    return tf


def as_tf_dataset(
    view: BatchedView,
    *,
    prefetch: int | None = AUTOTUNE,
    rank: int | None = None,
    world_size: int | None = None,
    input_context: tf.distribute.InputContext | None = None,
) -> tf.data.Dataset:
    """A ``tf.data.Dataset`` of ``{label: tf.Tensor}``, one element per insitu batch.

    The element spec is exact: each label's dtype and sample shape come from
    the view, and the batch dimension is fixed at ``view.batch_size`` when the
    view drops the last partial batch, ``None`` otherwise. Each iteration of
    the dataset (each Keras epoch) is one pass over the view; call
    ``ds.set_epoch(e)`` between passes for a new order.

    Batches cross from Python to TensorFlow once each (``from_generator``,
    never per sample). There TensorFlow wraps an array whose buffer is
    64-byte aligned without copying (the tensor keeps the batch alive) and
    copies any other array once into a buffer of its own. ``prefetch``
    batches (default ``tf.data.AUTOTUNE``) are read ahead; ``prefetch=None``
    or ``0`` reads none ahead, which keeps ``view.state_dict()`` equal to
    what was consumed (otherwise see :func:`consumed_state`).

    Ranks: pass ``rank`` and ``world_size``, or the ``input_context`` that
    ``strategy.distribute_datasets_from_function`` hands a dataset function
    (see :func:`dataset_fn`); the view is then sharded with ``view.shard``,
    so each rank reads disjoint chunks and all yield the same number of
    batches. For Keras, map elements to ``(inputs, targets)``:
    ``as_tf_dataset(view).map(lambda b: (b["x"], b["y"]))``.

    ``view`` is an insitu view (``ds.train``...) or any other
    :class:`insitu.BatchedView`; ranks need an
    :class:`insitu.sources.ShardableView` (what ``ds.train`` is). Anything
    else raises TypeError naming its type.
    """
    view = require_batched_view(view, "as_tf_dataset")
    tf = _import_tf()
    if prefetch is not None and (
        isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < -1
    ):
        raise ConfigError(
            f"prefetch must be None, tf.data.AUTOTUNE or a non-negative integer, got {prefetch!r}"
        )
    view = rank_view(view, rank=rank, world_size=world_size, input_context=input_context)
    len(view)  # plans the epoch: a bad rank layout (more ranks than chunks) fails here, not inside a TF op
    labels = tuple(view.labels)
    batch_dim = view.batch_size if view.drop_last else None
    statics = set(getattr(view, "static_labels", ()))  # static fields come as (1, *shape) in every batch
    signature = {
        label: tf.TensorSpec(
            shape=(1 if label in statics else batch_dim, *view.sample_shapes[label]),
            dtype=tf.as_dtype(np.dtype(view.dtypes[label])),
        )
        for label in labels
    }

    def generate() -> Iterator[dict[str, np.ndarray]]:
        for batch in view:
            yield {label: batch[label] for label in labels}

    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    # The batch count is known: declared, Keras sizes its epochs by it (and does not warn that the
    # input "ran out of data"); a pass that yields another count fails instead of going unnoticed.
    # Not while resuming: that pass yields the rest of an epoch, the next ones whole epochs.
    if not getattr(view, "resuming", False):
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(len(view)))
    if not prefetch:
        # tf.data otherwise adds a prefetch of its own at the end of the pipeline.
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False
        return dataset.with_options(options)
    return dataset.prefetch(prefetch)


def dataset_fn(view: ShardableView, *, prefetch: int | None = AUTOTUNE) -> Callable[[Any], tf.data.Dataset]:
    """A function for ``strategy.distribute_datasets_from_function``: one shard per input pipeline.

    Input pipeline ``input_context.input_pipeline_id`` of
    ``num_input_pipelines`` (one per worker) reads its own chunks. Each
    element is one replica's batch: build the dataset with the per-replica
    batch size (``input_context.get_per_replica_batch_size(global_batch)``).
    """
    # Checked now: inside the strategy, a wrong argument would surface as a TensorFlow error.
    require_shardable_view(view, "dataset_fn")

    def make(input_context: Any) -> tf.data.Dataset:
        return as_tf_dataset(view, prefetch=prefetch, input_context=input_context)

    return make


def rank_view(
    view: BatchedView,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    input_context: tf.distribute.InputContext | None = None,
) -> BatchedView:
    """The view one rank reads: ``view.shard(rank, world_size)``, or ``view`` when no rank is given.

    The same view (same state) :func:`as_tf_dataset` reads with these
    arguments: save and load resume state through it.
    """
    if input_context is not None:
        if rank is not None or world_size is not None:
            raise ConfigError("pass either input_context or rank/world_size, not both")
        rank, world_size = input_context.input_pipeline_id, input_context.num_input_pipelines
    if rank is None and world_size is None:
        return view
    if rank is None or world_size is None:
        raise ConfigError(f"pass rank and world_size together (got rank={rank!r}, world_size={world_size!r})")
    shardable = require_shardable_view(view, "sharding by rank (rank/world_size or input_context)")
    return shardable.for_rank(rank, world_size, source="rank/world_size")


def consumed_state(
    view: ShardableView,
    batches_done: int,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    input_context: tf.distribute.InputContext | None = None,
) -> dict[str, Any]:
    """The view's resume state once the model has consumed ``batches_done`` batches of this epoch.

    With read-ahead, the view has handed TensorFlow more batches than the
    model has used, and ``view.state_dict()`` counts those. Give the number
    of batches of the current epoch the training loop actually finished
    (counting from the start of the epoch, also across a resume) to get a
    state that resumes with the next unseen batch. Pass the ``rank``,
    ``world_size`` or ``input_context`` given to :func:`as_tf_dataset`.
    """
    sharded = rank_view(
        require_shardable_view(view, "consumed_state"),
        rank=rank,
        world_size=world_size,
        input_context=input_context,
    )
    state = dict(require_shardable_view(sharded, "consumed_state").state_dict())
    handed_out = int(state["batches_done"])
    if isinstance(batches_done, bool) or not isinstance(batches_done, int) or batches_done < 0:
        raise ConfigError(f"batches_done must be a non-negative integer, got {batches_done!r}")
    if batches_done > handed_out:
        raise ConfigError(
            f"batches_done={batches_done}, but the view has handed out only {handed_out} batch(es) "
            f"of epoch {state['epoch']}"
        )
    state["batches_done"] = batches_done
    return state


__all__ = ["AUTOTUNE", "as_tf_dataset", "consumed_state", "dataset_fn", "rank_view"]
