"""The supported API for plugin packages: everything a plugin imports from insitu-core.

A plugin package (insitu-stores, insitu-transforms, the framework adapters,
insitu-gpu, or a third-party one) imports core only from here::

    from insitu.plugin_api import ConfigError, RegisterTransform, hookimpl

The rest of core's modules are its implementation: they move and change
between minor versions, and an import-linter contract in the root
``pyproject.toml`` keeps the monorepo's plugin packages off them. What is
listed in ``__all__`` keeps its name and meaning within a minor version
(plugins pin ``insitu-core>=0.x,<0.x+1``).

The names fall in five groups:

- registering: ``hookimpl`` and the ``Register*`` protocols the hooks receive,
  ``LazyObject`` (a stand-in that imports the registered object on first use);
- errors and vocabulary: ``ConfigError``, ``InSituError``, ``RetryPolicy``,
  ``Progress`` and ``track``;
- stores: ``open_store``, URL redaction (``redact_url``, ``redact_text``,
  ``url_secrets``), the command-line store arguments
  (``add_store_arguments``, ``open_store_from_args``), and ``native_call``
  (await a request a native runtime serves, so the interpreter's exit waits
  for it);
- arrays and chunk transforms: ``ArrayGeometry``, ``open_geometries``, the
  chunk-transform contract (``SlabSpec``, ``DeclaresOutput``, ``output_spec``,
  ``transform_output``, ``chain_runner``, ``describe``,
  ``transform_fingerprint``), binding and configuration
  (``bind_to_array``, ``transform_from_config``), CF decoding
  (``cf_transform_for``) and value selections (``by_value``,
  ``is_periodic_longitude``, ``is_integer``);
- what a pass delivers: ``Batch``, the view protocols adapters accept
  (``BatchedView``, ``ShardableView``, ``require_batched_view``,
  ``require_shardable_view``), and ``InSituDataset``, ``DatasetView`` and
  ``SplitManifest`` for transforms that fit on a dataset.

Each name resolves on first attribute access (PEP 562), as the ``insitu``
root does: plugin modules load on the first registry lookup, so importing
this module costs nothing and a name imports only the core module that
defines it (``hookimpl`` does not import the engine).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the types mypy and IDEs see; at run time each name is imported on first use
    from insitu.arrays.cf import cf_transform_for
    from insitu.arrays.discovery import open_geometries
    from insitu.arrays.geometry import ArrayGeometry, is_integer
    from insitu.arrays.selection import by_value, is_periodic_longitude
    from insitu.arrays.transform_config import bind_to_array, transform_from_config
    from insitu.arrays.transforms import (
        DeclaresOutput,
        SlabSpec,
        chain_runner,
        describe,
        output_spec,
        transform_fingerprint,
        transform_output,
    )
    from insitu.batch import Batch
    from insitu.cli.common import add_store_arguments, open_store_from_args
    from insitu.dataset import InSituDataset
    from insitu.errors import ConfigError, InSituError
    from insitu.plan.splits import SplitManifest
    from insitu.plugins.hookspecs import (
        RegisterAdapter,
        RegisterCommand,
        RegisterDecoder,
        RegisterDevice,
        RegisterStore,
        RegisterTransform,
        hookimpl,
    )
    from insitu.plugins.registry import LazyObject
    from insitu.progress import Progress, track
    from insitu.sources import BatchedView, ShardableView, require_batched_view, require_shardable_view
    from insitu.store.loop import native_call
    from insitu.store.opener import open_store, redact_text, redact_url, url_secrets
    from insitu.store.retry import RetryPolicy
    from insitu.views import DatasetView

#: Public name -> the core module that defines it (kept in step with the TYPE_CHECKING block above).
_DEFINED_IN: dict[str, str] = {
    "ArrayGeometry": "insitu.arrays.geometry",
    "Batch": "insitu.batch",
    "BatchedView": "insitu.sources",
    "ConfigError": "insitu.errors",
    "DatasetView": "insitu.views",
    "DeclaresOutput": "insitu.arrays.transforms",
    "InSituDataset": "insitu.dataset",
    "InSituError": "insitu.errors",
    "LazyObject": "insitu.plugins.registry",
    "Progress": "insitu.progress",
    "RegisterAdapter": "insitu.plugins.hookspecs",
    "RegisterCommand": "insitu.plugins.hookspecs",
    "RegisterDecoder": "insitu.plugins.hookspecs",
    "RegisterDevice": "insitu.plugins.hookspecs",
    "RegisterStore": "insitu.plugins.hookspecs",
    "RegisterTransform": "insitu.plugins.hookspecs",
    "RetryPolicy": "insitu.store.retry",
    "ShardableView": "insitu.sources",
    "SlabSpec": "insitu.arrays.transforms",
    "SplitManifest": "insitu.plan.splits",
    "add_store_arguments": "insitu.cli.common",
    "bind_to_array": "insitu.arrays.transform_config",
    "by_value": "insitu.arrays.selection",
    "cf_transform_for": "insitu.arrays.cf",
    "chain_runner": "insitu.arrays.transforms",
    "describe": "insitu.arrays.transforms",
    "hookimpl": "insitu.plugins.hookspecs",
    "is_integer": "insitu.arrays.geometry",
    "is_periodic_longitude": "insitu.arrays.selection",
    "native_call": "insitu.store.loop",
    "open_geometries": "insitu.arrays.discovery",
    "open_store": "insitu.store.opener",
    "open_store_from_args": "insitu.cli.common",
    "output_spec": "insitu.arrays.transforms",
    "redact_text": "insitu.store.opener",
    "redact_url": "insitu.store.opener",
    "require_batched_view": "insitu.sources",
    "require_shardable_view": "insitu.sources",
    "track": "insitu.progress",
    "transform_fingerprint": "insitu.arrays.transforms",
    "transform_from_config": "insitu.arrays.transform_config",
    "transform_output": "insitu.arrays.transforms",
    "url_secrets": "insitu.store.opener",
}

# A literal list, so type checkers see the re-exports (a test keeps it in step with _DEFINED_IN).
__all__ = [
    "ArrayGeometry",
    "Batch",
    "BatchedView",
    "ConfigError",
    "DatasetView",
    "DeclaresOutput",
    "InSituDataset",
    "InSituError",
    "LazyObject",
    "Progress",
    "RegisterAdapter",
    "RegisterCommand",
    "RegisterDecoder",
    "RegisterDevice",
    "RegisterStore",
    "RegisterTransform",
    "RetryPolicy",
    "ShardableView",
    "SlabSpec",
    "SplitManifest",
    "add_store_arguments",
    "bind_to_array",
    "by_value",
    "cf_transform_for",
    "chain_runner",
    "describe",
    "hookimpl",
    "is_integer",
    "is_periodic_longitude",
    "native_call",
    "open_geometries",
    "open_store",
    "open_store_from_args",
    "output_spec",
    "redact_text",
    "redact_url",
    "require_batched_view",
    "require_shardable_view",
    "track",
    "transform_fingerprint",
    "transform_from_config",
    "transform_output",
    "url_secrets",
]


def __getattr__(name: str) -> Any:
    module = _DEFINED_IN.get(name)
    if module is None:
        raise AttributeError(f"module 'insitu.plugin_api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
