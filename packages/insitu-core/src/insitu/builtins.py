"""Core's built-in plugin, registered through the same path as third-party plugins.

It is listed in ``insitu.plugins.registry.BUILTIN_PLUGINS``, so it loads even with
``INSITU_DISABLE_PLUGIN_AUTOLOAD=1``.
"""

from __future__ import annotations

from typing import Any

from insitu.plugins.hookspecs import RegisterCommand, RegisterDecoder, RegisterStore, hookimpl
from insitu.store.opener import SCHEME_PACKAGES, local_store, memory_store


@hookimpl
def insitu_register_stores(register: RegisterStore) -> None:
    """Plain paths and ``file://`` URLs (LocalStore), ``memory://name`` (MemoryStore), and
    ``faults+<scheme>://`` (a fault-injecting wrapper for reliability drills, ``insitu.testing.faults``)."""
    # default=True: a plugin that also serves "file" never takes over local paths
    # unless the user asks for it with open_store(..., backend=name).
    register("local", local_store, schemes=("file", ""), default=True)
    register("memory", memory_store, schemes=("memory",), default=True)
    # The fault wrapper's module loads when a faults+ URL is opened, not with the registry: the
    # registry loads on every first open_store, and that import would add to time to first batch.
    register(
        "faults", _faults_store, schemes=tuple(f"faults+{s}" for s in ("file", "memory", *SCHEME_PACKAGES))
    )


def _faults_store(url: str, **options: Any) -> Any:
    """``insitu.testing.faults.faults_store``, imported on first use."""
    from insitu.testing.faults import faults_store

    return faults_store(url, **options)


@hookimpl
def insitu_register_decoders(register: RegisterDecoder) -> None:
    """Direct numcodecs decoding into pool slots (arrays with other codecs are read through zarr)."""
    from insitu.store.codecs import numcodecs_decoder

    register("numcodecs", numcodecs_decoder)


@hookimpl
def insitu_register_commands(register: RegisterCommand) -> None:
    """``insitu inspect``, ``insitu bench`` and ``insitu cache``."""
    from insitu.cli.bench import BenchCommand
    from insitu.cli.cache_cmd import CacheCommand
    from insitu.cli.inspect_cmd import InspectCommand

    register("inspect", InspectCommand())
    register("bench", BenchCommand())
    register("cache", CacheCommand())
