"""Regrid as a chunk transform: the contract (out_spec, fingerprint, pickling), errors that name
the value, the weight cache, and regridded batches through the insitu engine."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

import insitu
from insitu import ArrayGeometry, ConfigError
from insitu.testing import TransformConformance
from insitu_transforms.regrid import Grid, Regrid, cache, weights

SMALL = Grid.from_coords(np.linspace(-75, 75, 6), np.arange(0, 360, 72.0))  # 6x5, global in longitude


class TestRegridConformance(TransformConformance):
    def make_transform(self) -> Regrid:
        return Regrid(SMALL, "60deg", "bilinear", cache_dir=False)

    def make_other_transform(self) -> Regrid:
        return Regrid(SMALL, "60deg", "conservative", cache_dir=False)

    def expected_shape(self, block: np.ndarray) -> tuple[int, ...]:
        return (block.shape[0], 3, 6)


# -- the contract ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dtype", "out"),
    [
        ("float32", "float32"),
        ("float64", "float64"),
        ("float16", "float32"),
        ("int16", "float32"),
        ("uint8", "float32"),
    ],
)
def test_out_spec_keeps_leading_axes_and_declares_a_float_dtype(dtype: str, out: str) -> None:
    r = Regrid(Grid.regular(30), Grid.regular(60), "conservative", cache_dir=False)
    shape, got = r.out_spec((4, 3, 6, 12), np.dtype(dtype), name="t")
    assert shape == (4, 3, 3, 6)
    assert got == np.dtype(out)
    block = np.arange(4 * 3 * 6 * 12).reshape(4, 3, 6, 12).astype(dtype)
    result = r("t", block)
    assert result.shape == shape
    assert result.dtype == np.dtype(out)
    # Levels and samples are regridded independently: each field on its own.
    np.testing.assert_array_equal(result[2, 1], r("t", block[2:3, 1:2])[0, 0])


def test_a_source_grid_that_does_not_fit_the_array_is_an_error_naming_both_shapes() -> None:
    r = Regrid(Grid.regular("5.625deg"), "10deg", cache_dir=False)
    with pytest.raises(ConfigError, match=r"source grid is 32x64 but array 't2m' has lat/lon 721x1440"):
        r.out_spec((24, 721, 1440), np.dtype("float32"), name="t2m")
    with pytest.raises(ConfigError, match=r"source grid is 32x64 but array 'z' has lat/lon 64x32"):
        r("z", np.zeros((2, 64, 32), "float32"))
    with pytest.raises(ConfigError, match=r"last two axes.*shape \(32,\)"):
        r.out_spec((4, 32), np.dtype("float32"), name="v")
    with pytest.raises(ConfigError, match="real numbers"):
        r.out_spec((4, 32, 64), np.dtype("complex64"), name="c")


def test_bad_arguments_are_errors_naming_the_value() -> None:
    with pytest.raises(ConfigError, match=r"unknown regrid method 'cubic'"):
        Regrid(SMALL, "60deg", "cubic", cache_dir=False)
    with pytest.raises(ConfigError, match=r"bad grid resolution '1.5km'"):
        Regrid(SMALL, "1.5km", cache_dir=False)
    with pytest.raises(ConfigError, match=r"source must be a Grid"):
        Regrid("1deg", "60deg", cache_dir=False)  # type: ignore[arg-type]


def _geometry(dims: tuple[str, ...], shape: tuple[int, ...]) -> ArrayGeometry:
    coords = {
        "latitude": np.linspace(87.5, -87.5, 36),
        "longitude": np.arange(2.5, 360, 5.0),
        "level": np.arange(3.0),
    }
    return ArrayGeometry(
        name="t",
        path="t",
        shape=shape,
        dtype=np.dtype("f4"),
        chunk_shape=(2, *shape[1:]),
        dimension_names=dims,
        coords={d: coords[d] for d in dims if d in coords},
    )


def test_for_array_reads_the_grid_and_requires_lat_lon_last() -> None:
    geom = _geometry(("time", "level", "latitude", "longitude"), (8, 3, 36, 72))
    r = Regrid.for_array(geom, "15deg", "conservative", cache_dir=False)
    assert r.source is not None
    assert r.source.shape == (36, 72)
    assert r.out_spec((2, 3, 36, 72), np.dtype("f4"), name="t") == ((2, 3, 12, 24), np.dtype("f4"))
    box = Regrid.for_array(
        geom.sel(latitude=slice(60, 30), longitude=slice(350, 20)),
        Grid.from_coords([40.0, 50.0], [0.0, 10.0]),
    )
    assert box.source is not None
    assert box.source.shape == (6, 6)
    swapped = _geometry(("time", "longitude", "latitude"), (8, 72, 36))
    with pytest.raises(
        ConfigError, match=r"must be \('latitude', 'longitude'\) in that order.*\['longitude', 'latitude'\]"
    ):
        Regrid.for_array(swapped, "15deg")


def test_without_a_source_the_dataset_binds_one_per_array() -> None:
    template = Regrid(target="15deg", method="conservative", cache_dir=False)
    assert template.source is None
    assert "unbound" in template.fingerprint()
    with pytest.raises(ConfigError, match=r"no source grid for array 't'.*InSituDataset.*for_array"):
        template("t", np.zeros((1, 36, 72), "f4"))
    geom = _geometry(("time", "level", "latitude", "longitude"), (8, 3, 36, 72))
    bound = template.bind(geom)
    assert bound.source == Grid.from_geometry(geom)
    assert (
        bound.fingerprint() == Regrid.for_array(geom, "15deg", "conservative", cache_dir=False).fingerprint()
    )
    assert bound.bind(geom) is bound  # a Regrid with a source is kept as it is
    with pytest.raises(ConfigError, match="needs a target"):
        Regrid()
    with pytest.raises(ConfigError, match=r"must be \('lat', 'lon'\)"):
        Regrid(target="15deg", dims=("lat", "lon")).bind(geom)


def test_fingerprint_names_the_method_and_both_grids() -> None:
    source, target = Grid.regular(10), Grid.regular(30)
    fp = Regrid(source, target, "conservative", cache_dir=False).fingerprint()
    assert fp == f"Regrid/{weights.WEIGHTS_VERSION}(conservative;{source.digest};{target.digest})"
    assert fp == Regrid(Grid.regular("10deg"), "30deg", "conservative", cache_dir=False).fingerprint()
    others = {
        Regrid(source, target, "bilinear", cache_dir=False).fingerprint(),
        Regrid(source, Grid.regular(30, poles=True), "conservative", cache_dir=False).fingerprint(),
        Regrid(Grid.regular(10, lon_start=-180), target, "conservative", cache_dir=False).fingerprint(),
    }
    assert fp not in others
    assert len(others) == 3


def test_pickling_leaves_the_weights_behind() -> None:
    big = Regrid(Grid.regular(1), Grid.regular(2), "conservative", cache_dir=False)
    payload = pickle.dumps(big)
    assert len(payload) < 200_000  # grids only; the weights (~1.5 MB) are reloaded on the other side
    clone = pickle.loads(payload)
    block = np.random.default_rng(0).normal(size=(2, 180, 360)).astype("f4")
    np.testing.assert_array_equal(clone("x", block), big("x", block))


def test_concurrent_calls_agree() -> None:
    r = Regrid(Grid.regular(2), Grid.regular(5), "bilinear", cache_dir=False)
    clone = pickle.loads(pickle.dumps(r))  # weights not loaded yet: the threads race to load them
    block = np.random.default_rng(1).normal(size=(3, 90, 180))
    results: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: results.append(clone("x", block))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in results:
        np.testing.assert_array_equal(got, r("x", block))


def _masked_mean_reference(r: Regrid, block: np.ndarray) -> np.ndarray:
    """Per field, the weights of the valid cells renormalised, from the dense weight matrix."""
    w = r.weights.toarray()
    flat = block.reshape(-1, w.shape[1]).astype(np.float64)
    out = []
    for field in flat:
        valid = ~np.isnan(field)
        with np.errstate(invalid="ignore"):
            out.append((w[:, valid] @ field[valid]) / w[:, valid].sum(axis=1))
    return np.array(out).reshape(*block.shape[:-2], *r.target.shape)


@pytest.mark.parametrize("masks", ["one-field", "shared", "per-field"])
def test_nan_handling_whichever_fields_hold_nan(masks: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from insitu_transforms.regrid import apply

    r = Regrid(Grid.regular(10), Grid.regular(30), "conservative", cache_dir=False)
    rng = np.random.default_rng(3)
    block = rng.normal(size=(4, 2, 18, 36))
    land = rng.random((18, 36)) < 0.3
    if masks == "one-field":
        block[2, 1][land] = np.nan
    elif masks == "shared":
        block[:, :, land] = np.nan  # a land-sea mask: every field alike
    else:
        block[rng.random(block.shape) < 0.3] = np.nan
    block[0, 0, :3, [35, 0, 1]] = np.nan  # every source of target cell (0, 0), across the seam
    want = _masked_mean_reference(r, block)
    np.testing.assert_allclose(r("x", block), want, rtol=1e-12)
    assert np.isnan(r("x", block)[0, 0, 0, 0])
    monkeypatch.setattr(apply, "SCRATCH_BYTES", 8 * 18 * 36 * 3)  # three fields at a time: groups
    np.testing.assert_allclose(r("x", block), want, rtol=1e-12)


# -- the weight cache -----------------------------------------------------------------------------
def _forbid_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> None:
        raise AssertionError("weights were built instead of read from the cache")

    monkeypatch.setattr(weights, "build_weights", refuse)


def _count_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    built: list[str] = []
    real = weights.build_weights

    def counted(source: Grid, target: Grid, method: str) -> Any:
        built.append(method)
        return real(source, target, method)

    monkeypatch.setattr(weights, "build_weights", counted)
    return built


def test_a_second_construction_reads_the_weights_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = Regrid(Grid.regular(2), Grid.regular(3), "conservative", cache_dir=tmp_path)
    (path,) = tmp_path.glob("weights-*.npz")
    stamp = path.stat().st_mtime_ns
    cache.clear_memory()  # as if in a new process
    _forbid_builds(monkeypatch)
    second = Regrid(Grid.regular(2), Grid.regular(3), "conservative", cache_dir=tmp_path)
    assert (second.weights != first.weights).nnz == 0
    assert path.stat().st_mtime_ns == stamp  # read, not rewritten
    assert list(tmp_path.iterdir()) == [path]  # no temporary files left behind


def test_weights_are_built_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    built = _count_builds(monkeypatch)
    for _ in range(3):
        Regrid(Grid.regular(4), Grid.regular(9), "nearest", cache_dir=False)
    Regrid(Grid.regular(4), Grid.regular(9), "bilinear", cache_dir=False)
    assert built == ["nearest", "bilinear"]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "checksum", "other-key"])
def test_a_damaged_weights_file_is_rebuilt_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    source, target = Grid.regular(2), Grid.regular(3)
    good = Regrid(source, target, "conservative", cache_dir=tmp_path).weights
    (path,) = tmp_path.glob("weights-*.npz")
    raw = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"\x00not a zip file" * 100)
    elif damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    else:
        with np.load(path) as f:
            arrays = {k: f[k] for k in f.files}
        if damage == "checksum":
            arrays["data"] = arrays["data"] * 1.5  # plausible numbers, wrong weights
        else:
            meta = json.loads(str(arrays["meta"]))
            meta["key"] = "0" * 64
            arrays["meta"] = np.array(json.dumps(meta))
        with open(path, "wb") as out:
            np.savez(out, **arrays)
    cache.clear_memory()
    built = _count_builds(monkeypatch)
    again = Regrid(source, target, "conservative", cache_dir=tmp_path).weights
    assert built == ["conservative"]
    assert (again != good).nnz == 0
    cache.clear_memory()
    _forbid_builds(monkeypatch)  # the rewritten file is whole again
    Regrid(source, target, "conservative", cache_dir=tmp_path)


def test_cache_dir_defaults_to_the_user_cache_and_false_writes_nothing(tmp_path: Path) -> None:
    Regrid(Grid.regular(6), Grid.regular(12), cache_dir=False)
    assert not (tmp_path / "xdg").exists()
    Regrid(Grid.regular(6), Grid.regular(12), "nearest")
    assert len(list((tmp_path / "xdg" / "insitu" / "regrid").glob("weights-*.npz"))) == 1


def test_an_unwritable_cache_dir_costs_a_rebuild_not_a_failure(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    r = Regrid(Grid.regular(6), Grid.regular(12), cache_dir=blocked / "sub")
    assert r("x", np.ones((1, 30, 60))).shape == (1, 15, 30)


# -- through the insitu engine ----------------------------------------------------------------------
def write_store(root: Path) -> np.ndarray:
    """t2m (time=10, latitude=36 north first, longitude=72) at 5°, four samples per chunk."""
    group = zarr.open_group(root, mode="w", zarr_format=3)
    data = np.random.default_rng(0).normal(280, 10, size=(10, 36, 72)).astype("float32")
    arr = group.create_array(
        "t2m",
        shape=data.shape,
        chunks=(4, 36, 72),
        dtype="f4",
        dimension_names=("time", "latitude", "longitude"),
    )
    arr[...] = data
    for name, values in (("latitude", np.arange(87.5, -90, -5.0)), ("longitude", np.arange(2.5, 360, 5.0))):
        coord = group.create_array(
            name, shape=values.shape, chunks=values.shape, dtype="f8", dimension_names=(name,)
        )
        coord[...] = values
    return data


TARGET = Grid.regular(15, lon_start=7.5)  # cell edges on multiples of 15°: 3x3 source cells each


def block_mean_reference(data: np.ndarray) -> np.ndarray:
    """The exact area-weighted 3x3 block mean, from rows sorted south to north."""
    rows = data[:, ::-1].astype(np.float64)
    band = np.diff(np.sin(np.radians(np.linspace(-90, 90, 37))))
    total = (rows * band[:, None]).reshape(len(data), 12, 3, 24, 3).sum(axis=(2, 4))
    return total / (3 * band.reshape(12, 3).sum(axis=1))[:, None]


@pytest.mark.parametrize("how", ["for_array", "bound-by-the-dataset", "shared-chain"])
def test_batches_through_the_engine_are_regridded_once_per_chunk(tmp_path: Path, how: str) -> None:
    data = write_store(tmp_path / "data")
    calls: list[int] = []

    class Counted(Regrid):
        def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
            calls.append(block.shape[0])
            return super().__call__(name, block)

    store = LocalStore(tmp_path / "data", read_only=True)
    geoms = insitu.open_geometries(store)
    chain: Any
    if how == "for_array":
        chain = {"t2m": [Counted.for_array(geoms["t2m"], TARGET, "conservative", cache_dir=tmp_path / "w")]}
    else:  # a Regrid without a source, completed from the array's coordinates when the dataset binds it
        template = Counted(target=TARGET, method="conservative", cache_dir=tmp_path / "w")
        chain = {"t2m": [template]} if how == "bound-by-the-dataset" else [template]
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
    want = block_mean_reference(data)
    with insitu.InSituDataset(store, manifest, geoms, batch_size=3, chunk_transforms=chain) as ds:
        assert ds.train.sample_shapes == {"t2m": (12, 24)}
        assert ds.train.dtypes == {"t2m": np.dtype("float32")}
        seen = []
        for batch in ds.train:
            np.testing.assert_allclose(batch["t2m"], want[batch.sample_indices], rtol=1e-6)
            seen.extend(batch.sample_indices.tolist())
        assert sorted(seen) == list(range(10))
        assert sorted(calls) == [2, 4, 4]  # three chunks, the last one short, each transformed once
        for _ in ds.train:  # the pool holds every chunk: nothing is transformed again
            pass
        assert len(calls) == 3


RUN_SCRIPT = """
import json, sys
import numpy as np
import insitu
from insitu.testing import RecordingStore
from zarr.storage import LocalStore
from insitu_transforms.regrid import Grid, Regrid

root, cache, weights, out = sys.argv[1:5]
calls = []

class Counted(Regrid):
    def __call__(self, name, block):
        calls.append(block.shape[0])
        return super().__call__(name, block)

store = RecordingStore(LocalStore(root, read_only=True))
geoms = insitu.open_geometries(store)
regrid = Counted.for_array(geoms["t2m"], Grid.regular(15, lon_start=7.5), "conservative", cache_dir=weights)
manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
rows = {}
with insitu.InSituDataset(store, manifest, geoms, batch_size=3, cache_dir=cache, persist=True,
                          chunk_transforms={"t2m": [regrid]}) as ds:
    for b in ds.train:
        for i, row in zip(b.sample_indices.tolist(), b["t2m"]):
            rows[i] = row
np.save(out, np.stack([rows[i] for i in sorted(rows)]))
reads = sum(n for key, n in store.chunk_gets().items() if key.startswith("t2m/"))
print(json.dumps({"calls": len(calls), "reads": reads}))
"""


def _run_in_new_process(tmp_path: Path, out: Path) -> dict[str, int]:
    args = [sys.executable, "-c", textwrap.dedent(RUN_SCRIPT)]
    args += [str(tmp_path / "data"), str(tmp_path / "cache"), str(tmp_path / "weights"), str(out)]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_a_persisted_cache_of_regridded_chunks_is_reused_by_a_new_process(tmp_path: Path) -> None:
    data = write_store(tmp_path / "data")
    assert _run_in_new_process(tmp_path, tmp_path / "first.npy") == {"calls": 3, "reads": 3}
    assert _run_in_new_process(tmp_path, tmp_path / "second.npy") == {"calls": 0, "reads": 0}
    first, second = np.load(tmp_path / "first.npy"), np.load(tmp_path / "second.npy")
    np.testing.assert_array_equal(second, first)
    np.testing.assert_allclose(first, block_mean_reference(data), rtol=1e-6)
    assert len(list((tmp_path / "weights").glob("weights-*.npz"))) == 1
