"""The memory model's answers, checked against byte counts worked out by hand."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
from conftest import field, write_array

import insitu
from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transforms import SlabSpec
from insitu.options import ReadOptions
from insitu.plan import memory_model
from insitu.plan.memory_model import (
    READAHEAD_CAP_MIN,
    READAHEAD_CAP_PER_THREAD,
    arena_bytes,
    dataset_bytes,
    exceeds_readahead_cap,
    pass_footprint,
    readahead_bytes,
    readahead_cap_bytes,
    readahead_rows,
    sample_bytes,
    slots_per_array,
)
from insitu.plan.reads import EpochPlan
from insitu.plan.splits import SplitManifest

# Array a: 100 samples of (3,) float32 in chunks of 10: 12 bytes a sample, 120 a slab, 10 slabs.
A = ArrayGeometry(name="a", path="a", shape=(100, 3), dtype=np.dtype("f4"), chunk_shape=(10, 3))
# Array b: 100 samples of () float64 in chunks of 20: 8 bytes a sample, 160 a slab, 5 slabs.
B = ArrayGeometry(name="b", path="b", shape=(100,), dtype=np.dtype("f8"), chunk_shape=(20,))
SPECS = {"a": SlabSpec((10, 3), np.dtype("f4")), "b": SlabSpec((20,), np.dtype("f8"))}
ARRAYS = {"a": A, "b": B}


def _plan(block_starts: list[int], *, batch_span: int, batch_size: int) -> EpochPlan:
    """An epoch plan reduced to what the read-ahead depends on: block bounds, batch span and size."""
    starts = np.array(block_starts, np.int64)
    plan = SimpleNamespace(
        block_starts=starts, n_blocks=len(block_starts) - 1, batch_span=batch_span, batch_size=batch_size
    )
    return cast(EpochPlan, plan)


def _options(**kw: Any) -> ReadOptions:
    values = dict(
        batch_size=16,
        block_chunks=3,
        max_inflight=32,
        prefetch=2,
        readahead_blocks=2,
        decode_threads=1,
        seed=0,
        shuffle=True,
        drop_last=False,
    )
    return ReadOptions(**(values | kw))


def test_sample_and_arena_bytes() -> None:
    assert sample_bytes([SPECS["a"]]) == 3 * 4
    assert sample_bytes(SPECS.values()) == 12 + 8  # one row of a batch over both labels
    assert sample_bytes([SlabSpec((4, 2, 3), np.dtype("i2"))]) == 2 * 3 * 2
    assert sample_bytes([]) == 0
    assert arena_bytes(SPECS["a"], 7) == 7 * 120
    assert arena_bytes(SPECS["b"], 0) == 0
    # The geometry and the spec it decodes to agree on a sample's bytes.
    assert A.sample_nbytes == SPECS["a"].sample_nbytes == 12
    assert A.slab_nbytes == SPECS["a"].nbytes == 120


def test_dataset_bytes_counts_the_slabs_the_labels_read_per_rank() -> None:
    manifest = cast(SplitManifest, SimpleNamespace(sample_range_of=lambda split: (20, 60)))
    # Samples [20, 60) of a: slabs 2..5, 480 bytes; b is not a label, so read at offset 0: slabs 1..2.
    assert dataset_bytes(ARRAYS, SPECS, [A], manifest) == {"a": 4 * 120, "b": 2 * 160}
    # A label 15 samples ahead reads up to sample 75: slabs 2..7 of a.
    assert dataset_bytes(ARRAYS, SPECS, [A, A.shift(15)], manifest)["a"] == 6 * 120
    # Three ranks share the slabs, rounded up: a's six make two each, b's two make one each.
    assert dataset_bytes(ARRAYS, SPECS, [A, A.shift(15)], manifest, world_size=3) == {
        "a": 2 * 120,
        "b": 1 * 160,
    }


def test_slots_per_array_splits_a_budget_in_proportion(caplog: pytest.LogCaptureFixture) -> None:
    need = {"a": 1200, "b": 800}
    # 1,000 bytes: a gets 600 (5 slabs of 120), b 400 (2 slabs of 160, 80 bytes left over).
    assert slots_per_array(ARRAYS, SPECS, 1000, need) == {"a": 5, "b": 2}
    assert slots_per_array(ARRAYS, SPECS, 0, need) == {"a": 0, "b": 0}
    # More than the dataset: never more slots than what caching it takes, nor than its slabs.
    assert slots_per_array(ARRAYS, SPECS, 1 << 30, need) == {"a": 10, "b": 5}
    assert slots_per_array(ARRAYS, SPECS, 1 << 30, {"a": 240, "b": 160}) == {"a": 2, "b": 1}
    with caplog.at_level(logging.INFO, logger="insitu"):
        assert slots_per_array(ARRAYS, SPECS, 200, need) == {"a": 1, "b": 0}  # b's 80 bytes < 160
    assert "holds no slab of array 'b' (160 bytes each)" in caplog.text


def test_readahead_rows_take_the_widest_window_of_blocks_plus_the_prefetch_queue() -> None:
    # Blocks of 5, 7, 8 and 1 samples. A batch spans 2 blocks and the read-ahead 1 more: the widest
    # 3 consecutive blocks hold 20 samples (blocks 0-2), and 2 queued batches of 6 add 12.
    plan = _plan([0, 5, 12, 20, 21], batch_span=2, batch_size=6)
    assert readahead_rows(plan, readahead_blocks=1, prefetch=2) == 20 + 12
    # 25 bytes a row (24 for (2, 3) float32, 1 for an int8 scalar): 32 rows hold 800 bytes.
    specs = [SlabSpec((4, 2, 3), np.dtype("f4")), SlabSpec((4,), np.dtype("i1"))]
    assert readahead_bytes(plan, specs, readahead_blocks=1, prefetch=2) == 32 * 25
    # A window wider than the epoch holds the whole epoch.
    assert readahead_rows(_plan([0, 3, 7], batch_span=1, batch_size=4), readahead_blocks=5, prefetch=1) == 11
    assert readahead_rows(_plan([0], batch_span=1, batch_size=4), readahead_blocks=2, prefetch=2) == 0


def test_the_readahead_cap_grows_with_the_decode_threads() -> None:
    # What keeps decoders fed under latency is their rate times the latency: per thread.
    assert readahead_cap_bytes(1) == readahead_cap_bytes(2) == READAHEAD_CAP_MIN == 64 << 20
    assert readahead_cap_bytes(8) == 8 * READAHEAD_CAP_PER_THREAD == 256 << 20
    assert readahead_cap_bytes(64) == 2 << 30
    row = 256
    cap = readahead_cap_bytes(8)
    assert not exceeds_readahead_cap(cap // row, row, 8)  # exactly the cap: allowed
    assert exceeds_readahead_cap(cap // row + 1, row, 8)
    assert exceeds_readahead_cap(cap // row + 1, row, 2)  # fewer threads: a lower cap
    assert not exceeds_readahead_cap(10**12, 0, 2)  # rows of no bytes never reach it


def test_the_readahead_cap_is_read_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine asks on every block it considers: a cap set later is the one that applies.
    monkeypatch.setattr(memory_model, "READAHEAD_CAP_MIN", 40 * 64)
    monkeypatch.setattr(memory_model, "READAHEAD_CAP_PER_THREAD", 10 * 64)
    assert not exceeds_readahead_cap(40, 64, 2)
    assert exceeds_readahead_cap(41, 64, 2)
    assert not exceeds_readahead_cap(50, 64, 5)


def test_pass_footprint() -> None:
    # a is pooled whole (10 of 10 slots), b streamed (2 of 5): only b's rows are read ahead.
    held = pass_footprint(ARRAYS, SPECS, [A, B], {"a": 10, "b": 2}, _options(), n_samples=100)
    assert held.batch_bytes == {"a": 16 * 12, "b": 16 * 8}
    assert held.batch == 320
    assert held.batches == 3  # the batch being filled and 2 prefetched
    assert held.readahead == 100 * 8  # 2 blocks of 3 chunks of 20 = 120 rows, at most the 100 samples
    assert held.largest_slab == 160
    assert held.arenas == 10 * 120 + 2 * 160
    assert held.besides_pool == 3 * 320 + 800 + 160
    assert held.total == 1520 + 1920


def test_pass_footprint_of_a_short_pass() -> None:
    # 10 samples: one batch of 10 rows is all a pass holds in batches; the read-ahead is bounded by
    # the samples too, and with both arrays streamed both labels read ahead.
    held = pass_footprint(ARRAYS, SPECS, [A, B], {"a": 0, "b": 0}, _options(), n_samples=10)
    assert held.batch_bytes == {"a": 10 * 12, "b": 10 * 8}
    assert held.batches == 1
    assert held.readahead == 10 * 12 + 10 * 8
    assert held.arenas == 0
    assert held.total == 200 + 200 + 160


def test_an_iterator_reports_the_models_readahead_bytes(tmp_path: Path) -> None:
    # 64 samples of (2, 3) float32 (24 bytes) in chunks of 4; blocks of 2 chunks (8 samples) and
    # batches of 8 without shuffling: every batch is one block, the window 1 + 2 blocks (24 rows),
    # and 2 prefetched batches add 16 rows: 40 rows of 24 bytes.
    write_array(tmp_path, "x", field(64, (2, 3), seed=1), (4, 2, 3))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
    with insitu.InSituDataset(
        store, manifest, batch_size=8, block_chunks=2, readahead_blocks=2, prefetch=2, shuffle=False
    ) as ds:
        it = iter(ds.train)
        try:
            assert it.readahead_bytes == 40 * 24
        finally:
            it.close()
