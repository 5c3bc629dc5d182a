"""``block_chunks="auto"`` (the default): blocks sized from the chunks' decoded bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import field, write_array

import insitu
from insitu.errors import ConfigError
from insitu.options import AUTO_BLOCK_BYTES, AUTO_BLOCK_MAX, AUTO_BLOCK_MIN, auto_block_chunks


@pytest.mark.parametrize(
    ("unit_nbytes", "expected"),
    [
        (256, AUTO_BLOCK_MAX),  # tiny chunks: the most chunks a block takes
        (AUTO_BLOCK_BYTES // 64, 64),  # a block of 64 holds the bytes
        (AUTO_BLOCK_BYTES // 64 + 1, 64),
        (AUTO_BLOCK_BYTES // 64 - 1, 128),  # one byte short of it: doubled once more
        (181 * 360 * 4, AUTO_BLOCK_MIN),  # a one-sample 0.5-degree float32 field: the old fixed 16
        (64 << 20, AUTO_BLOCK_MIN),  # large chunks never get fewer than 16
        (0, AUTO_BLOCK_MAX),
    ],
)
def test_auto_block_doubles_until_a_block_holds_its_bytes(unit_nbytes: int, expected: int) -> None:
    assert auto_block_chunks(unit_nbytes) == expected


def _dataset(tmp_path: Path, chunk: int, sample_shape: tuple[int, ...], **kw: object) -> insitu.InSituDataset:
    write_array(tmp_path, "x", field(2 * chunk, sample_shape), (chunk, *sample_shape))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, ["x"])
    return insitu.InSituDataset(store, insitu.split_by_chunk(geoms["x"], (1.0,)), geoms, **kw)


def test_small_chunks_get_larger_blocks_and_every_sample_once(tmp_path: Path) -> None:
    values = field(2000, (4, 4))
    write_array(tmp_path, "x", values, (1, 4, 4))  # 64 bytes a chunk
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, ["x"])
    with insitu.InSituDataset(store, insitu.split_by_chunk(geoms["x"], (1.0,)), geoms, batch_size=50) as ds:
        assert ds.block_chunks == AUTO_BLOCK_MAX
        seen = []
        for batch in ds.train:
            np.testing.assert_array_equal(batch["x"], values[batch.sample_indices])
            seen.append(batch.sample_indices)
    assert sorted(np.concatenate(seen).tolist()) == list(range(2000))


def test_chunk_bytes_count_every_sample_in_the_chunk_and_every_label(tmp_path: Path) -> None:
    # 8 samples of 64 x 64 float32 a chunk: 128 kB, so 16 chunks hold 2 MiB.
    with _dataset(tmp_path, 8, (64, 64)) as ds:
        assert ds.block_chunks == 16
    # Two labels of 32 x 64 per sample read the same bytes as one of 64 x 64.
    other = tmp_path / "two"
    write_array(other, "a", field(16, (32, 64)), (8, 32, 64))
    write_array(other, "b", field(16, (32, 64)), (8, 32, 64))
    store = insitu.open_store(other)
    geoms = insitu.open_geometries(store, ["a", "b"])
    with insitu.InSituDataset(store, insitu.split_by_chunk(geoms["a"], (1.0,)), geoms) as ds:
        assert ds.block_chunks == 16
    with insitu.InSituDataset(store, insitu.split_by_chunk(geoms["a"], (1.0,)), [geoms["a"]]) as ds:
        assert ds.block_chunks == 32


def test_a_given_block_size_is_kept(tmp_path: Path) -> None:
    with _dataset(tmp_path, 1, (4,), block_chunks=3) as ds:
        assert ds.block_chunks == 3


def test_auto_patches_take_blocks_of_16_regions(tmp_path: Path) -> None:
    write_array(tmp_path, "x", field(4, (32, 32)), (1, 8, 8))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, ["x"])
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
    with insitu.InSituDataset(store, manifest, geoms, patch={1: 8, 2: 8}) as ds:
        assert ds.block_chunks == 16


@pytest.mark.parametrize("bad", ["big", "", 0, 1.5])
def test_a_bad_block_size_is_refused_naming_it(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ConfigError, match="block_chunks") as info:
        _dataset(tmp_path, 1, (4,), block_chunks=bad)
    assert repr(bad) in str(info.value)
    if isinstance(bad, str):
        assert "'auto'" in str(info.value)
