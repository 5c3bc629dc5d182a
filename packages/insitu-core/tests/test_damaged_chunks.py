"""Chunks whose bytes are valid but of the wrong size are bad chunks under every policy, never
silently wrong samples (a half-size frame used to leave the rest of the slot as it was)."""

from __future__ import annotations

from pathlib import Path

import numcodecs
import numpy as np
import pytest
from conftest import write_array
from zarr.storage import LocalStore

import insitu
from insitu.errors import BadChunkError

N, CHUNK, SHAPE = 24, 4, (3, 5)
CHUNK_BYTES = CHUNK * 15 * 4
CODECS = {
    "raw": (None, lambda b: b),
    "zstd": ("zstd", numcodecs.Zstd(1).encode),
    "gzip": ({"name": "gzip", "configuration": {"level": 1}}, numcodecs.GZip(1).encode),
    "blosc": (
        {
            "name": "blosc",
            "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4},
        },
        numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE).encode,
    ),
}
DAMAGE = {
    "half": lambda chunk: chunk[: len(chunk) // 2],
    "oversized": lambda chunk: chunk + chunk[:60],
}
BAD_CHUNK = 3  # samples 12..15
# Every codec with every kind of damage: each policy test below runs over all of them.
EACH_DAMAGED_CHUNK = pytest.mark.parametrize(
    ("codec", "damage"), [(c, d) for c in sorted(CODECS) for d in sorted(DAMAGE)]
)


def _store(root: Path, codec: str, damage: str) -> tuple[LocalStore, np.ndarray]:
    data = np.arange(N * 15, dtype="f4").reshape(N, *SHAPE) + 1
    meta, encode = CODECS[codec]
    compressor = meta if codec in ("raw", "zstd") else [meta]
    write_array(root, "x", data, (CHUNK, *SHAPE), compressor=compressor)
    good = data[BAD_CHUNK * CHUNK : (BAD_CHUNK + 1) * CHUNK].tobytes()
    assert len(good) == CHUNK_BYTES
    (root / "x" / "c" / str(BAD_CHUNK) / "0" / "0").write_bytes(encode(DAMAGE[damage](good)))
    return LocalStore(root, read_only=True), data


def _dataset(store: LocalStore, policy: str) -> insitu.InSituDataset:
    g = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(g["x"], (1.0,))
    return insitu.InSituDataset(store, manifest, batch_size=4, shuffle=False, on_bad_chunk=policy)


@EACH_DAMAGED_CHUNK
def test_wrong_size_chunk_raises_naming_the_chunk(tmp_path: Path, codec: str, damage: str) -> None:
    store, _ = _store(tmp_path, codec, damage)
    with _dataset(store, "raise") as ds, pytest.raises(BadChunkError, match=rf"x/c/{BAD_CHUNK}/0/0.*size"):
        list(ds.train)


@EACH_DAMAGED_CHUNK
def test_wrong_size_chunk_becomes_nan_and_is_counted(tmp_path: Path, codec: str, damage: str) -> None:
    store, data = _store(tmp_path, codec, damage)
    with _dataset(store, "nan") as ds:
        batches = list(ds.train)
        assert ds.stats["bad_chunks"] == 1
    for b in batches:
        bad = (b.sample_indices // CHUNK) == BAD_CHUNK
        assert np.isnan(b["x"][bad]).all()
        np.testing.assert_array_equal(b["x"][~bad], data[b.sample_indices[~bad]])


@EACH_DAMAGED_CHUNK
def test_wrong_size_chunk_is_skipped_and_counted(tmp_path: Path, codec: str, damage: str) -> None:
    store, data = _store(tmp_path, codec, damage)
    with _dataset(store, "skip") as ds:
        batches = list(ds.train)
        assert ds.stats["bad_chunks"] == 1
        assert ds.stats["skipped_samples"] == CHUNK
    seen = np.concatenate([b.sample_indices for b in batches])
    np.testing.assert_array_equal(np.sort(seen), [i for i in range(N) if i // CHUNK != BAD_CHUNK])
    for b in batches:
        np.testing.assert_array_equal(b["x"], data[b.sample_indices])


def test_bad_chunks_are_counted_by_kind(tmp_path: Path) -> None:
    store, _ = _store(tmp_path, "zstd", "half")
    (tmp_path / "x" / "c" / "1" / "0" / "0").write_bytes(b"garbage that is no zstd frame")
    with _dataset(store, "skip") as ds:
        list(ds.train)
        stats = ds.stats
    assert stats["bad_chunks"] == 2
    assert stats["bad_chunks_size"] == 1  # chunk 3: a valid frame of half the size
    assert stats["bad_chunks_decode"] == 1  # chunk 1: not a frame at all
    assert stats["bad_chunks_read"] == 0


def test_nan_policy_is_refused_for_integer_arrays(tmp_path: Path) -> None:
    write_array(tmp_path, "counts", np.arange(40, dtype="i2").reshape(10, 4), (2, 4))
    store = LocalStore(tmp_path, read_only=True)
    g = insitu.open_geometries(store)
    with pytest.raises(insitu.ConfigError, match=r"integer array\(s\) \{'counts': 'int16'\}.*'skip'"):
        insitu.InSituDataset(store, insitu.split_by_chunk(g["counts"], (1.0,)), on_bad_chunk="nan")
