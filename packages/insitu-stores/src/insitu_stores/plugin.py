"""insitu plugin: registers the obstore (default for cloud schemes) and fsspec store builders."""

from __future__ import annotations

from insitu.hookspecs import Register, hookimpl
from insitu_stores.builders import FSSPEC_SCHEMES, OBSTORE_SCHEMES, fsspec_store, obstore_store


@hookimpl
def insitu_register_stores(register: Register) -> None:
    """obstore serves the cloud schemes by default; fsspec is picked with ``backend="fsspec"``."""
    register("obstore", obstore_store, schemes=OBSTORE_SCHEMES, default=True)
    register("fsspec", fsspec_store, schemes=FSSPEC_SCHEMES)
