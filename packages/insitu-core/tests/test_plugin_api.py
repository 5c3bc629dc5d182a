"""insitu.plugin_api: every name resolves to core's own object, lazily, and the import contract that
keeps plugin packages on it covers every other core module."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import insitu
from insitu import plugin_api

ROOT_PYPROJECT = Path(insitu.__file__).resolve().parents[4] / "pyproject.toml"
CONTRACT = "plugin packages import insitu-core only through insitu.plugin_api"


def _type_checking_imports() -> dict[str, str]:
    """Name -> module of the imports under ``if TYPE_CHECKING:`` in plugin_api's source."""
    tree = ast.parse(Path(plugin_api.__file__).read_text())
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"
    )
    return {
        alias.name: str(node.module)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_every_public_name_resolves_to_the_object_core_defines() -> None:
    assert sorted(plugin_api.__all__) == sorted(plugin_api._DEFINED_IN)
    for name, module in plugin_api._DEFINED_IN.items():
        assert getattr(plugin_api, name) is getattr(importlib.import_module(module), name), name


def test_the_types_checkers_see_are_the_names_served_at_run_time() -> None:
    assert _type_checking_imports() == plugin_api._DEFINED_IN


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Engine'"):
        _ = plugin_api.Engine


def test_importing_it_and_registering_import_neither_the_engine_nor_zarr() -> None:
    code = (
        "import sys\n"
        "from insitu.plugin_api import ConfigError, LazyObject, RegisterTransform, hookimpl\n"
        "heavy = [m for m in ('zarr', 'insitu.engine', 'insitu.dataset', 'insitu.views') if m in sys.modules]\n"
        "sys.exit(f'imported {heavy}' if heavy else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_contract_forbids_plugins_every_core_module_but_the_plugin_api() -> None:
    if not ROOT_PYPROJECT.is_file():
        pytest.skip("not a checkout of the monorepo (the contracts live in its root pyproject.toml)")
    config = tomllib.loads(ROOT_PYPROJECT.read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["name"] == CONTRACT)
    core = {f"insitu.{m.name}" for m in pkgutil.iter_modules(insitu.__path__)}
    assert set(contract["forbidden_modules"]) == core - {"insitu.plugin_api"}
