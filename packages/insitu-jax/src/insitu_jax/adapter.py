"""Hand insitu batches to JAX.

jax is imported inside the functions: importing this module (which the
plugin registry does) must not pull in a framework.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import jax


def _import_jax() -> Any:
    try:
        import jax
    except ImportError as exc:
        raise ImportError("insitu-jax needs JAX: pip install jax (or jax[cuda12] for NVIDIA GPUs)") from exc
    return jax


def to_jax(
    batch: Mapping[str, np.ndarray], *, sharding: jax.sharding.Sharding | None = None
) -> dict[str, jax.Array]:
    """``{label: jax.Array}`` for one batch, placed with ``sharding`` (default: the default device).

    The transfer is dispatched asynchronously: the call returns before the
    copy finishes, so the next batch can be prepared meanwhile. With a
    ``NamedSharding`` over a mesh, the batch axis is split across devices the
    way ``sharding`` says. Note that JAX keeps 64-bit values only with
    ``jax_enable_x64``; otherwise int64/float64 arrays arrive as 32-bit.
    """
    jax = _import_jax()
    return jax.device_put(dict(batch.items()), sharding)


def jax_iterator(
    view: Iterable[Mapping[str, np.ndarray]],
    *,
    sharding: jax.sharding.Sharding | None = None,
    prefetch: int = 2,
) -> Iterator[dict[str, jax.Array]]:
    """Iterate ``view`` as device arrays, keeping ``prefetch`` batches in flight.

    While the model computes on one batch, the next ``prefetch`` are already
    being copied to the device(s), which hides host-to-device transfer time.
    """
    if prefetch < 1:
        raise ValueError(f"prefetch must be at least 1, got {prefetch}")
    _import_jax()
    queue: deque[dict[str, jax.Array]] = deque()
    for batch in view:
        queue.append(to_jax(batch, sharding=sharding))
        if len(queue) > prefetch:
            yield queue.popleft()
    while queue:
        yield queue.popleft()


__all__ = ["jax_iterator", "to_jax"]
