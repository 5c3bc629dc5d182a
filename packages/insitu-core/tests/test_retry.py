"""One retry owner: the engine retries a plain zarr store, and only a plain one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, Store
from zarr.storage import MemoryStore, WrapperStore

import insitu
from insitu.store.capabilities import RetriesItself
from insitu.store.fetch import ChunkFetcher
from insitu.store.retry import RetryPolicy, call_with_retries
from insitu.testing import is_chunk_key

QUICK = RetryPolicy(retries=3, backoff_s=0.001, max_backoff_s=0.002)


class FailingStore(WrapperStore[Any]):
    """Counts every chunk ``get`` that reaches it and fails the first ``times`` with ``error``."""

    def __init__(self, store: Store, error: BaseException, times: int = 1_000_000) -> None:
        super().__init__(store)
        self.error = error
        self.times = times
        self.attempts = 0

    def _with_store(self, store: Store) -> FailingStore:
        return FailingStore(store, self.error, self.times)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if not is_chunk_key(key):  # metadata reads pass: only chunk reads are counted and failed
            return await self._store.get(key, prototype, byte_range)
        self.attempts += 1
        if self.attempts <= self.times:
            raise self.error
        return await self._store.get(key, prototype, byte_range)


class SelfRetryingStore(FailingStore):
    """The same, declaring that it applies a retry policy itself."""

    policy = RetryPolicy(retries=2)

    @property
    def insitu_retry_policy(self) -> RetryPolicy:
        return self.policy


def _array(values: np.ndarray) -> MemoryStore:
    store = MemoryStore()
    group = zarr.open_group(store, mode="w")
    group.create_array("v", shape=values.shape, chunks=(4,), dtype=values.dtype)[...] = values
    return store


def _fetch(fetcher: ChunkFetcher, key: str = "v/c/0") -> Any:
    return asyncio.run(fetcher.get(key))


@pytest.mark.parametrize("error", [ConnectionError("reset"), TimeoutError("slow")])
def test_a_plain_store_is_retried_by_the_engine_exactly_the_policys_attempts(error: BaseException) -> None:
    store = FailingStore(_array(np.arange(8.0)), error)
    fetcher = ChunkFetcher(store, QUICK)
    with pytest.raises(type(error)):
        _fetch(fetcher)
    assert store.attempts == 4  # retries=3: the first attempt and three more
    assert fetcher.retries == 3


def test_a_plain_store_that_recovers_is_read() -> None:
    inner = _array(np.arange(8.0))
    store = FailingStore(inner, ConnectionError("reset"), times=2)
    fetcher = ChunkFetcher(store, QUICK)
    assert bytes(_fetch(fetcher)) == bytes(_fetch(ChunkFetcher(inner, QUICK)))
    assert store.attempts == 3
    assert fetcher.retries == 2


@pytest.mark.parametrize(
    "error", [PermissionError("403"), FileNotFoundError("bucket"), ValueError("bad option"), OSError("500?")]
)
def test_permanent_errors_are_never_retried(error: BaseException) -> None:
    store = FailingStore(_array(np.arange(8.0)), error)
    fetcher = ChunkFetcher(store, QUICK)
    with pytest.raises(type(error)):
        _fetch(fetcher)
    assert store.attempts == 1
    assert fetcher.retries == 0


def test_a_store_that_retries_itself_is_called_once() -> None:
    store = SelfRetryingStore(_array(np.arange(8.0)), ConnectionError("reset"))
    assert isinstance(store, RetriesItself)
    fetcher = ChunkFetcher(store, QUICK)
    assert fetcher.capabilities.retries_itself
    with pytest.raises(ConnectionError):
        _fetch(fetcher)
    assert store.attempts == 1, "the store's own retries are the only ones"
    assert fetcher.retries == 0
    assert fetcher.store_retries is None  # this store keeps no count


def test_the_engine_retries_a_plain_store_during_an_epoch() -> None:
    values = np.arange(16.0)
    store = FailingStore(_array(values), ConnectionError("reset"), times=2)
    geoms = insitu.open_geometries(store, variables=["v"])
    manifest = insitu.split_by_chunk(next(iter(geoms.values())), (1.0,))
    seen: list[int] = []
    with insitu.InSituDataset(store, manifest, geoms, batch_size=4, retry=QUICK) as ds:
        for batch in ds.train:
            (got,) = batch.values()
            np.testing.assert_array_equal(got, values[batch.sample_indices])
            seen.extend(batch.sample_indices.tolist())
        assert ds.stats["retries"] == 2  # the retries are counted where users look
    assert sorted(seen) == list(range(16))
    assert store.attempts == 4 + 2  # four chunks, two of the attempts failed and were repeated


def test_an_epoch_over_a_permanently_failing_plain_store_makes_the_policys_attempts() -> None:
    store = FailingStore(_array(np.arange(4.0)), ConnectionError("reset"))
    geoms = insitu.open_geometries(store, variables=["v"])
    manifest = insitu.split_by_chunk(next(iter(geoms.values())), (1.0,))
    with (
        insitu.InSituDataset(store, manifest, geoms, batch_size=4, retry=QUICK) as ds,
        pytest.raises(insitu.StoreUnavailableError, match=r"'v/c/0'.*ConnectionError: reset"),
    ):
        list(ds.train)
    assert store.attempts == 4


def test_local_files_are_read_without_the_store(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    zarr.create_array(zarr.storage.LocalStore(path), shape=(8,), chunks=(4,), dtype="f8")[...] = np.arange(
        8.0
    )
    fetcher = ChunkFetcher(zarr.storage.LocalStore(path), QUICK)
    assert fetcher.reads_files
    assert bytes(_fetch(fetcher, "c/0")) == (path / "c" / "0").read_bytes()


def _counting(results: list[BaseException | str]) -> tuple[Callable[[], Awaitable[str]], list[int]]:
    calls = [0]

    async def request() -> str:
        calls[0] += 1
        outcome = results.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return request, calls


def test_call_with_retries_reports_each_retry() -> None:
    request, calls = _counting([ConnectionError("a"), TimeoutError("b"), "done"])
    seen: list[str] = []
    got = asyncio.run(call_with_retries(request, QUICK, on_retry=lambda e: seen.append(str(e))))
    assert got == "done"
    assert calls == [3]
    assert seen == ["a", "b"]


def test_the_per_attempt_timeout_ends_an_attempt_and_counts_as_transient() -> None:
    policy = RetryPolicy(retries=1, backoff_s=0.001, timeout_s=0.05)
    attempts = 0

    async def stalls_once() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            await asyncio.Event().wait()  # never set: only the timeout ends this attempt
        return "second"

    assert asyncio.run(call_with_retries(stalls_once, policy)) == "second"
    assert attempts == 2


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("retries", -1, "retries must be >= 0"),
        ("backoff_s", -0.1, "backoff_s and max_backoff_s must be >= 0"),
        ("timeout_s", 0, "timeout_s must be > 0"),
        ("connect_timeout_s", 0, "connect_timeout_s must be > 0"),
    ],
)
def test_the_policy_refuses_impossible_values(field: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**{field: value})


def test_the_longest_call_covers_every_attempt_and_wait() -> None:
    policy = RetryPolicy(retries=2, max_backoff_s=1.0, timeout_s=10.0, connect_timeout_s=2.0)
    assert policy.attempts == 3
    assert policy.longest_call_s() == 3 * 12.0 + 2 * 1.0
    assert RetryPolicy(timeout_s=None).longest_call_s() is None
    for attempt in range(8):
        assert 0 <= policy.delay(attempt) <= policy.max_backoff_s
