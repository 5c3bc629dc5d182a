"""End to end: every sample of a split once per epoch, values equal to the source array."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import field, write_array

import insitu
from insitu.errors import DatasetClosedError


def _check_epoch(
    view: insitu.DatasetView, sources: dict[str, np.ndarray], expected: np.ndarray
) -> np.ndarray:
    seen = []
    for batch in view:
        idx = batch.sample_indices
        for label, arr in batch.items():
            name, _, off = label.partition("+")
            rows = batch.read_indices[label]
            np.testing.assert_array_equal(rows, idx + (int(off) if off else 0))
            np.testing.assert_array_equal(arr, sources[name][rows], err_msg=label)
        seen.append(idx)
    order = np.concatenate(seen) if seen else np.zeros(0, dtype=np.int64)
    assert len(order) == len(np.unique(order)), "a sample was delivered twice"
    np.testing.assert_array_equal(np.sort(order), np.sort(expected))
    return order


def test_every_sample_once_with_source_values(era5: tuple[Path, dict[str, np.ndarray]], open_local) -> None:
    root, src = era5
    store = open_local(root)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["t2m"], (0.6, 0.2, 0.2))
    with insitu.InSituDataset(store, manifest, batch_size=5, block_chunks=3) as ds:
        for epoch in range(2):
            ds.set_epoch(epoch)
            for split in ("train", "val", "test"):
                _check_epoch(ds.view(split), src, manifest.samples(split))
            _check_epoch(ds.all, src, np.arange(60))


def test_order_is_deterministic_for_seed_and_epoch(era5) -> None:
    root, _src = era5
    geoms = insitu.open_geometries(insitu.open_store(root))
    manifest = insitu.split_by_chunk(geoms["t2m"], (0.8, 0.2))

    def orders(seed: int) -> list[np.ndarray]:
        with insitu.InSituDataset(str(root), manifest, batch_size=4, block_chunks=2, seed=seed) as ds:
            out = []
            for epoch in (0, 1):
                ds.set_epoch(epoch)
                out.append(np.concatenate([b.sample_indices for b in ds.train]))
                out.append(np.concatenate([b.sample_indices for b in ds.val]))
            return out

    a, b, c = orders(7), orders(7), orders(8)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], a[2]), "train order should change with the epoch"
    assert not np.array_equal(a[0], c[0]), "train order should change with the seed"
    np.testing.assert_array_equal(a[1], np.sort(a[1]))  # val is in natural order
    np.testing.assert_array_equal(a[1], a[3])


def test_windows_read_shifted_rows(era5, open_local) -> None:
    root, src = era5
    store = open_local(root)
    geoms = insitu.open_geometries(store)
    t = geoms["t2m"]
    labels = [t, t.shift(5), t.shift(5).shift(-7), geoms["u10"]]
    assert [g.label for g in labels] == ["t2m", "t2m+5", "t2m-2", "u10"]
    manifest = insitu.split_by_chunk(t, (0.5, 0.5))
    with insitu.InSituDataset(store, manifest, labels, batch_size=6, block_chunks=2) as ds:
        valid = np.arange(2, 55)
        for split in ("train", "val"):
            expected = np.intersect1d(manifest.samples(split), valid)
            seen = []
            for batch in ds.view(split):
                i = batch.sample_indices
                np.testing.assert_array_equal(batch["t2m+5"], src["t2m"][i + 5])
                np.testing.assert_array_equal(batch["t2m-2"], src["t2m"][i - 2])
                np.testing.assert_array_equal(batch["u10"], src["u10"][i])
                seen.append(i)
            np.testing.assert_array_equal(np.sort(np.concatenate(seen)), expected)


@pytest.mark.parametrize("drop_last", [False, True])
def test_batch_sizes_and_drop_last(era5, drop_last: bool) -> None:
    root, _ = era5
    geoms = insitu.open_geometries(insitu.open_store(root))
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
    with insitu.InSituDataset(str(root), manifest, batch_size=7, drop_last=drop_last) as ds:
        sizes = [b.size for b in ds.train]
        assert len(sizes) == len(ds.train)
        if drop_last:
            assert sizes == [7] * (60 // 7)
        else:
            assert sizes == [7] * (60 // 7) + [60 % 7]
        order = ds.train.sample_order()
        assert len(order) == sum(sizes)


@pytest.mark.parametrize("budget", ["auto", 0])
def test_layouts(tmp_path: Path, budget: Any) -> None:
    """v2, v3, sharded v3, F order, big-endian, transposed, blosc/gzip, a non-zero sample axis, missing
    chunks; decoded into the pool (``"auto"``: all of it fits) or streamed into the batches (``0``)."""
    n = 23
    data = field(n, (5, 7), seed=3)
    cases = {
        "v3": dict(chunks=(3, 5, 7)),
        "v3_multi": dict(chunks=(2, 2, 3)),
        "v2": dict(chunks=(4, 5, 7), zarr_format=2),
        "v2_multi_F": dict(chunks=(4, 3, 4), zarr_format=2, order="F"),
        "v2_bigendian": dict(chunks=(5, 5, 7), zarr_format=2, dtype=">f4"),
        "sharded": dict(chunks=(1, 5, 7), shards=(4, 5, 7)),
        "sharded_multi": dict(chunks=(2, 3, 4), shards=(4, 6, 8)),
        "blosc": dict(chunks=(3, 5, 7), compressor=zarr.codecs.BloscCodec(cname="lz4", shuffle="bitshuffle")),
        "gzip_v2": dict(chunks=(3, 5, 7), zarr_format=2, compressor={"id": "gzip", "level": 1}),
        "raw": dict(chunks=(3, 5, 7), compressor=None),
    }
    for name, kw in cases.items():
        fmt = kw.pop("zarr_format", 3)
        dt = kw.pop("dtype", None)
        root = tmp_path / name
        write_array(root, "x", data.astype(dt) if dt else data, zarr_format=fmt, **kw)
    # transposed storage: a v3 transpose codec
    g = zarr.open_group(tmp_path / "transposed", mode="a")
    a = g.create_array(
        "x",
        shape=data.shape,
        chunks=(3, 5, 7),
        dtype="f4",
        filters=[zarr.codecs.TransposeCodec(order=(2, 0, 1))],
    )
    a[...] = data
    cases["transposed"] = {}
    # sample axis 1 (e.g. OME-NGFF samples z)
    moved = np.moveaxis(data, 0, 1).copy()  # (5, 23, 7)
    write_array(tmp_path / "axis1", "x", moved, (2, 4, 7))
    # missing chunks: never written -> fill value
    g = zarr.open_group(tmp_path / "missing", mode="a")
    m = g.create_array("x", shape=data.shape, chunks=(3, 5, 7), dtype="f4", fill_value=-1.0)
    m[:9] = data[:9]
    expected_missing = data.copy()
    expected_missing[9:] = -1.0

    for name in [*cases, "axis1", "missing"]:
        store = zarr.storage.LocalStore(tmp_path / name, read_only=True)
        axis = 1 if name == "axis1" else 0
        geoms = insitu.open_geometries(store, sample_axis=axis)
        manifest = insitu.split_by_chunk(geoms["x"], (0.5, 0.5))
        src = expected_missing if name == "missing" else data
        with insitu.InSituDataset(
            store, manifest, batch_size=4, block_chunks=2, cache_budget_bytes=budget
        ) as ds:
            for split in ("train", "val"):
                got = {}
                for b in ds.view(split):
                    for i, row in zip(b.sample_indices, b["x"], strict=True):
                        got[int(i)] = row
                assert sorted(got) == list(manifest.samples(split)), name
                for i, row in got.items():
                    np.testing.assert_array_equal(row, src[i], err_msg=f"{name} sample {i}")
            streamed = ds.stats["slabs_streamed"]
            assert (streamed > 0) == (budget == 0), name


def test_sample_axis_by_dimension_name(tmp_path: Path) -> None:
    data = field(12, (4, 3), seed=0)
    vol = np.moveaxis(data, 0, 2).copy()  # (4, 3, 12): z last
    write_array(tmp_path, "img", vol, (2, 3, 5), dimension_names=("y", "x", "z"))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, sample_axis="z")
    assert geoms["img"].sample_axis == 2
    assert geoms["img"].sample_shape == (4, 3)
    manifest = insitu.split_by_chunk(geoms["img"], (1.0,))
    with insitu.InSituDataset(store, manifest, batch_size=5) as ds:
        for b in ds.train:
            np.testing.assert_array_equal(b["img"], data[b.sample_indices])


def test_break_mid_epoch_then_next_epoch_works(era5, open_local) -> None:
    root, src = era5
    store = open_local(root)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["t2m"], (0.8, 0.2))
    slab = geoms["t2m"].slab_nbytes
    # Room for exactly two blocks of two chunks (+1 for a straddling row): a leaked pin would stall.
    with insitu.InSituDataset(
        store, manifest, [geoms["t2m"]], batch_size=3, block_chunks=2, cache_budget_bytes=5 * slab
    ) as ds:
        for _ in range(3):
            for i, _ in enumerate(ds.train):
                if i == 2:
                    break
        ds.set_epoch(1)
        _check_epoch(ds.train, {"t2m": src["t2m"]}, manifest.samples("train"))
        _check_epoch(ds.val, {"t2m": src["t2m"]}, manifest.samples("val"))


def test_validation_inside_a_training_epoch(era5, open_local) -> None:
    root, src = era5
    store = open_local(root)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["t2m"], (0.6, 0.2, 0.2))
    with insitu.InSituDataset(store, manifest, batch_size=4, block_chunks=2) as ds:
        train_seen = []
        for i, batch in enumerate(ds.train):
            np.testing.assert_array_equal(batch["t2m"], src["t2m"][batch.sample_indices])
            train_seen.append(batch.sample_indices)
            if i in (1, 4):
                _check_epoch(ds.val, src, manifest.samples("val"))
        np.testing.assert_array_equal(np.sort(np.concatenate(train_seen)), manifest.samples("train"))


def test_nested_iteration_with_a_tight_budget_completes(era5) -> None:
    root, src = era5
    geoms = insitu.open_geometries(insitu.open_store(root))
    manifest = insitu.split_by_chunk(geoms["t2m"], (0.5, 0.5))
    slab = geoms["t2m"].slab_nbytes
    with insitu.InSituDataset(
        str(root), manifest, [geoms["t2m"]], batch_size=4, block_chunks=1, cache_budget_bytes=3 * slab
    ) as ds:
        train = []
        for batch in ds.train:
            train.append(batch.sample_indices)
            if len(train) == 1:  # a whole validation pass while the train pass holds its blocks
                _check_epoch(ds.val, src, manifest.samples("val"))
        np.testing.assert_array_equal(np.sort(np.concatenate(train)), manifest.samples("train"))
        assert ds.stats["peak_resident_bytes"] <= 3 * slab


def test_closed_dataset_refuses_iteration(era5) -> None:
    root, _ = era5
    geoms = insitu.open_geometries(insitu.open_store(root))
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
    ds = insitu.InSituDataset(str(root), manifest, batch_size=4)
    view = ds.train
    ds.close()
    with pytest.raises(DatasetClosedError):
        iter(view)


def test_rank_sharding_disjoint_and_equal(era5) -> None:
    root, _src = era5
    geoms = insitu.open_geometries(insitu.open_store(root))
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
    seen = []
    counts = []
    for rank in range(3):
        with insitu.InSituDataset(
            str(root), manifest, [geoms["t2m"]], batch_size=4, rank=rank, world_size=3, seed=5
        ) as ds:
            idx = [b.sample_indices for b in ds.train]
            counts.append(len(idx))
            seen.append(np.concatenate(idx))
    assert len(set(counts)) == 1
    chunk_sets = [set((s // 4).tolist()) for s in seen]
    assert not (chunk_sets[0] & chunk_sets[1])
    assert not (chunk_sets[1] & chunk_sets[2])
    allseen = np.concatenate(seen)
    assert len(allseen) == len(np.unique(allseen))


def test_two_threads_iterate_views_concurrently(era5) -> None:
    import threading

    root, src = era5
    store = insitu.open_store(root)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["t2m"], (0.5, 0.5))
    errors: list[BaseException] = []
    seen: dict[str, list[int]] = {"train": [], "val": []}
    with insitu.InSituDataset(store, manifest, batch_size=4, block_chunks=2) as ds:

        def consume(split: str) -> None:
            try:
                for b in ds.view(split):
                    np.testing.assert_array_equal(b["u10"], src["u10"][b.sample_indices])
                    seen[split].extend(b.sample_indices.tolist())
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=consume, args=(s,)) for s in ("train", "val")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert not errors, errors
    for split in ("train", "val"):
        assert sorted(seen[split]) == manifest.samples(split).tolist()


def test_close_mid_epoch_stops_every_decode_thread(era5) -> None:
    # Decode threads are the dataset's own; closing it while a load is under way must not leave
    # any behind (a training script builds datasets repeatedly, e.g. per hyperparameter trial).
    import threading

    root, _ = era5
    geoms = insitu.open_geometries(insitu.open_store(root))
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
    before = {t for t in threading.enumerate() if t.name.startswith("insitu-decode")}
    ds = insitu.InSituDataset(str(root), manifest, batch_size=4, block_chunks=1, decode_threads=3)
    it = iter(ds.train)
    next(it)
    ours = {t for t in threading.enumerate() if t.name.startswith("insitu-decode")} - before
    assert len(ours) == 3
    ds.close()
    assert not any(t.is_alive() for t in ours)
