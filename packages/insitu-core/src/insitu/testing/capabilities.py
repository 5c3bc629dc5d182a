"""Checks for the optional store capabilities (:mod:`insitu.store.capabilities`) a store declares.

Both store kits inherit :class:`CapabilityChecks`; each check is skipped for
a store that does not declare the capability it covers, and fails a store
that declares it and does not keep its promise.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from zarr.abc.store import Store

from insitu.store.capabilities import (
    IdentifiedStore,
    MultiRangeReads,
    RawReads,
    ReportsRetries,
    RetriesItself,
    capabilities_of,
    object_version,
    store_identity,
)
from insitu.store.retry import RetryPolicy
from insitu.testing import _aio


@dataclass(frozen=True)
class Subject:
    """What the capability checks read: a store, one object in it and one key absent from it."""

    store: Store
    key: str
    data: bytes
    missing_key: str


def _raw(value: object) -> bytes | None:
    return None if value is None else bytes(memoryview(value))  # type: ignore[arg-type]


class CapabilityChecks:
    """The capability checks shared by ``StoreConformance`` and ``ReadOnlyStoreConformance``."""

    def capability_subject(self) -> Subject:
        """The store under test, a present key with its bytes (at least 8), and a missing key."""
        raise NotImplementedError

    def reopened_store(self) -> Store:
        """The plugin's store opened again over the same data (a second, independent open)."""
        raise NotImplementedError

    def other_read_store(self) -> Store | None:
        """A store of the plugin over other data (another location), for the identity check.

        Return ``None`` (the default) to check only that identity is stable.
        """
        return None

    def rewrite(self, key: str, data: bytes) -> bool:
        """Replace the object at ``key`` with ``data`` through a writable twin; False if impossible."""
        return False

    def test_raw_reads_match_store_reads(self) -> None:
        """A store with raw reads (``insitu_get``) returns the same bytes as a plain read, for the whole
        object, a byte range and a suffix, and ``None`` for a missing key."""
        subject = self.capability_subject()
        store = subject.store
        if not isinstance(store, RawReads):
            pytest.skip("the store offers no raw reads (insitu_get)")
        data, n = subject.data, len(subject.data)
        assert _raw(_aio.run(store.insitu_get(subject.key))) == data, "insitu_get of the whole object"
        got = _raw(_aio.run(store.insitu_get(subject.key, byte_range=(1, n // 2))))
        assert got == data[1 : n // 2], "insitu_get of a byte range"
        assert _raw(_aio.run(store.insitu_get(subject.key, suffix=4))) == data[-4:], "insitu_get of a suffix"
        assert _aio.run(store.insitu_get(subject.missing_key)) is None, "insitu_get of a missing key"

    def test_multi_range_reads_match_single_ranges(self) -> None:
        """A store with multi-range reads (``insitu_get_ranges``) returns one part per range, in order,
        equal to the single-range reads, and ``None`` for a missing key."""
        subject = self.capability_subject()
        store = subject.store
        if not isinstance(store, MultiRangeReads):
            pytest.skip("the store offers no multi-range reads (insitu_get_ranges)")
        data, n = subject.data, len(subject.data)
        ranges = [(0, 1), (2, n // 2), (n // 2, n // 2 + 1), (n - 3, n)]
        parts = _aio.run(store.insitu_get_ranges(subject.key, ranges))
        assert parts is not None, f"insitu_get_ranges({subject.key!r}) returned None for a present key"
        assert [_raw(p) for p in parts] == [data[a:b] for a, b in ranges], "one part per range, in order"
        assert _aio.run(store.insitu_get_ranges(subject.missing_key, ranges)) is None, "a missing key"

    def test_identity_is_stable_and_tells_data_apart(self) -> None:
        """A declared identity is a non-empty string, the same across calls and across two opens of the
        same data, and differs for other data (when :meth:`other_read_store` gives some)."""
        store = self.capability_subject().store
        if not isinstance(store, IdentifiedStore):
            pytest.skip("the store declares no identity (insitu_identity)")
        ident = store_identity(store)
        assert isinstance(ident, str), f"identity must be a str, got {type(ident).__name__}"
        assert ident, "identity must not be empty"
        assert store_identity(store) == ident, "identity changes between two calls"
        assert store_identity(self.reopened_store()) == ident, "identity differs between two opens"
        other = self.other_read_store()
        if other is not None:
            assert store_identity(other) != ident, "a store over other data has the same identity"

    def test_object_versions_follow_the_bytes(self) -> None:
        """Object versions are non-empty strings, stable across calls, ``None`` for a missing key, and
        change when the bytes do (when :meth:`rewrite` can rewrite them)."""
        subject = self.capability_subject()
        store = subject.store
        if not capabilities_of(store).object_versions:
            pytest.skip("the store reports no object versions (insitu_object_version)")
        version = _aio.run(object_version(store, subject.key))
        assert isinstance(version, str), f"version of a present key: {version!r}"
        assert version, "a version must not be empty"
        assert _aio.run(object_version(store, subject.key)) == version, "version changes between calls"
        assert _aio.run(object_version(store, subject.missing_key)) is None, "version of a missing key"
        if self.rewrite(subject.key, subject.data + b"changed"):
            changed = _aio.run(object_version(store, subject.key))
            assert changed != version, "the version did not change when the bytes did"

    def test_a_store_that_retries_reports_its_policy(self) -> None:
        """A store that retries by itself exposes a ``RetryPolicy``, and a non-negative retry count when it
        reports one."""
        store = self.capability_subject().store
        if not isinstance(store, RetriesItself):
            pytest.skip("the store does not retry by itself; the engine retries it")
        policy = store.insitu_retry_policy
        assert isinstance(policy, RetryPolicy), f"insitu_retry_policy is {type(policy).__name__}"
        assert capabilities_of(store).retry_policy is policy
        if isinstance(store, ReportsRetries):
            count = store.insitu_retries
            assert isinstance(count, int), f"insitu_retries is {type(count).__name__}"
            assert count >= 0
