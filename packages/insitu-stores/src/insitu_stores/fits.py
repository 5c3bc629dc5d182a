"""FITS headers to virtualizarr manifests: image HDUs as arrays of byte ranges.

A FITS data block is one contiguous, uncompressed, big-endian array, so an
image or cube is addressable by byte ranges without reading it: any run of
whole rows along the first axis is one range (the row chunks of a single
file), and a whole HDU is one range (one file per sample when many files
stack). BSCALE/BZERO become a ``numcodecs.fixedscaleoffset`` codec, so
values read back physical. See :mod:`insitu_stores.virtual` for why this is
built here rather than taken from virtualizarr's FITS parser.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu_stores.errors import Redactor
from insitu_stores.locations import Location

#: Given a file's location: the obstore store holding it and its path inside that store.
Resolve = Callable[[Location], tuple[Any, str]]

# FITS stores every value big-endian; BITPIX picks width and integer (>0) or IEEE float (<0).
_BITPIX = {8: "u1", 16: ">i2", 32: ">i4", 64: ">i8", -32: ">f4", -64: ">f8"}
# BZERO values that only shift a signed type into the unsigned range (FITS 4.0, 5.2.5).
_UNSIGNED_BZERO = {8: (-128, "i1"), 16: (32768, "<u2"), 32: (2**31, "<u4"), 64: (2**63, "<u8")}

#: Default target size of one row chunk of a single FITS image or cube.
DEFAULT_CHUNK_BYTES = 8 * 2**20


class NotAnImageError(ValueError):
    """A FITS HDU that was asked for (or the only data in a file) is a table, not an image."""


@dataclass(frozen=True)
class _Hdu:
    """What the manifest needs from one FITS image HDU."""

    name: str
    index: int
    shape: tuple[int, ...]
    stored: np.dtype
    offset: int
    bscale: float
    bzero: float
    attributes: dict[str, Any]

    @property
    def scaled(self) -> bool:
        return self.bscale != 1.0 or self.bzero != 0.0

    @property
    def nbytes(self) -> int:
        return self.stored.itemsize * math.prod(self.shape)

    def layout(self) -> tuple[Any, ...]:
        """What must agree between files stacked into one array."""
        return (self.shape, self.stored.str, self.bscale, self.bzero)


def optional_module(module: str) -> Any:
    """Import a module of the ``virtual`` extra (untyped, and absent from a minimal install)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f"virtual stores need {module.split('.')[0]}: pip install 'insitu-stores[virtual]'"
        ) from None


def fits_group(
    locations: list[Location],
    resolve: Resolve,
    wanted: Sequence[str | int] | None,
    chunk_rows: int | None,
    target_chunk_bytes: int,
    redact: Redactor,
) -> Any:
    """A virtualizarr ``ManifestGroup`` of the image HDUs of one file, or of many stacked."""
    from virtualizarr.manifests import ManifestGroup

    per_file = [_fits_images(loc, resolve, wanted, redact) for loc in locations]
    first_images, group_attrs = per_file[0]
    arrays = {}
    for name, hdu in first_images.items():
        if len(locations) == 1:
            arrays[name] = _single_file_array(hdu, locations[0].url, chunk_rows, target_chunk_bytes)
            continue
        members = []
        for loc, (images, _) in zip(locations, per_file, strict=True):
            other = images.get(name)
            if other is None:
                raise ValueError(
                    f"{loc.safe_url} has no image HDU {name!r}, which {locations[0].safe_url} has"
                )
            if other.layout() != hdu.layout():
                raise ValueError(
                    f"cannot stack HDU {name!r}: {loc.safe_url} has shape {other.shape}, type {other.stored}, "
                    f"BSCALE {other.bscale}, BZERO {other.bzero}; {locations[0].safe_url} has {hdu.shape}, "
                    f"{hdu.stored}, {hdu.bscale}, {hdu.bzero}"
                )
            members.append((loc.url, other))
        arrays[name] = _stacked_array(name, members)
    return ManifestGroup(arrays=arrays, attributes=group_attrs)


def _fits_images(
    loc: Location, resolve: Resolve, wanted: Sequence[str | int] | None, redact: Redactor
) -> tuple[dict[str, _Hdu], dict[str, Any]]:
    """The image HDUs of one file (by array name) and the attributes for the root group."""
    fits = optional_module("astropy.io.fits")
    BlockStoreReader = optional_module("obspec_utils.readers").BlockStoreReader

    store, path = resolve(loc)
    reader = BlockStoreReader(store=store, path=path, block_size=64 * 1024)
    try:
        hdulist = fits.open(reader, do_not_scale_image_data=True, lazy_load_hdus=False)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {loc.safe_url}") from None
    except OSError as exc:
        raise ValueError(f"{loc.safe_url} is not a readable FITS file: {redact(str(exc))}") from None
    with hdulist:
        names = _hdu_names(hdulist)
        picked = _pick_hdus(loc.safe_url, hdulist, names, wanted)
        images: dict[str, _Hdu] = {}
        group_attrs: dict[str, Any] = {}
        first = hdulist[0]
        if first.header.get("NAXIS", 0) == 0:
            group_attrs = _attributes(first.header)
        for index in picked:
            hdu = hdulist[index]
            str(hdu.header)  # astropy fixes non-conforming cards when it renders the header
            header = hdu.header
            naxis = int(header["NAXIS"])
            bitpix = int(header["BITPIX"])
            if bitpix not in _BITPIX:
                raise ValueError(f"HDU {names[index]!r} of {loc.safe_url} has an invalid BITPIX {bitpix}")
            images[names[index]] = _Hdu(
                name=names[index],
                index=index,
                shape=tuple(int(header[f"NAXIS{i}"]) for i in range(naxis, 0, -1)),
                stored=np.dtype(_BITPIX[bitpix]),
                offset=int(hdu.fileinfo()["datLoc"]),
                bscale=float(header.get("BSCALE", 1.0)),
                bzero=float(header.get("BZERO", 0.0)),
                attributes=_attributes(header),
            )
    return images, group_attrs


def _hdu_names(hdulist: Any) -> list[str]:
    names: list[str] = []
    for index, hdu in enumerate(hdulist):
        name = hdu.name or str(index)
        names.append(name if name not in names else f"{name}_{index}")
    return names


def _kind(hdu: Any) -> str:
    fits = optional_module("astropy.io.fits")

    if isinstance(hdu, fits.BinTableHDU):
        return "binary table"
    if isinstance(hdu, fits.TableHDU):
        return "ASCII table"
    if isinstance(hdu, fits.CompImageHDU):
        return "tile-compressed image"
    return type(hdu).__name__


def _is_image(hdu: Any) -> bool:
    fits = optional_module("astropy.io.fits")

    # Tile-compressed images are binary tables on disk: their bytes are not one array.
    return bool(hdu.is_image) and not isinstance(hdu, (fits.CompImageHDU, fits.BinTableHDU, fits.TableHDU))


def _pick_hdus(url: str, hdulist: Any, names: list[str], wanted: Sequence[str | int] | None) -> list[int]:
    listing = ", ".join(
        f"{i} {n!r} ({_kind(h)})" for i, (n, h) in enumerate(zip(names, hdulist, strict=True))
    )
    if wanted is None:
        picked = [i for i, h in enumerate(hdulist) if _is_image(h) and h.header.get("NAXIS", 0) > 0]
        if not picked:
            raise NotAnImageError(f"{url} has no image HDU with data to stream (HDUs: {listing})")
        return picked
    picked = []
    for want in wanted:
        if isinstance(want, int):
            if not 0 <= want < len(names):
                raise ValueError(f"{url} has no HDU {want} (HDUs: {listing})")
            index = want
        else:
            matches = [i for i, n in enumerate(names) if n.upper() == str(want).upper()]
            if not matches:
                raise ValueError(f"{url} has no HDU named {want!r} (HDUs: {listing})")
            index = matches[0]
        hdu = hdulist[index]
        if not _is_image(hdu):
            raise NotAnImageError(
                f"HDU {names[index]!r} (index {index}) of {url} is a {_kind(hdu)}, not an image; "
                "virtual stores stream image HDUs"
            )
        if hdu.header.get("NAXIS", 0) == 0:
            raise ValueError(f"HDU {names[index]!r} (index {index}) of {url} has no data")
        picked.append(index)
    return picked


def _attributes(header: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in dict(header).items():
        if key in ("COMMENT", "HISTORY", ""):
            continue
        out[key] = value if isinstance(value, (bool, int, float, str)) else str(value)
    return out


def _codecs(hdu: _Hdu) -> tuple[np.dtype, list[dict[str, Any]]]:
    """The array's dtype and codecs: raw big-endian bytes, plus scaling when the header asks."""
    stored = hdu.stored
    bytes_codec = {"name": "bytes", "configuration": {"endian": "big"}}
    if not hdu.scaled:
        return stored, [bytes_codec] if stored.itemsize > 1 else [{"name": "bytes"}]
    bitpix = stored.itemsize * 8 if stored.kind in "iu" else 0
    unsigned = _UNSIGNED_BZERO.get(bitpix)
    if unsigned is not None and hdu.bscale == 1.0 and hdu.bzero == unsigned[0]:
        dtype = np.dtype(unsigned[1])  # the FITS convention for unsigned integers: exact
    else:
        dtype = np.dtype("<f8")
    scale = {
        "name": "numcodecs.fixedscaleoffset",
        # physical = BZERO + BSCALE * stored; the codec decodes stored / scale + offset.
        "configuration": {
            "offset": hdu.bzero,
            "scale": 1.0 / hdu.bscale,
            "dtype": dtype.str,
            "astype": stored.str,
        },
    }
    return dtype, [scale, bytes_codec if stored.itemsize > 1 else {"name": "bytes"}]


def _dimension_names(name: str, ndim: int) -> tuple[str, ...]:
    if ndim <= 3:
        return tuple(f"{name}_{axis}" for axis in ("z", "y", "x")[-ndim:])
    return tuple(f"{name}_axis{ndim - i}" for i in range(ndim))


def _metadata(hdu: _Hdu, shape: tuple[int, ...], chunks: tuple[int, ...], dims: tuple[str, ...]) -> Any:
    import warnings

    from virtualizarr.manifests.utils import create_v3_array_metadata

    dtype, codecs = _codecs(hdu)
    attributes = dict(hdu.attributes)
    attributes["insitu_fits"] = {"hdu": hdu.index, "bscale": hdu.bscale, "bzero": hdu.bzero}
    with warnings.catch_warnings():
        # zarr warns that numcodecs codecs are outside the v3 spec; this one is deliberate.
        warnings.filterwarnings("ignore", message=".*Numcodecs codecs are not in the Zarr version 3")
        return create_v3_array_metadata(
            shape=shape,
            data_type=dtype,
            chunk_shape=chunks,
            fill_value=0,
            codecs=codecs,
            attributes=attributes,
            dimension_names=dims,
        )


def _single_file_array(hdu: _Hdu, url: str, chunk_rows: int | None, target: int) -> Any:
    from virtualizarr.manifests import ChunkManifest, ManifestArray

    n0 = hdu.shape[0]
    row_bytes = hdu.nbytes // n0 if n0 else 0
    if chunk_rows is None:
        fitting = max(1, target // max(row_bytes, 1))
        chunk_rows = max(d for d in range(1, n0 + 1) if n0 % d == 0 and d <= fitting)
    elif chunk_rows < 1 or n0 % chunk_rows:
        divisors = [d for d in range(1, n0 + 1) if n0 % d == 0]
        raise ValueError(
            f"chunk_rows={chunk_rows} must divide the first axis of HDU {hdu.name!r} ({n0} rows) "
            f"so every chunk is a whole byte range; choose one of {divisors[:12]}"
        )
    rest = ".0" * (len(hdu.shape) - 1)
    entries = {
        f"{i}{rest}": {
            "path": url,
            "offset": hdu.offset + i * chunk_rows * row_bytes,
            "length": chunk_rows * row_bytes,
        }
        for i in range(n0 // chunk_rows)
    }
    grid = (n0 // chunk_rows, *(1,) * (len(hdu.shape) - 1))
    chunks = (chunk_rows, *hdu.shape[1:])
    metadata = _metadata(hdu, hdu.shape, chunks, _dimension_names(hdu.name, len(hdu.shape)))
    return ManifestArray(metadata=metadata, chunkmanifest=ChunkManifest(entries=entries, shape=grid))


def _stacked_array(name: str, members: list[tuple[str, _Hdu]]) -> Any:
    from virtualizarr.manifests import ChunkManifest, ManifestArray

    first = members[0][1]
    rest = ".0" * len(first.shape)
    entries = {
        f"{i}{rest}": {"path": url, "offset": hdu.offset, "length": hdu.nbytes}
        for i, (url, hdu) in enumerate(members)
    }
    shape = (len(members), *first.shape)
    grid = (len(members), *(1,) * len(first.shape))
    dims = ("file", *_dimension_names(name, len(first.shape)))
    metadata = _metadata(first, shape, (1, *first.shape), dims)
    return ManifestArray(metadata=metadata, chunkmanifest=ChunkManifest(entries=entries, shape=grid))


__all__ = ["DEFAULT_CHUNK_BYTES", "NotAnImageError", "Resolve", "fits_group", "optional_module"]
