"""JAX adapter for insitu: batches as jax.Arrays, global arrays across processes, exact resume."""

from __future__ import annotations

from insitu_jax.adapter import to_jax
from insitu_jax.iterator import JaxIterator, global_batch_sharding, jax_iterator

__all__ = ["JaxIterator", "global_batch_sharding", "jax_iterator", "to_jax"]
