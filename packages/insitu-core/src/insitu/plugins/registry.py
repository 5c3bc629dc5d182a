"""The plugin registry: built-ins plus ``insitu`` entry points, loaded lazily and once.

Built-ins are ordinary plugin modules registered the same way as third-party
ones. Entry points are imported on the first lookup; each kind's hook runs on
the first lookup of that kind. A plugin that fails to import, or whose hook
raises, is skipped with a :class:`PluginWarning`; one implementing a hook that
does not exist (a misspelling) raises, as it would otherwise be silently ignored.
``INSITU_DISABLE_PLUGIN_AUTOLOAD=1`` loads only the built-ins;
``INSITU_BLOCK_PLUGINS=a,b`` skips the entry points named ``a`` and ``b``.
"""

from __future__ import annotations

import importlib
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any, overload

import pluggy

from insitu.plugins import hookspecs

BUILTIN_PLUGINS: tuple[str, ...] = ("insitu.builtins",)
KINDS: tuple[str, ...] = ("stores", "decoders", "transforms", "adapters", "devices", "commands")
DISABLE_AUTOLOAD_ENV = "INSITU_DISABLE_PLUGIN_AUTOLOAD"
BLOCK_ENV = "INSITU_BLOCK_PLUGINS"


class PluginWarning(UserWarning):
    """A plugin failed to load or register and was skipped."""


class DuplicatePluginError(ValueError):
    """Two providers claim one name, or one URL scheme with equal priority."""


class PluginNotFoundError(KeyError):
    """Nothing is registered under ``name`` for ``kind``; the message lists what is."""

    def __init__(self, kind: str, name: str, known: Iterable[str], hint: str = "") -> None:
        self.kind, self.name, self.known = kind, name, tuple(sorted(known))
        listed = ", ".join(repr(k) for k in self.known) or "none"
        self.message = f"unknown {kind.removesuffix('s')} {name!r} (registered: {listed}){hint}"
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would show the repr of the message
        return self.message


class LazyObject:
    """A registered object imported on first use: plugins load on every first ``open_store``, so a
    plugin that imports its implementations there puts them on every user's time to first batch.

    ``insitu_target`` is the object itself (``insitu.<name>`` and configurations resolve to it);
    calling the stand-in calls it."""

    def __init__(self, module: str, name: str, kind: str = "object") -> None:
        self.module = module
        self.kind = kind
        self.__name__ = self.__qualname__ = name
        self.__doc__ = f"{module}.{name}, imported on first use."

    @property
    def insitu_target(self) -> Any:
        """The registered object itself (imports its module)."""
        return getattr(importlib.import_module(self.module), self.__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the registered object (importing its module on first use)."""
        return self.insitu_target(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<lazy {self.kind} {self.module}.{self.__name__}>"


@dataclass(frozen=True)
class Registration:
    """One registered object and the plugin that registered it."""

    kind: str
    name: str
    obj: Any
    plugin: str
    schemes: tuple[str, ...] = ()
    default: bool = False


class _KindView:
    """Descriptor behind ``Registry.stores`` and friends, named after the kind it shows."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.kind = name

    @overload
    def __get__(self, registry: None, owner: type | None = None) -> _KindView: ...
    @overload
    def __get__(self, registry: Registry, owner: type | None = None) -> Mapping[str, Any]: ...
    def __get__(self, registry: Registry | None, owner: type | None = None) -> Mapping[str, Any] | _KindView:
        if registry is None:  # class access, e.g. help(Registry)
            return self
        return {n: r.obj for n, r in registry.entries(self.kind).items()}


class Registry:
    """Registered objects by kind, built from ``(plugin name, plugin)`` pairs."""

    def __init__(self, plugins: Iterable[tuple[str, object]]) -> None:
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        name = ""
        try:  # a hook with a wrong signature or a misspelled name fails here, loudly
            for name, plugin in plugins:
                if not self._pm.is_registered(plugin):
                    self._pm.register(plugin, name=name)
            self._pm.check_pending()
        except pluggy.PluginValidationError as exc:
            exc.add_note(f"Set {BLOCK_ENV}={self._pm.get_name(exc.plugin) or name} to skip this plugin.")
            raise
        self._kinds: dict[str, Mapping[str, Registration]] = {}
        self._lock = threading.RLock()

    @property
    def plugin_names(self) -> tuple[str, ...]:
        """Names of the registered plugins, built-ins first."""
        return tuple(name for name, _ in self._pm.list_name_plugin())

    def entries(self, kind: str) -> Mapping[str, Registration]:
        """All registrations of ``kind`` by name; runs that kind's hook on first call."""
        if kind not in KINDS:
            raise ValueError(f"unknown plugin kind {kind!r}; expected one of {', '.join(KINDS)}")
        with self._lock:
            if kind not in self._kinds:
                self._kinds[kind] = MappingProxyType(self._collect(kind))
            return self._kinds[kind]

    def lookup(self, kind: str, name: str) -> Any:
        """The object registered as ``name``; :class:`PluginNotFoundError` lists the known names."""
        entries = self.entries(kind)
        if name not in entries:
            raise PluginNotFoundError(kind, name, entries)
        return entries[name].obj

    def store_for_scheme(self, scheme: str) -> Registration:
        """The store builder serving URL ``scheme`` ("" for plain paths).

        Among several, one registered with ``default=True`` wins; a tie goes to
        a built-in, so installing a plugin never changes how local paths open.
        """
        stores = self.entries("stores").values()
        candidates = [r for r in stores if scheme.lower() in r.schemes]
        if not candidates:
            raise PluginNotFoundError("URL schemes", scheme, {s for r in stores for s in r.schemes})

        def rank(r: Registration) -> tuple[bool, bool]:
            return (r.default, r.plugin in BUILTIN_PLUGINS)

        best = max(map(rank, candidates))
        top = sorted((r for r in candidates if rank(r) == best), key=lambda r: r.name)
        if len(top) > 1:
            who = " and ".join(f"{r.name!r} (plugin {r.plugin!r})" for r in top)
            raise DuplicatePluginError(
                f"URL scheme {scheme!r} is served by {who} with equal priority; "
                "pass backend=<name> to open_store, or register one with default=True"
            )
        return top[0]

    # Each kind's registered objects by name, e.g. ``registry.stores["local"]``.
    stores = _KindView()
    decoders = _KindView()
    transforms = _KindView()
    adapters = _KindView()
    devices = _KindView()
    commands = _KindView()

    def _collect(self, kind: str) -> dict[str, Registration]:
        found: dict[str, Registration] = {}
        caller = getattr(self._pm.hook, f"insitu_register_{kind}")
        for impl in caller.get_hookimpls():
            batch: list[Registration] = []
            try:
                impl.function(_recorder(kind, impl.plugin_name, batch))
            except Exception as exc:  # what it registered before raising is dropped with it
                _warn_skipped(impl.plugin_name, f"failed in insitu_register_{kind}", exc)
                continue
            for reg in batch:
                if reg.name in found:
                    raise DuplicatePluginError(
                        f"{kind} name {reg.name!r} is registered by both plugin "
                        f"{found[reg.name].plugin!r} and plugin {reg.plugin!r}"
                    )
                found[reg.name] = reg
        return found


def _recorder(kind: str, plugin: str, sink: list[Registration]) -> Callable[..., None]:
    """The ``register`` callback handed to one plugin's hook."""

    def register(name: object, obj: Any, *, schemes: Iterable[str] = (), default: bool = False) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a registered name must be a non-empty string, got {name!r}")
        if isinstance(schemes, str):  # a lone "s3" would otherwise become ("s", "3")
            schemes = (schemes,)
        sink.append(Registration(kind, name, obj, plugin, tuple(s.lower() for s in schemes), bool(default)))

    return register


def _warn_skipped(plugin: str, what: str, exc: Exception | None) -> None:
    why = f": {type(exc).__name__}: {exc}" if exc is not None else ""
    warnings.warn(f"insitu plugin {plugin!r} {what} and was skipped{why}", PluginWarning, stacklevel=4)


def autoload_disabled() -> bool:
    """True when ``INSITU_DISABLE_PLUGIN_AUTOLOAD`` is set to anything but "", "0", "false" or "no"."""
    return os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip().lower() not in ("", "0", "false", "no")


def discover_plugins() -> list[tuple[str, object]]:
    """Import the built-ins and (unless disabled) the ``insitu`` entry points."""
    plugins: list[tuple[str, object]] = [(m, importlib.import_module(m)) for m in BUILTIN_PLUGINS]
    if autoload_disabled():
        return plugins
    blocked = {n.strip() for n in os.environ.get(BLOCK_ENV, "").split(",") if n.strip()}
    seen = {name for name, _ in plugins}
    for ep in entry_points(group=hookspecs.ENTRY_POINT_GROUP):
        if ep.name in blocked:
            continue
        if ep.name in seen:  # two distributions chose the same plugin name
            _warn_skipped(ep.name, f"({ep.value}) has a name already taken", None)
            continue
        try:
            plugin = ep.load()
        except Exception as exc:
            _warn_skipped(ep.name, f"({ep.value}) failed to import", exc)
            continue
        seen.add(ep.name)
        plugins.append((ep.name, plugin))
    return plugins


_registry: Registry | None = None
# Re-entrant so that a plugin which looks something up while being imported
# cannot deadlock the first lookup.
_registry_lock = threading.RLock()


def get_registry() -> Registry:
    """The process-wide registry, built on first use (thread-safe)."""
    global _registry
    with _registry_lock:
        if _registry is None:
            _registry = Registry(discover_plugins())
        return _registry


def reset_registry() -> None:
    """Forget the registry so the next lookup rediscovers plugins (for tests)."""
    global _registry
    with _registry_lock:
        _registry = None
