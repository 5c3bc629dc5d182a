"""Convert one insitu batch to JAX arrays.

jax is imported inside the functions: importing this module (which the
plugin registry does) must not pull in a framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import jax


def import_jax() -> Any:
    """The ``jax`` module, or an ImportError that says what to install."""
    try:
        import jax
    except ImportError as exc:
        raise ImportError("insitu-jax needs JAX: pip install jax (or jax[cuda12] for NVIDIA GPUs)") from exc
    return jax


def to_jax(
    batch: Mapping[str, np.ndarray], *, sharding: jax.sharding.Sharding | None = None
) -> dict[str, jax.Array]:
    """``{label: jax.Array}`` for one batch, placed with ``sharding`` (default: the default device).

    This is ``jax.device_put``, dispatched asynchronously: the call returns
    before a transfer finishes, so the next batch can be prepared meanwhile.
    With a ``NamedSharding`` over a mesh, the batch axis is split across
    devices the way ``sharding`` says.

    Copies: for CPU devices JAX does not copy an array (or, with a sharding,
    a device's block of rows) that is C-contiguous, 64-byte aligned and of a
    dtype it keeps: the ``jax.Array`` shares the batch's memory and keeps it
    alive. Anything else (misaligned, strided, 64-bit without
    ``jax_enable_x64``) is copied once, and a GPU/TPU always gets one
    host-to-device copy. Do not write to a batch's arrays after converting
    it: shared ones would change under JAX. JAX keeps 64-bit values only
    with ``jax_enable_x64``; otherwise int64/float64 arrays arrive as 32-bit.

    Static fields of an insitu ``Batch`` (arrays without the sample axis,
    delivered as ``(1, *shape)``: the labels without read indices) are
    replicated over a ``NamedSharding``'s mesh rather than split.
    """
    jax = import_jax()
    statics = static_labels(batch)
    if sharding is None or not statics:
        return jax.device_put(dict(batch.items()), sharding)
    whole = replicated(sharding)
    return {
        label: jax.device_put(values, whole if label in statics else sharding)
        for label, values in batch.items()
    }


def static_labels(batch: Mapping[str, np.ndarray]) -> set[str]:
    """Labels of static fields in an insitu ``Batch``: those it records no read indices for."""
    reads = getattr(batch, "read_indices", None)
    if not reads:
        return set()
    return {label for label in batch if label not in reads}


def replicated(sharding: jax.sharding.Sharding) -> jax.sharding.Sharding | None:
    """The whole array on every device of ``sharding``'s mesh (None: the default device)."""
    jax = import_jax()
    mesh = getattr(sharding, "mesh", None)
    if mesh is None:
        return None
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


__all__ = ["import_jax", "replicated", "static_labels", "to_jax"]
