"""Store plugins for insitu: obstore, fsspec, Icechunk, Arraylake and virtual (FITS / HDF5) stores.

Every builder returns a read-only zarr store that translates its backend's
errors (:mod:`insitu_stores.errors`), retries transient ones
(:class:`StoreRetry`) and never shows credentials. Importing this package
imports none of the optional backends (icechunk, arraylake, virtualizarr,
astropy, fsspec): each is imported when its builder is first called.
"""

from __future__ import annotations

from insitu_stores.arraylake_backend import arraylake_store
from insitu_stores.errors import (
    StoreError,
    StoreNotFoundError,
    StorePermissionError,
    StoreTimeoutError,
    TransientStoreError,
)
from insitu_stores.fsspec_backend import FsspecLoopStore, fsspec_store
from insitu_stores.icechunk_backend import IcechunkReadStore, icechunk_store
from insitu_stores.obstore_backend import ObstoreStore, obstore_store
from insitu_stores.retry import StoreRetry
from insitu_stores.virtual import NotAnImageError, VirtualStore, virtual_store

__all__ = [
    "FsspecLoopStore",
    "IcechunkReadStore",
    "NotAnImageError",
    "ObstoreStore",
    "StoreError",
    "StoreNotFoundError",
    "StorePermissionError",
    "StoreRetry",
    "StoreTimeoutError",
    "TransientStoreError",
    "VirtualStore",
    "arraylake_store",
    "fsspec_store",
    "icechunk_store",
    "obstore_store",
    "virtual_store",
]
