"""``open_store``: turn a path, a URL or a zarr Store into a zarr Store.

Plain paths and ``file://`` URLs open as ``zarr.storage.LocalStore``;
``memory://name`` opens a process-wide named ``zarr.storage.MemoryStore``.
Every other scheme is served by a store plugin (see ``insitu.plugins``), and
both built-ins are registered through the same plugin path as third parties.
"""

from __future__ import annotations

import errno
import os
import re
import threading
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from zarr.abc.buffer import Buffer
from zarr.abc.store import Store
from zarr.storage import LocalStore, MemoryStore

from insitu.plugins import PluginNotFoundError, get_registry

#: Accepted ``mode`` values (zarr's names). Only "r" is read-only; no mode deletes
#: data: overwriting belongs to ``zarr.open_group(store, mode="w")``.
MODES = ("r", "r+", "a", "w", "w-")

#: Where to get a store for the usual cloud schemes when no plugin serves them.
SCHEME_PACKAGES: dict[str, str] = {
    "s3": "insitu-stores[s3]",
    "s3a": "insitu-stores[s3]",
    "gs": "insitu-stores[gcs]",
    "gcs": "insitu-stores[gcs]",
    "az": "insitu-stores[azure]",
    "abfs": "insitu-stores[azure]",
    "abfss": "insitu-stores[azure]",
    "azure": "insitu-stores[azure]",
    "http": "insitu-stores[http]",
    "https": "insitu-stores[http]",
    "icechunk": "insitu-stores[icechunk]",
    "icechunk+file": "insitu-stores[icechunk]",
    "icechunk+s3": "insitu-stores[icechunk]",
    "icechunk+gs": "insitu-stores[icechunk]",
    "icechunk+gcs": "insitu-stores[icechunk]",
    "icechunk+az": "insitu-stores[icechunk]",
    "arraylake": "insitu-stores[arraylake]",
}

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")


class UnknownSchemeError(PluginNotFoundError, ValueError):
    """No installed plugin serves a URL's scheme; the message says what to install."""


def split_url(url: str) -> tuple[str, str]:
    """``(scheme, rest)`` of a store URL; the scheme is "" for a plain path.

    Raises ``ValueError`` naming the URL when it is empty, has a malformed
    scheme (``"://x"``, ``"3d://x"``) or nothing after ``scheme://``.
    """
    match = _SCHEME.match(url)
    if match is None:
        if not url or "://" in url:
            raise ValueError(f"malformed store URL {url!r}: expected a path or scheme://location")
        return "", url
    rest = url[match.end() :]
    if not rest:
        raise ValueError(f"malformed store URL {url!r}: nothing after '{match.group(1)}://'")
    return match.group(1).lower(), rest


def open_store(
    url_or_store: str | os.PathLike[str] | Store,
    *,
    backend: str | None = None,
    mode: str = "r",
    **options: Any,
) -> Store:
    """Open the zarr Store at a path or URL; a ``Store`` instance passes through unchanged.

    ``backend`` picks a registered store builder by name (``"obstore"``,
    ``"fsspec"``...) instead of dispatching on the URL scheme. ``mode`` "r"
    (the default) opens read-only and requires the store to exist; the other
    modes in :data:`MODES` open it writable, creating a missing local
    directory or memory store, and never delete anything. The builder is
    called as ``builder(url, read_only=mode == "r", **options)``.

    Raises ``FileNotFoundError`` naming a missing local path or memory store,
    ``ValueError`` for a malformed URL, and :class:`UnknownSchemeError` (a
    ``ValueError`` and ``KeyError``) naming the scheme and the package to
    install when no plugin serves it.
    """
    if isinstance(url_or_store, Store):
        if backend is not None:
            raise ValueError("backend= selects how a URL is opened; it cannot apply to a Store instance")
        return url_or_store
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    url = os.fspath(url_or_store)
    if not isinstance(url, str):
        raise TypeError(f"expected a path, URL or zarr Store; got {type(url_or_store).__name__}")
    scheme, _ = split_url(url)
    registry = get_registry()
    if backend is not None:
        builder = registry.lookup("stores", backend)
    else:
        try:
            builder = registry.store_for_scheme(scheme).obj
        except PluginNotFoundError as exc:
            package = SCHEME_PACKAGES.get(scheme)
            hint = f"; install one with: pip install '{package}'" if package else _cloud_hint()
            known = [s for s in exc.known if s]  # "" is plain paths, not a scheme to type
            raise UnknownSchemeError("URL schemes", scheme, known, hint) from None
    store = builder(url, read_only=mode == "r", **options)
    if not isinstance(store, Store):
        raise TypeError(f"store builder for {url!r} returned {type(store).__name__}, not a zarr Store")
    return store


def _cloud_hint() -> str:
    by_package: dict[str, list[str]] = {}
    for scheme, package in SCHEME_PACKAGES.items():
        by_package.setdefault(package, []).append(scheme)
    listed = "; ".join(f"{', '.join(s)}: pip install '{p}'" for p, s in by_package.items())
    return f"; cloud schemes come from plugins ({listed})"


def local_store(url: str, *, read_only: bool = True) -> LocalStore:
    """Store builder for plain paths and ``file://`` URLs (``file://rel/dir`` is relative)."""
    scheme, rest = split_url(url)
    if scheme not in ("", "file"):
        raise ValueError(f"not a local path or file:// URL: {url!r}")
    if scheme == "file":
        if rest.startswith("localhost/"):
            rest = rest[len("localhost") :]
        rest = unquote(rest)
    path = Path(rest).expanduser()
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "a local Zarr store must be a directory", str(path))
    if read_only and not path.exists():
        raise FileNotFoundError(errno.ENOENT, "no Zarr store at this path", str(path))
    return LocalStore(path, read_only=read_only)


# Named in-memory stores live as long as the process, so a test can write to
# "memory://x" and open it again by URL. Each open wraps the same dict.
_memory: dict[str, dict[str, Buffer]] = {}
_memory_lock = threading.Lock()


def memory_store(url: str, *, read_only: bool = True) -> MemoryStore:
    """Store builder for ``memory://name``: one shared ``MemoryStore`` content per name."""
    scheme, name = split_url(url)
    if scheme != "memory":
        raise ValueError(f"not a memory:// URL: {url!r}")
    with _memory_lock:
        if name not in _memory:
            if read_only:
                raise FileNotFoundError(errno.ENOENT, "no in-memory store with this name", url)
            _memory[name] = {}
        content = _memory[name]
    return MemoryStore(content, read_only=read_only)


__all__ = [
    "MODES",
    "SCHEME_PACKAGES",
    "UnknownSchemeError",
    "local_store",
    "memory_store",
    "open_store",
    "split_url",
]
