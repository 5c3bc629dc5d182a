"""insitu plugin: registers every store builder of this package and the URL schemes each serves.

``s3``, ``gs``, ``az`` and ``http(s)`` have two providers: obstore (the
default) and fsspec (``open_store(url, backend="fsspec")``). ``icechunk://``
and ``icechunk+<s3|gs|az|file>://`` URLs open Icechunk repositories,
``arraylake://org/repo`` Arraylake ones. Virtual stores take file lists, not
one URL, so they are called directly (``insitu_stores.virtual_store``) or
picked with ``backend="virtual"``.
"""

from __future__ import annotations

from insitu.hookspecs import Register, hookimpl
from insitu_stores.arraylake_backend import ARRAYLAKE_SCHEMES, arraylake_store
from insitu_stores.fsspec_backend import FSSPEC_SCHEMES, fsspec_store
from insitu_stores.icechunk_backend import ICECHUNK_SCHEMES, icechunk_store
from insitu_stores.obstore_backend import OBSTORE_SCHEMES, obstore_store
from insitu_stores.virtual import virtual_store


@hookimpl
def insitu_register_stores(register: Register) -> None:
    """obstore is the default for the cloud schemes it shares with fsspec."""
    register("obstore", obstore_store, schemes=OBSTORE_SCHEMES, default=True)
    register("fsspec", fsspec_store, schemes=FSSPEC_SCHEMES)
    register("icechunk", icechunk_store, schemes=ICECHUNK_SCHEMES, default=True)
    register("arraylake", arraylake_store, schemes=ARRAYLAKE_SCHEMES, default=True)
    register("virtual", virtual_store)
