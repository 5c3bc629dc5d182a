"""Arrays at other resolutions sampled with the reference (labels at scale 2 and 4, a mask at
twice the resolution): each array's patch is its scaled footprint of the reference patch, equal
to the source there, and its chunks are read once per epoch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import write_array

import insitu
from insitu.errors import ConfigError


def _group(tmp_path: Path, arrays: dict[str, tuple[np.ndarray, tuple[int, ...]]]) -> Any:
    root = tmp_path / "img.zarr"
    zarr.open_group(str(root), mode="w")
    for name, (data, chunks) in arrays.items():
        write_array(root, name, data, chunks, dimension_names=("z", "y", "x"))
    return insitu.open_store(str(root))


@pytest.mark.parametrize("edge", ["shift", "pad"])
def test_labels_at_scale_two_and_four_and_a_finer_mask_read_their_footprint(
    tmp_path: Path, edge: str
) -> None:
    rng = np.random.default_rng(0)
    image = rng.standard_normal((3, 96, 80)).astype("float32")
    half = rng.integers(0, 5, (3, 48, 40)).astype("uint8")
    quarter = rng.integers(0, 5, (3, 24, 20)).astype("uint8")
    fine = rng.random((3, 192, 160)).astype("float32")
    store = _group(
        tmp_path,
        {
            "image": (image, (1, 32, 32)),
            "half": (half, (1, 16, 8)),
            "quarter": (quarter, (1, 8, 20)),
            "fine": (fine, (1, 64, 64)),
        },
    )
    g = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(g["image"], fractions=(1.0,), names=("train",))
    ds = insitu.InSituDataset(
        store,
        manifest,
        geometries=[
            g["image"],
            g["half"].with_spacing(y=2, x=2),
            g["quarter"].with_spacing(y=4, x=4),
            g["fine"].with_spacing(y=0.5, x=0.5),
        ],
        patch={"y": 24, "x": 16},
        patch_stride={"y": 20, "x": 12},
        patch_edge=edge,
        batch_size=9,
    )
    n = 0
    for batch in ds.train:
        assert batch["half"].shape[1:] == (12, 8)
        assert batch["quarter"].shape[1:] == (6, 4)
        assert batch["fine"].shape[1:] == (48, 32)
        for i, (t, y, x) in enumerate(batch.patch_origins.tolist()):
            for label, src, k in (("image", image, 1), ("half", half, 2), ("quarter", quarter, 4)):
                want = src[t, y // k : y // k + 24 // k, x // k : x // k + 16 // k]  # clipped at the end
                got = batch[label][i]
                np.testing.assert_array_equal(got[: want.shape[0], : want.shape[1]], want)
                assert batch.patch_mask(label)[i].sum() == want.size  # padding past the end is masked
            want = fine[t, 2 * y : 2 * y + 48, 2 * x : 2 * x + 32]
            np.testing.assert_array_equal(batch["fine"][i][: want.shape[0], : want.shape[1]], want)
            assert batch.patch_mask("fine")[i].sum() == want.size
        n += batch.size
    assert n > 0
    chunks = {"image": 3 * 3 * 3, "half": 3 * 3 * 5, "quarter": 3 * 3 * 1, "fine": 3 * 3 * 3}
    assert ds.stats["chunks_decoded"] == sum(chunks.values())  # every chunk of every array once


def test_an_array_off_the_grid_or_a_patch_off_its_indices_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    store = _group(
        tmp_path,
        {
            "image": (rng.random((2, 64, 64)).astype("f4"), (1, 32, 32)),
            "half": (rng.random((2, 32, 32)).astype("f4"), (1, 16, 16)),
        },
    )
    g = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(g["image"], fractions=(1.0,), names=("train",))
    with pytest.raises(
        ConfigError, match=r"array 'half' \(shape \(2, 32, 32\).*not on the grid of 'image'.*with_spacing"
    ):
        insitu.InSituDataset(store, manifest, geometries=[g["image"], g["half"]], patch={"y": 8, "x": 8})
    with pytest.raises(
        ConfigError, match=r"a patch of 9 along axis 1 \('y'\) is 9/2 indices of array 'half'"
    ):
        insitu.InSituDataset(
            store, manifest, geometries=[g["image"], g["half"].with_spacing(y=2, x=2)], patch={"y": 9, "x": 8}
        )


def _ngff_image(
    root: Any, path: str, levels: list[np.ndarray], spacings: list[list[float]], fmt: int
) -> None:
    group = zarr.open_group(store=root, path=path, mode="a", zarr_format=fmt)
    axes = [{"name": "z", "type": "space"}, {"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    datasets = [
        {"path": str(i), "coordinateTransformations": [{"type": "scale", "scale": sp}]}
        for i, sp in enumerate(spacings)
    ]
    meta = {"axes": axes, "datasets": datasets, "name": path or "image"}
    if fmt == 2:
        group.attrs["multiscales"] = [{"version": "0.4", **meta}]
    else:
        group.attrs["ome"] = {"version": "0.5", "multiscales": [meta]}
    for i, data in enumerate(levels):
        arr = group.create_array(str(i), shape=data.shape, chunks=(1, 16, 16), dtype=data.dtype)
        arr[:] = data


@pytest.mark.parametrize("fmt", [2, 3])
def test_an_ome_ngff_image_and_its_labels_open_by_level_and_sample_together(tmp_path: Path, fmt: int) -> None:
    rng = np.random.default_rng(2)
    image = rng.standard_normal((4, 64, 64)).astype("float32")
    pyramid = [image, image[:, ::2, ::2].copy(), image[:, ::4, ::4].copy()]
    labels = rng.integers(0, 3, (4, 32, 32)).astype("uint16")  # at half the image's resolution
    root = zarr.storage.LocalStore(str(tmp_path / "ngff.zarr"))
    _ngff_image(root, "", pyramid, [[2.0, 0.5, 0.5], [2.0, 1.0, 1.0], [2.0, 2.0, 2.0]], fmt)
    _ngff_image(
        root, "labels/cells", [labels, labels[:, ::2, ::2].copy()], [[2.0, 1.0, 1.0], [2.0, 2.0, 2.0]], fmt
    )
    store = insitu.open_store(str(tmp_path / "ngff.zarr"))
    img = insitu.open_ome_ngff(store)
    assert img.dimension_names == ("z", "y", "x")
    assert img.spacing == (2.0, 0.5, 0.5)
    assert img.shape == (4, 64, 64)
    assert insitu.open_ome_ngff(store, resolution={"y": 0.9, "x": 1.1}).shape == (4, 32, 32)  # level 1
    assert insitu.open_ome_ngff(store, level=-1).shape == (4, 16, 16)
    cells = insitu.open_ome_ngff(store, "labels/cells", level=0)  # scale 2 against the image
    coarse = insitu.open_ome_ngff(store, "labels/cells", level=1)  # scale 4
    manifest = insitu.split_by_chunk(img, fractions=(1.0,), names=("train",))
    ds = insitu.InSituDataset(
        store, manifest, geometries=[img, cells, coarse], patch={"y": 32, "x": 32}, batch_size=4
    )
    n = 0
    for batch in ds.train:
        for i, (z, y, x) in enumerate(batch.patch_origins.tolist()):
            np.testing.assert_array_equal(batch[img.label][i], image[z, y : y + 32, x : x + 32])
            np.testing.assert_array_equal(
                batch[cells.label][i], labels[z, y // 2 : y // 2 + 16, x // 2 : x // 2 + 16]
            )
            np.testing.assert_array_equal(
                batch[coarse.label][i], labels[z, ::2, ::2][y // 4 : y // 4 + 8, x // 4 : x // 4 + 8]
            )
        n += batch.size
    assert n == 4 * 2 * 2
    with pytest.raises(insitu.ConfigError, match=r"has levels 0..1; got level=5"):
        insitu.open_ome_ngff(store, "labels/cells", level=5)
    with pytest.raises(insitu.ConfigError, match=r"no OME-NGFF multiscales metadata"):
        insitu.open_ome_ngff(store, "labels")
