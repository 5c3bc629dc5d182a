"""Every transform of this package by name, as a configuration file would give it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import insitu
from insitu_transforms import Cast, Coarsen, Crop, FillNaN, RandomCrop, Regrid


@pytest.mark.parametrize(
    ("config", "kind"),
    [
        ({"name": "regrid", "target": "5.625deg", "method": "conservative"}, Regrid),
        ({"name": "random_crop", "size": {"lat": 4, "lon": 4}, "dims": ["lat", "lon"]}, RandomCrop),
        ({"name": "crop", "lat": [0, 4]}, Crop),
        ({"name": "coarsen", "factors": {"lat": 2}}, Coarsen),
        ({"name": "cast", "dtype": "float16"}, Cast),
        ({"name": "fill_nan", "value": 0.0}, FillNaN),
    ],
)
def test_a_configuration_names_each_transform(config: dict[str, object], kind: type) -> None:
    assert isinstance(insitu.transform_from_config(config), kind)


def test_a_configured_regrid_reads_its_source_grid_from_each_array(tmp_path: Path) -> None:
    """``{"name": "regrid", "target": ...}`` knows no source grid: the dataset binds it per array."""
    group = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=3)
    lat = 90 - 2.8125 - 5.625 * np.arange(32)  # 5.625° cell centres, north first
    lon = 5.625 * np.arange(64)
    values = np.ones((8, 32, 64), "f4") * np.arange(8, dtype="f4")[:, None, None]
    t = group.create_array(
        "t", shape=values.shape, chunks=(4, 32, 64), dtype="f4", dimension_names=("time", "lat", "lon")
    )
    t[...] = values
    for name, coord in (("lat", lat), ("lon", lon)):
        group.create_array(name, shape=coord.shape, dtype="f8", dimension_names=(name,))[...] = coord
    store = insitu.open_store(tmp_path / "s.zarr")
    geoms = insitu.open_geometries(store, ["t"], "time")
    manifest = insitu.split_by_chunk(geoms["t"], (1.0,), names=["train"])
    config = [{"name": "regrid", "target": "11.25deg", "method": "conservative"}]
    with insitu.InSituDataset(
        store, manifest, geoms, chunk_transforms=config, batch_size=8, shuffle=False
    ) as data:
        batch = next(iter(data.train))
    assert batch["t"].shape == (8, 16, 32)
    # A field constant on each sample is reproduced exactly by conservative regridding.
    np.testing.assert_array_equal(
        batch["t"], np.broadcast_to(np.arange(8, dtype="f4")[:, None, None], (8, 16, 32))
    )


def test_loading_the_plugin_imports_no_transform_module() -> None:
    """The registry loads this plugin on every first open_store: scipy (Regrid) must wait for use."""
    code = (
        "import sys, insitu; insitu.open_store('memory://lazy', mode='w'); "
        "from insitu.plugins.registry import get_registry; get_registry().entries('transforms'); "
        "print(sorted(m for m in sys.modules if m.startswith(('scipy', 'insitu_transforms.'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "['insitu_transforms.plugin']"
