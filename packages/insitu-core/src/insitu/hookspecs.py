"""Hook specifications for insitu plugins.

Every hook receives a ``register`` callback and returns nothing. Plugins are
modules (or objects) implementing some of these hooks, published under the
``insitu`` entry-point group::

    [project.entry-points.insitu]
    myplugin = "my_package.insitu_plugin"

Heavy imports (torch, jax, tensorflow, cupy) belong inside the registered
callables, never at plugin-module import time.
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

PROJECT_NAME = "insitu"
ENTRY_POINT_GROUP = "insitu"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

Register = Callable[..., None]


@hookspec
def insitu_register_stores(register: Register) -> None:
    """Called once, on the first store lookup.

    ``register(name, builder, *, schemes=(), default=False)``: ``builder(url,
    **options)`` returns a ``zarr.abc.store.Store``. ``schemes`` are the URL
    schemes it serves (``"s3"``, ``"file"``...). When two builders serve one
    scheme, the one registered with ``default=True`` wins; ``open_store(...,
    backend=name)`` picks another explicitly.
    """


@hookspec
def insitu_register_decoders(register: Register) -> None:
    """Called once, on the first decoder lookup.

    ``register(name, factory)``: ``factory(geometry)`` returns a chunk decoder
    for that array, or ``None`` when it cannot handle the array's codecs.
    """


@hookspec
def insitu_register_transforms(register: Register) -> None:
    """Called once, on the first transform lookup.

    ``register(name, obj)``: a named chunk or batch transform (a class or a
    factory). ``obj`` must be importable without heavy frameworks.
    """


@hookspec
def insitu_register_adapters(register: Register) -> None:
    """Called once, on the first adapter lookup.

    ``register(name, obj)``: a framework adapter callable such as
    ``as_torch`` or ``to_jax``. The framework is imported inside ``obj``.
    """


@hookspec
def insitu_register_devices(register: Register) -> None:
    """Called once, on the first device lookup.

    ``register(name, factory)``: a device buffer / device-transform stage
    (for example a GPU staging area). ``factory(**options)`` builds it.
    """


def _spec_names() -> tuple[str, ...]:
    return tuple(n for n in globals() if n.startswith("insitu_register_"))


HOOK_NAMES: tuple[str, ...] = _spec_names()

__all__ = ["ENTRY_POINT_GROUP", "HOOK_NAMES", "PROJECT_NAME", "Register", "hookimpl", "hookspec"]
