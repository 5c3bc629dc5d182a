"""Chunk transforms that change dtype and shape, pool slots sized for their output, and a
persisted cache whose identity is per array and stable across processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import CountingStore, field, write_array
from zarr.storage import LocalStore

import insitu
from insitu.arrays.transforms import transform_fingerprint
from insitu.errors import ConfigError, StaleCacheError


class HalfFloat:
    """float32 -> float16: half the pool memory."""

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        return block.astype(np.float16)

    def out_spec(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[tuple[int, ...], Any]:
        return shape, np.float16


class Coarsen2:
    """2x2 block mean over the two dimensions after the sample axis."""

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        n, h, w = block.shape
        return block.reshape(n, h // 2, 2, w // 2, 2).mean(axis=(2, 4), dtype=np.float32)

    def out_spec(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[tuple[int, ...], Any]:
        return (shape[0], shape[1] // 2, shape[2] // 2), np.float32


class Unpack:
    """int16 packed data -> float32 physical values (scale, offset), fill -> NaN."""

    def __init__(self, scale: float, offset: float, fill: int) -> None:
        self.scale, self.offset, self.fill = scale, offset, fill

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        out = block.astype(np.float32) * np.float32(self.scale) + np.float32(self.offset)
        out[block == self.fill] = np.nan
        return out

    def out_spec(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[tuple[int, ...], Any]:
        return shape, np.float32


class WidensLargeValues:
    """float32 -> float64 only for slabs holding a value above 100: its output depends on the values,
    which a probe on zeros cannot see."""

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        return block.astype(np.float64) if block.max() > 100 else block


class TrimsLargeValues:
    """Drops the last column of slabs holding a value above 100: a shape that depends on the values."""

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        return block[..., :-1] if block.max() > 100 else block


class DropsSamples:
    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        return block[::2]

    def out_spec(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[tuple[int, ...], Any]:
        return (shape[0] // 2, *shape[1:]), dtype


def _iterate_all(ds: insitu.InSituDataset) -> list[insitu.Batch]:
    return [b for split in ds.manifest.names for b in ds.view(split)]


@pytest.fixture
def grid(tmp_path: Path) -> tuple[Path, np.ndarray]:
    data = field(30, (4, 6), seed=3)
    write_array(tmp_path, "x", data, (4, 4, 6))
    return tmp_path, data


def _open(root: Path, **kwargs: Any) -> insitu.InSituDataset:
    store = CountingStore(LocalStore(root, read_only=True))
    g = insitu.open_geometries(store)
    return insitu.InSituDataset(store, insitu.split_by_chunk(g["x"], (0.6, 0.4)), batch_size=5, **kwargs)


@pytest.mark.parametrize(
    ("transform", "reference", "dtype", "shape"),
    [
        (HalfFloat(), lambda a: a.astype(np.float16), np.float16, (4, 6)),
        (Coarsen2(), lambda a: Coarsen2()("x", a), np.float32, (2, 3)),
    ],
    ids=["cast-float16", "coarsen-2x"],
)
@pytest.mark.parametrize("budget", ["auto", 0], ids=["pooled", "streamed"])
def test_transform_that_changes_dtype_or_shape_runs_through_the_engine(
    grid: tuple[Path, np.ndarray],
    transform: Any,
    reference: Any,
    dtype: Any,
    shape: tuple[int, ...],
    budget: Any,
) -> None:
    root, data = grid
    with _open(root, chunk_transforms=[transform], cache_budget_bytes=budget) as ds:
        assert ds.train.dtypes == {"x": np.dtype(dtype)}
        assert ds.train.sample_shapes == {"x": shape}
        apool = ds.pool.arrays["x"]
        assert apool.arena.dtype == np.dtype(dtype)
        assert apool.arena.shape[1:] == shape
        assert apool.slot_nbytes == 4 * int(np.prod(shape)) * np.dtype(dtype).itemsize
        seen = []
        for b in _iterate_all(ds):
            assert b["x"].dtype == np.dtype(dtype)
            assert b["x"].shape[1:] == shape
            np.testing.assert_array_equal(b["x"], reference(data[b.sample_indices]))
            seen.append(b.sample_indices)
        assert sorted(np.concatenate(seen).tolist()) == list(range(30))
        assert ds.stats["slabs_streamed" if budget == 0 else "slabs_loaded"] == 8


def test_a_float16_pool_holds_twice_the_slabs_of_a_float32_pool(grid: tuple[Path, np.ndarray]) -> None:
    root, _ = grid
    budget = 4 * 4 * 6 * 4 * 4  # four float32 slabs
    with (
        _open(root, cache_budget_bytes=budget) as plain,
        _open(root, cache_budget_bytes=budget, chunk_transforms=[HalfFloat()]) as half,
    ):
        assert half.pool.arrays["x"].n_slots == 2 * plain.pool.arrays["x"].n_slots


@pytest.mark.parametrize("budget", ["auto", 0], ids=["pooled", "streamed"])
def test_int16_packed_values_decode_to_float32(tmp_path: Path, budget: Any) -> None:
    rng = np.random.default_rng(0)
    packed = rng.integers(-3000, 3000, size=(24, 3, 5), dtype=np.int16)
    packed[3, 1, 1] = packed[17, 0, 4] = -32767
    write_array(tmp_path, "t", packed, (6, 3, 5))
    unpack = Unpack(0.01, 273.15, -32767)
    store = LocalStore(tmp_path, read_only=True)
    g = insitu.open_geometries(store)
    with insitu.InSituDataset(
        store,
        insitu.split_by_chunk(g["t"], (1.0,)),
        batch_size=4,
        chunk_transforms={"t": [unpack]},
        cache_budget_bytes=budget,
    ) as ds:
        assert ds.train.dtypes == {"t": np.dtype(np.float32)}
        batches = list(ds.train)
    for b in batches:
        np.testing.assert_array_equal(b["t"], unpack("t", packed[b.sample_indices]))
    got = np.concatenate([b["t"] for b in batches])
    assert np.isnan(got).sum() == 2


@pytest.mark.parametrize("budget", ["auto", 0], ids=["pooled", "streamed"])
@pytest.mark.parametrize(
    ("transform", "differs"), [(WidensLargeValues(), "float64"), (TrimsLargeValues(), "(4, 4, 5)")]
)
def test_a_transform_whose_output_differs_from_the_probe_is_an_error_naming_it_and_the_array(
    grid: tuple[Path, np.ndarray], budget: Any, transform: Any, differs: str
) -> None:
    root, _ = grid  # samples from 10 on hold values above 100: the first slab passes, later ones differ
    with _open(root, chunk_transforms=[transform], cache_budget_bytes=budget) as ds:
        assert ds.train.dtypes == {"x": np.dtype(np.float32)}  # what the probe on zeros found
        assert ds.train.sample_shapes == {"x": (4, 6)}
        with pytest.raises(ConfigError) as err:
            list(ds.train)
    msg = str(err.value)
    assert type(transform).__name__ in msg
    assert "'x'" in msg
    assert "out_spec" in msg
    assert "zeros" in msg
    assert differs in msg


def test_changing_the_sample_axis_length_is_refused_at_construction(grid: tuple[Path, np.ndarray]) -> None:
    root, _ = grid
    with pytest.raises(ConfigError, match=r"DropsSamples.*sample-axis length 4"):
        _open(root, chunk_transforms=[DropsSamples()])


def test_each_chunk_is_transformed_once_per_epoch_and_not_again_when_cached(
    grid: tuple[Path, np.ndarray],
) -> None:
    root, _ = grid
    calls: list[int] = []

    class Counted(Coarsen2):
        def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
            calls.append(block.shape[0])
            return super().__call__(name, block)

    with _open(root, chunk_transforms=[Counted()]) as ds:
        _iterate_all(ds)
        assert len(calls) == 8  # 30 samples in chunks of 4: 8 chunks, the last one of 2 rows
        assert sorted(calls) == [2] + [4] * 7
        _iterate_all(ds)  # everything cached: no chunk transformed twice
        assert len(calls) == 8


# -- plain callables: the output found by probing ------------------------------------------------------
def mean_last(name: str, block: np.ndarray) -> np.ndarray:
    return block.mean(axis=-1)


def half(name: str, block: np.ndarray) -> np.ndarray:
    return block.astype("float16")


def to_3x4(name: str, block: np.ndarray) -> np.ndarray:
    return block.reshape(block.shape[0], 3, 4)


def to_4x6(name: str, block: np.ndarray) -> np.ndarray:
    return block.reshape(-1, 4, 6)


def _chain(*fns: Any) -> Any:
    def apply(a: np.ndarray) -> np.ndarray:
        for f in fns:
            a = f("x", a)
        return a

    return apply


PLAIN = {
    # name: (source sample shape, chain, delivered dtype, delivered sample shape)
    "mean-last-axis": ((3, 4), [mean_last], np.float32, (3,)),
    "cast-float16": ((4, 6), [half], np.float16, (4, 6)),
    "reshape-12-to-3x4": ((12,), [to_3x4], np.float32, (3, 4)),
    "plain-declared-plain": ((24,), [to_4x6, Coarsen2(), half], np.float16, (2, 3)),
    "lambda-mean": ((3, 4), [lambda label, block: block.mean(axis=-1)], np.float32, (3,)),
}


@pytest.mark.parametrize("case", list(PLAIN))
@pytest.mark.parametrize("budget", ["auto", 0], ids=["pooled", "streamed"])
def test_a_plain_callable_that_changes_shape_or_dtype_runs_without_out_spec(
    tmp_path: Path, case: str, budget: Any
) -> None:
    sample_shape, chain, dtype, shape = PLAIN[case]
    write_array(tmp_path, "x", field(30, sample_shape, seed=5), (4, *sample_shape))
    source = np.asarray(zarr.open_array(LocalStore(tmp_path, read_only=True), path="x", mode="r")[...])
    with _open(tmp_path, chunk_transforms=chain, cache_budget_bytes=budget) as ds:
        assert ds.train.dtypes == {"x": np.dtype(dtype)}
        assert ds.train.sample_shapes == {"x": shape}
        apool = ds.pool.arrays["x"]  # slots sized for the probed output
        assert apool.arena.dtype == np.dtype(dtype)
        assert apool.arena.shape[1:] == shape
        assert apool.slot_nbytes == 4 * int(np.prod(shape)) * np.dtype(dtype).itemsize
        seen = []
        for b in _iterate_all(ds):
            assert b["x"].dtype == np.dtype(dtype)
            np.testing.assert_array_equal(b["x"], _chain(*chain)(source[b.sample_indices]))
            seen.append(b.sample_indices)
    assert sorted(np.concatenate(seen).tolist()) == list(range(30))


@pytest.mark.parametrize(
    "drops",
    [
        lambda name, block: block[::2],
        lambda name, block: block.sum(axis=0),  # (4, 4, 6) -> (4, 6): four rows, but not samples
        lambda name, block: block.reshape(-1),
        lambda name, block: float(block.mean()),
    ],
    ids=["every-other", "sum-over-samples", "flatten", "scalar"],
)
def test_a_plain_callable_that_changes_the_number_of_samples_is_refused_with_why(
    grid: tuple[Path, np.ndarray], drops: Any
) -> None:
    root, _ = grid
    with pytest.raises(ConfigError) as err:
        _open(root, chunk_transforms=[drops])
    msg = str(err.value)
    assert "<lambda>" in msg
    assert "'x'" in msg
    assert "changes the number of samples" in msg
    assert "sample-axis length 4" in msg
    assert "addressed by their index" in msg


def test_a_plain_callable_that_fails_on_the_probe_is_refused_naming_out_spec(
    grid: tuple[Path, np.ndarray],
) -> None:
    root, _ = grid

    def needs_data(name: str, block: np.ndarray) -> np.ndarray:
        if not block.any():
            raise ValueError("an empty slab")
        return block

    with pytest.raises(ConfigError, match=r"needs_data.*'x'.*zeros.*an empty slab.*define out_spec"):
        _open(root, chunk_transforms=[needs_data])
    needs_data.out_spec = lambda shape, dtype: (shape, dtype)  # type: ignore[attr-defined]
    with _open(root, chunk_transforms=[needs_data]) as ds:  # declared: not probed
        assert len(list(ds.train)) > 0


def test_a_static_field_takes_a_plain_callable(tmp_path: Path) -> None:
    write_array(tmp_path, "x", field(12, (3, 4), seed=1), (4, 3, 4), dimension_names=("time", "lat", "lon"))
    mask = np.arange(12, dtype="f4").reshape(3, 4)
    write_array(tmp_path, "land", mask, (3, 4), dimension_names=("lat", "lon"))
    store = LocalStore(tmp_path, read_only=True)
    g = insitu.open_geometries(store, include_static=True)
    assert g["land"].static
    with insitu.InSituDataset(
        store, insitu.split_by_chunk(g["x"], (1.0,)), g, batch_size=4, chunk_transforms=[mean_last]
    ) as ds:
        b = next(iter(ds.train))
    np.testing.assert_array_equal(b["land"], mean_last("land", mask[np.newaxis]))  # delivered as (1, 3)
    assert b["x"].shape == (4, 3)


# -- fingerprints ------------------------------------------------------------------------------------
def scale_by_two(name: str, block: np.ndarray) -> np.ndarray:
    return block * 2


def test_fingerprint_of_a_plain_function_holds_no_memory_address() -> None:
    fp = transform_fingerprint(scale_by_two)
    assert "0x" not in fp
    assert fp.startswith(f"{__name__}.scale_by_two#")
    assert transform_fingerprint(HalfFloat()) == transform_fingerprint(HalfFloat())
    assert transform_fingerprint(Unpack(0.01, 0, -1)) != transform_fingerprint(Unpack(0.02, 0, -1))


def test_an_unpicklable_transform_without_fingerprint_is_refused_for_persistence(
    grid: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    root, _ = grid

    class HoldsALock:
        def __init__(self) -> None:
            import threading

            self.lock = threading.Lock()

        def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
            return block

    with pytest.raises(ConfigError, match="define a fingerprint"):
        _open(root, cache_dir=tmp_path / "c", persist=True, chunk_transforms=[HoldsALock()])


TRANSFORMS_MODULE = """
import numpy as np

def offset(name, block):
    return block + 1

def mean_last(name, block):
    return block.mean(axis=-1)

class Scale:
    def __init__(self, k):
        self.k = k
    def __call__(self, name, block):
        return block * self.k
"""

RUN_SCRIPT = """
import json, sys
import numpy as np
import insitu
from insitu.testing import RecordingStore
from zarr.storage import LocalStore
import user_transforms as ut

root, cache, k, arrays = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4].split(",")
store = RecordingStore(LocalStore(root, read_only=True))
geoms = insitu.open_geometries(store, variables=arrays)
manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
transforms = {{"x": [ut.offset], "y": [ut.Scale(k)], "z": [ut.mean_last]}}
transforms = {{a: t for a, t in transforms.items() if a in arrays}}
persist = sys.argv[5] if len(sys.argv) > 5 else True
with insitu.InSituDataset(store, manifest, geoms, batch_size=4, cache_dir=cache, persist=persist,
                          chunk_transforms=transforms) as ds:
    for b in ds.train:
        for a in arrays:
            src = np.asarray(__import__("zarr").open_array(LocalStore(root, read_only=True), path=a, mode="r")[...])
            want = {{"x": src + 1, "y": src * k, "z": src.mean(axis=-1)}}[a][b.sample_indices]
            np.testing.assert_array_equal(b[a], want.astype(b[a].dtype))
reads = {{a: sum(n for key, n in store.chunk_gets().items() if key.startswith(a + "/")) for a in arrays}}
print(json.dumps(reads))
"""


@pytest.fixture
def two_arrays(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    for name, seed in (("x", 1), ("y", 2), ("z", 3)):
        write_array(root, name, field(16, (3, 4), seed=seed), (4, 3, 4))
    (tmp_path / "user_transforms.py").write_text(TRANSFORMS_MODULE)
    return root


def _run_in_new_process(root: Path, cache: Path, k: float, arrays: str, persist: str = "") -> dict[str, int]:
    args = [sys.executable, "-c", textwrap.dedent(RUN_SCRIPT.format()), str(root), str(cache), str(k), arrays]
    if persist:
        args.append(persist)
    proc = subprocess.run(args, capture_output=True, text=True, cwd=root.parent, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_persisted_cache_with_plain_transforms_is_reused_by_a_new_process(
    two_arrays: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    assert _run_in_new_process(two_arrays, cache, 2.0, "x,y") == {"x": 4, "y": 4}
    assert _run_in_new_process(two_arrays, cache, 2.0, "x,y") == {"x": 0, "y": 0}


def test_persisted_cache_of_a_probed_output_is_reused_by_a_new_process(
    two_arrays: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    assert _run_in_new_process(two_arrays, cache, 2.0, "x,z") == {"x": 4, "z": 4}
    index = json.loads((cache / "index.json").read_text())
    assert index["arrays"]["z"]["slot_shape"] == [4, 3]  # (16, 3, 4) in chunks of 4, mean over the last axis
    assert index["arrays"]["z"]["dtype"] == np.dtype(np.float32).str
    assert _run_in_new_process(two_arrays, cache, 2.0, "x,z") == {"x": 0, "z": 0}


@pytest.mark.slow
def test_cache_invalidation_is_per_array(two_arrays: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _run_in_new_process(two_arrays, cache, 2.0, "x,y")
    # Another parameter for y's transform: y's cached chunks are refused, x's stay valid...
    root = two_arrays
    store = LocalStore(root, read_only=True)
    g = insitu.open_geometries(store, variables=["x", "y"])
    sys.path.insert(0, str(root.parent))
    try:
        import user_transforms as ut  # type: ignore[import-not-found]

        with pytest.raises(StaleCacheError, match=r"array 'y'.*transforms differ"):
            insitu.InSituDataset(
                store,
                insitu.split_by_chunk(g["x"], (1.0,)),
                g,
                cache_dir=cache,
                persist=True,
                chunk_transforms={"x": [ut.offset], "y": [ut.Scale(3.0)]},
            )
    finally:
        sys.path.remove(str(root.parent))
        sys.modules.pop("user_transforms", None)
    # ...and rebuilding re-reads y alone.
    assert _run_in_new_process(two_arrays, cache, 3.0, "x,y", "rebuild") == {"x": 0, "y": 4}
    assert _run_in_new_process(two_arrays, cache, 3.0, "x,y") == {"x": 0, "y": 0}
    # A variable added to the dataset is read; the others stay cached.
    assert _run_in_new_process(two_arrays, cache, 3.0, "x,y,z") == {"x": 0, "y": 0, "z": 4}
    # A dataset of fewer variables keeps the others' cached chunks for later.
    assert _run_in_new_process(two_arrays, cache, 3.0, "x") == {"x": 0}
    assert _run_in_new_process(two_arrays, cache, 3.0, "x,y,z") == {"x": 0, "y": 0, "z": 0}
