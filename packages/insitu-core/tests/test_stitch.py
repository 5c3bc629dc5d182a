"""Stitched inference: what a user writing a model's outputs back over a whole array relies on.

Stitching the input patches themselves gives the source back exactly (overlapping grids, shift
and pad edges, 2-D and 3-D with a time axis, mean and taper blends), blends follow their
documented windows, every output chunk is written once (counted at the store), the chunks held
at once never exceed what the pass order needs, and wrong outputs or an early close are refused
by name.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.abc.store import ByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import LocalStore, MemoryStore, WrapperStore

import insitu
from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError, IncompleteStitchError
from insitu.plan.patches_spec import PatchSpec
from insitu.plan.stitch_layout import StitchLayout
from insitu.stitch import taper_window


class CountingStore(WrapperStore[Any]):
    """Counts every write (set, delete) per key."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.writes: Counter[str] = Counter()

    async def set(self, key: str, value: Buffer) -> None:
        self.writes[key] += 1
        await super().set(key, value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        self.writes[key] += 1
        await super().set_if_not_exists(key, value)

    async def delete(self, key: str) -> None:
        self.writes[key] += 1
        await super().delete(key)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        return await super().get(key, prototype, byte_range)

    def chunk_writes(self, name: str) -> Counter[str]:
        return Counter(
            {k: n for k, n in self.writes.items() if k.startswith(f"{name}/") and "zarr.json" not in k}
        )


def _source(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _dataset(
    tmp_path: Path, src: np.ndarray, chunks: tuple[int, ...], dims: tuple[str, ...], **kwargs: Any
) -> insitu.InSituDataset:
    root = tmp_path / "data.zarr"
    z = zarr.open_array(
        str(root), path="v", mode="w", shape=src.shape, chunks=chunks, dtype=src.dtype, dimension_names=dims
    )
    z[:] = src
    store = insitu.open_store(str(root))
    g = insitu.open_geometries(store)["v"]
    manifest = insitu.split_by_chunk(g, fractions=(1.0,), names=("train",))
    kwargs.setdefault("batch_size", 8)
    return insitu.InSituDataset(store, manifest, geometries=[g], **kwargs)


def _stitch(view: Any, out: Any, outputs: Any = None, **kwargs: Any) -> insitu.PatchStitcher:
    with insitu.PatchStitcher(out, "pred", view=view, **kwargs) as st:
        for batch in view:
            st.add(batch, batch["v"] if outputs is None else outputs(batch))
    return st


def _chunk_keys(shape: tuple[int, ...], unit: tuple[int, ...], touched: np.ndarray) -> set[str]:
    """The store keys of the output chunks holding any element where ``touched``."""
    keys = set()
    for index in itertools.product(*(range(-(-n // u)) for n, u in zip(shape, unit, strict=True))):
        box = tuple(slice(i * u, (i + 1) * u) for i, u in zip(index, unit, strict=True))
        if touched[box].any():
            keys.add("pred/c/" + "/".join(map(str, index)))
    return keys


CASES = {
    # name: (shape, stored chunks, dims, patch, stride, output chunks)
    "raster-2d": ((100, 130), (32, 40), ("y", "x"), {"y": 24, "x": 24}, {"y": 16, "x": 17}, None),
    "raster-2d-other-chunks": (
        (100, 130),
        (32, 40),
        ("y", "x"),
        {"y": 24, "x": 24},
        {"y": 20, "x": 13},
        (25, 50),
    ),
    "time-lat-lon": (
        (5, 50, 70),
        (2, 16, 32),
        ("time", "lat", "lon"),
        {"lat": 20, "lon": 24},
        {"lat": 12, "lon": 16},
        None,
    ),
    "volume-z-named": (
        (20, 33, 35),
        (8, 16, 16),
        ("z", "y", "x"),
        {"z": 6, "y": 12, "x": 12},
        {"z": 4, "y": 9, "x": 8},
        None,
    ),
}


@pytest.mark.parametrize("blend", ["mean", "taper"])
@pytest.mark.parametrize("edge", ["shift", "pad"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_stitching_the_input_patches_gives_the_source_back_writing_each_chunk_once(
    tmp_path: Path, case: str, edge: str, blend: str
) -> None:
    shape, chunks, dims, patch, stride, out_chunks = CASES[case]
    src = _source(shape)
    ds = _dataset(tmp_path, src, chunks, dims, patch=patch, patch_stride=stride, patch_edge=edge)
    out = CountingStore(MemoryStore())
    st = _stitch(ds.all, out, blend=blend, chunks=out_chunks)
    result = zarr.open_array(out, path="pred")[:]
    np.testing.assert_array_equal(result, src)
    assert result.dtype == np.float32
    unit = out_chunks or chunks
    writes = out.chunk_writes("pred")
    assert set(writes.values()) == {1}, f"written more than once: {[k for k, n in writes.items() if n > 1]}"
    assert set(writes) == _chunk_keys(shape, unit, np.ones(shape, dtype=bool))  # every chunk, once
    p = st.progress
    assert p.done
    assert (p.patches_added, p.chunks_written) == (p.patches_total, len(writes))
    assert p.patches_total == len(ds.all.patch_order())
    assert (p.chunks_in_progress, p.bytes_in_progress) == (0, 0)
    ds.close()


def test_the_output_array_takes_the_reference_shape_chunks_and_dimension_names(tmp_path: Path) -> None:
    src = _source((5, 50, 70))
    ds = _dataset(tmp_path, src, (2, 16, 32), ("time", "lat", "lon"), patch={"lat": 20, "lon": 24})
    st = insitu.PatchStitcher(tmp_path / "out.zarr", "pred", view=ds.all)
    arr = zarr.open_array(str(tmp_path / "out.zarr"), path="pred")
    assert (arr.shape, arr.chunks, arr.dtype) == ((5, 50, 70), (2, 16, 32), np.float32)
    assert arr.metadata.zarr_format == 3
    assert arr.metadata.dimension_names == ("time", "lat", "lon")
    assert np.isnan(arr.fill_value)
    assert st.row_shape == (20, 24)
    st.discard()
    ds.close()


def _bound(order: np.ndarray, batch_size: int, touched: Any) -> int:
    """The most output chunks a stitcher must hold at once for this order, batch by batch: those
    touched by a patch of this batch or an earlier one and by one of this batch or a later one."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, origin in enumerate(order):
        for u in touched(origin):
            first.setdefault(u, i // batch_size)
            last[u] = i // batch_size
    n_batches = -(-len(order) // batch_size)
    return max(sum(1 for u in first if first[u] <= k <= last[u]) for k in range(n_batches))


@pytest.mark.parametrize("view_name", ["all", "train"])  # natural order; blocks shuffled
def test_the_chunks_held_never_exceed_what_the_pass_order_needs(tmp_path: Path, view_name: str) -> None:
    src = _source((1, 256, 256))
    box, unit = (1, 24, 24), (1, 32, 32)
    ds = _dataset(
        tmp_path,
        src,
        unit,
        ("t", "y", "x"),
        patch={"y": 24, "x": 24},
        patch_stride={"y": 16, "x": 16},
        block_chunks=4,
        batch_size=16,
    )
    view = ds.view(view_name)

    def touched(origin: np.ndarray) -> list[int]:
        ranges = [
            range(o // u, (min(o + b, n) - 1) // u + 1)
            for o, b, u, n in zip(origin.tolist(), box, unit, src.shape, strict=True)
        ]
        return [int(np.ravel_multi_index(c, (1, 8, 8))) for c in itertools.product(*ranges)]

    bound = _bound(view.patch_order(), 16, touched)
    assert bound < 64  # fewer than the array's 64 chunks: they are written as they complete
    held = []
    st = insitu.PatchStitcher(MemoryStore(), "pred", view=view)
    for batch in view:
        st.add(batch, batch["v"])
        held.append(st.progress.chunks_in_progress)
    st.close()
    p = st.progress
    assert max(held) <= p.peak_chunks_in_progress == bound
    # what a chunk in progress costs: float64 value and weight sums of its elements
    assert p.peak_bytes_in_progress == bound * 32 * 32 * 16
    np.testing.assert_array_equal(zarr.open_array(st.array.store, path="pred")[:], src)
    ds.close()


@st.composite
def _grids(draw: st.DrawFn) -> tuple[Any, tuple[int, ...]]:
    shape = tuple(draw(st.integers(1, 40)) for _ in range(3))
    chunks = tuple(draw(st.integers(1, n + 3)) for n in shape)
    named = {d: draw(st.integers(1, n)) for d, n in zip("tyx", shape, strict=True) if draw(st.booleans())}
    stride = {d: draw(st.integers(1, s + 2)) for d, s in named.items()}
    edge = draw(st.sampled_from(["shift", "pad", "drop"]))
    geom = ArrayGeometry("v", "v", shape, np.dtype("f4"), chunks, dimension_names=("t", "y", "x"))
    out_chunks = tuple(draw(st.integers(1, n + 3)) for n in shape)
    return PatchSpec(named, stride, edge=edge).resolve(geom), out_chunks


@settings(max_examples=60, deadline=None)
@given(_grids())
def test_each_patch_touches_exactly_the_output_chunks_its_valid_part_overlaps(case: Any) -> None:
    grid, out_chunks = case
    layout = StitchLayout.of(grid, None, grid.shape, out_chunks)
    origins = grid.origins(np.arange(grid.n_positions))
    extent = grid.valid_extent(origins)
    units = layout.touched(origins, extent)
    for origin, valid, row in zip(origins, extent, units, strict=True):
        ranges = [
            range(o // c, (o + min(b, e) - 1) // c + 1)
            for o, b, e, c in zip(origin.tolist(), grid.patch_shape, valid.tolist(), out_chunks, strict=True)
        ]
        want = {int(np.ravel_multi_index(c, layout.unit_grid)) for c in itertools.product(*ranges)}
        assert set(row[row >= 0].tolist()) == want
        assert len(row[row >= 0]) == len(want)


def test_taper_window_is_the_documented_ramp() -> None:
    np.testing.assert_allclose(taper_window(5, 2), [1 / 3, 2 / 3, 1, 2 / 3, 1 / 3])
    np.testing.assert_array_equal(taper_window(4, 0), np.ones(4))
    np.testing.assert_allclose(taper_window(4, 3), [0.25, 0.5, 0.5, 0.25])  # the ramps meet
    size, stride = 24, 16
    w = taper_window(size, size - stride)
    assert (w > 0).all()
    np.testing.assert_allclose(w[stride:] + w[: size - stride], 1.0)  # neighbours' ramps sum to 1


def _blended(shape: tuple[int, ...], origins: np.ndarray, rows: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The weighted average of ``rows`` placed at ``origins``, by brute force over the whole array."""
    total = np.zeros(shape)
    wsum = np.zeros(shape)
    for origin, row in zip(origins, rows, strict=True):
        box = tuple(slice(o, o + n) for o, n in zip(origin, row.shape, strict=True))
        part = total[box]
        cut = tuple(slice(0, n) for n in part.shape)
        total[box] += row[cut] * weight[cut]
        wsum[box] += weight[cut]
    with np.errstate(invalid="ignore"):
        return np.where(wsum > 0, total / wsum, np.nan)


@pytest.mark.parametrize("blend", ["mean", "taper"])
def test_overlapping_outputs_blend_as_documented(tmp_path: Path, blend: str) -> None:
    src = _source((1, 60, 70))
    ds = _dataset(
        tmp_path, src, (1, 32, 32), ("t", "y", "x"), patch={"y": 20, "x": 20}, patch_stride={"y": 14, "x": 12}
    )
    rng = np.random.default_rng(3)
    every_origin, every_row = [], []

    def outputs(batch: insitu.Batch) -> np.ndarray:
        rows = rng.standard_normal(batch["v"].shape).astype(np.float32)  # disagreeing patches
        every_origin.append(batch.patch_origins[:, 1:])
        every_row.append(rows)
        return rows

    out = MemoryStore()
    _stitch(ds.all, out, outputs, blend=blend)
    if blend == "mean":
        weight = np.ones((20, 20))
    else:
        weight = np.outer(taper_window(20, 20 - 14), taper_window(20, 20 - 12))
    want = _blended((60, 70), np.concatenate(every_origin), np.concatenate(every_row), weight)
    result = zarr.open_array(out, path="pred")[0]
    np.testing.assert_allclose(result, want, rtol=1e-6, atol=1e-6)
    ds.close()


def test_a_constant_stays_constant_under_the_taper(tmp_path: Path) -> None:
    src = np.full((1, 61, 77), 2.7, dtype=np.float32)
    ds = _dataset(
        tmp_path,
        src,
        (1, 16, 16),
        ("t", "y", "x"),
        patch={"y": 20, "x": 20},
        patch_stride={"y": 7, "x": 11},
        patch_edge="pad",
    )
    out = MemoryStore()
    _stitch(ds.all, out, blend="taper")
    np.testing.assert_array_equal(zarr.open_array(out, path="pred")[:], src)
    ds.close()


def test_only_the_valid_part_of_a_padded_patch_contributes(tmp_path: Path) -> None:
    src = _source((1, 50, 45))
    ds = _dataset(tmp_path, src, (1, 16, 16), ("t", "y", "x"), patch={"y": 16, "x": 16}, patch_edge="pad")

    def outputs(batch: insitu.Batch) -> np.ndarray:
        return np.where(batch.patch_mask("v"), batch["v"], 1e9)  # what a model makes of padding

    for blend in ("mean", "taper"):
        out = MemoryStore()
        _stitch(ds.all, out, outputs, blend=blend)
        np.testing.assert_array_equal(zarr.open_array(out, path="pred")[:], src)
    ds.close()


def test_elements_no_patch_covers_hold_the_fill_value(tmp_path: Path) -> None:
    src = _source((1, 50, 45))
    ds = _dataset(tmp_path, src, (1, 16, 16), ("t", "y", "x"), patch={"y": 16, "x": 16}, patch_edge="drop")
    out = CountingStore(MemoryStore())
    _stitch(ds.all, out)
    result = zarr.open_array(out, path="pred")[:]
    np.testing.assert_array_equal(result[:, :48, :32], src[:, :48, :32])
    assert np.isnan(result[:, 48:, :]).all()
    assert np.isnan(result[:, :, 32:]).all()
    # chunks no patch touches are never written; the others once
    touched = np.zeros(src.shape, dtype=bool)
    touched[:, :48, :32] = True
    writes = out.chunk_writes("pred")
    assert set(writes) == _chunk_keys(src.shape, (1, 16, 16), touched)
    assert set(writes.values()) == {1}
    ds.close()


def test_random_patches_average_their_repeats(tmp_path: Path) -> None:
    src = _source((1, 40, 40))
    ds = _dataset(
        tmp_path,
        src,
        (1, 16, 16),
        ("t", "y", "x"),
        patch={"y": 10, "x": 10},
        patch_sampling="random",
        patches_per_epoch=60,
    )
    out = CountingStore(MemoryStore())
    _stitch(ds.all, out, blend="taper")
    result = zarr.open_array(out, path="pred")[:]
    covered = ~np.isnan(result)
    assert covered.any()
    np.testing.assert_array_equal(result[covered], src[covered])
    assert set(out.chunk_writes("pred").values()) == {1}
    ds.close()


def test_origins_alone_place_the_outputs_as_a_batch_does(tmp_path: Path) -> None:
    src = _source((4, 30, 30))
    ds = _dataset(tmp_path, src, (2, 16, 16), ("time", "y", "x"), patch={"y": 12, "x": 12})
    out = MemoryStore()
    with insitu.PatchStitcher(out, "pred", view=ds.all, blend="taper") as st:
        for batch in ds.all:
            st.add(batch.patch_origins, batch["v"])
    np.testing.assert_array_equal(zarr.open_array(out, path="pred")[:], src)
    ds.close()


def test_outputs_with_other_bands_and_added_channels(tmp_path: Path) -> None:
    src = _source((40, 50, 3))
    ds = _dataset(tmp_path, src, (16, 16, 3), ("y", "x", "band"), patch={"y": 12, "x": 12})
    # two classes in place of three bands, and a trailing axis of two channels
    out = CountingStore(MemoryStore())
    view = ds.all

    def classes(batch: insitu.Batch) -> np.ndarray:
        v = batch["v"]
        return np.stack([v[..., 0], -v[..., 0]], axis=-1)[..., None] * np.array([1.0, 2.0], dtype=np.float32)

    _stitch(view, out, classes, row_shape=(12, 12, 2, 2), blend="taper")
    arr = zarr.open_array(out, path="pred")
    assert arr.shape == (40, 50, 2, 2)
    assert arr.chunks == (16, 16, 2, 2)
    assert arr.metadata.dimension_names == ("y", "x", None, None)
    result = arr[:]
    np.testing.assert_array_equal(result[:, :, 0, 0], src[:, :, 0])
    np.testing.assert_array_equal(result[:, :, 1, 1], -2 * src[:, :, 0])
    assert set(out.chunk_writes("pred").values()) == {1}
    ds.close()


def test_a_selected_run_is_stitched_in_place_and_the_rest_reads_as_fill(tmp_path: Path) -> None:
    src = _source((2, 40, 50, 4))
    ds = _dataset(tmp_path, src, (1, 16, 16, 4), ("t", "y", "x", "band"))
    ds.close()
    store = insitu.open_store(str(tmp_path / "data.zarr"))
    g = insitu.open_geometries(store)
    box = insitu.select(g, isel={"x": slice(10, 45), "band": slice(1, 3)})["v"]
    ds = insitu.InSituDataset(
        store,
        insitu.split_by_chunk(box, fractions=(1.0,), names=("train",)),
        geometries=[box],
        patch={"y": 12, "x": 12},
        patch_stride={"y": 8, "x": 8},
        patch_edge="pad",
    )
    out = CountingStore(MemoryStore())
    _stitch(ds.all, out, blend="taper")
    result = zarr.open_array(out, path="pred")[:]
    assert result.shape == src.shape  # the stored array's, origins are its indices
    np.testing.assert_array_equal(result[:, :, 10:45, 1:3], src[:, :, 10:45, 1:3])
    assert np.isnan(result[:, :, :10]).all()
    assert np.isnan(result[:, :, 45:]).all()
    assert np.isnan(result[..., [0, 3]]).all()
    assert set(out.chunk_writes("pred").values()) == {1}
    picked = insitu.select(g, isel={"band": [0, 2]})["v"]
    listed = insitu.InSituDataset(
        store,
        insitu.split_by_chunk(picked, fractions=(1.0,), names=("train",)),
        geometries=[picked],
        patch={"y": 12, "x": 12},
    )
    with pytest.raises(ConfigError, match="select a list of indices"):
        insitu.PatchStitcher(MemoryStore(), "pred", view=listed.all)
    listed.close()
    ds.close()


def test_a_sharded_output_writes_each_shard_once(tmp_path: Path) -> None:
    src = _source((1, 64, 64))
    ds = _dataset(
        tmp_path, src, (1, 16, 16), ("t", "y", "x"), patch={"y": 20, "x": 20}, patch_stride={"y": 12, "x": 12}
    )
    out = CountingStore(LocalStore(tmp_path / "out.zarr"))
    _stitch(ds.all, out, chunks=(1, 8, 8), shards=(1, 32, 32), blend="taper")
    np.testing.assert_array_equal(zarr.open_array(out, path="pred")[:], src)
    writes = out.chunk_writes("pred")
    assert set(writes) == {f"pred/c/0/{i}/{j}" for i in range(2) for j in range(2)}
    assert set(writes.values()) == {1}
    ds.close()


def test_a_zarr_v2_output(tmp_path: Path) -> None:
    src = _source((1, 30, 30))
    ds = _dataset(tmp_path, src, (1, 16, 16), ("t", "y", "x"), patch={"y": 12, "x": 12}, patch_edge="pad")
    out = CountingStore(MemoryStore())
    _stitch(ds.all, out, zarr_format=2)
    arr = zarr.open_array(out, path="pred")
    assert arr.metadata.zarr_format == 2
    np.testing.assert_array_equal(arr[:], src)
    chunks = Counter(
        {
            k: n
            for k, n in out.writes.items()
            if k.startswith("pred/") and not k.endswith((".zarray", ".zattrs"))
        }
    )
    assert len(chunks) == 4
    assert set(chunks.values()) == {1}
    ds.close()


# -- refusals ----------------------------------------------------------------------------------


@pytest.fixture
def tiles(tmp_path: Path) -> Any:
    src = _source((2, 40, 40))
    ds = _dataset(
        tmp_path, src, (1, 16, 16), ("t", "y", "x"), patch={"y": 16, "x": 16}, patch_stride={"y": 12, "x": 12}
    )
    yield ds
    ds.close()


def test_outputs_of_the_wrong_shape_are_refused_by_name(tiles: Any) -> None:
    st = insitu.PatchStitcher(MemoryStore(), "pred", view=tiles.all)
    batch = next(iter(tiles.all))
    with pytest.raises(ConfigError, match=r"outputs have shape \(8, 16, 15\); expected \(8, 16, 16\)"):
        st.add(batch, batch["v"][:, :, :15])
    with pytest.raises(ConfigError, match=r"expected \(8, 16, 16\)"):
        st.add(batch, batch["v"][:5])
    with pytest.raises(ConfigError, match=r"origins must be integers of shape \(B, 3\)"):
        st.add(batch.patch_origins[:, 1:], batch["v"])
    assert st.progress.patches_added == 0
    st.discard()


def test_row_shapes_that_change_a_patched_axis_are_refused(tiles: Any) -> None:
    with pytest.raises(ConfigError, match=r"has 8 along 'x'.*keep the patch's size there \(16\)"):
        insitu.PatchStitcher(MemoryStore(), "pred", view=tiles.all, row_shape=(16, 8))
    with pytest.raises(ConfigError, match="must start with one length per axis"):
        insitu.PatchStitcher(MemoryStore(), "pred", view=tiles.all, row_shape=(16,))
    with pytest.raises(ConfigError, match="cannot hold a blend"):
        insitu.PatchStitcher(MemoryStore(), "pred", view=tiles.all, dtype="int32")
    with pytest.raises(ConfigError, match="blend='max'"):
        insitu.PatchStitcher(MemoryStore(), "pred", view=tiles.all, blend="max")


def test_closing_before_the_pass_ends_names_the_incomplete_chunks(tiles: Any) -> None:
    out = CountingStore(MemoryStore())
    st = insitu.PatchStitcher(out, "pred", view=tiles.all)
    batches = iter(tiles.all)
    for _ in range(2):
        batch = next(batches)
        st.add(batch, batch["v"])
    p = st.progress
    left = p.chunks_total - p.chunks_written
    assert left > 0
    with pytest.raises(
        IncompleteStitchError, match=rf"{left} of {p.chunks_total} output chunks are incomplete"
    ) as err:
        st.close()
    assert f"16 of the pass's {p.patches_total} patches" in str(err.value)
    assert not st.closed  # the rest can still come
    for batch in batches:
        st.add(batch, batch["v"])
    st.close()
    assert st.progress.done
    assert set(out.chunk_writes("pred").values()) == {1}


def test_close_partial_writes_what_arrived_once(tiles: Any) -> None:
    out = CountingStore(MemoryStore())
    st = insitu.PatchStitcher(out, "pred", view=tiles.all)
    batch = next(iter(tiles.all))
    st.add(batch, batch["v"])
    in_progress = st.progress.chunks_in_progress
    before = sum(out.chunk_writes("pred").values())
    st.close(partial=True)
    writes = out.chunk_writes("pred")
    assert sum(writes.values()) == before + in_progress
    assert set(writes.values()) == {1}
    result = zarr.open_array(out, path="pred")[:]
    src = zarr.open_array(tiles.store, path="v")[:]
    covered = ~np.isnan(result)
    np.testing.assert_array_equal(result[covered], src[covered])
    assert covered.sum() == len(
        np.unique(
            np.concatenate(
                [
                    np.ravel_multi_index(
                        (np.full(256, o[0]), *np.mgrid[o[1] : o[1] + 16, o[2] : o[2] + 16].reshape(2, -1)),
                        src.shape,
                    )
                    for o in batch.patch_origins
                ]
            )
        )
    )
    with pytest.raises(ConfigError, match="closed"):
        st.add(batch, batch["v"])


def test_a_patch_added_twice_is_refused_before_anything_changes(tiles: Any) -> None:
    out = CountingStore(MemoryStore())
    st = insitu.PatchStitcher(out, "pred", view=tiles.all)
    batches = list(tiles.all)
    for batch in batches:
        st.add(batch, batch["v"])
    assert st.progress.done
    with pytest.raises(ConfigError, match="after the patches the pass holds for it were all added"):
        st.add(batches[0], batches[0]["v"])
    assert st.progress.patches_added == st.progress.patches_total
    st.close()
    assert set(out.chunk_writes("pred").values()) == {1}


def test_an_error_leaving_the_block_drops_the_chunks_in_progress(tiles: Any) -> None:
    out = CountingStore(MemoryStore())
    batch = next(iter(tiles.all))
    made = []

    def infer() -> None:
        with insitu.PatchStitcher(out, "pred", view=tiles.all) as st:
            made.append(st)
            st.add(batch, batch["v"])
            assert st.progress.chunks_in_progress > 0
            raise KeyError("model failed")

    with pytest.raises(KeyError, match="model failed"):  # not masked by an incomplete-stitch error
        infer()
    (st,) = made
    assert st.closed
    assert st.progress.chunks_in_progress == 0
    assert sum(out.chunk_writes("pred").values()) == st.progress.chunks_written  # none on the way out


def test_views_that_cannot_be_stitched_are_refused(tiles: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rank 0 of 2"):
        insitu.PatchStitcher(MemoryStore(), "pred", view=tiles.view("train", rank=0, world_size=2))
    whole = _dataset(tmp_path / "whole", _source((4, 8, 8)), (2, 8, 8), ("t", "y", "x"))
    with pytest.raises(ConfigError, match="sampling patches"):
        insitu.PatchStitcher(MemoryStore(), "pred", view=whole.all)
    whole.close()
    out = MemoryStore()
    insitu.PatchStitcher(out, "pred", view=tiles.all).discard()
    with pytest.raises(ConfigError, match=r"'pred' already exists.*overwrite=True"):
        insitu.PatchStitcher(out, "pred", view=tiles.all)
    insitu.PatchStitcher(out, "pred", view=tiles.all, overwrite=True).discard()
