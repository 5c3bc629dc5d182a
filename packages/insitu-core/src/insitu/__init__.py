"""insitu: train in place on n-dimensional Zarr archives.

Public names are listed in ``__all__``. Names served by plugin packages
(``as_torch``, ``to_jax``, ``as_tf_dataset``, ``obstore_store``, ...)
resolve through the plugin registry on first use; when the plugin is not
installed the error names the package to ``pip install``.
"""

from __future__ import annotations

import sys
from typing import Any

from insitu.arrays.discovery import Geometries, open_geometries, select
from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transform_config import transform_from_config
from insitu.batch import Batch
from insitu.dataset import DatasetView, InSituDataset
from insitu.errors import (
    BadChunkError,
    CacheDiskFullError,
    CacheInUseError,
    ConfigError,
    DatasetClosedError,
    InSituError,
    MetadataError,
    StaleCacheError,
    StoreTimeoutError,
    StoreUnavailableError,
)
from insitu.plan.splits import SplitManifest, split_by_chunk, split_by_coord
from insitu.sources import BatchedView
from insitu.store.opener import open_store
from insitu.store.retry import RetryPolicy
from insitu.xarray_source import from_xarray, geometries_from_xarray, register_xarray_accessor

__version__ = "0.1.0"

if "xarray" in sys.modules:  # never imported here: only hooked into when the user already has it
    register_xarray_accessor()

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
    "MetadataError",
    "RetryPolicy",
    "SplitManifest",
    "StaleCacheError",
    "StoreTimeoutError",
    "StoreUnavailableError",
    "__version__",
    "from_xarray",
    "geometries_from_xarray",
    "open_geometries",
    "open_store",
    "register_xarray_accessor",
    "select",
    "split_by_chunk",
    "split_by_coord",
    "transform_from_config",
]


def __getattr__(name: str) -> Any:
    from insitu.plugins.exports import EXPORTS, resolve_export

    if name in EXPORTS:
        return resolve_export(name)
    raise AttributeError(f"module 'insitu' has no attribute {name!r}")


def __dir__() -> list[str]:
    from insitu.plugins.exports import EXPORTS

    return sorted(set(__all__) | set(EXPORTS))
