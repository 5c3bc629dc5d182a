"""Each stored chunk is fetched and decoded once per epoch, even when shared."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import CountingStore, field, write_array
from zarr.storage import LocalStore

import insitu


def _chunk_keys(root: Path, name: str) -> set[str]:
    return {
        str(p.relative_to(root)) for p in (root / name).rglob("*") if p.is_file() and p.name != "zarr.json"
    }


def test_each_chunk_read_once_per_epoch_with_windows_and_shared_splits(era5) -> None:
    root, _src = era5
    store = CountingStore(LocalStore(root, read_only=True))
    geoms = insitu.open_geometries(store)
    t, u = geoms["t2m"], geoms["u10"]
    # u10 has 3 samples per chunk while the splits follow t2m's 4: some u10 rows straddle two splits;
    # t2m+5 reads rows of the next chunks, which other blocks also need.
    manifest = insitu.split_by_chunk(t, (0.6, 0.2, 0.2))
    with insitu.InSituDataset(store, manifest, [t, t.shift(5), u], batch_size=4, block_chunks=2) as ds:
        for split in ("train", "val", "test"):
            for _ in ds.view(split):
                pass
        gets = store.chunk_gets()
        # Valid anchors are 0..54 (t2m+5 must stay inside 60 samples): every t2m chunk row is
        # needed, and u10 rows 0..18 (row 19 holds samples 57-59 only). Each read exactly once.
        expected = _chunk_keys(root, "t2m") | {k for k in _chunk_keys(root, "u10") if k.split("/")[2] != "19"}
        assert set(gets) == expected
        assert max(gets.values()) == 1, {k: v for k, v in gets.items() if v > 1}
        assert ds.stats["chunks_decoded"] == len(gets)
        # A second epoch is served from the pool: no new reads at all.
        ds.set_epoch(1)
        for _ in ds.train:
            pass
        assert store.chunk_gets() == gets


def test_local_fast_path_counts_reads_once(era5) -> None:
    root, _ = era5
    store = LocalStore(root, read_only=True)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["t2m"], (0.5, 0.5))
    with insitu.InSituDataset(store, manifest, batch_size=8, block_chunks=3) as ds:
        for split in ("train", "val"):
            for _ in ds.view(split):
                pass
        n_chunks = len(_chunk_keys(root, "t2m")) + len(_chunk_keys(root, "u10"))
        assert ds.stats["reads"] == n_chunks
        assert ds.stats["chunks_decoded"] == n_chunks


def test_sharded_reads_coalesce_inner_chunks(tmp_path: Path) -> None:
    data = field(32, (4, 6), seed=4)
    write_array(tmp_path, "x", data, (1, 4, 6), shards=(8, 4, 6))
    store = CountingStore(LocalStore(tmp_path, read_only=True))
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
    with insitu.InSituDataset(store, manifest, batch_size=8, block_chunks=8, shuffle=False) as ds:
        got = {}
        for b in ds.train:
            for i, row in zip(b.sample_indices, b["x"], strict=True):
                got[int(i)] = row
    assert sorted(got) == list(range(32))
    np.testing.assert_array_equal(np.stack([got[i] for i in range(32)]), data)
    shard_gets = store.chunk_gets()
    # 4 shards: one index read and one coalesced range read for the 8 inner chunks of each.
    assert sorted(shard_gets) == [f"x/c/{i}/0/0" for i in range(4)]
    assert set(shard_gets.values()) == {2}
    ranges = [r for k, r in store.reads if k.startswith("x/c/")]
    assert sum(type(r).__name__ == "RangeByteRequest" for r in ranges) == 4


class MultiRangeStore(CountingStore):
    """A store that also serves several byte ranges of one object per call (as obstore can)."""

    def __init__(self, store) -> None:
        super().__init__(store)
        self.multi_calls: list[tuple[str, list[tuple[int, int]]]] = []

    async def insitu_get_ranges(self, key: str, ranges: list[tuple[int, int]]):
        from zarr.abc.store import RangeByteRequest
        from zarr.buffer import default_buffer_prototype

        self.multi_calls.append((key, list(ranges)))
        out = []
        for start, end in ranges:
            buf = await self._store.get(key, default_buffer_prototype(), RangeByteRequest(start, end))
            if buf is None:
                return None
            out.append(buf.to_bytes())
        return out


def test_sparse_shard_reads_use_one_multi_range_request(tmp_path: Path) -> None:
    data = field(32, (4, 6), seed=4)
    write_array(tmp_path, "x", data, (1, 4, 6), shards=(16, 4, 6))
    store = MultiRangeStore(LocalStore(tmp_path, read_only=True))
    geoms = insitu.open_geometries(store)
    # Chunks dealt at random between two splits: the inner chunks train wants from a shard are
    # scattered, so they form several runs (a zero coalescing gap keeps runs apart).
    manifest = insitu.split_by_chunk(geoms["x"], (0.5, 0.5), contiguous=False, seed=3)
    with insitu.InSituDataset(store, manifest, batch_size=4, block_chunks=32, shuffle=False) as ds:
        ds.engine.loaders["x"].reader.coalesce_gap = 0
        got = {int(i): row for b in ds.train for i, row in zip(b.sample_indices, b["x"], strict=True)}
    assert sorted(got) == manifest.samples("train").tolist()
    for i, row in got.items():
        np.testing.assert_array_equal(row, data[i])
    assert store.multi_calls, "the multi-range path was not used"
    assert {key for key, _ in store.multi_calls} <= {"x/c/0/0/0", "x/c/1/0/0"}
    assert all(len(r) > 1 for _, r in store.multi_calls)


def test_bytes_read_counts_reads_made_through_zarrs_pipeline(tmp_path: Path) -> None:
    """An array no registered decoder handles is read by zarr through the engine's fetcher; its
    bytes count in ``bytes_read`` like the direct path's (equal totals either way)."""
    write_array(tmp_path, "a", field(16, (3,)), (4, 3))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, ["a"])
    manifest = insitu.split_by_chunk(geoms["a"], (1.0,), names=["train"])
    totals = {}
    for decoders in (None, []):  # no decoder at all: zarr reads every chunk
        with insitu.InSituDataset(store, manifest, geoms, batch_size=4, decoders=decoders) as ds:
            list(ds.train)
            totals[str(decoders)] = (ds.stats["reads"], ds.stats["bytes_read"])
    direct, via_zarr = totals.values()
    assert via_zarr[1] > 0
    assert via_zarr[1] == direct[1]
