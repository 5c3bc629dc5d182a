"""insitu plugin: registers every store builder of this package and the URL schemes each serves.

``s3``, ``gs``, ``az`` and ``http(s)`` have two providers: obstore (the
default) and fsspec (``open_store(url, backend="fsspec")``). ``icechunk://``
and ``icechunk+<s3|gs|az|file>://`` URLs open Icechunk repositories,
``arraylake://org/repo`` Arraylake ones. Virtual stores take file lists, not
one URL, so they are called directly (``insitu_stores.virtual_store``) or
picked with ``backend="virtual"``.

Registration imports no backend module: insitu loads every plugin the first
time any dataset or store is opened, local paths included, and importing all
five backends cost ~25 ms of that first call (time to first batch). Each
builder is imported when it is first called.
"""

from __future__ import annotations

from insitu.plugin_api import LazyObject, RegisterStore, hookimpl
from insitu_stores.schemes import ARRAYLAKE_SCHEMES, FSSPEC_SCHEMES, ICECHUNK_SCHEMES, OBSTORE_SCHEMES


class LazyBuilder(LazyObject):
    """A store builder that imports ``module`` and calls its ``name`` on first use."""

    def __init__(self, module: str, name: str) -> None:
        super().__init__(module, name, "store builder")


@hookimpl
def insitu_register_stores(register: RegisterStore) -> None:
    """obstore is the default for the cloud schemes it shares with fsspec."""
    lazy = LazyBuilder
    register(
        "obstore",
        lazy("insitu_stores.obstore_backend", "obstore_store"),
        schemes=OBSTORE_SCHEMES,
        default=True,
    )
    register("fsspec", lazy("insitu_stores.fsspec_backend", "fsspec_store"), schemes=FSSPEC_SCHEMES)
    register(
        "icechunk",
        lazy("insitu_stores.icechunk_backend", "icechunk_store"),
        schemes=ICECHUNK_SCHEMES,
        default=True,
    )
    register(
        "arraylake",
        lazy("insitu_stores.arraylake_backend", "arraylake_store"),
        schemes=ARRAYLAKE_SCHEMES,
        default=True,
    )
    register("virtual", lazy("insitu_stores.virtual", "virtual_store"))
