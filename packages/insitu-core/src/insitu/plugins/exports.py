"""Root names served by plugin packages, resolved through the registry on first use.

``insitu.as_torch`` and friends are not imported by ``import insitu``: the
package root looks them up here, so a missing plugin fails only when the name
is used, with an ``ImportError`` that says what to ``pip install``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from insitu.plugins.registry import DISABLE_AUTOLOAD_ENV, PluginNotFoundError, autoload_disabled, get_registry


class Export(NamedTuple):
    """Where a root name comes from: registry kind, registered name, pip package."""

    kind: str
    name: str
    package: str


EXPORTS: dict[str, Export] = {
    "as_torch": Export("adapters", "as_torch", "insitu-torch"),
    "to_torch": Export("adapters", "to_torch", "insitu-torch"),
    "to_jax": Export("adapters", "to_jax", "insitu-jax"),
    "jax_iterator": Export("adapters", "jax_iterator", "insitu-jax"),
    "as_tf_dataset": Export("adapters", "as_tf_dataset", "insitu-tf"),
    "obstore_store": Export("stores", "obstore", "insitu-stores"),
    "fsspec_store": Export("stores", "fsspec", "insitu-stores"),
    "icechunk_store": Export("stores", "icechunk", "insitu-stores"),
    "arraylake_store": Export("stores", "arraylake", "insitu-stores"),
    "virtual_store": Export("stores", "virtual", "insitu-stores"),
    "StandardScaler": Export("transforms", "StandardScaler", "insitu-transforms"),
}


def resolve_export(name: str) -> Any:
    """The object behind root name ``name``, looked up in the plugin registry.

    Raises ``AttributeError`` when ``name`` is not a plugin-served root name
    (so ``insitu.__getattr__`` can return this directly), and ``ImportError``
    naming the package to install when no loaded plugin provides it. A plugin
    that registers a lazy stand-in (to keep plugin loading cheap) exposes the
    real object as its ``insitu_target`` attribute; the root name is that object.
    """
    export = EXPORTS.get(name)
    if export is None:
        raise AttributeError(f"module 'insitu' has no attribute {name!r}")
    try:
        obj = get_registry().lookup(export.kind, export.name)
    except PluginNotFoundError:
        msg = f"insitu.{name} is provided by the {export.package} package: pip install {export.package}"
        if autoload_disabled():
            msg += f" (note: {DISABLE_AUTOLOAD_ENV} is set, so installed plugins are not loaded)"
        raise ImportError(msg, name=f"insitu.{name}") from None
    return getattr(obj, "insitu_target", obj)


__all__ = ["EXPORTS", "Export", "resolve_export"]
