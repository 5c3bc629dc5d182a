"""Importing insitu and loading every plugin imports no framework; missing plugins name their package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import insitu
from insitu.plugins.exports import EXPORTS, resolve_export
from insitu.plugins.hookspecs import ENTRY_POINT_GROUP
from insitu.plugins.registry import BLOCK_ENV, DISABLE_AUTOLOAD_ENV
from insitu.testing import temporary_plugin, write_plugin_distribution

HEAVY_MODULES = ("torch", "jax", "jaxlib", "tensorflow", "keras", "cupy", "kvikio")
SRC = Path(insitu.__file__).resolve().parent.parent

# A plugin written the recommended way: the framework import lives inside the
# registered callable, so registering it costs nothing.
LAZY_PLUGIN = """
from insitu.plugins.hookspecs import hookimpl

def as_fake_tensor(view):
    import torch  # only when used
    return torch

@hookimpl
def insitu_register_adapters(register):
    register("as_fake_tensor", as_fake_tensor)
"""

PROBE = """
import json, sys
import insitu
import insitu.plugins.exports, insitu.plugins.registry, insitu.store.opener
plugin_imported_by_import = {module!r} in sys.modules
registry = insitu.plugins.registry.get_registry()
for kind in insitu.plugins.registry.KINDS:
    registry.entries(kind)
print(json.dumps({{
    "heavy": sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r}),
    "plugins": list(registry.plugin_names),
    "adapters": sorted(registry.adapters),
    "plugin_imported_by_import": plugin_imported_by_import,
}}))
"""


pytestmark = pytest.mark.usefixtures("fresh_registry")


def test_import_and_loading_all_plugins_imports_no_framework(tmp_path: Path) -> None:
    module = write_plugin_distribution(tmp_path / "site", "lazyframework", LAZY_PLUGIN)
    env = {k: v for k, v in os.environ.items() if k not in (DISABLE_AUTOLOAD_ENV, BLOCK_ENV)}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), str(SRC), *sys.path[1:]])
    code = textwrap.dedent(PROBE).format(module=module, heavy=HEAVY_MODULES)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["heavy"] == [], f"importing insitu and its plugins imported {report['heavy']}"
    assert "lazyframework" in report["plugins"], "the probe plugin must actually have been loaded"
    assert "as_fake_tensor" in report["adapters"]
    assert not report["plugin_imported_by_import"], "import insitu must not load plugins"


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_missing_plugin_for_root_name_names_the_package(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "1")  # installed plugins must not mask the error
    package = EXPORTS[name].package
    with pytest.raises(ImportError, match=rf"insitu\.{name}.*pip install {package}"):
        resolve_export(name)


def test_unknown_root_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'not_a_thing'"):
        resolve_export("not_a_thing")


def test_installed_plugin_serves_the_root_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = """
    from insitu.plugins.hookspecs import hookimpl

    def as_torch(view):
        return ("adapted", view)

    @hookimpl
    def insitu_register_adapters(register):
        register("as_torch", as_torch)
    """
    # Block real plugins, so an installed insitu-torch cannot clash with the fake one.
    monkeypatch.setenv(BLOCK_ENV, ",".join(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)))
    with temporary_plugin(tmp_path, "fake_torch", source):
        assert resolve_export("as_torch")("view") == ("adapted", "view")


# Modules the command line must not need to print its help: zarr (and the numpy it brings) is
# most of the start-up time of `insitu --help`.
STORE_MODULES = ("zarr", "numpy", "numcodecs")

HELP_PROBE = """
import json, sys
from insitu.cli import main
try:
    main(["--help"])
except SystemExit as exc:
    status = exc.code
print(json.dumps({{
    "status": status,
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] in {store!r}),
    "commands_registered": "insitu.cli.inspect_cmd" in sys.modules,
}}))
"""


def _run_python(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in (DISABLE_AUTOLOAD_ENV, BLOCK_ENV)}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *sys.path[1:]])
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_import_insitu_imports_no_zarr() -> None:
    code = (
        f"import sys, insitu; print(sorted(m for m in sys.modules if m.split('.')[0] in {STORE_MODULES!r}))"
    )
    proc = _run_python("-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", f"import insitu imported {proc.stdout.strip()}"


def test_cli_help_imports_no_zarr() -> None:
    proc = _run_python("-c", textwrap.dedent(HELP_PROBE).format(store=STORE_MODULES))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["status"] == 0
    assert report["commands_registered"], "the probe must have loaded the built-in subcommands"
    assert report["loaded"] == [], f"insitu --help imported {report['loaded']}"
    assert "inspect" in proc.stdout
    assert "bench" in proc.stdout


def test_python_m_insitu_help_imports_no_zarr() -> None:
    proc = _run_python("-X", "importtime", "-m", "insitu", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: insitu"), proc.stdout[:200]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert "insitu.cli" in imported, "-X importtime must have listed the imports"
    assert not imported & set(STORE_MODULES), (
        f"python -m insitu --help imported {imported & set(STORE_MODULES)}"
    )


def test_every_root_name_resolves_and_is_listed() -> None:
    import importlib

    lazy = insitu._LAZY_NAMES
    assert set(insitu.__all__) == {"__version__", *lazy}, (
        "__all__ and the lazy table must list the same names"
    )
    assert set(dir(insitu)) >= set(insitu.__all__) | set(EXPORTS)
    for name in insitu.__all__:
        value = getattr(insitu, name)
        if name != "__version__":
            assert value is getattr(importlib.import_module(lazy[name]), name)
    namespace: dict[str, object] = {}
    exec("from insitu import InSituDataset, open_store, ConfigError, split_by_coord", namespace)
    assert namespace["InSituDataset"] is insitu.InSituDataset


def test_unknown_root_name_through_the_module_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'not_a_thing'"):
        insitu.not_a_thing  # noqa: B018
    with pytest.raises(ImportError, match="cannot import name 'not_a_thing'"):
        exec("from insitu import not_a_thing", {})
