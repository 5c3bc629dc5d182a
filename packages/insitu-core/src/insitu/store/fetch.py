"""Getting chunk bytes out of a store, and the one retry policy for transient store errors.

For zarr's ``LocalStore`` the engine reads files inside its decode threads
(read + decode in one task, no event-loop hop per chunk): on local disk the
per-chunk asyncio cost would otherwise rival the decode itself. Every other
store goes through ``Store.get`` (or the store's raw-bytes read, when it has
one) on the event loop, under one concurrency budget.

Exactly one layer retries a transient error. A store that retries by itself
(:class:`insitu.store.capabilities.RetriesItself`, as insitu-stores' obstore and
Icechunk stores do, through their clients' own retry settings) is called
once per read and its errors pass through. Any other store, insitu-stores'
fsspec store included, is retried here, under the dataset's
:class:`RetryPolicy`.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from zarr.abc.store import RangeByteRequest, Store, SuffixByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.storage import LocalStore

from insitu.errors import StoreTimeoutError, StoreUnavailableError
from insitu.stats import FetchCounters
from insitu.store.capabilities import (
    MultiRangeReads,
    RawReads,
    ReportsRetries,
    RetriesItself,
    capabilities_of,
    local_file_version,
    object_version,
)
from insitu.store.retry import RetryPolicy, call_with_retries

T = TypeVar("T")


class ChunkFetcher:
    """Fetches object bytes (whole or a range) from one store, retrying unless the store does.

    ``counters`` holds the retries this fetcher made and the requests that timed out (none for a
    store that retries by itself; :attr:`store_retries` reports that store's own count when it
    keeps one, and :meth:`totals` adds the two).
    """

    def __init__(self, store: Store, retry: RetryPolicy) -> None:
        self.store = store
        self.retry = retry
        self.counters = FetchCounters()
        # Asked once here: a protocol check per GET would cost microseconds per chunk.
        self.capabilities = capabilities_of(store)
        self._raw_get = cast(RawReads, store).insitu_get if self.capabilities.raw_reads else None
        self._root: Path | None = Path(store.root) if isinstance(store, LocalStore) else None
        # A plain string prefix: pathlib's ``/`` costs ~20 us per chunk.
        self._root_str = os.path.join(str(self._root), "") if self._root is not None else None
        self._prototype = default_buffer_prototype()
        self._local = threading.local()

    @property
    def reads_files(self) -> bool:
        """True when reads happen synchronously in decode threads (local files)."""
        return self._root is not None

    @property
    def policy(self) -> RetryPolicy:
        """The policy this store's reads run under: its own for a store that retries itself."""
        if self.capabilities.retries_itself:
            return cast(RetriesItself, self.store).insitu_retry_policy
        return self.retry

    @property
    def store_name(self) -> str:
        """The store as messages name it: its URL where it has one (credentials hidden by it)."""
        return str(getattr(self.store, "url", None) or self.store)

    def unavailable(
        self, key: str | None, error: BaseException, array: str | None = None
    ) -> StoreUnavailableError:
        """What a failed read of ``key`` raises once the policy is spent: the outage, naming the
        store, the key and, for a timeout, the limit (a store's own error is kept as the cause)."""
        if isinstance(error, StoreUnavailableError):
            return error
        reason = str(error) or type(error).__name__
        if isinstance(error, TimeoutError):
            policy = self.policy
            tries = f"per attempt, {policy.attempts} attempt{'s' if policy.attempts > 1 else ''}"
            detail = tries if reason == "TimeoutError" else f"{tries}: {reason}"
            out: StoreUnavailableError = StoreTimeoutError(
                self.store_name, key, policy.timeout_s, detail, array=array
            )
        else:
            out = StoreUnavailableError(
                self.store_name, key, f"{type(error).__name__}: {reason}", array=array
            )
        out.__cause__ = error
        return out

    @property
    def retries(self) -> int:
        """Retries this fetcher made (none for a store that retries by itself)."""
        return self.counters.retries

    @property
    def timeouts(self) -> int:
        """Requests of this fetcher that ran past the policy's ``timeout_s`` (retried or not)."""
        return self.counters.timeouts

    def totals(self) -> FetchCounters:
        """Retries and timeouts of transient store errors, by whichever single layer retried them:
        this fetcher for plain stores, the store itself for a store that retries and counts."""
        return FetchCounters(
            retries=self.counters.retries + (self.store_retries or 0),
            timeouts=self.counters.timeouts + (self.store_timeouts or 0),
        )

    def congestion_signals(self) -> int:
        """Retries and timeouts seen so far, the store's own retries included (each new one tells
        the concurrency controller that the store is congested)."""
        own = self.counters.retries + self.counters.timeouts
        # Asked per completed read: the capability is a flag, where a protocol check costs microseconds.
        if self.capabilities.reports_retries:
            return own + cast(ReportsRetries, self.store).insitu_retries
        return own

    @property
    def store_timeouts(self) -> int | None:
        """Requests of a store that retries by itself which timed out, when it counts them."""
        count = getattr(self.store, "insitu_timeouts", None)
        return count if isinstance(count, int) else None

    @property
    def store_retries(self) -> int | None:
        """Retries the store made by itself, when it reports them (all its callers together)."""
        return cast(ReportsRetries, self.store).insitu_retries if self.capabilities.reports_retries else None

    async def get(
        self, key: str, byte_range: tuple[int, int] | None = None, suffix: int | None = None
    ) -> Any:
        """Bytes of ``key`` (a bytes-like object), or None if it does not exist."""
        if self._root is not None:
            return await asyncio.to_thread(self.read_file, key, byte_range, suffix)
        raw_get = self._raw_get
        if raw_get is not None:
            raw = await self._retrying(lambda: raw_get(key, byte_range, suffix))
            return None if raw is None else memoryview(raw)
        request: Any = None
        if byte_range is not None:
            request = RangeByteRequest(byte_range[0], byte_range[1])
        elif suffix is not None:
            request = SuffixByteRequest(suffix)
        buf = await self._retrying(lambda: self.store.get(key, self._prototype, byte_range=request))
        return None if buf is None else buf.as_numpy_array()

    async def version(self, key: str) -> str | None:
        """The stored object's version (see :func:`insitu.store.capabilities.object_version`), retried
        like a read; None when the object is missing."""
        if self._root_str is not None:
            return local_file_version(self._root_str + key)
        return await self._retrying(lambda: object_version(self.store, key))

    @property
    def reads_many_ranges(self) -> bool:
        """True when the store fetches several byte ranges of one object in one call."""
        return self._root is None and self.capabilities.multi_range_reads

    async def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[Any] | None:
        """Several ``[start, end)`` ranges of one object in one request (``insitu_get_ranges``);
        None if the object does not exist."""
        fetch = cast(MultiRangeReads, self.store).insitu_get_ranges
        parts = await self._retrying(lambda: fetch(key, ranges))
        return None if parts is None else [memoryview(p) for p in parts]

    async def retrying(self, request: Callable[[], Awaitable[T]]) -> T:
        """``await request()`` under this fetcher's policy (none for a store that retries itself),
        counting retries and timeouts: for reads made on the engine's behalf by another layer."""
        return await self._retrying(request)

    async def _retrying(self, request: Callable[[], Awaitable[T]]) -> T:
        try:
            if self.capabilities.retries_itself:
                return await request()  # the store owns retries and timeouts: one call, errors pass through
            return await call_with_retries(request, self.retry, on_retry=self._count_retry)
        except TimeoutError:
            self.counters.timeouts += 1  # the last attempt timed out too
            raise

    def _count_retry(self, error: BaseException) -> None:
        self.counters.retries += 1
        if isinstance(error, TimeoutError):
            self.counters.timeouts += 1

    def read_file(
        self,
        key: str,
        byte_range: tuple[int, int] | None = None,
        suffix: int | None = None,
        *,
        reuse: bool = False,
        versions: list[str | None] | None = None,
    ) -> Any:
        """Synchronous read of a local chunk file (called from a decode thread).

        With ``reuse=True`` the bytes land in a per-thread buffer that the next
        read on this thread overwrites: a fresh allocation per chunk costs page
        faults comparable to the read itself at one sample per chunk. With
        ``versions``, the version of the file that was read (size and mtime of
        the open descriptor, as :func:`insitu.store.capabilities.local_file_version`
        gives them) is appended to it: ``None`` for a missing file.
        """
        assert self._root_str is not None
        try:
            fd = os.open(self._root_str + key, os.O_RDONLY)
        except FileNotFoundError:
            if versions is not None:
                versions.append(None)
            return None
        try:
            if versions is not None:
                st = os.fstat(fd)
                versions.append(f"{st.st_size}-{st.st_mtime_ns}")
            if reuse and byte_range is None and suffix is None:
                # A whole file into this thread's buffer without asking its size first: a read
                # shorter than the buffer reached the end of the file (one stat call per chunk
                # saved); a full buffer may have stopped short of it, and goes the long way.
                buf = getattr(self._local, "buf", None)
                if buf is not None:
                    n = os.preadv(fd, [buf], 0)
                    if n < len(buf):
                        return memoryview(buf)[:n]
            if byte_range is not None:
                start, size = byte_range[0], byte_range[1] - byte_range[0]
            else:
                start, size = 0, os.fstat(fd).st_size
                if suffix is not None:
                    start, size = max(0, size - suffix), min(size, suffix)
            if not reuse:
                return os.pread(fd, size, start)
            buf = getattr(self._local, "buf", None)
            if buf is None or len(buf) <= size:
                # One byte more than the file: the next file of this size reads short of the end
                # of the buffer, which tells the fast path above it got all of it.
                buf = bytearray(max(size + 1, 2 * len(buf) if buf is not None else size + 1))
                self._local.buf = buf
            view = memoryview(buf)[:size]
            n = os.preadv(fd, [view], start)
            return view[:n]
        finally:
            os.close(fd)
