"""Store builders: a URL in, a read-only zarr Store out.

Each builder is registered by name (and for its URL schemes) so that
``insitu.open_store(url)`` dispatches to it; both can also be called directly.
The backends are imported inside the builders, so importing this module is cheap.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from zarr.storage import FsspecStore, ObjectStore

# URL schemes `obstore.store.from_url` understands, apart from file:// and memory://, which
# insitu-core serves through zarr's own stores.
OBSTORE_SCHEMES = ("s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl", "http", "https")
# Schemes fsspec serves through its cloud packages (s3fs, gcsfs, adlfs); `gcs` only here.
FSSPEC_SCHEMES = ("s3", "gs", "gcs", "az", "abfs", "http", "https")


def obstore_store(url: str, **options: Any) -> ObjectStore:
    """A read-only zarr store over ``url`` through obstore.

    ``options`` go to ``obstore.store.from_url``: backend config keys such as
    ``region``, ``skip_signature`` or ``endpoint``, and ``client_options`` /
    ``retry_config`` dicts. Credentials otherwise come from the environment,
    as obstore reads them.
    """
    from obstore.store import from_url

    return ObjectStore(from_url(url, **options), read_only=True)


def fsspec_store(url: str, **storage_options: Any) -> FsspecStore:
    """A read-only zarr store over ``url`` through fsspec.

    ``storage_options`` go to the fsspec filesystem (for example ``anon=True``
    for public S3 buckets with s3fs). Synchronous filesystems are wrapped by
    zarr so that they serve its async API.
    """
    if importlib.util.find_spec("fsspec") is None:
        raise ImportError("fsspec_store needs fsspec: pip install 'insitu-stores[fsspec]'")
    return FsspecStore.from_url(url, storage_options=storage_options or None, read_only=True)


__all__ = ["FSSPEC_SCHEMES", "OBSTORE_SCHEMES", "fsspec_store", "obstore_store"]
