"""Patch sampling through InSituDataset: what a user training on tiles and sub-volumes relies on.

Every patch equals the zarr slice of the source at its origin (straddling chunk
borders, with overlap, 2-D and 3-D, windows, statics, arrays chunked
differently), every grid position comes once per epoch, edges follow their
policy, each stored chunk is decoded once per epoch, ranks are disjoint and
resume is exact. Bad input is refused by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import write_array

import insitu
from insitu.errors import ConfigError


def _store(tmp_path: Path, arrays: dict[str, tuple[np.ndarray, tuple[int, ...], tuple[str, ...]]]) -> Any:
    root = tmp_path / "data.zarr"
    zarr.open_group(str(root), mode="w")
    for name, (data, chunks, dims) in arrays.items():
        write_array(root, name, data, chunks, dimension_names=dims)
    return insitu.open_store(str(root))


def _source(shape: tuple[int, ...], seed: int = 0, dtype: str = "float32") -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _expected(src: np.ndarray, origin: np.ndarray, box: tuple[int, ...], fill: float = np.nan) -> np.ndarray:
    """The source's box at ``origin``, padded with ``fill`` past the end."""
    out = np.full(box, fill, dtype=np.float64)
    index = tuple(slice(int(o), int(o) + b) for o, b in zip(origin, box, strict=True))
    part = src[index]
    out[tuple(slice(0, n) for n in part.shape)] = part
    return out


def _chunks_touched(
    origins: list[tuple[int, ...]], box: tuple[int, ...], chunks: tuple[int, ...], shape: tuple[int, ...]
) -> set[tuple[int, ...]]:
    import itertools

    out = set()
    for o in origins:
        ranges = [
            range(a // c, (min(a + b, n) - 1) // c + 1)
            for a, b, c, n in zip(o, box, chunks, shape, strict=True)
        ]
        out.update(itertools.product(*ranges))
    return out


def _epoch(view: Any) -> list[Any]:
    return list(view)


def _dataset(store: Any, names: list[str], **kwargs: Any) -> insitu.InSituDataset:
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms[names[0]], fractions=(1.0,), names=("train",))
    kwargs.setdefault("batch_size", 8)
    return insitu.InSituDataset(store, manifest, geometries=[geoms[n] for n in names], **kwargs)


def _grid_origins(
    shape: tuple[int, ...], box: tuple[int, ...], stride: tuple[int, ...], edge: str
) -> set[tuple[int, ...]]:
    """Every origin of the grid, written out per axis from the edge rule."""
    axes = []
    for n, b, t in zip(shape, box, stride, strict=True):
        full = list(range(0, n - b + 1, t)) if b <= n else []
        if edge == "shift" and (not full or full[-1] + b < n):
            full.append(n - b)
        if edge == "pad":
            k = full[-1] + t if full else 0
            while (not full or full[-1] + b < n) and k < n:
                full.append(k)
                k += t
        axes.append(full)
    import itertools

    return set(itertools.product(*axes))


@pytest.mark.parametrize(
    ("patch", "stride", "edge"),
    [
        ({"y": 16, "x": 20}, None, "shift"),  # aligned with the chunks
        ({"y": 24, "x": 24}, None, "shift"),  # straddling chunk borders
        ({"y": 24, "x": 24}, {"y": 10, "x": 17}, "shift"),  # overlapping
        ({"y": 24, "x": 24}, None, "pad"),
        ({"y": 24, "x": 24}, None, "drop"),
        ({"y": 100, "x": 7}, None, "shift"),  # the whole of one axis
    ],
)
def test_every_grid_position_once_with_the_source_values(
    tmp_path: Path, patch: dict[str, int], stride: dict[str, int] | None, edge: str
) -> None:
    src = _source((3, 100, 130))
    store = _store(tmp_path, {"v": (src, (1, 32, 40), ("t", "y", "x"))})
    ds = _dataset(store, ["v"], patch=patch, patch_stride=stride, patch_edge=edge)
    box = (1, patch["y"], patch["x"])
    seen = []
    for batch in _epoch(ds.train):
        assert batch["v"].shape == (batch.size, patch["y"], patch["x"])
        assert np.array_equal(batch.sample_indices, batch.patch_origins[:, 0])
        for row, origin in zip(batch["v"], batch.patch_origins, strict=True):
            want = _expected(src, origin, box)[0]
            np.testing.assert_array_equal(row, want.astype(np.float32))
            seen.append(tuple(int(o) for o in origin))
    step = (1, *(stride or patch).values()) if stride else box
    assert len(seen) == len(set(seen))
    assert set(seen) == _grid_origins(src.shape, box, step, edge)
    # every stored chunk the patches read is decoded once
    assert ds.stats["chunks_decoded"] == len(_chunks_touched(seen, box, (1, 32, 40), src.shape))


def test_edges_are_a_policy(tmp_path: Path) -> None:
    src = _source((1, 10, 10))
    store = _store(tmp_path, {"v": (src, (1, 5, 5), ("t", "y", "x"))})
    covered = {}
    for edge in ("shift", "pad", "drop"):
        ds = _dataset(store, ["v"], patch={"y": 4, "x": 4}, patch_edge=edge, batch_size=64)
        (batch,) = _epoch(ds.train)
        mask = np.zeros((10, 10), dtype=bool)
        for row, origin, inside in zip(batch["v"], batch.patch_origins, batch.patch_mask("v"), strict=True):
            _, y, x = (int(o) for o in origin)
            valid = row[inside]
            assert not np.isnan(valid).any()
            mask[y : y + 4, x : x + 4] |= inside[: 10 - y, : 10 - x] if edge == "pad" else True
        covered[edge] = mask
        if edge == "pad":
            assert batch.patch_extent is not None
            assert np.isnan(batch["v"][~batch.patch_mask("v")]).all()
            assert batch.patch_extent.min() == 1
            assert (batch.patch_extent[:, 1:] <= 4).all()
        else:
            assert batch.patch_extent is None
            assert batch.patch_mask("v").all()
    assert covered["shift"].all()
    assert covered["pad"].all()
    assert not covered["drop"][8:, :].any()  # asked for: the last two rows are left out


def test_padded_integers_take_the_fill_value(tmp_path: Path) -> None:
    src = np.arange(60, dtype=np.int16).reshape(1, 6, 10)
    root = tmp_path / "i.zarr"
    write_array(root, "i", src, (1, 4, 4), fill_value=-7, dimension_names=("t", "y", "x"))
    store = insitu.open_store(str(root))
    g = next(iter(insitu.open_geometries(store).values()))
    manifest = insitu.split_by_chunk(g, fractions=(1.0,), names=("train",))
    ds = insitu.InSituDataset(
        store, manifest, geometries=[g], patch={"y": 4, "x": 4}, patch_edge="pad", cf_decode=False
    )
    (batch,) = _epoch(ds.train)
    for row, origin in zip(batch[g.label], batch.patch_origins, strict=True):
        np.testing.assert_array_equal(row, _expected(src, origin, (1, 4, 4), fill=-7)[0].astype(np.int16))


def test_three_d_sub_volumes_with_the_sample_dimension_named(tmp_path: Path) -> None:
    src = _source((20, 33, 35))
    store = _store(tmp_path, {"vol": (src, (8, 16, 16), ("z", "y", "x"))})
    ds = _dataset(store, ["vol"], patch={"z": 6, "y": 12, "x": 12}, batch_size=5)
    seen = set()
    for batch in _epoch(ds.train):
        assert batch["vol"].shape[1:] == (6, 12, 12)
        for row, origin in zip(batch["vol"], batch.patch_origins, strict=True):
            np.testing.assert_array_equal(row, _expected(src, origin, (6, 12, 12)).astype(np.float32))
            seen.add(tuple(int(o) for o in origin))
    assert seen == _grid_origins(src.shape, (6, 12, 12), (6, 12, 12), "shift")


def test_a_raster_without_time_gives_tiles_with_every_band(tmp_path: Path) -> None:
    src = _source((70, 90, 3))
    store = _store(tmp_path, {"img": (src, (32, 32, 3), ("y", "x", "band"))})
    ds = _dataset(store, ["img"], patch={"y": 20, "x": 20})
    n = 0
    for batch in _epoch(ds.train):
        assert batch["img"].shape[1:] == (20, 20, 3)
        for row, origin in zip(batch["img"], batch.patch_origins, strict=True):
            np.testing.assert_array_equal(row, _expected(src, origin, (20, 20, 3)).astype(np.float32))
            n += 1
    assert n == 4 * 5


def test_windows_statics_and_arrays_chunked_differently(tmp_path: Path) -> None:
    t2m, u10 = _source((30, 40, 50), 1), _source((30, 40, 50), 2)
    lsm = _source((40, 50), 3)
    store = _store(
        tmp_path,
        {
            "t2m": (t2m, (4, 16, 16), ("time", "lat", "lon")),
            "u10": (u10, (3, 20, 25), ("time", "lat", "lon")),
            "lsm": (lsm, (40, 50), ("lat", "lon")),
        },
    )
    geoms = insitu.open_geometries(store, include_static=True)
    manifest = insitu.split_by_chunk(geoms["t2m"], fractions=(1.0,), names=("train",))
    ds = insitu.InSituDataset(
        store,
        manifest,
        geometries=[geoms["t2m"], geoms["u10"], geoms["t2m"].shift(2), geoms["lsm"]],
        patch={"lat": 12, "lon": 12},
        batch_size=16,
    )
    n = 0
    for batch in _epoch(ds.train):
        assert batch["lsm"].shape == (batch.size, 12, 12)  # a static on the patch's grid comes cropped
        for i, origin in enumerate(batch.patch_origins):
            t, y, x = (int(o) for o in origin)
            assert t + 2 < 30
            np.testing.assert_array_equal(batch["lsm"][i], lsm[y : y + 12, x : x + 12])
            np.testing.assert_array_equal(batch["t2m"][i], t2m[t, y : y + 12, x : x + 12])
            np.testing.assert_array_equal(batch["u10"][i], u10[t, y : y + 12, x : x + 12])
            np.testing.assert_array_equal(batch["t2m+2"][i], t2m[t + 2, y : y + 12, x : x + 12])
        np.testing.assert_array_equal(batch.read_indices["t2m+2"], batch.sample_indices + 2)
        n += batch.size
    assert n == 28 * 4 * 5  # the last two time steps cannot anchor the window
    assert ds.delivered_arrays["lsm"][0] == (12, 12)


def test_random_patches_are_a_function_of_seed_and_epoch(tmp_path: Path) -> None:
    src = _source((2, 64, 64))
    store = _store(tmp_path, {"v": (src, (1, 16, 16), ("t", "y", "x"))})

    def origins(seed: int, epoch: int) -> np.ndarray:
        ds = _dataset(
            store, ["v"], patch={"y": 10, "x": 10}, patch_sampling="random", patches_per_epoch=50, seed=seed
        )
        ds.set_epoch(epoch)
        batches = _epoch(ds.train)
        for batch in batches:
            for row, origin in zip(batch["v"], batch.patch_origins, strict=True):
                np.testing.assert_array_equal(row, _expected(src, origin, (1, 10, 10))[0].astype(np.float32))
        return np.concatenate([b.patch_origins for b in batches])

    a = origins(0, 0)
    assert len(a) == 50
    assert (a[:, 1:] <= 54).all()
    assert (a >= 0).all()
    np.testing.assert_array_equal(a, origins(0, 0))
    assert not np.array_equal(a, origins(0, 1))
    assert not np.array_equal(a, origins(1, 0))


def test_each_chunk_decoded_once_per_epoch_when_the_pool_holds_the_array(tmp_path: Path) -> None:
    src = _source((4, 96, 96))
    store = _store(tmp_path, {"v": (src, (1, 32, 32), ("t", "y", "x"))})
    ds = _dataset(store, ["v"], patch={"y": 24, "x": 24}, patch_stride={"y": 16, "x": 16}, block_chunks=4)
    n_chunks = 4 * 3 * 3
    _epoch(ds.train)
    assert ds.stats["chunks_decoded"] == n_chunks
    ds.set_epoch(1)
    _epoch(ds.train)  # the whole array is cached: the second epoch decodes nothing
    assert ds.stats["chunks_decoded"] == n_chunks


@pytest.mark.parametrize("fraction", [0.5, 0.75])
def test_read_amplification_at_a_tenth_of_the_array(tmp_path: Path, fraction: float) -> None:
    """A pool budget of a tenth of the decoded array: chunks shared by neighbouring blocks are
    decoded again only when the pool could not keep them; measured at most 1.5x."""
    chunk = 32
    size = int(chunk * fraction)
    src = _source((2, 320, 320))
    store = _store(tmp_path, {"v": (src, (1, chunk, chunk), ("t", "y", "x"))})
    budget = src.nbytes // 10
    ds = _dataset(
        store, ["v"], patch={"y": size, "x": size}, cache_budget_bytes=budget, block_chunks=16, batch_size=32
    )
    n = sum(b.size for b in _epoch(ds.train))
    assert n == 2 * (-(-320 // size)) ** 2
    distinct = 2 * 10 * 10
    ratio = ds.stats["chunks_decoded"] / distinct
    assert 1.0 <= ratio <= 1.5, ratio


def test_ranks_are_disjoint_and_deliver_equal_batch_counts(tmp_path: Path) -> None:
    src = _source((4, 64, 64))
    store = _store(tmp_path, {"v": (src, (1, 16, 16), ("t", "y", "x"))})
    ds = _dataset(store, ["v"], patch={"y": 16, "x": 16}, batch_size=4, block_chunks=2)
    per_rank = []
    for rank in range(3):
        view = ds.view("train", rank=rank, world_size=3)
        batches = _epoch(view)
        per_rank.append((len(batches), {tuple(o) for b in batches for o in b.patch_origins.tolist()}))
    counts = {n for n, _ in per_rank}
    assert len(counts) == 1
    a, b, c = (s for _, s in per_rank)
    assert not (a & b)
    assert not (a & c)
    assert not (b & c)


def test_resume_mid_epoch_is_exact_for_patches(tmp_path: Path) -> None:
    src = _source((3, 64, 64))
    store = _store(tmp_path, {"v": (src, (1, 16, 16), ("t", "y", "x"))})
    kwargs: dict[str, Any] = {"patch": {"y": 12, "x": 12}, "patch_stride": {"y": 8, "x": 8}, "batch_size": 7}
    ds = _dataset(store, ["v"], **kwargs)
    ds.set_epoch(2)
    full = [b.patch_origins for b in _epoch(ds.train)]
    it = iter(ds.train)
    for _ in range(5):
        next(it)
    state = ds.train.state_dict()
    it.close()
    again = _dataset(store, ["v"], **kwargs)
    again.train.load_state_dict(state)
    rest = [b.patch_origins for b in _epoch(again.train)]
    assert len(rest) == len(full) - 5
    for got, want in zip(rest, full[5:], strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_state_of_other_patches_is_refused(tmp_path: Path) -> None:
    src = _source((2, 32, 32))
    store = _store(tmp_path, {"v": (src, (1, 16, 16), ("t", "y", "x"))})
    ds = _dataset(store, ["v"], patch={"y": 8, "x": 8})
    state = ds.train.state_dict()
    other = _dataset(store, ["v"], patch={"y": 16, "x": 8})
    with pytest.raises(ConfigError, match="patches"):
        other.train.load_state_dict(state)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"patch": {"y": 200, "x": 8}}, r"patch size 200 along 'y' is larger than the dimension"),
        ({"patch": {"lat": 8}}, r"does not have.*\['t', 'y', 'x'\]"),
        (
            {"patch": {"y": 8}, "patch_stride": {"y": 0}},
            r"patch_stride\['y'\] must be a positive integer, got 0",
        ),
        ({"patch": {"y": 8}, "patches_per_epoch": 10}, r"patches_per_epoch=10 needs patch_sampling='random'"),
        ({"patch_edge": "pad"}, r"patch_edge='pad' given without patch="),
        ({"patch": {"y": 8}, "patch_sampling": "sobol"}, r"patch_sampling='sobol'"),
        ({"patch": [8, 8]}, r"patch must map dimension names to sizes"),
    ],
)
def test_bad_patch_input_is_refused_by_name(tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    src = _source((2, 32, 32))
    store = _store(tmp_path, {"v": (src, (1, 16, 16), ("t", "y", "x"))})
    with pytest.raises(ConfigError, match=match):
        _dataset(store, ["v"], **kwargs)


def test_arrays_off_the_reference_grid_are_refused(tmp_path: Path) -> None:
    store = _store(
        tmp_path,
        {
            "a": (_source((2, 32, 32)), (1, 16, 16), ("t", "y", "x")),
            "b": (_source((2, 30, 32)), (1, 16, 16), ("t", "y", "x")),
        },
    )
    with pytest.raises(ConfigError, match=r"array 'b' \(shape \(2, 30, 32\).*not on the grid of 'a'"):
        _dataset(store, ["a", "b"], patch={"y": 8, "x": 8})


def test_a_shape_changing_transform_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path, {"v": (_source((2, 32, 32)), (1, 16, 16), ("t", "y", "x"))})
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["v"], fractions=(1.0,), names=("train",))

    def halve(_: str, x: np.ndarray) -> np.ndarray:
        return x[..., ::2]

    with pytest.raises(ConfigError, match=r"chunk transforms of array 'v' change its samples"):
        insitu.InSituDataset(
            store, manifest, geometries=[geoms["v"]], patch={"x": 8}, chunk_transforms=[halve]
        )


def test_patches_inside_a_selected_box_with_picked_levels_and_a_dropped_axis(tmp_path: Path) -> None:
    """A box selected on the patched axes bounds where patches go (origins stay stored indices);
    a list of levels is read as picked, an integer selection drops its axis; a static field
    selected alike comes cropped to each patch."""
    z = _source((6, 7, 40, 50), 4)
    members = _source((6, 3, 40, 50), 5)
    lsm = _source((40, 50), 6)
    store = _store(
        tmp_path,
        {
            "z": (z, (2, 3, 16, 16), ("time", "level", "lat", "lon")),
            "m": (members, (2, 3, 16, 16), ("time", "member", "lat", "lon")),
            "lsm": (lsm, (20, 25), ("lat", "lon")),
        },
    )
    geoms = insitu.open_geometries(store, include_static=True)
    box = {"lat": slice(5, 37), "lon": slice(3, 48)}
    zsel = geoms["z"].isel(level=[5, 1, 2], **box)
    manifest = insitu.split_by_chunk(geoms["z"], fractions=(1.0,), names=("train",))
    ds = insitu.InSituDataset(
        store,
        manifest,
        geometries=[zsel, geoms["lsm"].isel(**box)],
        patch={"lat": 10, "lon": 12},
        batch_size=7,
    )
    seen = set()
    for batch in _epoch(ds.train):
        assert batch["z"].shape[1:] == (3, 10, 12)
        for i, (t, _, y, x) in enumerate(batch.patch_origins.tolist()):
            assert 5 <= y <= 37 - 10
            assert 3 <= x <= 48 - 12
            np.testing.assert_array_equal(batch["z"][i], z[t][[5, 1, 2]][:, y : y + 10, x : x + 12])
            np.testing.assert_array_equal(batch["lsm"][i], lsm[y : y + 10, x : x + 12])
            seen.add((t, y, x))
    assert len(seen) == 6 * 4 * 4  # 32 = 10 + 10 + 10 + 2 (shifted), 45 = 12 * 3 + 9 (shifted)
    one = geoms["m"].isel(member=1, **box)
    ds = insitu.InSituDataset(store, manifest, geometries=[one], patch={"lat": 10, "lon": 12}, batch_size=7)
    batch = next(iter(ds.train))
    assert batch["m"].shape[1:] == (10, 12)
    for i, (t, _, y, x) in enumerate(batch.patch_origins.tolist()):
        np.testing.assert_array_equal(batch["m"][i], members[t, 1, y : y + 10, x : x + 12])


def test_a_selection_a_patch_cannot_be_placed_in_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path, {"v": (_source((2, 32, 32)), (1, 16, 16), ("t", "y", "x"))})
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["v"], fractions=(1.0,), names=("train",))
    with pytest.raises(ConfigError, match=r"selects a list of indices .* along 'y', which the patch names"):
        insitu.InSituDataset(store, manifest, geometries=[geoms["v"].isel(y=[0, 4, 9])], patch={"y": 2})
    with pytest.raises(ConfigError, match=r"patch size 20 along 'x' is larger than the dimension"):
        insitu.InSituDataset(store, manifest, geometries=[geoms["v"].isel(x=slice(0, 16))], patch={"x": 20})


def test_sharded_arrays_and_a_persisted_cache_serve_patches(tmp_path: Path) -> None:
    """Inner chunks of shards are the pool's units; a persisted cache keeps them across runs (the
    second run reads nothing from the store and serves the same values)."""
    src = _source((4, 64, 64))
    root = tmp_path / "sharded.zarr"
    z = zarr.create_array(
        str(root),
        shape=src.shape,
        chunks=(1, 16, 16),
        shards=(2, 32, 32),
        dtype="f4",
        dimension_names=("t", "y", "x"),
    )
    z[:] = src
    store = insitu.open_store(str(root))
    (name,) = insitu.open_geometries(store)
    for run in range(2):
        with _dataset(
            store, [name], patch={"y": 24, "x": 24}, cache_dir=tmp_path / "cache", persist=True
        ) as ds:
            n = 0
            for batch in _epoch(ds.train):
                for row, (t, y, x) in zip(batch[name], batch.patch_origins.tolist(), strict=True):
                    np.testing.assert_array_equal(row, src[t, y : y + 24, x : x + 24])
                n += batch.size
            assert n == 4 * 3 * 3
            stats = ds.stats
        if run == 0:
            assert stats["chunks_decoded"] == 4 * 4 * 4
        else:
            assert stats["reads"] == 0
            assert stats["chunks_decoded"] == 0
            assert stats["cache_verified_slabs"] == 4 * 4 * 4


def test_each_pass_reports_its_read_amplification(tmp_path: Path) -> None:
    src = _source((2, 64, 64))
    store = _store(tmp_path, {"v": (src, (1, 16, 16), ("t", "y", "x"))})
    ds = _dataset(store, ["v"], patch={"y": 24, "x": 24}, patch_stride={"y": 20, "x": 20})
    reports: list[Any] = []
    ds.add_stats_callback(reports.append)
    delivered = sum(b["v"].nbytes for b in _epoch(ds.train))
    (report,) = reports
    assert report.distinct_chunks == 2 * 4 * 4
    assert report.read_amplification == 1.0
    assert report.engine["bytes_delivered"] == delivered
    assert report.decoded_per_delivered == pytest.approx(src.nbytes / delivered)
    assert "read amplification 1.00" in report.line()
    ds.set_epoch(1)
    _epoch(ds.train)  # every chunk cached: nothing decoded
    assert reports[-1].read_amplification == 0.0
    assert ds.stats["decoded_per_delivered"] == pytest.approx(src.nbytes / (2 * delivered))


@pytest.mark.parametrize("layout", ["blocks", "checkerboard"])
def test_a_split_in_space_keeps_validation_patches_off_training_cells(tmp_path: Path, layout: str) -> None:
    """The leakage rule of spatial cross-validation: no patch of one split reads an element of a
    cell that belongs to another; every patch of a split lies inside its cells."""
    src = _source((2, 96, 96))
    store = _store(tmp_path, {"v": (src, (1, 16, 16), ("t", "y", "x"))})
    geoms = insitu.open_geometries(store)
    split = insitu.split_by_region(
        geoms["v"], (0.5, 0.25, 0.25), dims=("y", "x"), cell_chunks=2, layout=layout
    )
    ds = insitu.InSituDataset(
        store, split, geometries=[geoms["v"]], patch={"y": 12, "x": 12}, patch_stride={"y": 6, "x": 6}
    )
    cells = split.cell_map()  # cells of 32 x 32 elements
    owner = np.repeat(np.repeat(cells, 32, axis=0), 32, axis=1)[:96, :96]
    seen = {}
    for index, name in enumerate(("train", "val", "test")):
        origins = [o for b in _epoch(ds.view(name)) for o in b.patch_origins.tolist()]
        assert origins, name
        for _, y, x in origins:
            assert (owner[y : y + 12, x : x + 12] == index).all(), (name, y, x)
        seen[name] = {tuple(o) for o in origins}
    assert not (seen["train"] & seen["val"])
    # the JSON manifest round-trips into the same dataset order
    again = insitu.InSituDataset(
        store,
        insitu.SpatialSplit.from_json(split.to_json()),
        geometries=[geoms["v"]],
        patch={"y": 12, "x": 12},
        patch_stride={"y": 6, "x": 6},
    )
    assert [b.patch_origins.tolist() for b in _epoch(again.val)] == [
        b.patch_origins.tolist() for b in _epoch(ds.val)
    ]


def test_a_split_in_space_needs_patches_and_its_own_reference(tmp_path: Path) -> None:
    store = _store(
        tmp_path,
        {
            "a": (_source((2, 64, 64)), (1, 16, 16), ("t", "y", "x")),
            "b": (_source((2, 64, 64)), (1, 32, 32), ("t", "y", "x")),
        },
    )
    geoms = insitu.open_geometries(store)
    split = insitu.split_by_region(geoms["a"], (0.5, 0.5), dims=("y", "x"))
    with pytest.raises(ConfigError, match="a SpatialSplit splits patch positions in space: give patch="):
        insitu.InSituDataset(store, split, geometries=[geoms["a"]])
    with pytest.raises(ConfigError, match=r"spatial split was made on 'a'.*not on 'b'"):
        insitu.InSituDataset(store, split, geometries=[geoms["b"], geoms["a"]], patch={"y": 8, "x": 8})
