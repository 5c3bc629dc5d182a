"""Core's built-in stores pass the conformance kit, and the kit catches broken plugins."""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.storage import LocalStore, WrapperStore

from insitu.batch import Batch
from insitu.store.opener import open_store
from insitu.store.retry import RetryPolicy
from insitu.testing import AdapterConformance, StoreConformance, TransformConformance

# --- built-in stores -------------------------------------------------------


class TestLocalPathStore(StoreConformance):
    def writable_target(self) -> Store:
        return open_store(self.tmp_path / "ref.zarr", mode="w")

    def open_read_store(self, target: Store) -> Store:
        return open_store(str(self.tmp_path / "ref.zarr"))


class TestFileUrlStore(StoreConformance):
    def writable_target(self) -> Store:
        return LocalStore(self.tmp_path / "ref.zarr")

    def open_read_store(self, target: Store) -> Store:
        return open_store((self.tmp_path / "ref.zarr").as_uri())


class TestMemoryStore(StoreConformance):
    def writable_target(self) -> Store:
        self.url = f"memory://conformance-{uuid.uuid4().hex}"
        return open_store(self.url, mode="w")

    def open_read_store(self, target: Store) -> Store:
        return open_store(self.url)


# --- example transform and adapters that pass -----------------------------


class Scale:
    """A minimal chunk transform: multiply by a factor."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __call__(self, label: str, block: np.ndarray) -> np.ndarray:
        return (block * self.factor).astype(block.dtype)

    def fingerprint(self) -> str:
        return f"Scale(factor={self.factor!r})"


class TestScaleTransform(TransformConformance):
    def make_transform(self) -> Scale:
        return Scale(2.5)

    def make_other_transform(self) -> Scale:
        return Scale(3.0)


def copying_adapter(source: Iterable[Batch]) -> Iterator[dict[str, np.ndarray]]:
    for batch in source:
        yield {label: np.array(values) for label, values in batch.items()}


class TestCopyingAdapter(AdapterConformance):
    def adapter(self) -> Callable[[Any], Any]:
        return copying_adapter


class TestPerBatchAdapter(AdapterConformance):
    per_batch = True
    sample_dtypes: ClassVar[Mapping[str, str]] = {"x": "float64", "flag": "bool"}
    sample_shapes: ClassVar[Mapping[str, tuple[int, ...]]] = {"x": (2, 2)}

    def adapter(self) -> Callable[[Any], Any]:
        return lambda batch: [(label, memoryview(values)) for label, values in batch.items()]

    def output_arrays(self, item: Any) -> Mapping[str, Any]:
        return dict(item)


# --- the kit must fail broken plugins ---------------------------------------


class _BuggyStore(WrapperStore[Store]):
    """Wraps a store and breaks one part of the contract, chosen by ``bug``."""

    def __init__(self, store: Store, bug: str) -> None:
        super().__init__(store)
        self.bug = bug

    def _with_store(self, store: Store) -> _BuggyStore:
        return _BuggyStore(store, self.bug)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if self.bug == "ignores_ranges":
            byte_range = None
        buf = await self._store.get(key, prototype, byte_range)
        if buf is None and self.bug == "empty_for_missing":
            return prototype.buffer.from_bytes(b"")
        return buf


def _buggy_store_kit(tmp_path: Path, bug: str) -> StoreConformance:
    class Kit(StoreConformance):
        def writable_target(self) -> Store:
            return LocalStore(tmp_path / "ref.zarr")

        def open_read_store(self, target: Store) -> Store:
            return _BuggyStore(LocalStore(tmp_path / "ref.zarr", read_only=True), bug)

    kit = Kit()
    kit.tmp_path = tmp_path
    return kit


def test_kit_rejects_store_returning_bytes_for_missing_keys(tmp_path: Path) -> None:
    kit = _buggy_store_kit(tmp_path, "empty_for_missing")
    with pytest.raises(AssertionError, match="must return None"):
        kit.test_missing_keys_return_none()


def test_kit_rejects_store_ignoring_byte_ranges(tmp_path: Path) -> None:
    kit = _buggy_store_kit(tmp_path, "ignores_ranges")
    kit.test_reads_reference_arrays()  # whole-chunk reads still work ...
    with pytest.raises(AssertionError, match="ByteRequest"):
        kit.test_byte_range_requests()  # ... but ranged reads do not


class _CapableStore(WrapperStore[Store]):
    """Declares every optional capability over a local store, and breaks the one named by ``bug``."""

    policy = RetryPolicy(retries=1)

    def __init__(self, store: Store, bug: str = "") -> None:
        super().__init__(store)
        self.bug = bug

    def _with_store(self, store: Store) -> _CapableStore:
        return _CapableStore(store, self.bug)

    async def insitu_get(
        self, key: str, byte_range: tuple[int, int] | None = None, suffix: int | None = None
    ) -> Any:
        if self.bug == "raw_ignores_ranges":
            byte_range = suffix = None
        request: ByteRequest | None = None
        if byte_range is not None:
            request = RangeByteRequest(*byte_range)
        elif suffix is not None:
            request = SuffixByteRequest(suffix)
        buf = await self._store.get(key, default_buffer_prototype(), request)
        return None if buf is None else buf.to_bytes()

    async def insitu_get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[Any] | None:
        parts = [await self.insitu_get(key, r) for r in ranges]
        if parts[0] is None:
            return None
        return parts[::-1] if self.bug == "ranges_out_of_order" else parts

    def insitu_identity(self) -> str:
        where = f"capable:{self._store}"
        return f"{where}#{id(self)}" if self.bug == "identity_per_open" else where

    async def insitu_object_version(self, key: str) -> str | None:
        from insitu.store.capabilities import local_file_version

        version = local_file_version(Path(str(self._store.root)) / key)  # type: ignore[attr-defined]
        return "v1" if version is not None and self.bug == "version_ignores_bytes" else version

    @property
    def insitu_retry_policy(self) -> Any:
        return {"retries": 1} if self.bug == "policy_not_a_policy" else self.policy


def _capable_kit(tmp_path: Path, bug: str) -> StoreConformance:
    class Kit(StoreConformance):
        def writable_target(self) -> Store:
            return LocalStore(tmp_path / "ref.zarr")

        def open_read_store(self, target: Store) -> Store:
            return _CapableStore(LocalStore(tmp_path / "ref.zarr", read_only=True), bug)

        def other_read_store(self) -> Store:
            return _CapableStore(LocalStore(tmp_path / "other.zarr", read_only=True), bug)

    kit = Kit()
    kit.tmp_path = tmp_path
    return kit


_CAPABILITY_CHECKS = {
    "raw_ignores_ranges": "test_raw_reads_match_store_reads",
    "ranges_out_of_order": "test_multi_range_reads_match_single_ranges",
    "identity_per_open": "test_identity_is_stable_and_tells_data_apart",
    "version_ignores_bytes": "test_object_versions_follow_the_bytes",
    "policy_not_a_policy": "test_a_store_that_retries_reports_its_policy",
}


@pytest.mark.parametrize(("bug", "check"), sorted(_CAPABILITY_CHECKS.items()))
def test_kit_rejects_broken_capabilities(tmp_path: Path, bug: str, check: str) -> None:
    with pytest.raises(AssertionError):
        getattr(_capable_kit(tmp_path / "broken", bug), check)()
    getattr(_capable_kit(tmp_path / "sound", ""), check)()  # the sound store passes the same check


def test_kit_skips_capabilities_a_store_does_not_declare(tmp_path: Path) -> None:
    kit = _buggy_store_kit(tmp_path, "")
    for check in _CAPABILITY_CHECKS.values():
        if check == "test_object_versions_follow_the_bytes":
            continue  # a local directory has versions (size and mtime) without declaring them
        with pytest.raises(pytest.skip.Exception):
            getattr(kit, check)()


def test_local_files_have_versions_that_follow_the_bytes(tmp_path: Path) -> None:
    _buggy_store_kit(tmp_path, "").test_object_versions_follow_the_bytes()


class _IdFingerprint(Scale):
    def fingerprint(self) -> str:
        return f"Scale-{id(self)}"


class _HashFingerprint(Scale):
    def fingerprint(self) -> str:
        return f"Scale-{hash(('scale', self.factor))}"  # str hashes vary per process


class _InPlace(Scale):
    def __call__(self, label: str, block: np.ndarray) -> np.ndarray:
        block *= self.factor
        return block


class _Unpicklable(Scale):
    def __init__(self, factor: float) -> None:
        super().__init__(factor)
        self.fn = lambda x: x


class _IgnoresParameter(Scale):
    def fingerprint(self) -> str:
        return "Scale"


def _transform_kit(cls: type[Scale]) -> TransformConformance:
    class Kit(TransformConformance):
        def make_transform(self) -> Scale:
            return cls(2.5)

        def make_other_transform(self) -> Scale:
            return cls(3.0)

    return Kit()


@pytest.mark.parametrize(
    ("cls", "check"),
    [
        (_IdFingerprint, "test_fingerprint_is_a_stable_string"),
        (_HashFingerprint, "test_fingerprint_stable_across_processes"),
        (_InPlace, "test_leaves_input_unchanged"),
        (_Unpicklable, "test_picklable"),
        (_IgnoresParameter, "test_fingerprint_changes_with_parameters"),
    ],
)
def test_kit_rejects_broken_transforms(cls: type[Scale], check: str) -> None:
    kit = _transform_kit(cls)
    with pytest.raises((AssertionError, pickle.PicklingError, AttributeError)):
        getattr(kit, check)()
    assert getattr(_transform_kit(Scale), check)() is None, "the sound transform passes the same check"


def _adapter_kit(adapter: Callable[[Any], Any]) -> AdapterConformance:
    class Kit(AdapterConformance):
        def adapter(self) -> Callable[[Any], Any]:
            return adapter

    return Kit()


def test_kit_rejects_adapter_reusing_one_buffer() -> None:
    def reusing(source: Iterable[Batch]) -> Iterator[dict[str, np.ndarray]]:
        buffers: dict[str, np.ndarray] = {}
        for batch in source:
            for label, values in batch.items():
                buffers.setdefault(label, np.empty_like(values))[...] = values
            yield buffers

    with pytest.raises(AssertionError, match="batch 0"):
        _adapter_kit(reusing).test_values_survive_in_order()


def test_kit_rejects_adapter_changing_dtype_or_labels() -> None:
    def widening(source: Iterable[Batch]) -> Iterator[dict[str, np.ndarray]]:
        for batch in source:
            yield {label: values.astype("float64") for label, values in batch.items()}

    def dropping(source: Iterable[Batch]) -> Iterator[dict[str, np.ndarray]]:
        for batch in source:
            yield {"x": batch["x"]}

    with pytest.raises(AssertionError, match="float64 != float32"):
        _adapter_kit(widening).test_dtypes_preserved()
    with pytest.raises(AssertionError, match="labels"):
        _adapter_kit(dropping).test_labels_survive()
