"""The live counters are typed records snapshotted into Stats; engine parts meet through public names."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import field, write_array
from zarr.storage import MemoryStore, WrapperStore

import insitu
from insitu.engine.concurrency import AdaptiveLimiter, ConcurrencyController
from insitu.engine.fetch_queue import FetchQueue
from insitu.engine.jobs import ReadItem
from insitu.options import BadChunkPolicy
from insitu.stats import (
    BadChunkKind,
    CacheChecks,
    EngineCounters,
    FetchCounters,
    InflightGauges,
    PoolGauges,
    Stats,
)
from insitu.store.fetch import ChunkFetcher
from insitu.store.retry import RetryPolicy

RECORDS = (EngineCounters, FetchCounters, CacheChecks, PoolGauges, InflightGauges)
RATES = ("hit_rate", "stall_fraction", "samples_per_s", "decoded_per_delivered")
CORE = Path(insitu.__file__).parent


def _names(cls: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def test_every_stats_field_is_a_field_of_one_record_in_the_same_order() -> None:
    # A counter added to a record and not to Stats (or the other way round) fails here.
    from_records = [name for record in RECORDS for name in _names(record)]
    assert _names(Stats) == [*from_records, *RATES]


def test_a_snapshot_of_records_copies_them_and_derives_the_rates() -> None:
    live = EngineCounters(slab_hits=3, slabs_loaded=1, samples=40, iterating_s=2.0, waiting_s=0.5)
    stats = Stats.from_records(live, FetchCounters(retries=2), PoolGauges(budget_bytes=64))
    live.slab_hits += 1  # the snapshot is a copy: the engine counts on
    assert (stats.slab_hits, stats.retries, stats.budget_bytes) == (3, 2, 64)
    assert stats.hit_rate == 0.75
    assert stats.stall_fraction == 0.25
    assert stats.samples_per_s == 20.0
    assert stats.cache_verified_slabs == 0  # a record not given reads as zero


def test_a_bad_chunk_counts_in_bad_chunks_and_in_the_counter_of_its_kind() -> None:
    counters = EngineCounters()
    for kind in (BadChunkKind.SIZE, BadChunkKind.DECODE, BadChunkKind.DECODE, BadChunkKind.READ):
        counters.count_bad_chunk(kind)
    assert counters.bad_chunks == 4
    assert (counters.bad_chunks_size, counters.bad_chunks_decode, counters.bad_chunks_read) == (1, 2, 1)


def test_cache_checks_read_a_persisted_caches_counts() -> None:
    checks = CacheChecks.from_counts({"verified": 5, "stale": 1, "corrupt": 2})
    assert dataclasses.astuple(checks) == (5, 1, 2)


class CountingStore(WrapperStore[Any]):
    """A store that reports retries and timeouts of its own, as a self-retrying store does."""

    insitu_retries = 7
    insitu_timeouts = 2


def test_a_fetchers_totals_add_the_stores_own_count_to_its_own() -> None:
    fetcher = ChunkFetcher(CountingStore(MemoryStore()), RetryPolicy())
    fetcher.counters.retries, fetcher.counters.timeouts = 1, 1
    assert (fetcher.retries, fetcher.timeouts) == (1, 1)  # its own, as before
    assert fetcher.totals() == FetchCounters(retries=8, timeouts=3)
    # Congestion: its own retries and timeouts, and the store's retries.
    assert fetcher.congestion_signals() == 9
    plain = ChunkFetcher(MemoryStore(), RetryPolicy())
    assert plain.totals() == FetchCounters()
    assert plain.congestion_signals() == 0


class ListReader:
    """A stand-in loader: records the GETs the queue hands it, fails the ones it is told to."""

    def __init__(self, failing: set[str]) -> None:
        self.failing = failing
        self.served: list[str] = []
        self.failed: list[tuple[str, str]] = []

    async def fetch_then_decode(self, item: ReadItem, priority: int) -> None:
        await asyncio.sleep(0)
        if item.read.key in self.failing:
            raise RuntimeError(item.read.key)
        self.served.append(item.read.key)

    def fail_read(self, item: ReadItem, error: BaseException) -> None:
        self.failed.append((item.read.key, str(error)))


def test_the_fetch_queue_serves_gets_in_priority_order_through_the_readers_public_methods() -> None:
    async def run() -> ListReader:
        tasks: list[asyncio.Task[None]] = []
        limiter = AdaptiveLimiter(ConcurrencyController(1))
        queue = FetchQueue(limiter, lambda coro: tasks.append(asyncio.ensure_future(coro)), workers=1)
        reader = ListReader(failing={"b"})
        for priority, key in [(2, "c"), (0, "a"), (1, "b"), (0, "a2")]:
            queue.put(priority, reader, ReadItem(_read(key), [], []))
        assert queue.has_queued()
        assert queue.outstanding == 4
        while len(reader.served) + len(reader.failed) < 4:
            await asyncio.sleep(0)
        assert queue.outstanding == 0
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return reader

    reader = asyncio.run(run())
    assert reader.served == ["a", "a2", "c"]  # lower priority first, in queueing order within one
    assert reader.failed == [("b", "b")]  # a GET that raised reaches its reader, the worker goes on


def _read(key: str) -> Any:
    from insitu.arrays.layout import Read

    return Read(key, None, ())


def test_the_dataset_stats_come_from_the_engines_records(tmp_path: Path) -> None:
    write_array(tmp_path, "x", field(24, (4,)), (6, 4))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, ["x"])
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
    with insitu.InSituDataset(store, manifest, geoms, batch_size=4) as ds:
        list(ds.train)
        records = ds.engine.counters()
        assert {type(r) for r in records} == {EngineCounters, FetchCounters, PoolGauges, InflightGauges}
        assert ds.stats == Stats.from_records(*records)  # no persisted cache: its checks are zero
        assert ds.stats.reads == 4
        assert ds.stats.inflight_limit == 0
        assert ds.inflight_trajectory == ()
        # Each loader was given its settings and the engine's parts, not the engine.
        loader = ds.engine.loaders["x"]
        assert not any(v is ds.engine for v in vars(loader).values())
        assert loader.settings.on_bad_chunk is BadChunkPolicy.RAISE


def test_a_remote_engine_reports_its_limit_through_its_own_methods() -> None:
    store = MemoryStore()
    write_array(store, "x", field(24, (4,)), (6, 4))
    geoms = insitu.open_geometries(store, ["x"])
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
    with insitu.InSituDataset(store, manifest, geoms, batch_size=4, max_inflight=8) as ds:
        list(ds.train)
        engine = ds.engine
        assert engine.adapts_inflight
        assert engine.inflight_limit == ds.stats.inflight_limit == 8  # started at min(cap, 32)
        assert engine.outstanding_reads == 0  # the pass is over: nothing queued or in flight
        assert ds.inflight_trajectory == engine.inflight_trajectory()
        assert ds.inflight_trajectory[0].reason == "start"


def test_core_sets_no_attribute_by_a_name_it_builds() -> None:
    # Counters are fields incremented by name; a setattr with a computed name hides them from
    # readers, type checkers and grep.
    offenders = [
        f"{path.relative_to(CORE)}:{n}"
        for path in sorted(CORE.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"(?<![\w.])setattr\(", line)
    ]
    assert offenders == []


@pytest.mark.parametrize("policy", ["raise", "nan", "skip"])
def test_each_loader_is_told_the_bad_chunk_policy_and_its_fill(tmp_path: Path, policy: str) -> None:
    write_array(tmp_path, "x", field(12, (4,)), (6, 4))
    store = insitu.open_store(tmp_path)
    geoms = insitu.open_geometries(store, ["x"])
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
    with insitu.InSituDataset(store, manifest, geoms, batch_size=4, on_bad_chunk=policy) as ds:
        settings = ds.engine.loaders["x"].settings
        assert settings.on_bad_chunk.value == policy
        assert settings.track_sources is False
        if policy == "raise":
            assert settings.error_fill is None
        else:
            assert np.isnan(settings.error_fill)  # a float array's bad chunk reads as NaN
