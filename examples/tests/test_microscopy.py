"""The microscopy example: batches are the stored planes, image and mask planes correspond, the
smoke run beats Otsu, and the real-store path works on a local copy shaped like IDR's image.

The IDR copy has what ``idr0062A/6001240.zarr`` declares (OME-NGFF 0.4 on
Zarr v2, axes c/z/y/x with its micrometre scales, uint16, two channels,
275 x 271 planes in chunks of one plane, ``/``-separated chunk keys, blosc,
a ``labels/0`` label image), with fewer planes. The label array's dtype and
chunking are not published beside the metadata: int64 in 30-plane chunks
here is an assumption, chosen to exercise a second chunking.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from numcodecs import Blosc

import insitu
from examples.microscopy import train
from examples.microscopy.data import make_cells, open_ome, write_ome_zarr, write_synthetic
from examples.microscopy.model import IoU, otsu_segment, otsu_threshold

SHAPE = (40, 32, 32)  # Z, Y, X: two label chunks (30 + 10 planes)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_synthetic(tmp_path_factory.mktemp("microscopy") / "cells.ome.zarr", SHAPE, seed=3)


def attrs(store: str, group: str = "") -> dict[str, Any]:
    """A group's attributes, as plain JSON."""
    return dict(zarr.open_group(store, path=group, mode="r").attrs)


def array(store: str, path: str) -> zarr.Array:
    return zarr.open_array(store, path=path, mode="r")


def test_ome_metadata_follows_the_spec(synthetic: str) -> None:
    ome = attrs(synthetic)["ome"]
    assert ome["version"] == "0.5"
    multiscale = ome["multiscales"][0]
    assert [a["name"] for a in multiscale["axes"]] == ["t", "c", "z", "y", "x"]
    assert [a["type"] for a in multiscale["axes"]] == ["time", "channel", "space", "space", "space"]
    assert [d["path"] for d in multiscale["datasets"]] == ["0", "1"]
    assert array(synthetic, "0").metadata.dimension_names == ("t", "c", "z", "y", "x")  # type: ignore[union-attr]
    assert attrs(synthetic, "labels")["ome"]["labels"] == ["cells"]
    label = attrs(synthetic, "labels/cells")["ome"]
    assert label["image-label"]["source"] == {"image": "../../"}
    assert array(synthetic, "0").chunks == (1, 1, 1, 32, 32)  # one plane per chunk
    assert array(synthetic, "labels/cells/0").chunks == (1, 1, 30, 32, 32)  # thirty planes per chunk
    assert array(synthetic, "1").shape == (1, 2, 40, 16, 16)  # level 1: y and x halved


def test_batches_are_the_stored_planes(synthetic: str) -> None:
    """Each row of ``image`` is plane z of the stored image and the same row of ``mask`` is plane z
    of the label image, for every split, though the two arrays are chunked differently along z."""
    image, labels = np.asarray(array(synthetic, "0")[:]), np.asarray(array(synthetic, "labels/cells/0")[:])
    store = insitu.open_store(synthetic)
    ome = open_ome(store, channels=[0, 1])
    assert ome.image.chunk_len == 1
    assert ome.mask.chunk_len == 30
    assert ome.dims == {"image": ("c", "y", "x"), "mask": ("y", "x")}
    manifest = insitu.split_by_chunk(ome.image, (0.75, 0.25), names=("train", "test"))
    with insitu.InSituDataset(store, manifest, [ome.image, ome.mask], batch_size=7, seed=1) as ds:
        seen: list[int] = []
        for split in ("train", "test"):
            for batch in ds.view(split):
                z = batch.sample_indices
                np.testing.assert_array_equal(batch["image"], image[0][:, z].transpose(1, 0, 2, 3))
                np.testing.assert_array_equal(batch["mask"], labels[0, 0, z])
                seen += z.tolist()
        assert sorted(seen) == list(range(SHAPE[0]))  # every plane once: 30 train, 10 test
        assert set(manifest.samples("test")) == set(range(30, 40))
        # Every chunk read once: 40 planes of 2 channels (a chunk each) and 2 label chunks, the
        # second shared by both splits.
        assert ds.stats["reads"] == 2 * 40 + 2


def test_training_batches_crop_image_and_mask_alike(synthetic: str) -> None:
    """Random patches: each row's image window and mask window come from the same place of the
    same plane (found by searching the stored, normalised plane for the image window)."""
    image = np.asarray(array(synthetic, "0")[0, 0])
    labels = np.asarray(array(synthetic, "labels/cells/0")[0, 0])
    store = insitu.open_store(synthetic)
    ome = open_ome(store, channels=[0])
    ds = train.build_dataset(store, ome, patch=12, batch_size=8, seed=0)
    with ds:
        batch = next(iter(ds.train))
        assert batch["image"].shape == (8, 1, 12, 12)
        assert batch["image"].dtype == np.float32
        assert batch["mask"].shape == (8, 12, 12)
        assert batch["mask"].dtype == np.uint8
        offsets = set()
        for row, z in enumerate(batch.sample_indices):
            plane = train.NormalizePlanes()("0", image[z][None, None])[0, 0]
            windows = np.lib.stride_tricks.sliding_window_view(plane, (12, 12))
            hits = np.argwhere((windows == batch["image"][row, 0]).all(axis=(2, 3)))
            assert len(hits) >= 1
            oy, ox = hits[0]
            offsets.add((int(oy), int(ox)))
            np.testing.assert_array_equal(batch["mask"][row], labels[z, oy : oy + 12, ox : ox + 12] > 0)
        assert len(offsets) > 1  # windows differ between rows
        test_batch = next(iter(ds.test))  # held-out planes are whole
        assert test_batch["image"].shape[1:] == (1, 32, 32)


def test_otsu_splits_two_populations() -> None:
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(10, 1, 5000), rng.normal(30, 2, 1000)])
    assert 13 < otsu_threshold(values) < 25
    planes = np.zeros((2, 8, 8))
    planes[:, 2:5, 2:5] = 5.0
    iou = IoU()
    iou.add(otsu_segment(planes), planes > 0)
    assert iou.value == 1.0


def test_smoke_run_beats_otsu(capsys: pytest.CaptureFixture[str]) -> None:
    assert train.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "microscopy: held-out IoU" in out
    assert "model beats the baseline" in out


def write_idr_like(path: Path, planes: int = 40) -> str:
    """A local copy shaped like idr0062A/6001240.zarr (see the module docstring), filled with cells."""
    image, labels = make_cells((planes, 275, 271), seed=5, radius=(6.0, 12.0))
    axes = [
        {"name": "c", "type": "channel"},
        {"name": "z", "type": "space", "unit": "micrometer"},
        {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"},
    ]
    return write_ome_zarr(
        path,
        image,
        labels[None].astype(np.int64),
        version="0.4",
        axes=axes,
        scale=(1.0, 0.5002025531914894, 0.3603981534640209, 0.3603981534640209),
        image_chunks=(1, 1, 275, 271),
        label_chunks=(1, 30, 275, 271),
        label_name="0",
        levels=3,
        compressor=Blosc(cname="zstd", clevel=5, shuffle=Blosc.BITSHUFFLE),
    )


def test_real_store_path_on_an_idr_like_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_idr_like(tmp_path / "6001240.zarr")
    assert zarr.open_group(path, mode="r").metadata.zarr_format == 2
    assert attrs(path)["multiscales"][0]["version"] == "0.4"
    assert (Path(path) / "0" / "0" / "0" / "0" / "0").is_file()  # "/"-separated chunk keys
    assert array(path, "0").dtype == np.uint16
    assert array(path, "0").shape == (2, 40, 275, 271)

    ome = open_ome(insitu.open_store(path))
    assert ome.image.dimension_names is None  # v0.4 arrays do not name their dimensions...
    assert ome.image.sample_axis == 1
    assert ome.mask.sample_axis == 1
    assert ome.label_name == "0"
    assert ome.image.sample_shape == (2, 275, 271)
    assert ome.mask.sample_shape == (275, 271)

    assert train.main(["--store", path, "--smoke", "--channels", "0"]) == 0
    out = capsys.readouterr().out
    assert "image 0 (2, 40, 275, 271) chunks (1, 1, 275, 271)" in out
    assert "labels labels/0/0 chunks (1, 30, 275, 271)" in out
    assert "model beats the baseline" in out
