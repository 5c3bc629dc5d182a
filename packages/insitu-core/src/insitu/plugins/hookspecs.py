"""Hook specifications for insitu plugins.

Every hook receives a ``register`` callback and returns nothing. Each
callback's signature is a protocol here (:class:`RegisterStore`,
:class:`RegisterDecoder`...): annotate a hook implementation's parameter with
it and mypy checks every ``register(...)`` call the plugin makes. Plugins are
modules (or objects) implementing some of these hooks, published under the
``insitu`` entry-point group::

    [project.entry-points.insitu]
    myplugin = "my_package.insitu_plugin"

Heavy imports (torch, jax, tensorflow, cupy) belong inside the registered
callables, never at plugin-module import time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

import pluggy

PROJECT_NAME = "insitu"
ENTRY_POINT_GROUP = "insitu"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# Names and objects are positional (the core's callback names them differently); ``schemes``
# and ``default`` are keywords.


class RegisterStore(Protocol):
    """``register(name, builder, *, schemes=(), default=False)`` of :func:`insitu_register_stores`."""

    def __call__(
        self, name: str, builder: Callable[..., Any], /, *, schemes: Iterable[str] = (), default: bool = False
    ) -> None:
        """Register ``builder(url, **options)`` under ``name`` for the URL ``schemes`` it serves;
        ``default=True`` makes it win when two builders serve one scheme."""


class RegisterDecoder(Protocol):
    """``register(name, factory)`` of :func:`insitu_register_decoders`."""

    def __call__(self, name: str, factory: Callable[..., Any], /) -> None:
        """Register ``factory`` under ``name``: ``factory(geometry)`` returns a chunk decoder for that
        array, or ``None`` when it cannot handle the array's codecs."""


class RegisterTransform(Protocol):
    """``register(name, obj)`` of :func:`insitu_register_transforms`."""

    def __call__(self, name: str, obj: Any, /) -> None:
        """Register a named chunk or batch transform (a class or a factory)."""


class RegisterAdapter(Protocol):
    """``register(name, obj)`` of :func:`insitu_register_adapters`."""

    def __call__(self, name: str, obj: Callable[..., Any], /) -> None:
        """Register a framework adapter callable (such as ``as_torch`` or ``to_jax``) under ``name``."""


class RegisterDevice(Protocol):
    """``register(name, factory)`` of :func:`insitu_register_devices`."""

    def __call__(self, name: str, factory: Callable[..., Any], /) -> None:
        """Register a device buffer / device transform ``factory`` under ``name``."""


class RegisterCommand(Protocol):
    """``register(name, command)`` of :func:`insitu_register_commands`."""

    def __call__(self, name: str, command: Any, /) -> None:
        """Register a subcommand of the ``insitu`` command line under ``name``.
        Call the registered object (importing its module on first use)."""


#: Untyped form of every hook's callback, kept for plugins written before the typed ones.
Register = Callable[..., None]


@hookspec
def insitu_register_stores(register: RegisterStore) -> None:
    """Called once, on the first store lookup.

    ``register(name, builder, *, schemes=(), default=False)``: ``builder(url,
    **options)`` returns a ``zarr.abc.store.Store``. ``schemes`` are the URL
    schemes it serves (``"s3"``, ``"file"``...). When two builders serve one
    scheme, the one registered with ``default=True`` wins; ``open_store(...,
    backend=name)`` picks another explicitly.
    """


@hookspec
def insitu_register_decoders(register: RegisterDecoder) -> None:
    """Called once, on the first decoder lookup.

    ``register(name, factory)``: ``factory(geometry)`` returns a chunk decoder
    for that array, or ``None`` when it cannot handle the array's codecs.
    """


@hookspec
def insitu_register_transforms(register: RegisterTransform) -> None:
    """Called once, on the first transform lookup.

    ``register(name, obj)``: a named chunk or batch transform (a class or a
    factory). ``obj`` must be importable without heavy frameworks.
    """


@hookspec
def insitu_register_adapters(register: RegisterAdapter) -> None:
    """Called once, on the first adapter lookup.

    ``register(name, obj)``: a framework adapter callable such as
    ``as_torch`` or ``to_jax``. The framework is imported inside ``obj``.
    """


@hookspec
def insitu_register_devices(register: RegisterDevice) -> None:
    """Called once, on the first device lookup.

    ``register(name, factory)``: a device buffer / device-transform stage
    (for example a GPU staging area). ``factory(**options)`` builds it.
    """


@hookspec
def insitu_register_commands(register: RegisterCommand) -> None:
    """Called once, when the ``insitu`` command line starts.

    ``register(name, command)``: a subcommand ``insitu <name>``. ``command``
    has ``help`` (one line), ``add_arguments(parser)`` (an
    ``argparse.ArgumentParser``) and ``run(args) -> int`` (the exit status).
    Import anything heavy inside ``run``.
    """


def _spec_names() -> tuple[str, ...]:
    return tuple(n for n in globals() if n.startswith("insitu_register_"))


HOOK_NAMES: tuple[str, ...] = _spec_names()

__all__ = [
    "ENTRY_POINT_GROUP",
    "HOOK_NAMES",
    "PROJECT_NAME",
    "Register",
    "RegisterAdapter",
    "RegisterCommand",
    "RegisterDecoder",
    "RegisterDevice",
    "RegisterStore",
    "RegisterTransform",
    "hookimpl",
    "hookspec",
]
