"""insitu: train in place on n-dimensional Zarr archives.

Public names are listed in ``__all__``. Each resolves on first attribute
access (PEP 562), so ``import insitu`` costs next to nothing and the ``insitu``
command line prints its help without importing zarr; ``from insitu import X``
works the same way. Names served by plugin packages (``as_torch``, ``to_jax``,
``as_tf_dataset``, ``obstore_store``, ...) resolve through the plugin registry
on first use; when the plugin is not installed the error names the package to
``pip install``.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the types mypy and IDEs see; at run time each name is imported on first use
    from insitu.arrays.discovery import Geometries, open_geometries, select
    from insitu.arrays.geometry import ArrayGeometry
    from insitu.arrays.ngff import open_ome_ngff
    from insitu.arrays.transform_config import transform_from_config
    from insitu.batch import Batch
    from insitu.dataset import DatasetView, InSituDataset
    from insitu.errors import (
        BadChunkError,
        CacheDiskFullError,
        CacheInUseError,
        ConfigError,
        DatasetClosedError,
        IncompleteStitchError,
        InSituError,
        MetadataError,
        StaleCacheError,
        StoreTimeoutError,
        StoreUnavailableError,
    )
    from insitu.plan.patches_split import SpatialSplit, split_by_region
    from insitu.plan.splits import SplitManifest, split_by_chunk, split_by_coord
    from insitu.sources import BatchedView
    from insitu.stitch import PatchStitcher, StitchProgress
    from insitu.store.opener import open_store
    from insitu.store.retry import RetryPolicy
    from insitu.xarray_source import from_xarray, geometries_from_xarray, register_xarray_accessor

__version__ = "0.1.0"

#: Root name -> the module that defines it (kept in step with the TYPE_CHECKING block above).
_LAZY_NAMES: dict[str, str] = {
    "ArrayGeometry": "insitu.arrays.geometry",
    "BadChunkError": "insitu.errors",
    "Batch": "insitu.batch",
    "BatchedView": "insitu.sources",
    "CacheDiskFullError": "insitu.errors",
    "CacheInUseError": "insitu.errors",
    "ConfigError": "insitu.errors",
    "DatasetClosedError": "insitu.errors",
    "DatasetView": "insitu.dataset",
    "Geometries": "insitu.arrays.discovery",
    "InSituDataset": "insitu.dataset",
    "InSituError": "insitu.errors",
    "IncompleteStitchError": "insitu.errors",
    "MetadataError": "insitu.errors",
    "PatchStitcher": "insitu.stitch",
    "RetryPolicy": "insitu.store.retry",
    "SpatialSplit": "insitu.plan.patches_split",
    "SplitManifest": "insitu.plan.splits",
    "StaleCacheError": "insitu.errors",
    "StitchProgress": "insitu.stitch",
    "StoreTimeoutError": "insitu.errors",
    "StoreUnavailableError": "insitu.errors",
    "from_xarray": "insitu.xarray_source",
    "geometries_from_xarray": "insitu.xarray_source",
    "open_geometries": "insitu.arrays.discovery",
    "open_ome_ngff": "insitu.arrays.ngff",
    "open_store": "insitu.store.opener",
    "register_xarray_accessor": "insitu.xarray_source",
    "select": "insitu.arrays.discovery",
    "split_by_chunk": "insitu.plan.splits",
    "split_by_coord": "insitu.plan.splits",
    "split_by_region": "insitu.plan.patches_split",
    "transform_from_config": "insitu.arrays.transform_config",
}

# A literal list, so type checkers see the re-exports (a test keeps it in step with _LAZY_NAMES).
__all__ = [
    "ArrayGeometry",
    "BadChunkError",
    "Batch",
    "BatchedView",
    "CacheDiskFullError",
    "CacheInUseError",
    "ConfigError",
    "DatasetClosedError",
    "DatasetView",
    "Geometries",
    "InSituDataset",
    "InSituError",
    "IncompleteStitchError",
    "MetadataError",
    "PatchStitcher",
    "RetryPolicy",
    "SpatialSplit",
    "SplitManifest",
    "StaleCacheError",
    "StitchProgress",
    "StoreTimeoutError",
    "StoreUnavailableError",
    "__version__",
    "from_xarray",
    "geometries_from_xarray",
    "open_geometries",
    "open_ome_ngff",
    "open_store",
    "register_xarray_accessor",
    "select",
    "split_by_chunk",
    "split_by_coord",
    "split_by_region",
    "transform_from_config",
]

if "xarray" in sys.modules:  # never imported here: only hooked into when the user already has it
    importlib.import_module("insitu.xarray_source").register_xarray_accessor()


def __getattr__(name: str) -> Any:
    module = _LAZY_NAMES.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups are plain module attributes
        return value
    from insitu.plugins.exports import EXPORTS, resolve_export

    if name in EXPORTS:
        return resolve_export(name)
    raise AttributeError(f"module 'insitu' has no attribute {name!r}")


def __dir__() -> list[str]:
    from insitu.plugins.exports import EXPORTS

    return sorted(set(__all__) | set(EXPORTS))
