"""JAX adapter for insitu: batches as device arrays, with prefetch and sharding."""

from __future__ import annotations

from insitu_jax.adapter import jax_iterator, to_jax

__all__ = ["jax_iterator", "to_jax"]
