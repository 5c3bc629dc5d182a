"""Helpers that check a plugin registers what it should, and is discoverable.

``plugin_registrations`` runs one plugin's hooks through the real registry
machinery, alone, with hook failures raised instead of warned, so a plugin's
own test suite sees the error. ``temporary_plugin`` makes a module an
installed ``insitu`` plugin for the length of a test, with a real
``*.dist-info`` entry point found by ``importlib.metadata``.
"""

from __future__ import annotations

import importlib
import re
import sys
import tempfile
import textwrap
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path

from insitu.plugins.hookspecs import ENTRY_POINT_GROUP
from insitu.plugins.registry import PluginWarning, Registration, Registry, get_registry, reset_registry


def plugin_registrations(plugin: object, kind: str) -> Mapping[str, Registration]:
    """What ``plugin`` (a module, its dotted name, or a plugin object) registers for ``kind``."""
    obj = importlib.import_module(plugin) if isinstance(plugin, str) else plugin
    name = plugin if isinstance(plugin, str) else getattr(obj, "__name__", repr(obj))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginWarning)
        return Registry([(name, obj)]).entries(kind)


def assert_registers(plugin: object, kind: str, names: Iterable[str], *, exact: bool = False) -> None:
    """Assert ``plugin`` registers every one of ``names`` for ``kind`` (and nothing else if ``exact``)."""
    got = set(plugin_registrations(plugin, kind))
    want = set(names)
    assert want <= got, f"{plugin!r} registers {kind} {sorted(got)}; missing {sorted(want - got)}"
    if exact:
        assert got == want, f"{plugin!r} registers unexpected {kind} {sorted(got - want)}"


def assert_entry_point(name: str, value: str | None = None) -> None:
    """Assert an installed distribution declares ``insitu`` plugin ``name`` and the registry loaded it."""
    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert name in found, f"no {ENTRY_POINT_GROUP!r} entry point named {name!r}; installed: {sorted(found)}"
    if value is not None:
        assert found[name] == value, f"entry point {name!r} points at {found[name]!r}, not {value!r}"
    loaded = get_registry().plugin_names
    assert name in loaded, f"plugin {name!r} is installed but was not loaded (loaded: {list(loaded)})"


def write_plugin_distribution(directory: Path, name: str, source: str, *, module: str | None = None) -> str:
    """Write module ``source`` and a ``*.dist-info`` declaring it as ``insitu`` plugin ``name``.

    Putting ``directory`` on ``sys.path`` (or ``PYTHONPATH``) installs it.
    Returns the module name.
    """
    module = module or "insitu_tmp_" + re.sub(r"\W", "_", name)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{module}.py").write_text(textwrap.dedent(source))
    dist_info = directory / f"{module}-0.0.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.0.0\n")
    (dist_info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {module}\n")
    return module


@contextmanager
def temporary_plugin(directory: Path, name: str, source: str, *, module: str | None = None) -> Iterator[str]:
    """Install ``source`` as ``insitu`` plugin ``name`` for the ``with`` block; yields the module name.

    The files go to a new folder under ``directory``; the registry is reset on
    entry and exit so the next lookup discovers (then forgets) the plugin.
    """
    root = Path(tempfile.mkdtemp(prefix="insitu-plugin-", dir=directory))
    module = write_plugin_distribution(root, name, source, module=module)
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()  # also clears importlib.metadata's directory cache
    reset_registry()
    try:
        yield module
    finally:
        sys.path.remove(str(root))
        sys.modules.pop(module, None)
        importlib.invalidate_caches()
        reset_registry()
