"""Conformance kit for insitu plugins (needs pytest).

Plugin packages subclass these in their own tests, so every store, transform
and adapter proves itself against the same checks::

    from insitu.testing import StoreConformance

    class TestMyStore(StoreConformance):
        def writable_target(self): ...
        def open_read_store(self, target): ...
"""

from __future__ import annotations

from insitu.testing.adapters import AdapterConformance, BatchSource, make_batches
from insitu.testing.datasets import linear_regression_view
from insitu.testing.readonly import ReadOnlyStoreConformance
from insitu.testing.recording import RecordingStore, is_chunk_key
from insitu.testing.reference import ReferenceArray, reference_arrays, write_reference
from insitu.testing.registration import (
    assert_entry_point,
    assert_registers,
    plugin_registrations,
    temporary_plugin,
    write_plugin_distribution,
)
from insitu.testing.stores import StoreConformance, WrittenReference
from insitu.testing.transforms import TransformConformance

__all__ = [
    "AdapterConformance",
    "BatchSource",
    "ReadOnlyStoreConformance",
    "RecordingStore",
    "ReferenceArray",
    "StoreConformance",
    "TransformConformance",
    "WrittenReference",
    "assert_entry_point",
    "assert_registers",
    "is_chunk_key",
    "linear_regression_view",
    "make_batches",
    "plugin_registrations",
    "reference_arrays",
    "temporary_plugin",
    "write_plugin_distribution",
    "write_reference",
]
