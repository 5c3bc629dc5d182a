"""Tools for tests, demos and benchmarks, above every engine floor.

- The conformance kit (needs pytest): plugin packages subclass these in their
  own tests, so every store, transform and adapter proves itself against the
  same checks::

      from insitu.testing import StoreConformance

      class TestMyStore(StoreConformance):
          def writable_target(self): ...
          def open_read_store(self, target): ...

- ``insitu.testing.synthetic``: deterministic synthetic datasets (the demo's
  ERA5-like store, benchmark data); needs only insitu-core.
- ``insitu.testing.faults``: a fault-injecting store wrapper for reliability
  drills (the ``faults+<scheme>://`` URLs).

The kit's names load on first use (PEP 562), so ``insitu.testing.synthetic``
and ``insitu.testing.faults`` work without pytest installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Each kit name -> the module that defines it.
_KIT = {
    "AdapterConformance": "adapters",
    "BatchSource": "adapters",
    "make_batches": "adapters",
    "linear_regression_view": "datasets",
    "ReadOnlyStoreConformance": "readonly",
    "RecordingStore": "recording",
    "is_chunk_key": "recording",
    "ReferenceArray": "reference",
    "reference_arrays": "reference",
    "write_reference": "reference",
    "assert_entry_point": "registration",
    "assert_registers": "registration",
    "plugin_registrations": "registration",
    "temporary_plugin": "registration",
    "write_plugin_distribution": "registration",
    "StoreConformance": "stores",
    "WrittenReference": "stores",
    "TransformConformance": "transforms",
}


def __getattr__(name: str) -> Any:
    """A kit name, imported from its module on first use."""
    module = _KIT.get(name)
    if module is None:
        raise AttributeError(f"module 'insitu.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"insitu.testing.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_KIT])


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
