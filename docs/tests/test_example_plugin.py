"""The example plugin package installs and is discovered through the ``insitu`` entry-point group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import DOCS

PLUGIN = DOCS / "examples" / "plugin"

CHECK = """
import json, numpy as np, zarr, insitu
from insitu.plugins.registry import get_registry

zarr.open_group("x.zarr", mode="w").create_array("x", shape=(8, 3), chunks=(4, 3), dtype="float32")[:] = np.arange(24).reshape(8, 3)
store = insitu.open_store("x.zarr")
geoms = insitu.open_geometries(store, sample_axis=0)
negate = insitu.transform_from_config({"name": "negate"})
manifest = insitu.split_by_chunk(geoms["x"], fractions=(1.0,), names=("all",))
with insitu.InSituDataset(store, manifest, batch_size=8, shuffle=False, chunk_transforms=[negate]) as ds:
    batch = next(iter(ds.view("all")))
print(json.dumps({
    "plugins": list(get_registry().plugin_names),
    "transform": type(negate).__module__ + "." + type(negate).__name__,
    "values": batch["x"].tolist(),
}))
"""


def test_example_plugin_installs_and_is_discovered(tmp_path: Path) -> None:
    target = tmp_path / "site"
    # A real install from the package's pyproject.toml (hatchling builds the wheel), into a folder
    # of its own: the entry point comes from the installed *.dist-info, as for any user.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(PLUGIN),
        ],
        check=True,
    )
    assert list(target.glob("insitu_example_plugin-*.dist-info")), "no dist-info installed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}
    env.pop("INSITU_DISABLE_PLUGIN_AUTOLOAD", None)
    run = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert "example" in result["plugins"]
    assert result["transform"] == "insitu_example_plugin.transform.Negate"
    assert result["values"] == [[-float(3 * i + j) for j in range(3)] for i in range(8)]


def test_without_the_install_the_transform_is_unknown(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", "import insitu; insitu.transform_from_config({'name': 'negate'})"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0
    assert "unknown transform 'negate'" in run.stderr
