"""Getting chunk bytes out of a store: async GETs with retries, or direct file reads.

For zarr's ``LocalStore`` the engine reads files inside its decode threads
(read + decode in one task, no event-loop hop per chunk): on local disk the
per-chunk asyncio cost would otherwise rival the decode itself. Every other
store goes through ``Store.get`` on the event loop, under one concurrency
budget, with retries and a per-request timeout for transient errors.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarr.abc.store import RangeByteRequest, Store, SuffixByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.storage import LocalStore

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError, asyncio.TimeoutError)


@dataclass(frozen=True)
class RetryPolicy:
    """How transient store errors are retried.

    ``retries`` extra attempts with exponential backoff starting at
    ``backoff_s`` (with jitter, capped at ``max_backoff_s``); each attempt is
    abandoned after ``timeout_s``. Permanent errors are raised at once.
    """

    retries: int = 3
    backoff_s: float = 0.05
    max_backoff_s: float = 2.0
    timeout_s: float | None = 60.0
    transient: tuple[type[BaseException], ...] = TRANSIENT_ERRORS

    def delay(self, attempt: int) -> float:
        base = min(self.max_backoff_s, self.backoff_s * (2**attempt))
        return base * (0.5 + random.random() / 2)


class ChunkFetcher:
    """Fetches object bytes (whole or a range) from one store."""

    def __init__(self, store: Store, retry: RetryPolicy) -> None:
        self.store = store
        self.retry = retry
        self._root: Path | None = Path(store.root) if isinstance(store, LocalStore) else None
        # A plain string prefix: pathlib's ``/`` costs ~20 us per chunk.
        self._root_str = os.path.join(str(self._root), "") if self._root is not None else None
        self._prototype = default_buffer_prototype()
        self._local = threading.local()

    @property
    def reads_files(self) -> bool:
        """True when reads happen synchronously in decode threads (local files)."""
        return self._root is not None

    async def get(
        self, key: str, byte_range: tuple[int, int] | None = None, suffix: int | None = None
    ) -> Any:
        """Bytes of ``key`` (a numpy uint8 array or bytes), or None if it does not exist."""
        if self._root is not None:
            return await asyncio.to_thread(self.read_file, key, byte_range, suffix)
        request: Any = None
        if byte_range is not None:
            request = RangeByteRequest(byte_range[0], byte_range[1])
        elif suffix is not None:
            request = SuffixByteRequest(suffix)
        buf = await self._retrying(lambda: self.store.get(key, self._prototype, byte_range=request))
        return None if buf is None else buf.as_numpy_array()

    @property
    def reads_many_ranges(self) -> bool:
        """True when the store fetches several byte ranges of one object in one call."""
        return self._root is None and callable(getattr(self.store, "insitu_get_ranges", None))

    async def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[Any] | None:
        """Several ``[start, end)`` ranges of one object in one request (``insitu_get_ranges``);
        None if the object does not exist."""
        fetch = self.store.insitu_get_ranges  # type: ignore[attr-defined]
        parts = await self._retrying(lambda: fetch(key, ranges))
        return None if parts is None else [memoryview(p) for p in parts]

    async def _retrying(self, request: Callable[[], Awaitable[Any]]) -> Any:
        """``await request()`` with the per-attempt timeout, retrying transient errors with backoff."""
        attempt = 0
        while True:
            try:
                # asyncio.timeout, not wait_for: no extra task per request (tens of microseconds
                # of loop time each, which adds up at thousands of small chunks per second).
                async with asyncio.timeout(self.retry.timeout_s):
                    return await request()
            except self.retry.transient:
                if attempt >= self.retry.retries:
                    raise
                await asyncio.sleep(self.retry.delay(attempt))
                attempt += 1

    def read_file(
        self,
        key: str,
        byte_range: tuple[int, int] | None = None,
        suffix: int | None = None,
        *,
        reuse: bool = False,
    ) -> Any:
        """Synchronous read of a local chunk file (called from a decode thread).

        With ``reuse=True`` the bytes land in a per-thread buffer that the next
        read on this thread overwrites: a fresh allocation per chunk costs page
        faults comparable to the read itself at one sample per chunk.
        """
        assert self._root_str is not None
        try:
            fd = os.open(self._root_str + key, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            if byte_range is not None:
                start, size = byte_range[0], byte_range[1] - byte_range[0]
            else:
                start, size = 0, os.fstat(fd).st_size
                if suffix is not None:
                    start, size = max(0, size - suffix), min(size, suffix)
            if not reuse:
                return os.pread(fd, size, start)
            buf = getattr(self._local, "buf", None)
            if buf is None or len(buf) < size:
                buf = bytearray(max(size, 2 * len(buf) if buf is not None else size))
                self._local.buf = buf
            view = memoryview(buf)[:size]
            n = os.preadv(fd, [view], start)
            return view[:n]
        finally:
            os.close(fd)
