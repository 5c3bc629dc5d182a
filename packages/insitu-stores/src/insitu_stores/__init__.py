"""Remote store builders for insitu: obstore (S3, GCS, Azure, HTTP) and fsspec."""

from __future__ import annotations

from insitu_stores.builders import fsspec_store, obstore_store

__all__ = ["fsspec_store", "obstore_store"]
