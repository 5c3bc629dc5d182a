"""One read per one-chunk slab: the keys the fast path writes are the array's own chunk keys, in
every chunk key encoding, and an encoder the fast path cannot frame still gets its keys asked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

import insitu
from insitu.arrays.layout import ArrayReader, _key_around_slab
from insitu.store.keys import chunk_key_encoder


@pytest.mark.parametrize(
    "meta",
    [
        {"zarr_format": 3},
        {"zarr_format": 3, "chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}}},
        {"zarr_format": 3, "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "/"}}},
        {"zarr_format": 2},
        {"zarr_format": 2, "dimension_separator": "/"},
    ],
)
def test_the_framed_key_is_the_encoders_key_for_every_slab(meta: dict) -> None:
    encode = chunk_key_encoder(meta, "group/x")
    around = _key_around_slab(encode, (0, 2))
    assert around is not None
    head, tail = around
    for slab in [0, 1, 9, 10, 99, 100, 123456789]:
        assert f"{head}{slab}{tail}" == encode((slab, 0, 2))


def test_an_encoder_that_needs_integers_is_asked_for_each_key() -> None:
    assert _key_around_slab(lambda coords: "k" + "-".join(str(int(c)) for c in coords), (0,)) is None
    assert _key_around_slab(lambda coords: f"{coords[0]}/{coords[0]}", (0,)) is None  # the slab twice
    assert _key_around_slab(lambda coords: "same", (0,)) is None


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_single_reads_name_the_stored_chunks(tmp_path: Path, zarr_format: int) -> None:
    data = np.arange(12 * 6, dtype=np.float32).reshape(12, 2, 3)
    root = tmp_path / "d.zarr"
    arr = zarr.create_array(
        str(root), name="x", shape=data.shape, chunks=(1, 2, 3), dtype="f4", zarr_format=zarr_format
    )
    arr[:] = data
    store = insitu.open_store(str(root))
    geom = insitu.open_geometries(store, ["x"])["x"]
    reader = ArrayReader(geom)
    reads = reader.single_reads([11, 0, 5])
    assert reads is not None
    for slab, read in zip([11, 0, 5], reads, strict=True):
        assert (root / read.key).is_file()
        assert read.key == reader.key((slab, 0, 0))
        assert read.pieces[0].coords == (slab, 0, 0)
        assert read.byte_range is None
