"""What a store can do beyond zarr's ``Store`` interface, written down as protocols.

Every zarr store reads whole objects and byte ranges (:class:`ByteRangeReads`).
A store may offer more, by defining the members of a protocol below; the
engine and the persisted cache use what it offers:

- :class:`RawReads` (``insitu_get``): chunk bytes without a zarr Buffer around them;
- :class:`MultiRangeReads` (``insitu_get_ranges``): several ranges of one shard in one call;
- :class:`IdentifiedStore` (``insitu_identity``): names the stored bytes in cache fingerprints;
- :class:`VersionedObjects` (``insitu_object_version``): the version of one stored object;
- :class:`RetriesItself` (``insitu_retry_policy``): the store retries, so the engine does not;
- :class:`ReportsRetries` (``insitu_retries``): how many retries the store made.

The protocols are ``runtime_checkable``: ``isinstance(store, MultiRangeReads)``
answers whether a store declares the capability. That check walks the
protocol's members (microseconds), so the engine asks once per store
(:func:`capabilities_of`), never per request.

``insitu.testing.StoreConformance`` checks each capability a store declares.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from zarr.abc.store import ByteRequest, Store
from zarr.storage import LocalStore, MemoryStore, WrapperStore

from insitu.errors import ConfigError

if TYPE_CHECKING:
    from zarr.abc.buffer import Buffer, BufferPrototype

    from insitu.store.retry import RetryPolicy


@runtime_checkable
class ByteRangeReads(Protocol):
    """Whole objects or byte ranges of them: what every ``zarr.abc.store.Store`` offers.

    ``byte_range`` is a zarr ``RangeByteRequest`` (``[start, end)``),
    ``OffsetByteRequest`` or ``SuffixByteRequest``; ``None`` reads the whole
    object. A missing key returns ``None``.
    """

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """The object at ``key`` (or the requested range of it); ``None`` when the key is missing."""


@runtime_checkable
class RawReads(Protocol):
    """Object bytes as any buffer-protocol object, skipping zarr's Buffer wrapping.

    ``byte_range`` is ``(start, end)``; ``suffix`` is a count of trailing
    bytes; neither: the whole object. Returns ``None`` when the key is missing.
    """

    async def insitu_get(
        self, key: str, byte_range: tuple[int, int] | None = None, suffix: int | None = None
    ) -> Any:
        """The bytes of ``key`` (a range, a suffix or the whole object); ``None`` when the key is missing."""


@runtime_checkable
class MultiRangeReads(Protocol):
    """Several ``[start, end)`` ranges of one object in one call (the inner chunks of a shard).

    Returns one buffer-protocol object per range, in order, or ``None`` when
    the key is missing. The result must equal one range read per range.
    """

    async def insitu_get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[Any] | None:
        """One buffer per ``[start, end)`` range of ``key``, in order; ``None`` when the key is missing."""


@runtime_checkable
class IdentifiedStore(Protocol):
    """A stable name for the bytes a store serves: where they live and, when known, which version.

    The same location opened twice gives the same string, in any process;
    other data gives another. Persisted caches are keyed by it, so a
    repository store includes its snapshot id and a store over files their
    versions. A plain string attribute of that name is accepted too.
    """

    def insitu_identity(self) -> str:
        """The stable name of the bytes this store serves (location, and version when known)."""


@runtime_checkable
class VersionedObjects(Protocol):
    """The version of one stored object: an ETag, an object version id, or size and mtime.

    Returns a string that changes when the object's bytes change, or
    ``None`` when the key is missing. Each call may cost a request (a HEAD on
    object storage), so it is for checks on a few objects, not per chunk read.
    """

    async def insitu_object_version(self, key: str) -> str | None:
        """A string that changes when the bytes at ``key`` change; ``None`` when the key is missing."""


@runtime_checkable
class RetriesItself(Protocol):
    """A store that retries transient failures by itself, under the policy it exposes.

    The engine then retries none of its errors: exactly one layer retries a
    transient failure. Such a store raises what is still failing after its
    last attempt.
    """

    @property
    def insitu_retry_policy(self) -> RetryPolicy:
        """The policy under which the store retries transient failures itself."""


@runtime_checkable
class ReportsRetries(Protocol):
    """A store that counts the retries it made (all callers together, since it was built)."""

    @property
    def insitu_retries(self) -> int:
        """Retries the store has made since it was built, all callers together.
        Whether the caller runs on the engine's event-loop thread (where blocking on the loop would
        deadlock).
        Whether ``key`` names chunk data rather than metadata (``zarr.json``, ``.zarray`` and the like).
        zarr's read of ``key``, made through the engine's fetcher: retried, counted in ``bytes_read``,
        and, while a slab's sources are being recorded, its object version or checksum noted.
        Several reads, one after another, each through :meth:`get`."""


@dataclass(frozen=True)
class StoreCapabilities:
    """The optional protocols one store implements, found once by :func:`capabilities_of`."""

    raw_reads: bool
    multi_range_reads: bool
    identity: bool
    object_versions: bool
    retry_policy: RetryPolicy | None
    reports_retries: bool

    @property
    def retries_itself(self) -> bool:
        """True when the store applies its own retry policy (the engine must not add one)."""
        return self.retry_policy is not None

    def names(self) -> tuple[str, ...]:
        """The capabilities present, by field name (``retries_itself`` for a retry policy)."""
        flags = {
            "raw_reads": self.raw_reads,
            "multi_range_reads": self.multi_range_reads,
            "identity": self.identity,
            "object_versions": self.object_versions,
            "retries_itself": self.retries_itself,
            "reports_retries": self.reports_retries,
        }
        return tuple(name for name, present in flags.items() if present)


def capabilities_of(store: object) -> StoreCapabilities:
    """Which optional protocols ``store`` implements (local files count as versioned)."""
    return StoreCapabilities(
        raw_reads=isinstance(store, RawReads),
        multi_range_reads=isinstance(store, MultiRangeReads),
        identity=isinstance(store, IdentifiedStore),
        object_versions=_versioned(store) is not None,
        retry_policy=store.insitu_retry_policy if isinstance(store, RetriesItself) else None,
        reports_retries=isinstance(store, ReportsRetries),
    )


def check_retry_owner(store: Store, retry: RetryPolicy | None) -> None:
    """Refuse a ``retry=`` given beside a store that retries by itself: that store runs every read
    under its own policy, so a different one would be silently ignored; the ConfigError says where
    the policy belongs."""
    if retry is None or not isinstance(store, RetriesItself):
        return
    own = store.insitu_retry_policy
    if own != retry:
        raise ConfigError(
            f"retry={retry!r} would not apply: the store {getattr(store, 'url', None) or store} retries by "
            f"itself under its own policy ({own!r}); give the policy to the store instead, e.g. "
            "insitu.open_store(url, retry=...) or obstore_store(url, retry=...)"
        )


def store_identity(store: Store | IdentifiedStore) -> str:
    """A string naming where the data lives (and which version of it, when known).

    A store (or the store a wrapper holds) that implements
    :class:`IdentifiedStore` names itself; local directories are named by
    their resolved path; anything else by its type and ``str()``.
    """
    if isinstance(store, IdentifiedStore):
        ident: Any = store.insitu_identity
        return str(ident() if callable(ident) else ident)
    if isinstance(store, LocalStore):
        return f"file://{Path(store.root).resolve()}"
    if isinstance(store, MemoryStore):
        return f"memory:{id(store._store_dict)}"
    inner = getattr(store, "_store", None) or getattr(store, "store", None)
    if isinstance(inner, (LocalStore, MemoryStore, IdentifiedStore)):
        return store_identity(inner)
    from insitu.store.opener import redact_urls  # stores imports this module; the fallback is rare

    # A store's str() may show a URL with credentials: they must not reach a cache fingerprint.
    return redact_urls(f"{type(store).__module__}.{type(store).__qualname__}:{store}")


async def object_version(store: Store, key: str) -> str | None:
    """The version of the object at ``key`` (``None`` when it is missing).

    Stores implementing :class:`VersionedObjects` answer themselves (an ETag
    or version id: one HEAD request on object storage). Local directories
    answer with the file's size and modification time in nanoseconds (one
    ``stat``). Raises ``TypeError`` for a store that offers neither.
    """
    versioned = _versioned(store)
    if isinstance(versioned, VersionedObjects):
        return await versioned.insitu_object_version(key)
    if isinstance(versioned, LocalStore):
        return local_file_version(os.path.join(str(versioned.root), key))
    raise TypeError(f"{type(store).__qualname__} reports no object versions")


def _versioned(store: object) -> object | None:
    """The store that answers object versions for ``store``: itself, or the store a plain
    ``WrapperStore`` holds (wrappers pass bytes through; one that changes them must answer
    versions itself, as :class:`insitu.testing.faults.FaultInjectingStore` does)."""
    while True:
        if isinstance(store, (VersionedObjects, LocalStore)):
            return store
        if not isinstance(store, WrapperStore):
            return None
        store = store._store


def local_file_version(path: str | os.PathLike[str]) -> str | None:
    """``"<size>-<mtime ns>"`` of a file, ``None`` when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return f"{st.st_size}-{st.st_mtime_ns}"


__all__ = [
    "ByteRangeReads",
    "IdentifiedStore",
    "MultiRangeReads",
    "RawReads",
    "ReportsRetries",
    "RetriesItself",
    "StoreCapabilities",
    "VersionedObjects",
    "capabilities_of",
    "local_file_version",
    "object_version",
    "store_identity",
]
