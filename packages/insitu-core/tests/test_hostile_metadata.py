"""Hostile or broken array metadata, written by hand: each is refused naming the array, the value
and the limit; default discovery skips such an array with a warning and still reads the others."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import insitu
from insitu.errors import ConfigError, MetadataError


def _v3(
    root: Path, name: str, shape: list[int], chunks: list[int], dtype: str = "float32", **extra: Any
) -> None:
    (root / name).mkdir(parents=True)
    meta = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        **extra,
    }
    (root / name / "zarr.json").write_text(json.dumps(meta))


def _v2(root: Path, name: str, shape: list[int], chunks: list[int]) -> None:
    (root / name).mkdir(parents=True)
    zarray = {
        "zarr_format": 2,
        "shape": shape,
        "chunks": chunks,
        "dtype": "<f4",
        "compressor": None,
        "fill_value": 0.0,
        "filters": None,
        "order": "C",
    }
    (root / name / ".zarray").write_text(json.dumps(zarray))


# (how the hostile array is written, what the error must say)
HOSTILE = {
    "1e15 samples": (
        lambda r: _v3(r, "bad", [10**15, 4], [1, 4]),
        r"array 'bad' has 1,000,000,000,000,000 chunks along its sample axis .* at most 2,147,483,648 \(2\*\*31\)",
    ),
    "1e18 chunks per slab": (
        lambda r: _v3(r, "bad", [2, 10**9, 10**9], [1, 1, 1], dtype="uint8"),
        r"array 'bad' has 1,000,000,000,000,000,000 chunks per sample chunk .* at most 1,048,576 \(2\*\*20\)",
    ),
    "int64 overflow": (
        lambda r: _v3(r, "bad", [10, 2**40, 2**40], [1, 2**40, 2**40]),
        r"array 'bad' holds 48,357,032,784,585,166,988,247,040 bytes .* \(9,223,372,036,854,775,807 bytes",
    ),
    "negative chunk": (
        lambda r: _v3(r, "bad", [10, 4], [-1, 4]),
        # zarr's own words differ by version (3.1: "non-negative", 3.4: "edge length must be >= 1").
        r"'bad' .*(non-negative. Got \[-1, 4\]|chunk edge length must be >= 1, got -1)",
    ),
    "negative shape": (lambda r: _v3(r, "bad", [-10, 4], [1, 4]), r"'bad' .*non-negative. Got \[-10, 4\]"),
    "v2 chunk 0": (
        lambda r: _v2(r, "bad", [10, 4], [0, 4]),
        r"array 'bad': chunk shape must be a sequence of positive integers, got \(0, 4\)",
    ),
}


def _zarr_repairs_chunk_zero(tmp_path: Path) -> bool:
    """zarr >= 3.4 reads a stored v2 chunk size of 0 as 1, with its own warning (the array can only
    hold its fill value): then nothing impossible is left for insitu to refuse."""
    root = tmp_path / "probe.zarr"
    zarr.open_group(str(root), mode="w", zarr_format=2)
    _v2(root, "a", [10, 4], [0, 4])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return tuple(zarr.open_array(str(root / "a"), mode="r").chunks) == (1, 4)
    except Exception:
        return False


def _hostile_or_repaired(tmp_path: Path, case: str) -> bool:
    """True when the case is still hostile under this zarr; False when zarr repairs it on read (and
    then insitu reads what zarr reads: checked by the caller)."""
    return not (case == "v2 chunk 0" and _zarr_repairs_chunk_zero(tmp_path))


def _store(tmp_path: Path, case: str, with_good: bool) -> Any:
    write, _ = HOSTILE[case]
    root = tmp_path / "store.zarr"
    v2 = case.startswith("v2")
    zarr.open_group(str(root), mode="w", zarr_format=2 if v2 else 3)
    write(root)
    if with_good:
        good = zarr.open_group(str(root), mode="a").create_array(
            "good", shape=(8, 2), chunks=(2, 2), dtype="f4"
        )
        good[...] = np.arange(16, dtype="f4").reshape(8, 2)
    return insitu.open_store(root)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_array_named_in_variables_is_refused_naming_it(tmp_path: Path, case: str) -> None:
    store = _store(tmp_path, case, with_good=True)
    if not _hostile_or_repaired(tmp_path, case):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert insitu.open_geometries(store, ["bad"])["bad"].chunk_shape == (1, 4)
        return
    with pytest.raises(MetadataError, match=HOSTILE[case][1]):
        insitu.open_geometries(store, ["bad"])


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_default_discovery_skips_a_hostile_array_with_a_warning(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = _store(tmp_path, case, with_good=True)
    if not _hostile_or_repaired(tmp_path, case):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert sorted(insitu.open_geometries(store)) == ["bad", "good"]
        return
    with caplog.at_level(logging.WARNING, logger="insitu"):
        geoms = insitu.open_geometries(store)
    assert list(geoms) == ["good"]
    assert "bad" in geoms.skipped
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("skipped array 'bad'" in m for m in warned), warned
    manifest = insitu.split_by_chunk(geoms["good"], (1.0,))
    with insitu.InSituDataset(store, manifest, batch_size=4) as ds:
        assert sorted(i for b in ds.train for i in b.sample_indices.tolist()) == list(range(8))


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_no_array_matches_says_what_was_skipped_and_why(tmp_path: Path, case: str) -> None:
    store = _store(tmp_path, case, with_good=False)
    if not _hostile_or_repaired(tmp_path, case):
        pytest.skip("this zarr reads a chunk size of 0 as 1: the array is readable, nothing to skip")
    with pytest.raises(ConfigError, match=r"no array in the store matches .*skipped: \{'bad': ") as info:
        insitu.open_geometries(store)
    assert "skipped" in str(info.value)


def test_a_dimension_named_dotdot_does_not_make_the_store_unopenable(tmp_path: Path) -> None:
    root = tmp_path / "store.zarr"
    zarr.open_group(str(root), mode="w")
    _v3(root, "a", [8, 2], [2, 2], dimension_names=["time", ".."])
    store = insitu.open_store(root)
    geoms = insitu.open_geometries(store)
    assert geoms["a"].dimension_names == ("time", "..")
    manifest = insitu.split_by_chunk(geoms["a"], (1.0,))
    with insitu.InSituDataset(store, manifest, batch_size=4) as ds:
        assert sum(len(b.sample_indices) for b in ds.train) == 8
