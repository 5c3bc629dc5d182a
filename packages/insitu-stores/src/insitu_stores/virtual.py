"""Virtual Zarr stores: FITS, HDF5 and netCDF-4 files read in place through byte-range references.

Nothing is copied or converted. :func:`virtual_store` reads only the files'
headers, builds a virtualizarr ``ManifestStore`` whose chunks are byte ranges
of the original files, and wraps it as a read-only zarr store the engine
streams like any other (errors translated, an identity that changes with the
files).

FITS manifests are built here, from the headers astropy parses, on every
virtualizarr version: virtualizarr 2.5 (the newest on Python 3.11) reads FITS
through kerchunk, which records BSCALE/BZERO in a scale-offset filter with the
scale inverted and keeps the integer dtype, so scaled images come back with
wrong values and no error; 2.8 (Python 3.12) scales correctly but names axes
and types differently. Building the manifest ourselves gives identical,
correct arrays on both, and lets one image or cube be cut into row chunks
(a FITS data block is contiguous, so any run of whole rows is one byte range),
and lets many same-shaped files stack into one array, one file per sample.
HDF5 and netCDF-4 go through virtualizarr's HDF parser, which is the same
native reader on both versions.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, Store

from insitu.plugin_api import RetryPolicy
from insitu_stores.cloud import CloudSetup
from insitu_stores.errors import Redactor, StoreError
from insitu_stores.fits import DEFAULT_CHUNK_BYTES, NotAnImageError, fits_group, optional_module
from insitu_stores.locations import Location, parse_location
from insitu_stores.obstore_backend import obstore_store, translate_obstore_error
from insitu_stores.retry import DEFAULT_RETRY, call_once

FITS_SUFFIXES = (".fits", ".fit", ".fts", ".fits.fz")
HDF_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5", ".nc", ".nc4", ".netcdf")


def virtual_store(
    urls: str | Sequence[str],
    *,
    read_only: bool = True,
    format: str | None = None,
    hdus: Sequence[str | int] | None = None,
    chunk_rows: int | None = None,
    target_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    anonymous: bool = False,
    endpoint: str | None = None,
    region: str | None = None,
    allow_http: bool | None = None,
    retry: RetryPolicy | None = None,
    **credentials: Any,
) -> VirtualStore:
    """A read-only zarr store over FITS, HDF5 or netCDF-4 files, without copying them.

    ``urls``: one file or several (``file://``, a plain path, ``s3://``,
    ``gs://``, ``az://``, ``https://``). ``format`` is ``"fits"`` or
    ``"hdf5"`` (netCDF-4 is HDF5), guessed from the file suffix when omitted.
    ``read_only`` must stay ``True``: the store references bytes of existing
    files (a ``ValueError`` otherwise).

    FITS: every image HDU with data becomes an array named after its EXTNAME
    (``PRIMARY`` for the primary HDU); ``hdus`` picks some by name or index.
    Asking for a table HDU, or a file with no image HDU, raises
    :class:`NotAnImageError` naming the HDU and its type. BSCALE/BZERO are
    applied (float64 values, or the unsigned integer type for the standard
    unsigned offsets). One file: its image or cube, cut into chunks of
    ``chunk_rows`` rows along the first axis (default: the largest row count
    that divides the first axis and keeps a chunk under ``target_chunk_bytes``).
    Several files: each HDU stacks into one array with a new first axis, one
    file per sample; the files must agree on shape, type and scaling.

    HDF5 / netCDF-4 (one file): every dataset virtualizarr can reference,
    with the file's own chunking and compression.

    Connection options (``anonymous``, ``endpoint``, ``region``,
    ``allow_http``, credentials, ``retry``) are those of
    :func:`~insitu_stores.obstore_store`; credentials never appear in reprs
    or messages.
    """
    if not read_only:
        raise ValueError("virtual stores are read-only: they reference bytes of existing files")
    url_list = [urls] if isinstance(urls, str) else list(urls)
    if not url_list:
        raise ValueError("virtual_store needs at least one file URL")
    locations = [_file_location(u) for u in url_list]
    kind = _format(format, [loc.safe_url for loc in locations])
    retry = retry or DEFAULT_RETRY
    redact = Redactor.from_options(dict(credentials), urls=[*url_list, endpoint])
    registry, readers, setup = _registry(
        locations, anonymous, endpoint, region, allow_http, retry, credentials
    )
    if kind == "fits":
        if len(locations) > 1 and chunk_rows is not None:
            raise ValueError("chunk_rows applies to a single FITS file; stacked files are one chunk each")
        group = fits_group(
            locations, lambda loc: _store_for(loc, readers), hdus, chunk_rows, target_chunk_bytes, redact
        )
        fingerprint = _fingerprint(locations, readers)
    else:
        if hdus is not None or chunk_rows is not None:
            raise ValueError("hdus= and chunk_rows= apply to FITS files only")
        if len(locations) != 1:
            raise ValueError("an HDF5 / netCDF virtual store covers one file; open one store per file")
        group, fingerprint = None, _fingerprint(locations, readers)
    from virtualizarr.manifests import ManifestStore

    if group is not None:
        manifest_store = ManifestStore(group=group, registry=registry)
    else:
        from virtualizarr.parsers import HDFParser

        try:
            manifest_store = HDFParser()(url=locations[0].url, registry=registry)
        except OSError as exc:
            raise ValueError(
                f"{locations[0].safe_url} is not a readable HDF5 / netCDF-4 file: {redact(str(exc))}"
            ) from None
    described = ", ".join(loc.safe_url for loc in locations[:3]) + (
        f" and {len(locations) - 3} more" if len(locations) > 3 else ""
    )
    return VirtualStore(
        manifest_store,
        description=described,
        fingerprint=fingerprint,
        retry=retry,
        redact=redact,
        setup=setup,
    )


# -- locations and the object-store registry ---------------------------------
def _file_location(url: str) -> Location:
    if "://" not in url:
        from pathlib import Path

        path = Path(url).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
        url = path.as_uri()
    loc = parse_location(url)
    if loc.service == "memory":
        raise ValueError(f"virtual stores read files; {loc.safe_url!r} is not a file URL")
    if loc.service == "file":
        from pathlib import Path

        if not Path(loc.prefix).is_file():
            raise FileNotFoundError(f"no such file: {loc.prefix}")
    return loc


def _format(given: str | None, urls: list[str]) -> str:
    if given is not None:
        kind = given.lower().replace("-", "")
        if kind in ("fits", "fit"):
            return "fits"
        if kind in ("hdf5", "hdf", "h5", "netcdf", "netcdf4", "nc"):
            return "hdf5"
        raise ValueError(f"unknown virtual format {given!r}; expected 'fits' or 'hdf5' (netCDF-4)")
    kinds = set()
    for url in urls:
        lower = url.lower()
        if lower.endswith(FITS_SUFFIXES):
            kinds.add("fits")
        elif lower.endswith(HDF_SUFFIXES):
            kinds.add("hdf5")
        else:
            raise ValueError(
                f"cannot tell the format of {url!r} from its suffix; pass format='fits' or 'hdf5'"
            )
    if len(kinds) > 1:
        raise ValueError("all files of one virtual store must have the same format")
    return kinds.pop()


def _registry(
    locations: list[Location],
    anonymous: bool,
    endpoint: str | None,
    region: str | None,
    allow_http: bool | None,
    retry: RetryPolicy,
    credentials: dict[str, Any],
) -> tuple[Any, dict[str, Any], CloudSetup | None]:
    """One obstore store per bucket (or per host, or local files), the registry over them, and
    the configuration of the first cloud one (for the hints in error messages)."""
    ObjectStoreRegistry = optional_module("obspec_utils.registry").ObjectStoreRegistry

    stores: dict[str, Any] = {}
    setup: CloudSetup | None = None
    for loc in locations:
        root = "file://" if loc.service == "file" else loc.root
        if root in stores:
            continue
        if loc.service == "file":
            from obstore.store import LocalStore

            stores[root] = LocalStore()
        else:
            built = obstore_store(
                root,
                anonymous=anonymous,
                endpoint=endpoint,
                region=region,
                allow_http=allow_http,
                retry=retry,
                **credentials,
            )
            stores[root] = built.store
            setup = setup or built.cloud_setup
    return ObjectStoreRegistry(dict(stores)), stores, setup


def _store_for(loc: Location, readers: dict[str, Any]) -> tuple[Any, str]:
    if loc.service == "file":
        return readers["file://"], loc.prefix.lstrip("/")
    return readers[loc.root], loc.prefix


def _fingerprint(locations: Iterable[Location], readers: dict[str, Any]) -> str:
    """Size and version (ETag or modification time) of every file: changes when a file changes."""
    import obstore as obs

    digest = hashlib.sha256()
    for loc in locations:
        store, path = _store_for(loc, readers)
        try:
            meta = obs.head(store, path)
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {loc.safe_url}") from None
        version = meta.get("e_tag") or meta.get("version") or str(meta.get("last_modified"))
        digest.update(f"{loc.safe_url}\0{meta['size']}\0{version}\n".encode())
    return digest.hexdigest()[:32]


# -- the store ---------------------------------------------------------------
def _node_paths(group: Any, prefix: str = "") -> tuple[set[str] | None, set[str]]:
    """Paths of the groups and arrays under a virtualizarr ``ManifestGroup`` (None if unknown)."""
    if group is None or not hasattr(group, "arrays") or not hasattr(group, "groups"):
        return None, set()
    groups = {prefix.rstrip("/")}
    arrays = {f"{prefix}{name}" for name in group.arrays}
    for name, child in group.groups.items():
        sub_groups, sub_arrays = _node_paths(child, f"{prefix}{name}/")
        groups |= sub_groups or set()
        arrays |= sub_arrays
    return groups, arrays


class VirtualStore(Store):
    """A read-only zarr store over a virtualizarr ``ManifestStore``: translated errors, file identity."""

    supports_writes = False
    supports_deletes = False
    supports_partial_writes = False
    supports_listing = True

    def __init__(
        self,
        manifest_store: Store,
        *,
        description: str,
        fingerprint: str,
        retry: RetryPolicy = DEFAULT_RETRY,
        redact: Redactor | None = None,
        setup: CloudSetup | None = None,
    ) -> None:
        super().__init__(read_only=True)
        self.manifest_store = manifest_store
        self.description = description
        self.fingerprint = fingerprint
        self.retry = retry
        self._redact = redact or Redactor()
        self._setup = setup
        # virtualizarr's ManifestStore answers "<anything>/zarr.json" with the nearest group's
        # metadata, so zarr would see groups that do not exist; keys are checked against the
        # real hierarchy first.
        self._groups, self._arrays = _node_paths(getattr(manifest_store, "_group", None))

    def _known(self, key: str) -> bool:
        if self._groups is None:
            return True
        node, _, leaf = key.rpartition("/")
        if leaf == "zarr.json":
            return node in self._groups or node in self._arrays
        return any(key.startswith(f"{a}/") for a in self._arrays)

    def insitu_identity(self) -> str:
        """The files and their sizes and versions: a rewritten file is different data."""
        return f"virtual:{self.description}#{self.fingerprint}"

    @property
    def insitu_retry_policy(self) -> RetryPolicy:
        """The policy the obstore clients underneath apply to every byte-range read."""
        return self.retry

    def __str__(self) -> str:
        return f"virtual:{self.description}"

    def __repr__(self) -> str:
        return f"VirtualStore({self.description!r})"

    def __eq__(self, value: object) -> bool:
        return isinstance(value, VirtualStore) and value.insitu_identity() == self.insitu_identity()

    __hash__ = None  # type: ignore[assignment]

    def with_read_only(self, read_only: bool = False) -> VirtualStore:
        """This store itself for ``read_only=True``; a ValueError otherwise (a virtual store is read-only)."""
        if not read_only:
            raise ValueError("a virtual store is read-only")
        return self

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """The object at ``key`` (or the requested range), read from the file the manifest points to;
        ``None`` for a key outside the hierarchy. Failures raise insitu's store errors."""
        if not self._known(key):
            return None
        # The obstore stores underneath retry (under this policy); this call only translates,
        # with a deadline past every attempt they may make.
        longest = self.retry.longest_call_s()
        try:
            return await call_once(
                lambda: self.manifest_store.get(key, prototype, byte_range),
                deadline_s=None if longest is None else longest + 1.0,
                translate=self._translate,
                key=key,
                url=str(self),
            )
        except (IndexError, ValueError):
            # virtualizarr's ManifestStore raises for chunk keys outside its grid or key pattern;
            # for a store those keys are simply absent.
            if key.endswith("zarr.json"):
                raise
            return None

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        """Several reads, concurrently, each through :meth:`get`."""
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        # virtualizarr's ManifestStore has no exists(); a one-byte read answers it (metadata
        # documents are read whole: they are generated, not ranged).
        """Whether ``key`` can be read (a one-byte read of a chunk; metadata is read whole)."""
        from zarr.abc.store import RangeByteRequest
        from zarr.buffer import default_buffer_prototype

        request = (
            None if key.endswith(("zarr.json", ".zarray", ".zgroup", ".zattrs")) else RangeByteRequest(0, 1)
        )
        return await self.get(key, default_buffer_prototype(), request) is not None

    async def set(self, key: str, value: Buffer) -> None:
        """Refused: the store is read-only."""
        self._check_writable()

    async def delete(self, key: str) -> None:
        """Refused: the store is read-only."""
        self._check_writable()

    def list(self) -> AsyncIterator[str]:
        """Every key of the manifest's hierarchy."""
        return self.manifest_store.list()

    def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """The manifest's keys under ``prefix``."""
        return self.manifest_store.list_prefix(prefix)

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The manifest's entries directly under ``prefix``."""
        return self.manifest_store.list_dir(prefix)

    def _translate(self, exc: BaseException, key: str | None) -> StoreError | None:
        where = f"{self} key {key!r}" if key else str(self)
        return translate_obstore_error(
            exc, where, url=str(self), key=key, redact=self._redact, setup=self._setup
        )


__all__ = ["NotAnImageError", "VirtualStore", "virtual_store"]
