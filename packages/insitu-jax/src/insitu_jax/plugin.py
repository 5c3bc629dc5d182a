"""insitu plugin: registers the JAX adapters (jax itself loads on first call)."""

from __future__ import annotations

from insitu.plugin_api import RegisterAdapter, hookimpl
from insitu_jax.adapter import to_jax
from insitu_jax.iterator import jax_iterator


@hookimpl
def insitu_register_adapters(register: RegisterAdapter) -> None:
    """``to_jax`` (batch -> jax arrays) and ``jax_iterator`` (view -> prefetching, resumable iterator)."""
    register("to_jax", to_jax)
    register("jax_iterator", jax_iterator)
