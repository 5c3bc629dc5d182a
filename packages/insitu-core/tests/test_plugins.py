"""The plugin registry: discovery through real entry points, isolation of broken plugins."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pluggy
import pytest
from zarr.storage import LocalStore, MemoryStore

from insitu.plugins.registry import (
    BLOCK_ENV,
    DISABLE_AUTOLOAD_ENV,
    DuplicatePluginError,
    PluginNotFoundError,
    PluginWarning,
    get_registry,
)
from insitu.store.opener import open_store
from insitu.testing import assert_entry_point, assert_registers, plugin_registrations, temporary_plugin

GOOD_PLUGIN = """
from zarr.storage import MemoryStore
from insitu.plugins.hookspecs import hookimpl

CALLS = []

def fake_builder(url, *, read_only=True, **options):
    return MemoryStore(read_only=read_only)

def fake_adapter(view):
    return list(view)

@hookimpl
def insitu_register_stores(register):
    CALLS.append("stores")
    register("fake", fake_builder, schemes=("fake",))

@hookimpl
def insitu_register_adapters(register):
    CALLS.append("adapters")
    register("fake_adapter", fake_adapter)
"""


pytestmark = pytest.mark.usefixtures("fresh_registry")


def test_builtins_serve_local_paths_and_memory() -> None:
    registry = get_registry()
    assert {"local", "memory"} <= set(registry.stores)
    assert registry.store_for_scheme("file").name == "local"
    assert registry.store_for_scheme("").name == "local"
    assert registry.store_for_scheme("MEMORY").name == "memory"
    assert_registers("insitu.builtins", "stores", ["faults", "local", "memory"], exact=True)


def test_entry_point_plugin_is_discovered(tmp_path: Path) -> None:
    with temporary_plugin(tmp_path, "fakeplug", GOOD_PLUGIN) as module:
        registry = get_registry()
        assert "fakeplug" in registry.plugin_names
        assert registry.entries("stores")["fake"].plugin == "fakeplug"
        assert registry.adapters["fake_adapter"] is sys.modules[module].fake_adapter
        assert isinstance(open_store("fake://anything"), MemoryStore)
        assert_entry_point("fakeplug", module)
    assert "fake" not in get_registry().stores


def test_plugins_load_lazily_and_each_hook_runs_once(tmp_path: Path) -> None:
    with temporary_plugin(tmp_path, "lazyplug", GOOD_PLUGIN) as module:
        assert module not in sys.modules, "installing must not import the plugin"
        get_registry()
        calls = sys.modules[module].CALLS
        assert calls == [], "no hook runs before its kind is looked up"
        for _ in range(3):
            get_registry().stores  # noqa: B018  (the lookup is the point)
            open_store("fake://x")
        assert calls == ["stores"]
        get_registry().adapters  # noqa: B018
        assert calls == ["stores", "adapters"]


def test_first_lookup_is_thread_safe(tmp_path: Path) -> None:
    with temporary_plugin(tmp_path, "threadplug", GOOD_PLUGIN) as module:
        barrier = threading.Barrier(8)
        seen: list[object] = []

        def look() -> None:
            barrier.wait()
            registry = get_registry()
            registry.stores  # noqa: B018
            seen.append(registry)

        threads = [threading.Thread(target=look) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(seen) == 8
        assert all(r is seen[0] for r in seen)
        assert sys.modules[module].CALLS == ["stores"]


def test_plugin_that_fails_to_import_warns_and_is_skipped(tmp_path: Path) -> None:
    source = "import insitu_no_such_dependency_xyz\n"
    with temporary_plugin(tmp_path, "brokenimport", source):
        expected = r"'brokenimport'.*ModuleNotFoundError.*insitu_no_such_dependency_xyz"
        with pytest.warns(PluginWarning, match=expected):
            registry = get_registry()
        assert "brokenimport" not in registry.plugin_names
        assert isinstance(open_store("memory://fails-to-import", mode="w"), MemoryStore)


def test_hook_that_raises_warns_and_its_registrations_are_dropped(tmp_path: Path) -> None:
    source = """
    from insitu.plugins.hookspecs import hookimpl

    @hookimpl
    def insitu_register_stores(register):
        register("half", object(), schemes=("half",))
        raise RuntimeError("boom in stores")

    @hookimpl
    def insitu_register_transforms(register):
        register("fine", object())
    """
    with temporary_plugin(tmp_path, "raiser", source):
        registry = get_registry()
        with pytest.warns(
            PluginWarning, match=r"'raiser'.*insitu_register_stores.*RuntimeError: boom in stores"
        ):
            stores = registry.stores
        assert "half" not in stores
        assert {"local", "memory"} <= set(stores)
        assert "fine" in registry.transforms


def test_misspelled_hook_fails_loudly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = """
    from insitu.plugins.hookspecs import hookimpl

    @hookimpl
    def insitu_register_store(register):
        register("typo", object())
    """
    with temporary_plugin(tmp_path, "typo", source):
        with pytest.raises(pluggy.PluginValidationError, match="insitu_register_store") as info:
            get_registry()
        assert any(f"{BLOCK_ENV}=typo" in note for note in getattr(info.value, "__notes__", []))
        monkeypatch.setenv(BLOCK_ENV, "typo")
        assert "typo" not in get_registry().plugin_names


def test_duplicate_names_raise_naming_both_providers(tmp_path: Path) -> None:
    source = """
    from insitu.plugins.hookspecs import hookimpl

    @hookimpl
    def insitu_register_stores(register):
        register("local", object(), schemes=("elsewhere",))
    """
    with temporary_plugin(tmp_path, "copycat", source):
        registry = get_registry()
        with pytest.raises(DuplicatePluginError, match=r"'local'.*'insitu\.builtins'.*'copycat'"):
            registry.stores  # noqa: B018


def test_disable_autoload_loads_only_builtins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "1")
    with temporary_plugin(tmp_path, "ignored", GOOD_PLUGIN) as module:
        registry = get_registry()
        assert "fake" not in registry.stores
        assert {"local", "memory"} <= set(registry.stores)
        assert module not in sys.modules
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "0")
    with temporary_plugin(tmp_path, "loaded", GOOD_PLUGIN):
        assert "fake" in get_registry().stores


def test_block_list_skips_named_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BLOCK_ENV, "someother, blockedplug")
    with temporary_plugin(tmp_path, "blockedplug", GOOD_PLUGIN) as module:
        assert "fake" not in get_registry().stores
        assert module not in sys.modules


def test_lookup_of_unknown_name_lists_known_names() -> None:
    with pytest.raises(PluginNotFoundError, match=r"unknown store 'nope'.*'local', 'memory'") as info:
        get_registry().lookup("stores", "nope")
    assert isinstance(info.value, KeyError)
    assert info.value.known == ("faults", "local", "memory")
    with pytest.raises(KeyError, match="registered: none"):
        get_registry().lookup("adapters", "as_nothing")


def test_unknown_kind_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown plugin kind 'widgets'"):
        get_registry().entries("widgets")


SCHEME_PLUGIN = """
from zarr.storage import MemoryStore
from insitu.plugins.hookspecs import hookimpl

def builder(url, *, read_only=True):
    store = MemoryStore(read_only=read_only)
    store.built_by = {name!r}
    return store

@hookimpl
def insitu_register_stores(register):
    register({name!r}, builder, schemes=("dup", "file"), default={default})
"""


def test_scheme_served_twice_needs_a_default_or_backend(tmp_path: Path) -> None:
    with (
        temporary_plugin(tmp_path, "one", SCHEME_PLUGIN.format(name="one", default=False)),
        temporary_plugin(tmp_path, "two", SCHEME_PLUGIN.format(name="two", default=False)),
    ):
        with pytest.raises(DuplicatePluginError, match=r"'dup'.*'one'.*'two'.*backend="):
            open_store("dup://x")
        assert open_store("dup://x", backend="two").built_by == "two"  # type: ignore[attr-defined]


def test_default_wins_but_never_over_builtin_local_paths(tmp_path: Path) -> None:
    with (
        temporary_plugin(tmp_path, "one", SCHEME_PLUGIN.format(name="one", default=False)),
        temporary_plugin(tmp_path, "two", SCHEME_PLUGIN.format(name="two", default=True)),
    ):
        assert open_store("dup://x").built_by == "two"  # type: ignore[attr-defined]
        assert isinstance(open_store(tmp_path), LocalStore)
        assert isinstance(open_store(f"file://{tmp_path}"), LocalStore)
        assert open_store(f"file://{tmp_path}", backend="one").built_by == "one"  # type: ignore[attr-defined]


def test_plugin_registrations_raise_hook_failures_for_plugin_authors() -> None:
    class Plugin:
        @staticmethod
        @pluggy.HookimplMarker("insitu")
        def insitu_register_transforms(register: object) -> None:
            raise RuntimeError("bad transform table")

    with pytest.raises(PluginWarning, match="bad transform table"):
        plugin_registrations(Plugin(), "transforms")
    with pytest.raises(AssertionError, match="missing"):
        assert_registers("insitu.builtins", "stores", ["local", "s3"])


def test_hook_with_wrong_signature_fails_loudly(tmp_path: Path) -> None:
    source = """
    from insitu.plugins.hookspecs import hookimpl

    @hookimpl
    def insitu_register_stores(registry):
        pass
    """
    with (
        temporary_plugin(tmp_path, "badargs", source),
        pytest.raises(pluggy.PluginValidationError, match="registry") as info,
    ):
        get_registry()
    assert any(f"{BLOCK_ENV}=badargs" in note for note in getattr(info.value, "__notes__", []))
