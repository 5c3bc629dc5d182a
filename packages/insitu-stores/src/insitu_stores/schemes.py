"""The URL schemes each backend serves: what the plugin registers without importing any backend."""

from __future__ import annotations

#: URL schemes obstore serves. file and memory are served by insitu-core by default;
#: ``open_store(url, backend="obstore")`` picks obstore for them.
OBSTORE_SCHEMES = (
    "s3",
    "s3a",
    "gs",
    "gcs",
    "az",
    "azure",
    "abfs",
    "abfss",
    "adl",
    "http",
    "https",
    "file",
    "memory",
)

FSSPEC_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "http", "https", "file")
ICECHUNK_SCHEMES = ("icechunk", "icechunk+file", "icechunk+s3", "icechunk+gs", "icechunk+gcs", "icechunk+az")
ARRAYLAKE_SCHEMES = ("arraylake",)

__all__ = ["ARRAYLAKE_SCHEMES", "FSSPEC_SCHEMES", "ICECHUNK_SCHEMES", "OBSTORE_SCHEMES"]
