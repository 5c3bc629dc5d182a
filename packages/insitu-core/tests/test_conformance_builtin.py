"""Core's built-in stores pass the conformance kit, and the kit catches broken plugins."""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, Store
from zarr.storage import LocalStore, WrapperStore

from insitu.batch import Batch
from insitu.stores import open_store
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
