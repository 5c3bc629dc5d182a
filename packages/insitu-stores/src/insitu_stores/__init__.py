"""Store plugins for insitu: obstore, fsspec, Icechunk, Arraylake and virtual (FITS / HDF5) stores.

Every builder returns a read-only zarr store that translates its backend's
errors (:mod:`insitu_stores.errors`) and never shows credentials. Exactly one
layer retries a transient error: the backend's own client, configured from
the store's ``insitu.RetryPolicy`` (``retry=``), where it has one (obstore,
Icechunk: the engine then does not retry), and otherwise insitu's engine
under the dataset's policy (fsspec). Importing this package
imports none of the backends (nor icechunk, arraylake, virtualizarr, astropy,
fsspec): each name below is imported on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Public names -> the module defining them. Imported on first access (PEP 562), so that loading
# the plugin (which imports this package) stays cheap; see plugin.py.
_EXPORTS = {
    "arraylake_store": "insitu_stores.arraylake_backend",
    "StoreConfigurationError": "insitu_stores.errors",
    "StoreError": "insitu_stores.errors",
    "StoreNotFoundError": "insitu_stores.errors",
    "StorePermissionError": "insitu_stores.errors",
    "StoreTimeoutError": "insitu_stores.errors",
    "TransientStoreError": "insitu_stores.errors",
    "FsspecLoopStore": "insitu_stores.fsspec_backend",
    "fsspec_store": "insitu_stores.fsspec_backend",
    "IcechunkReadStore": "insitu_stores.icechunk_backend",
    "icechunk_store": "insitu_stores.icechunk_backend",
    "ObstoreStore": "insitu_stores.obstore_backend",
    "obstore_store": "insitu_stores.obstore_backend",
    "StoreRetry": "insitu_stores.retry",  # deprecated alias of insitu.RetryPolicy (warns)
    "NotAnImageError": "insitu_stores.virtual",
    "VirtualStore": "insitu_stores.virtual",
    "virtual_store": "insitu_stores.virtual",
}

if TYPE_CHECKING:
    from insitu_stores.arraylake_backend import arraylake_store
    from insitu_stores.errors import (
        StoreConfigurationError,
        StoreError,
        StoreNotFoundError,
        StorePermissionError,
        StoreTimeoutError,
        TransientStoreError,
    )
    from insitu_stores.fsspec_backend import FsspecLoopStore, fsspec_store
    from insitu_stores.icechunk_backend import IcechunkReadStore, icechunk_store
    from insitu_stores.obstore_backend import ObstoreStore, obstore_store
    from insitu_stores.virtual import NotAnImageError, VirtualStore, virtual_store


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'insitu_stores' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "FsspecLoopStore",
    "IcechunkReadStore",
    "NotAnImageError",
    "ObstoreStore",
    "StoreConfigurationError",
    "StoreError",
    "StoreNotFoundError",
    "StorePermissionError",
    "StoreTimeoutError",
    "TransientStoreError",
    "VirtualStore",
    "arraylake_store",
    "fsspec_store",
    "icechunk_store",
    "obstore_store",
    "virtual_store",
]
