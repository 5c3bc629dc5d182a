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
    """
    jax = import_jax()
    return jax.device_put(dict(batch.items()), sharding)


__all__ = ["import_jax", "to_jax"]
