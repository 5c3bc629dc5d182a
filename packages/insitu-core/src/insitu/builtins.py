"""Core's built-in plugin, registered through the same path as third-party plugins.

It is listed in ``insitu.plugins.BUILTIN_PLUGINS``, so it loads even with
``INSITU_DISABLE_PLUGIN_AUTOLOAD=1``.
"""

from __future__ import annotations

from insitu.hookspecs import RegisterDecoder, RegisterStore, hookimpl
from insitu.stores import local_store, memory_store


@hookimpl
def insitu_register_stores(register: RegisterStore) -> None:
    """Plain paths and ``file://`` URLs (LocalStore), ``memory://name`` (MemoryStore), and
    ``faults+<scheme>://`` (a fault-injecting wrapper for reliability drills, ``insitu.faults``)."""
    # default=True: a plugin that also serves "file" never takes over local paths
    # unless the user asks for it with open_store(..., backend=name).
    register("local", local_store, schemes=("file", ""), default=True)
    register("memory", memory_store, schemes=("memory",), default=True)
    # Imported here: the fault wrapper loads with the first store lookup, not with every registry.
    from insitu.faults import FAULT_SCHEMES, faults_store

    register("faults", faults_store, schemes=FAULT_SCHEMES)


@hookimpl
def insitu_register_decoders(register: RegisterDecoder) -> None:
    """Direct numcodecs decoding into pool slots (arrays with other codecs are read through zarr)."""
    from insitu.codecs import numcodecs_decoder

    register("numcodecs", numcodecs_decoder)
