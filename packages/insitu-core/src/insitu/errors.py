"""Exception types. Each message names the bad value so a user can fix it."""

from __future__ import annotations


class InSituError(Exception):
    """Base class for errors raised by insitu."""


class ConfigError(InSituError, ValueError):
    """A constructor argument or input is invalid."""


class BadChunkError(InSituError):
    """A stored chunk could not be read or decoded.

    ``array`` and ``key`` name the array path and the store key of the chunk.
    """

    def __init__(self, array: str, key: str, reason: str) -> None:
        super().__init__(f"array {array!r}, chunk {key!r}: {reason}")
        self.array = array
        self.key = key
        self.reason = reason


class StaleCacheError(InSituError):
    """A persisted chunk cache does not match the store, arrays or transforms."""


class CacheInUseError(InSituError):
    """Another process holds the persisted cache directory for writing."""


class DatasetClosedError(InSituError, RuntimeError):
    """The dataset was closed; its views can no longer be iterated."""


class MetadataError(ConfigError):
    """A store's Zarr metadata is unreadable, or impossible or past what insitu can plan.

    Unreadable (truncated JSON, an unknown ``data_type``): the message names the
    document, and ``key`` holds it (``t2m/zarr.json``; None when no single
    document could be blamed). Impossible (a size that is zero, negative, or
    beyond a limit): the message names the array, the value and the limit;
    default discovery skips such an array with a warning, naming it in
    ``variables=`` raises this. A ConfigError, so code catching bad input keeps
    catching it; the command line reports it as a store problem (exit 1).
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class CacheDiskFullError(InSituError, OSError):
    """The disk under ``cache_dir`` has no room for the persisted cache's arenas or index.

    An ``OSError`` with ``errno`` ENOSPC (or EDQUOT); the message names the directory and the
    bytes needed."""


class StoreUnavailableError(InSituError):
    """The store could not deliver bytes (refused or reset connections, 5xx, a 403, a timeout),
    after the retry policy. Never governed by ``on_bad_chunk``: an outage is not a damaged chunk.

    ``store`` names the store, ``key`` the object that could not be read (``None`` for a
    metadata read of the whole store), ``reason`` what failed.
    """

    def __init__(self, store: str, key: str | None, reason: str, *, array: str | None = None) -> None:
        what = f"reading {key!r}" if key is not None else "reading its metadata"
        of = f" (array {array!r})" if array else ""
        super().__init__(f"store {store} is unavailable: {what}{of} failed: {reason}")
        self.store = store
        self.key = key
        self.array = array
        self.reason = reason


class StoreTimeoutError(StoreUnavailableError, TimeoutError):
    """A store request ran past its time limit (``limit_s``), after the retry policy."""

    def __init__(
        self,
        store: str,
        key: str | None,
        limit_s: float | None,
        reason: str = "",
        *,
        array: str | None = None,
    ) -> None:
        limit = f"no answer within {limit_s:g} s" if limit_s is not None else "timed out"
        super().__init__(store, key, f"{limit}{' ' + reason if reason else ''}", array=array)
        self.limit_s = limit_s


class IncompleteStitchError(InSituError, RuntimeError):
    """A :class:`~insitu.stitch.PatchStitcher` was closed before every patch of its pass
    arrived; the message names the output chunks left incomplete. ``close(partial=True)``
    writes them from what arrived instead."""
